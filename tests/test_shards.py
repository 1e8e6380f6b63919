"""Shards: writing, reading back, and merging any group of parts."""

import itertools
import re
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import speed
from conftest import random_stream


def node_induced(events, node_parts, parts):
    allowed = node_parts == -1
    for p in parts:
        allowed |= node_parts == p
    return np.flatnonzero(allowed[events.src] & allowed[events.dst])


def make(tmp_path, n=80, e=2000, p=4, topk=0.05, seed=0, msg=False, label=False):
    rng = np.random.default_rng(seed)
    src, dst, t = random_stream(rng, n, e)
    ev = speed.Events.from_arrays(
        src, dst, t, num_nodes=n,
        msg=rng.random((e, 3)).astype(np.float32) if msg else None,
        label=rng.integers(0, 2, e) if label else None,
    )
    split = speed.chronological_split(ev, seed=seed)
    res = speed.partition(split.train(ev), p, topk=topk)
    out = res.save(tmp_path / "shards", events=ev, split=split)
    return ev, split, res, speed.load_shards(out)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.sampled_from([0.0, 0.05, 0.2]), st.integers(0, 10_000), st.data())
def test_merge_is_node_induced_subgraph_of_union(tmp_path_factory, p, topk, seed, data):
    tmp = tmp_path_factory.mktemp("m")
    ev, _, res, sh = make(tmp, p=p, topk=topk, seed=seed, msg=True, label=True)
    group = data.draw(st.lists(st.integers(0, p - 1), min_size=1, max_size=p, unique=True))
    got = sh.merge(group)
    idx = node_induced(ev, res.node_parts, group)
    np.testing.assert_array_equal(got.eid, ev.eid[idx])
    np.testing.assert_array_equal(got.src, ev.src[idx])
    np.testing.assert_array_equal(got.dst, ev.dst[idx])
    np.testing.assert_array_equal(got.t, ev.t[idx])
    np.testing.assert_array_equal(got.msg, ev.msg[idx])
    np.testing.assert_array_equal(got.label, ev.label[idx])
    assert np.all(np.diff(got.t) >= 0)


def test_cut_events_come_back_when_parts_merge(tmp_path):
    ev, split, res, sh = make(tmp_path, n=200, e=5000, p=4, topk=0.0)
    a, b = sh.part(0, "train"), sh.part(1, "train")
    ab = sh.merge([0, 1], "train")
    cut_ab = len(ab) - len(set(a.eid) | set(b.eid))
    np_ = res.node_parts
    tr = split.train(ev)
    ps, pd = np_[tr.src], np_[tr.dst]
    expected = int(np.sum(((ps == 0) & (pd == 1)) | ((ps == 1) & (pd == 0))))
    assert cut_ab == expected > 0


def test_part_event_counts_match_manifest(tmp_path):
    ev, split, res, sh = make(tmp_path, topk=0.1)
    m = sh.manifest
    assert [len(sh.part(p, "train")) for p in range(4)] == m["part_events"]
    assert len(sh.events()) == len(ev) == m["num_events"]
    assert len(sh.events("train")) == split.num_train == m["num_train_events"]
    assert len(sh.events("eval")) == split.num_val + split.num_test
    # every part holds every shared-shared event; all events appear in the union
    assert len(sh.merge(range(4), "train")) == split.num_train
    assert np.array_equal(sh.node_parts, res.node_parts) and np.array_equal(sh.shared, res.shared)
    assert np.array_equal(sh.new_nodes, split.new_nodes)


def test_manifest_has_required_keys(tmp_path):
    _, _, _, sh = make(tmp_path)
    for key in ["num_events", "num_train_events", "num_nodes", "num_parts", "method", "params",
                "replication_factor", "edge_cut", "shared_nodes", "part_events", "part_nodes",
                "stream_loads", "seconds"]:
        assert key in sh.manifest, key
    for stage in ["centrality", "assign", "write"]:
        assert stage in sh.manifest["seconds"]


def test_refuses_existing_output_and_overwrites_on_request(tmp_path):
    ev, split, res, sh = make(tmp_path)
    with pytest.raises(speed.InputError, match="already exists"):
        res.save(tmp_path / "shards", events=ev)
    res.save(tmp_path / "shards", events=ev, overwrite=True)
    assert speed.load_shards(tmp_path / "shards").num_events == len(ev)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["shards"]


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    ev, split, res, _ = make(tmp_path)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError):
        res.save(tmp_path / "other", events=ev)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["shards"]


def test_bad_shards_directory(tmp_path):
    with pytest.raises(speed.InputError, match="no manifest.json"):
        speed.load_shards(tmp_path)
    _, _, _, sh = make(tmp_path)
    with pytest.raises(speed.InputError, match="part 9 out of range"):
        sh.merge([9])


def test_string_ids_survive(tmp_path):
    ev = speed.Events.from_arrays(["a", "b", "c", "a"], ["b", "c", "a", "c"], [0, 1, 2, 3])
    res = speed.partition(ev, 2)
    sh = speed.load_shards(res.save(tmp_path / "s"))
    assert list(sh.node_ids) == ["a", "b", "c"]
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["num_events"] == 4


def test_bucket_ids_are_a_bijection():
    from speed.partition._kernels import bucket_id

    for p in range(1, 7):
        ids = {bucket_id(a, b, p) for a, b in itertools.combinations_with_replacement(range(p + 1), 2)}
        assert ids == set(range((p + 1) * (p + 2) // 2))


@pytest.mark.parametrize("method", ["sep", "hdrf", "greedy", "random"])
def test_assigned_groups_train_each_event_once(tmp_path, method):
    src, dst, t = random_stream(np.random.default_rng(3), 300, 4000)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=300)
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.0)
    res = speed.partition(split.train(ev), 4, topk=0.1, method=method)
    sh = speed.load_shards(res.save(tmp_path / "s", events=ev, split=split))
    groups = [[0, 2], [1, 3]]
    assigned = [sh.merge(g, period="train", subgraph="assigned") for g in groups]
    induced = [sh.merge(g, period="train") for g in groups]
    for a, i in zip(assigned, induced):
        assert set(a.eid.tolist()) <= set(i.eid.tolist())
        assert np.all(np.diff(a.t) >= 0)
    ids = np.concatenate([a.eid for a in assigned])
    assert ids.size == np.unique(ids).size  # no event on two groups
    # every training event is on a group, except cut events whose parts are on different groups
    home = {p: k for k, g in enumerate(groups) for p in g}
    a_part, b_part = res.node_parts[split.train(ev).src], res.node_parts[split.train(ev).dst]
    lost = [(x >= 0 and y >= 0 and home[x] != home[y]) for x, y in zip(a_part, b_part)]
    assert ids.size == split.num_train - sum(lost)
    if method in ("sep", "hdrf", "greedy") and sh.shared.size:
        assert sum(len(i) for i in induced) > ids.size  # induced repeats the shared-shared events


def test_shards_without_event_parts_refuse_assigned_clearly(tmp_path):
    src, dst, t = random_stream(np.random.default_rng(4), 200, 3000)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=200)
    split = speed.chronological_split(ev, seed=0)
    path = speed.partition(split.train(ev), 2, topk=0.2).save(tmp_path / "s", events=ev, split=split)
    (path / "events" / "part.npy").unlink()  # as written by speed 0.1
    sh = speed.load_shards(path)
    assert len(sh.merge([0], period="train")) > 0
    with pytest.raises(speed.InputError, match="re-partition them, or use subgraph 'induced'"):
        sh.merge([0], period="train", subgraph="assigned")


def test_overwrite_never_deletes_what_speed_did_not_write(tmp_path, capsys):
    """`speed partition L -o S --overwrite` once removed a run saved in S and a user's notes:
    now a run folder is refused inside a shards folder, and --overwrite refuses, naming the file,
    while S holds anything speed did not write there."""
    from speed.cli import main

    log = Path(__file__).resolve().parents[1] / "data" / "sample.csv"
    s = tmp_path / "S"
    assert main(["partition", str(log), "-o", str(s), "--parts", "2", "--no-progress"]) == 0
    assert main(["train", str(s), "--out", str(s / "run"), "--epochs", "1", "--no-progress"]) == 2
    assert "inside the shards folder" in capsys.readouterr().err and not (s / "run").exists()
    (s / "mynotes.txt").write_text("n\n")
    assert main(["partition", str(log), "-o", str(s), "--parts", "2", "--no-progress", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "'mynotes.txt'" in err and "speed did not write" in err and len(err.strip().splitlines()) == 1
    assert (s / "mynotes.txt").read_text() == "n\n" and (s / "manifest.json").exists()
    (s / "mynotes.txt").unlink()
    assert main(["partition", str(log), "-o", str(s), "--parts", "2", "--no-progress", "--overwrite"]) == 0


@pytest.mark.parametrize("window", [7, 1 << 21])
def test_time_ordered_log_written_a_window_at_a_time_is_the_gathered_log(tmp_path, window):
    from speed.partition.ordered import map_ordered_log, release_pages, write_ordered_log

    ev, split, res, shards = make(tmp_path, msg=True, label=True)
    want = shards.events("split")
    got = map_ordered_log(shards, write_ordered_log(shards, tmp_path / "log", window=window))
    for name in ("src", "dst", "t", "eid", "msg", "label"):
        a, b = getattr(got, name), getattr(want, name)
        assert isinstance(a, np.memmap) and not a.flags.writeable  # mapped, never held or written
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert (got.num_nodes, got.bipartite) == (want.num_nodes, want.bipartite)
    release_pages(got)  # the pages go from this process, the values stay readable
    assert np.array_equal(got.msg, want.msg) and np.array_equal(got.src, want.src)


def test_time_ordered_log_refuses_ids_that_do_not_cover_the_log(tmp_path):
    from speed.partition.ordered import write_ordered_log

    ev, split, res, shards = make(tmp_path)
    eid = np.load(shards.segments[0].folder / "eid.npy")
    eid[eid == 5] = 6  # event 5 missing, event 6 twice
    np.save(shards.segments[0].folder / "eid.npy", eid)
    with pytest.raises(speed.InputError, match="eid.npy"):
        write_ordered_log(speed.load_shards(shards.path), tmp_path / "log", window=4)


@pytest.mark.parametrize("change, said", [
    (lambda m: m.update(nodes_file="../outside/nodes.npz"), "nodes_file is '../outside/nodes.npz'"),
    (lambda m: m.update(sep_state="/etc/passwd"), "sep_state is '/etc/passwd'"),
    (lambda m: m.update(segments=[{"dir": "../s/events", "first_eid": 0, "num_events": m["num_events"]}]),
     "segments[0].dir is '../s/events'"),
    (lambda m: m.update(split="x"), "split is str, not an object"),
    (lambda m: m.update(num_parts="a"), "num_parts is 'a', not a whole number"),
    (lambda m: m.update(num_nodes=True), "num_nodes is True, not a whole number"),
    (lambda m: m["split"].update(num_train_events=10 ** 12), "split.num_train_events is 1,000,000,000,000, above"),
    (lambda m: m.update(num_train_events=-1), "num_train_events is -1, below 0"),
    (lambda m: m["split"].update(val_time="soon"), "split.val_time is 'soon', not a number"),
])
def test_a_manifest_that_names_files_outside_or_has_wrong_entries_is_refused(tmp_path, capsys, change, said):
    from speed.cli import main

    ev, split, res, shards = make(tmp_path)
    m = json.loads((shards.path / "manifest.json").read_text())
    change(m)
    (shards.path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(speed.InputError, match="manifest.json: " + re.escape(said)):
        speed.load_shards(shards.path)
    for argv in (["plan", str(shards.path), "--nproc", "1"], ["train", str(shards.path), "--out", str(tmp_path / "r")]):
        assert main(argv + (["--no-progress"] if argv[0] == "train" else [])) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1
