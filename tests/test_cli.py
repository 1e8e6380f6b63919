"""The ``speed`` command: outputs, exit codes and one-line errors."""

import json
import subprocess
import sys

import pytest

import speed
from speed.cli import main


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.fixture
def log(tmp_path):
    return speed.write_generated(tmp_path / "log.csv", 500, 5000, seed=0)


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_partition_writes_shards_and_summary(tmp_path, log, capsys):
    code, out, err = run_cli(["partition", log, "-o", tmp_path / "s", "--parts", 3, "--topk", 5], capsys)
    assert code == 0, err
    assert "edge cut" in out and "replication" in out
    m = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert m["num_parts"] == 3 and m["params"]["topk"] == 0.05 and m["num_events"] == 5000
    assert m["num_train_events"] == m["split"]["num_train_events"] < 5000
    assert {"read", "split", "centrality", "assign", "write"} <= set(m["seconds"])


def test_partition_json(tmp_path, log, capsys):
    code, out, _ = run_cli(["partition", log, "-o", tmp_path / "s", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["num_parts"] == 4


def test_unsorted_input_is_sorted_and_reported(tmp_path, capsys):
    p = write(tmp_path, "u.csv", "".join(f"{i % 13},{(i * 7) % 13},{(i * 37) % 100}\n" for i in range(100)))
    code, out, _ = run_cli(["partition", p, "-o", tmp_path / "s", "--parts", 2], capsys)
    assert code == 0 and "not sorted" in out


def test_columns_by_name_and_index(tmp_path, capsys):
    # time first, then an unused column, then destination and source: the defaults (0, 1, 2)
    # would read other values, so the flags must be what picked the columns
    rows = [(i, 7 * i, (i + 1) % 5 + 100, i % 5 + 100) for i in range(50)]
    p = write(tmp_path, "c.csv", "t,junk,b,a\n" + "".join(f"{t},{j},{b},{a}\n" for t, j, b, a in rows))
    code, _, err = run_cli(["partition", p, "-o", tmp_path / "s1", "--src-col", "a", "--dst-col", "b",
                            "--time-col", "t"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["partition", p, "-o", tmp_path / "s2", "--src-col", 3, "--dst-col", 2,
                            "--time-col", 0], capsys)
    assert code == 0, err
    for out in ("s1", "s2"):
        ev = speed.load_shards(tmp_path / out).events()
        assert ev.node_ids[ev.src].tolist() == [a for _, _, _, a in rows]
        assert ev.node_ids[ev.dst].tolist() == [b for _, _, b, _ in rows]
        assert ev.t.tolist() == [t for t, _, _, _ in rows]


BAD_FILES = [
    ("empty.csv", "", "file is empty"),
    ("hdr.csv", "src,dst,t\n", "hdr.csv:2: no events after the header"),
    ("ragged.csv", "1,2,3\n4,5,6,7\n", "ragged.csv:2: expected 3 fields"),
    ("nonnum.csv", "1,2,3\n4,5,x\n", "nonnum.csv:2: time 'x' is not a number"),
    ("nan.csv", "1,2,3\n4,5,nan\n", "nan.csv:2: time is nan"),
    ("inf.csv", "1,2,3\n4,5,-inf\n", "inf.csv:2: time is -inf"),
    ("noid.csv", "1,2,3\n4,,5\n", "noid.csv:2: missing dst id"),
]


@pytest.mark.parametrize("name, text, expected", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_files_exit_2_one_line_no_output(tmp_path, capsys, name, text, expected):
    p = write(tmp_path, name, text)
    code, out, err = run_cli(["partition", p, "-o", tmp_path / "out", "--parts", 2], capsys)
    assert code == 2
    assert err.count("\n") == 1 and expected in err and str(p) in err
    assert not (tmp_path / "out").exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == [name]


@pytest.mark.parametrize("args, expected", [
    (["--parts", "0"], "--parts must be >= 1"),
    (["--topk", "101"], "--topk is a percent in [0, 100]"),
    (["--topk", "-1"], "--topk is a percent in [0, 100]"),
    (["--src-col", "nope"], "unknown src column 'nope'"),
    (["--time-col", "9"], "time column index 9 out of range"),
])
def test_bad_options(tmp_path, log, capsys, args, expected):
    code, _, err = run_cli(["partition", log, "-o", tmp_path / "out", *args], capsys)
    assert code == 2 and expected in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_argparse_errors_are_one_line_exit_2(tmp_path, log, capsys):
    with pytest.raises(SystemExit) as info:
        main(["partition", str(log), "-o", str(tmp_path / "out"), "--parts", "two"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "invalid int value" in err and err.count("\n") == 1


def test_missing_input(tmp_path, capsys):
    code, _, err = run_cli(["partition", tmp_path / "nope.csv", "-o", tmp_path / "out"], capsys)
    assert code == 2 and "nope.csv: file not found" in err


def test_existing_output_refused(tmp_path, log, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    code, _, err = run_cli(["partition", log, "-o", tmp_path / "out"], capsys)
    assert code == 2 and "already exists" in err
    assert (tmp_path / "out" / "keep").exists()


def test_generate_command(tmp_path, capsys):
    code, out, _ = run_cli(["generate", tmp_path / "g.csv", "--nodes", 100, "--events", 1000], capsys)
    assert code == 0 and "1,000 events" in out
    assert len(speed.read_events(tmp_path / "g.csv")) == 1000
    code, _, err = run_cli(["generate", tmp_path / "h.csv", "--nodes", 1], capsys)
    assert code == 2 and not (tmp_path / "h.csv").exists()


def test_python_dash_m_entry_point(tmp_path, log):
    proc = subprocess.run([sys.executable, "-m", "speed", "partition", str(log), "-o", str(tmp_path / "s"),
                           "--parts", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_parts"] == 2
    assert proc.stderr == ""  # no progress bars when stderr is not a terminal


def test_the_current_folder_or_one_above_is_never_an_output(tmp_path, monkeypatch, capsys):
    """`-o .` used to die renaming onto the working folder (EBUSY), leaving a `..old-*` folder."""
    log = tmp_path / "log.csv"
    log.write_text("src,dst,t\n" + "".join(f"{i % 7},{7 + i % 5},{i}\n" for i in range(200)))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for argv in (["partition", str(log), "-o", ".", "--parts", "2"],
                 ["partition", str(log), "-o", "..", "--parts", "2", "--overwrite"],
                 ["train", str(log), "--out", ".", "--epochs", "1"]):
        assert main(argv + ["--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert "the output is the current folder" in err and len(err.splitlines()) == 1
    assert list(here.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["here", "log.csv"]


@pytest.mark.parametrize("extra", [[], ["--max-memory", "1G"]])
def test_more_parts_than_nodes_warn_and_more_than_the_buckets_allow_are_refused(tmp_path, capsys, extra):
    """3,000 parts of 1,963 nodes made a 70 MB folder without a word; 10,000 raised MemoryError."""
    log = tmp_path / "log.csv"
    log.write_text("src,dst,t\n" + "".join(f"{i % 7},{7 + i % 5},{i}\n" for i in range(200)))
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "10000", "--no-progress",
                 "--new-node-fraction", "0", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "num_parts is 10,000; at most 4,096" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s").exists()
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "13", "--no-progress",
                 "--new-node-fraction", "0", *extra]) == 0
    assert "warning: 13 parts for 12 nodes: at least 1 parts stay empty" in capsys.readouterr().err


def test_a_named_separator_that_does_not_split_the_file_is_refused_with_the_one_that_does(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text("".join(f"{i % 7} {7 + i % 5} {i}\n" for i in range(50)))
    for sep, named in (("tab", "--sep tab"), (",", "--sep ','")):
        assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "1", "--sep", sep,
                     "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert f"log.txt:1: {named} splits this line into 1 column" in err
        assert err.endswith("its lines look separated by spaces (--sep space)")
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "1", "--sep", "space",
                 "--no-progress"]) == 0


@pytest.mark.parametrize("text, hint", [("1 5 9\n2 6 3\n", "sort -k3,3g"), ("1\t5\t9\n2\t6\t3\n", "sort -t$'\\t' -k3,3g"),
                                        ("1,5,9\n2,6,3\n", "sort -t, -k3,3g")])
def test_the_out_of_core_sort_hint_follows_the_separator(tmp_path, capsys, text, hint):
    log = tmp_path / "log.txt"
    log.write_text(text)
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "1", "--max-memory", "1G",
                 "--no-progress"]) == 2
    assert f"(e.g. {hint})" in capsys.readouterr().err


def test_a_file_size_limit_gives_one_line_and_leaves_nothing_half_written(tmp_path):
    """Under `ulimit -f` an append raised OSError EFBIG, and `speed embed` left its ids file
    without the embeddings."""
    import resource

    rows = "".join(f"{i % 40},{40 + i % 30},{i}\n" for i in range(3000))
    (tmp_path / "a.csv").write_text("src,dst,t\n" + rows)
    (tmp_path / "b.csv").write_text("src,dst,t\n" + "".join(f"{i % 40},{40 + i % 30},{i}\n"
                                                            for i in range(3000, 60000)))
    s, run = tmp_path / "s", tmp_path / "run"
    assert main(["partition", str(tmp_path / "a.csv"), "-o", str(s), "--parts", "2", "--no-progress"]) == 0
    assert main(["train", str(tmp_path / "a.csv"), "--out", str(run), "--epochs", "1", "--model", "jodie",
                 "--no-progress"]) == 0
    before = sorted(p.name for p in s.rglob("*"))

    def limited(limit):
        return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    for argv, limit in ((["partition", str(tmp_path / "b.csv"), "-o", str(s), "--append"], 100_000),
                        (["embed", str(run), "-o", str(tmp_path / "emb.npy")], 10_000)):
        r = subprocess.run([sys.executable, "-m", "speed", *argv, "--no-progress"], capture_output=True, text=True,
                           preexec_fn=limited(limit))
        assert r.returncode == 2, r.stderr
        assert "cannot write" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in s.rglob("*")) == before
    assert not list(tmp_path.glob("emb*")) and not list(tmp_path.glob(".emb*"))


def test_scratch_folders_of_killed_processes_are_swept(tmp_path):
    """A PAC run killed while rank 0 wrote the time-ordered log left its folder in the run folder:
    the next one removes it (only a dead process's, of this host)."""
    import os
    import socket

    from speed._util import scratch_dir

    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32] or "host"
    dead = tmp_path / f".speed-log.tmp-{host}-999999999-abc"
    live = tmp_path / f".speed-log.tmp-{host}-{os.getpid()}-abc"
    dead.mkdir()
    live.mkdir()
    (dead / "src.npy").write_bytes(b"x")
    new = scratch_dir(tmp_path, "speed-log")
    assert new.is_dir() and new.parent == tmp_path and new.name.startswith(f".speed-log.tmp-{host}-{os.getpid()}-")
    assert not dead.exists() and live.exists()


def test_a_line_past_the_csv_field_limit_is_one_line_naming_it(tmp_path, capsys):
    """A 200 MB line raised _csv.Error from the bad-line search; an open quote does the same."""
    log = tmp_path / "log.csv"
    log.write_text("src,dst,t\n1,2,3\n4,\"5" + "x" * 300_000 + "\n7,8,9\n")
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "log.csv:3: unreadable line (field larger than field limit" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s").exists()
