"""A corpus of broken inputs: each gets exit code 2, one line naming the file (and line), and
no output left behind.  Each case builds its file the way a real export goes wrong."""

import gzip
import json
import shutil

import numpy as np
import pytest

import speed
from speed.cli import main


def _one_line_error(capsys, code, *needles):
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    for n in needles:
        assert n in err, err
    return err

from conftest import generated_shards  # noqa: E402


@pytest.fixture(scope="module")
def good_shards(tmp_path_factory):
    return generated_shards(tmp_path_factory.mktemp("bad"), 100, 2000, 0, 2, "--topk", "5")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_truncated_gzip(tmp_path, capsys):
    log = speed.write_generated(tmp_path / "log.csv", 2000, 200_000, seed=0)
    data = gzip.compress(log.read_bytes())
    (tmp_path / "cut.csv.gz").write_bytes(data[: len(data) // 2])
    code = main(["partition", str(tmp_path / "cut.csv.gz"), "-o", str(tmp_path / "out"), "--no-progress"])
    _one_line_error(capsys, code, "cut.csv.gz", "gzip stream is truncated or corrupt")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage, needle", [
    ("missing_offsets", "offsets.npy: missing file"),
    ("truncated_src", "src.npy: unreadable or truncated array"),
    ("short_t", "t.npy: "),
    ("missing_nodes", "nodes.npz: missing file"),
    ("future_format", "unsupported shard format 99"),
    ("manifest_lacks_counts", "manifest.json lacks num_events"),
])
def test_damaged_shard_directories(good_shards, tmp_path, capsys, damage, needle):
    s = _copy(good_shards, tmp_path / "s")
    ev = s / "events"
    if damage == "missing_offsets":
        (ev / "offsets.npy").unlink()
    elif damage == "truncated_src":
        raw = (ev / "src.npy").read_bytes()
        (ev / "src.npy").write_bytes(raw[: len(raw) // 2])
    elif damage == "short_t":
        np.save(ev / "t.npy", np.load(ev / "t.npy")[:-5])
    elif damage == "missing_nodes":
        (s / "nodes.npz").unlink()
    else:
        m = json.loads((s / "manifest.json").read_text())
        if damage == "future_format":
            m["format_version"] = 99
        else:
            del m["num_events"]
        (s / "manifest.json").write_text(json.dumps(m))
    code = main(["train", str(s), "--out", str(tmp_path / "run"), "--epochs", "1", "--no-progress"])
    _one_line_error(capsys, code, needle)
    assert not (tmp_path / "run").exists()
    code = main(["plan", str(s), "--nproc", "2"])
    _one_line_error(capsys, code, needle)


@pytest.mark.parametrize("rows", [
    ["1,2,5"],  # one event
    ["1,2,5", "2,3,5", "3,1,5", "4,1,5", "2,4,5"],  # every event at the same time
])
def test_logs_too_degenerate_to_split(tmp_path, capsys, rows):
    (tmp_path / "log.csv").write_text("\n".join(rows) + "\n")
    code = main(["train", str(tmp_path / "log.csv"), "--out", str(tmp_path / "run"), "--no-progress"])
    _one_line_error(capsys, code, "log.csv: the log is too small or too degenerate to train on")
    assert not (tmp_path / "run").exists()
    # partitioning such a log is fine; training on its shards is refused the same way
    assert main(["partition", str(tmp_path / "log.csv"), "-o", str(tmp_path / "s"), "--no-progress"]) == 0
    capsys.readouterr()
    code = main(["train", str(tmp_path / "s"), "--out", str(tmp_path / "run"), "--nproc", "1", "--no-progress"])
    _one_line_error(capsys, code, "too small or too degenerate")


def test_iso_datetimes_are_read_as_epoch_seconds(tmp_path):
    rows = ["src,dst,time", "a,b,2024-01-01T00:00:00", "b,c,2024-01-01 00:00:01.5", "c,a,2024-01-01T00:01:00"]
    (tmp_path / "iso.csv").write_text("\n".join(rows) + "\n")
    ev = speed.read_events(tmp_path / "iso.csv")
    assert ev.t.tolist() == [1704067200.0, 1704067201.5, 1704067260.0]
    zoned = ["1,2,2024-01-01T02:00:00+02:00", "2,3,2024-01-01T00:00:30Z"]
    (tmp_path / "zoned.csv").write_text("\n".join(zoned) + "\n")
    assert speed.read_events(tmp_path / "zoned.csv").t.tolist() == [1704067200.0, 1704067230.0]
    (tmp_path / "fmt.csv").write_text("1,2,02/01/2024 10:00\n2,3,03/01/2024 10:00\n")
    ev = speed.read_events(tmp_path / "fmt.csv", time_format="%d/%m/%Y %H:%M")
    assert ev.t.tolist() == [1704189600.0, 1704276000.0]


def test_a_bad_datetime_names_its_line(tmp_path, capsys):
    rows = ["1,2,2024-01-01T00:00:00"] * 5 + ["2,3,2024-13-45T99:00:00"] + ["3,1,2024-01-02T00:00:00"] * 3
    (tmp_path / "dates.csv").write_text("\n".join(rows) + "\n")
    code = main(["partition", str(tmp_path / "dates.csv"), "-o", str(tmp_path / "out"), "--no-progress"])
    _one_line_error(capsys, code, "dates.csv:6: time '2024-13-45T99:00:00' is not a number or an ISO-8601")
    code = main(["partition", str(tmp_path / "dates.csv"), "-o", str(tmp_path / "out"), "--no-progress",
                 "--time-format", "%d/%m/%Y"])
    _one_line_error(capsys, code, "dates.csv:1: time '2024-01-01T00:00:00' does not match --time-format")
    assert not (tmp_path / "out").exists()


def test_comment_lines_anywhere_are_skipped_and_lines_stay_right(tmp_path, capsys):
    rows = ["# exported 2024-01-01", "src,dst,t", "1,2,1", "2,3,2", "# a note in the middle", "3,1,3",
            "% another", "1,3,4", "2,1,x"]
    (tmp_path / "c.csv").write_text("\n".join(rows[:-1]) + "\n")
    ev = speed.read_events(tmp_path / "c.csv")
    assert ev.t.tolist() == [1.0, 2.0, 3.0, 4.0] and len(ev) == 4
    (tmp_path / "bad.csv").write_text("\n".join(rows) + "\n")
    code = main(["partition", str(tmp_path / "bad.csv"), "-o", str(tmp_path / "out"), "--no-progress"])
    _one_line_error(capsys, code, "bad.csv:9: time 'x' is not a number")


def test_snap_with_runs_of_whitespace(tmp_path):
    (tmp_path / "runs.txt").write_text("1  2\t 10\n 2 3   11  \n3\t\t1 12\n")
    ev = speed.read_events(tmp_path / "runs.txt")
    assert len(ev) == 3 and ev.t.tolist() == [10.0, 11.0, 12.0]
    assert [ev.node_ids[i] for i in ev.src] == [1, 2, 3] and [ev.node_ids[i] for i in ev.dst] == [2, 3, 1]
    # regular in its head, irregular further down (past the sniffed bytes)
    body = "".join(f"{i} {i + 1} {i}\n" for i in range(20000)) + "20000   20001  20000\n"
    (tmp_path / "late.txt").write_text(body)
    assert len(speed.read_events(tmp_path / "late.txt")) == 20001


# ------------------------------------------------------------------ output paths of every command
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A trained run (one epoch on a small log) for the commands that read one."""
    tmp = tmp_path_factory.mktemp("outpaths")
    log = speed.write_generated(tmp / "log.csv", 60, 800, seed=1)
    code = main(["train", str(log), "--out", str(tmp / "run"), "--epochs", "1", "--memory-dim", "8", "--time-dim", "8",
                 "--embedding-dim", "8", "--no-progress", "--threads", "1"])
    assert code == 0
    (tmp / "pairs.csv").write_text("src,dst,t\n1,2,99999999\n")
    return tmp


def _command(name, tmp, out):
    """The command ``name`` writing to ``out`` (every subcommand with an output)."""
    log, run = str(tmp / "log.csv"), str(tmp / "run")
    return {"partition": ["partition", log, "-o", out], "train": ["train", log, "--out", out, "--epochs", "1"],
            "embed": ["embed", run, "-o", out], "score": ["score", run, str(tmp / "pairs.csv"), "-o", out],
            "update": ["update", run, str(tmp / "pairs.csv"), "--out", out], "generate": ["generate", out],
            "convert-run": ["convert-run", str(tmp / "old"), out]}[name] + ["--no-progress"] * (name != "convert-run")


COMMANDS_WITH_OUTPUT = ["partition", "train", "embed", "score", "update", "generate", "convert-run"]


@pytest.mark.parametrize("name", COMMANDS_WITH_OUTPUT)
@pytest.mark.parametrize("case", ["under_a_file", "pseudo_fs", "file_for_folder"])
def test_an_output_path_that_cannot_be_made_is_one_line(tiny_run, tmp_path, capsys, name, case):
    """A file in the way, a pseudo file system that takes no files, or a file where a folder
    output is named (a folder where a file output is): exit 2, one line naming the path and
    why, nothing created."""
    (tmp_path / "afile").write_text("x")
    folder_output = name in ("partition", "train", "update", "convert-run")
    if case == "under_a_file":
        out, needle = tmp_path / "afile" / "sub", "afile is a file, not a folder"
    elif case == "pseudo_fs":
        out, needle = "/proc/speed-test-output", "does not take new files"
    else:  # the wrong kind where the output is named
        if folder_output:
            out, needle = tmp_path / "afile", "is a file, not a folder"
        else:
            (tmp_path / "adir").mkdir()
            out, needle = tmp_path / "adir", "is a folder"
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(_command(name, tiny_run, str(out)))
    err = _one_line_error(capsys, code, str(out), needle)
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "afile").read_text() == "x"


def test_a_missing_parent_folder_is_made_and_said(tmp_path, capsys):
    """Missing parents are created, as `mkdir -p` would (the path names where the user wants the
    output), and the command says so on stderr."""
    log = speed.write_generated(tmp_path / "log.csv", 60, 800, seed=1)
    out = tmp_path / "a" / "b" / "shards"
    assert main(["partition", str(log), "-o", str(out), "--no-progress"]) == 0
    assert (out / "manifest.json").exists()
    assert f"{tmp_path / 'a' / 'b'} does not exist: creating it" in capsys.readouterr().err


def test_a_guessed_time_column_that_is_no_time_stops_training(tmp_path, capsys):
    """A headerless `source,target,rating,time` log (Bitcoin's): the default takes the rating as
    the time; training stops with the hint, partitioning flags it, and naming the column trains."""
    rng = np.random.default_rng(0)
    n = 600
    t = np.cumsum(rng.integers(1, 50, n))
    rows = np.stack([rng.integers(0, 40, n), rng.integers(0, 40, n), rng.integers(-10, 11, n), t], 1)
    log = tmp_path / "bitcoin.csv"
    np.savetxt(log, rows, fmt="%d", delimiter=",")
    code = main(["train", str(log), "--out", str(tmp_path / "r"), "--epochs", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "taken from column 2 by default" in err and "--time-col" in err and "not training on it" in err
    assert not (tmp_path / "r").exists()
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--no-progress"]) == 0
    assert "CHECK        the time was taken from column 2 by default" in capsys.readouterr().out
    assert main(["train", str(log), "--out", str(tmp_path / "r"), "--epochs", "1", "--time-col", "3",
                 "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]) == 0


def test_score_takes_pairs_without_a_time_and_scores_them_now(tiny_run, tmp_path, capsys):
    (tmp_path / "pairs.csv").write_text("src,dst\n1,2\n3,4\n")
    (tmp_path / "bare.csv").write_text("1,2\n3,4\n")
    for name in ("pairs.csv", "bare.csv"):
        assert main(["score", str(tiny_run / "run"), str(tmp_path / name), "-o", str(tmp_path / f"s-{name}"),
                     "--no-progress"]) == 0
        out = capsys.readouterr().out
        assert "at the run's last time" in out and "no time column" in out
    a, b = ((tmp_path / f"s-{n}").read_text().splitlines() for n in ("pairs.csv", "bare.csv"))
    assert a == b and a[0] == "src,dst,t,score,known" and len(a) == 3
    t_last = speed.load_run(tiny_run / "run").t_last
    assert all(float(line.split(",")[2]) == t_last for line in a[1:])
