"""Out-of-core partitioning (``--max-memory``): the same shards as in memory, bounded chunks."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import speed
from speed.cli import main
from speed.partition import outofcore


def same_shards(a, b):
    """Every array and manifest entry equal, except timings and the out-of-core note."""
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    for m in (ma, mb):
        m.pop("seconds")
        m.pop("out_of_core", None)
    assert ma == mb
    for name in sorted(p.name for p in (a / "events").iterdir()):
        x, y = np.load(a / "events" / name), np.load(b / "events" / name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    with np.load(a / "nodes.npz") as x, np.load(b / "nodes.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for k in x.files:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), k


def both_modes(tmp_path, log, *args):
    assert main(["partition", str(log), "-o", str(tmp_path / "mem"), "--no-progress", *args]) == 0
    assert main(["partition", str(log), "-o", str(tmp_path / "ooc"), "--no-progress", "--max-memory", "1G",
                 *args]) == 0
    same_shards(tmp_path / "mem", tmp_path / "ooc")


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few hundred events, so every pass crosses many chunk boundaries."""
    monkeypatch.setattr(outofcore, "_MAX_CHUNK", 317)
    monkeypatch.setattr(outofcore, "_MIN_CHUNK", 1)


def write_log(path, src, dst, t, header="src,dst,t", extra=None):
    rows = [f"{a},{b},{c}" + ("" if extra is None else "," + ",".join(str(v) for v in extra[k]))
            for k, (a, b, c) in enumerate(zip(src, dst, t))]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 300), st.integers(20, 3000), st.integers(1, 6), st.sampled_from([0, 2, 10]),
       st.sampled_from([1, 50, 10_000]), st.integers(0, 10_000), st.sampled_from(["off", "0", "0.1"]))
def test_identical_to_in_memory_on_random_logs(tmp_path_factory, n, e, p, topk, times, seed, balance):
    # with --balance, the capacity's dynamic hubs grow across chunks and the spread rewrites the
    # stored parts chunk by chunk: the shards must still be the in-memory ones
    tmp = tmp_path_factory.mktemp("ooc")
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e) * 7 + 3  # sparse ids: compaction must number them the same way
    dst = rng.integers(0, n, e) * 7 + 3
    t = np.sort(rng.integers(0, times, e))  # few distinct times: runs of equal times cross chunks
    log = write_log(tmp / "log.csv", src, dst, t)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(outofcore, "_MAX_CHUNK", int(rng.integers(1, 400)))
        mp.setattr(outofcore, "_MIN_CHUNK", 1)
        both_modes(tmp, log, "--parts", str(p), "--topk", str(topk), "--seed", str(seed % 5), "--balance", balance)


def test_identical_on_real_bipartite_log_with_labels(tmp_path, small_chunks, shared_data):
    head = (shared_data / "wikipedia.csv").read_text().splitlines()[:3001]  # JODIE: users, items, a label
    (tmp_path / "wiki.csv").write_text("\n".join(head) + "\n")
    both_modes(tmp_path, tmp_path / "wiki.csv", "--parts", "4", "--topk", "5")


def test_identical_with_edge_features(tmp_path, small_chunks):
    rng = np.random.default_rng(3)
    e = 900
    src, dst = rng.integers(0, 40, e), rng.integers(100, 130, e)
    t = np.sort(rng.random(e) * 1000).round(3)
    feats = np.stack([rng.integers(0, 2, e), *(rng.random((2, e)).round(4))], axis=1)
    log = write_log(tmp_path / "jodie.csv", src, dst, t, header="user_id,item_id,timestamp,state_label,f0,f1",
                    extra=[[int(r[0]), r[1], r[2]] for r in feats])
    both_modes(tmp_path, log, "--parts", "3", "--topk", "5")
    msg = np.load(tmp_path / "ooc" / "events" / "msg.npy")
    assert msg.shape == (e, 2) and msg.dtype == np.float32


def test_identical_on_snap_whitespace_log(tmp_path, small_chunks):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 50, 800), rng.integers(0, 50, 800)
    t = np.sort(rng.integers(0, 10_000, 800))
    (tmp_path / "snap.txt").write_text("# a SNAP export\n" + "".join(f"{a}  {b}\t{c}\n" for a, b, c in zip(src, dst, t)))
    both_modes(tmp_path, tmp_path / "snap.txt", "--parts", "3", "--topk", "10")


def test_identical_with_datetimes_and_negative_ids(tmp_path, small_chunks):
    rng = np.random.default_rng(2)
    src, dst = rng.integers(-20, 20, 600), rng.integers(-20, 20, 600)
    secs = np.sort(rng.integers(0, 10**6, 600))
    times = [np.datetime_as_string(np.datetime64("2024-01-01T00:00:00") + np.timedelta64(int(s), "s")) for s in secs]
    log = write_log(tmp_path / "dt.csv", src, dst, times)
    both_modes(tmp_path, log, "--parts", "2", "--topk", "5")


def test_unsorted_input_is_refused_with_its_line(tmp_path, capsys):
    log = write_log(tmp_path / "u.csv", [1, 2, 3, 4], [2, 3, 4, 5], [1, 5, 3, 7])
    code = main(["partition", str(log), "-o", str(tmp_path / "out"), "--no-progress", "--max-memory", "1G"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "u.csv:4" in err and "sorted by time" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_string_ids_and_other_methods_are_refused(tmp_path, capsys):
    log = write_log(tmp_path / "s.csv", ["a", "b", "c", "d"], ["b", "c", "d", "a"], [1, 2, 3, 4])
    assert main(["partition", str(log), "-o", str(tmp_path / "o1"), "--no-progress", "--max-memory", "1G"]) == 2
    assert "not integers" in capsys.readouterr().err
    log = write_log(tmp_path / "i.csv", [1, 2, 3, 4], [2, 3, 4, 1], [1, 2, 3, 4])
    assert main(["partition", str(log), "-o", str(tmp_path / "o2"), "--no-progress", "--max-memory", "1G",
                 "--method", "hdrf"]) == 2
    assert "method 'sep' only" in capsys.readouterr().err


@pytest.mark.parametrize("size, expect", [("3G", 3 * 2**30), ("512M", 512 * 2**20), ("2.5GB", int(2.5 * 2**30)),
                                          ("1GiB", 2**30), ("1000", 1000), (4096, 4096)])
def test_parse_size(size, expect):
    assert outofcore.parse_size(size) == expect


@pytest.mark.parametrize("size", ["lots", "-1G", "0", "3X"])
def test_bad_sizes_and_too_small_budgets(tmp_path, size, capsys):
    log = write_log(tmp_path / "i.csv", [1, 2, 3, 4], [2, 3, 4, 1], [1, 2, 3, 4])
    assert main(["partition", str(log), "-o", str(tmp_path / "o"), "--no-progress", f"--max-memory={size}"]) == 2
    assert "max_memory" in capsys.readouterr().err
    with pytest.raises(speed.InputError, match="too small"):
        outofcore.chunk_events(100 << 20, 10**6, 24)


def test_tgl_companions_are_refused_out_of_core(tmp_path, capsys):
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n" + "".join(
        f"{k},{k % 5},{(k + 1) % 5},{k},{0 if k < 60 else 1 if k < 80 else 2}\n" for k in range(100)))
    args = ["partition", str(tmp_path / "edges.csv"), "-o", str(tmp_path / "o"), "--no-progress", "--max-memory", "1G"]
    assert main(args) == 2 and "ext_roll" in capsys.readouterr().err
    assert main([*args, "--split-times", "59", "79"]) == 0  # with the times given it streams
    capsys.readouterr()
