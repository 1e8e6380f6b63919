"""Every way a run can end: signals, a dead launcher, a full disk, a kill -9, a closed pipe,
and folders that are not ours.  Real processes throughout (the CLI as users run it)."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import speed
from speed.train.run.checkpoint import NO_LAST
from speed.cli import main

SPEED = [sys.executable, "-m", "speed"]


def _cli(args, **kw):
    return subprocess.run(SPEED + [str(a) for a in args], capture_output=True, text=True, timeout=300, **kw)

from conftest import generated_shards  # noqa: E402


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return generated_shards(tmp_path_factory.mktemp("faults"), 400, 30_000, 3, 2)


def _children(pid: int):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start_parallel_run(shards, out):
    """A 2-rank run that lasts far longer than the test, its ranks up and training."""
    proc = subprocess.Popen(SPEED + ["train", str(shards), "--nproc", "2", "--epochs", "200", "--out", str(out),
                                     "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a shell's background job ignores SIGINT; a user's terminal does not
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    ranks = []
    while time.monotonic() < deadline:
        ranks = [p for p in _children(proc.pid) if "spawn" in Path(f"/proc/{p}/cmdline").read_text()]
        if len(ranks) == 2:
            break
        time.sleep(0.5)
    assert len(ranks) == 2, "the ranks did not start"
    time.sleep(6)  # into the process group and the first steps
    return proc, ranks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig, code, words", [
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
    pytest.param(signal.SIGINT, 130, "interrupted", marks=pytest.mark.slow),
    pytest.param(signal.SIGHUP, 129, "stopped by SIGHUP", marks=pytest.mark.slow)])
def test_a_signal_to_the_launcher_alone_stops_every_rank(shards, tmp_path, sig, code, words):
    proc, ranks = _start_parallel_run(shards, tmp_path / "run")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1] == f"speed train: {words}"
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while any(_alive(r) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(r) for r in ranks), "a rank outlived its launcher"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ranks_end_when_their_launcher_is_killed(shards, tmp_path):
    proc, ranks = _start_parallel_run(shards, tmp_path / "run")
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(_alive(r) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(r) for r in ranks), "a rank outlived its launcher (kill -9)"


def test_resume_without_a_checkpoint_fails_before_any_rank_starts(shards, tmp_path):
    (tmp_path / "run").mkdir()
    r = _cli(["train", shards, "--nproc", "2", "--resume", "--out", tmp_path / "run"])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"speed train: error: {tmp_path / 'run' / 'last.json'}: {NO_LAST}"


@pytest.fixture(scope="module")
def bad_big_log(tmp_path_factory):
    """A log larger than one read block (16 MiB) with a bad time on line 501."""
    path = tmp_path_factory.mktemp("badbig") / "bad.csv"
    n = 1_300_000
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 5000, n).tolist(), rng.integers(5000, 9000, n).tolist()
    lines = [f"{s},{d},{10**9 + k}" for k, (s, d) in enumerate(zip(src, dst))]
    lines[499] = "1,5001,12x9"
    path.write_text("src,dst,t\n" + "\n".join(lines) + "\n")
    assert path.stat().st_size > 1 << 24
    return path


_FORKING_DRIVER = """
import os, sys
from speed.cli import main
codes = []
for k in range(0, int(sys.argv[2]), 2):
    pids = []
    for j in (k, k + 1):  # two at a time, one per core
        pid = os.fork()
        if pid == 0:  # the child runs the command and leaves through normal interpreter exit
            sys.exit(main(["partition", sys.argv[1], "-o", sys.argv[3] + str(j), "--parts", "2", "--no-progress"]))
        pids.append(pid)
    for pid in pids:
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(" ".join(map(str, codes)))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks the command to save the imports")
def test_a_bad_file_exits_2_every_time(bad_big_log, tmp_path):
    """Arrow's read-ahead threads once held Python buffers past the error; freed while the
    interpreter exited, they aborted it (SIGABRT, exit 134) in about half the runs.

    Each run is a real process that ends through interpreter shutdown, where the abort
    happened; a driver imports ``speed`` once and forks them, to keep the test short.
    """
    r = subprocess.run([sys.executable, "-c", _FORKING_DRIVER, str(bad_big_log), "20", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=600)
    assert r.stdout.split() == ["2"] * 20, r.stderr[-500:]
    lines = r.stderr.strip().splitlines()
    assert lines == [f"speed partition: error: {bad_big_log}:501: time '12x9' is not a number"] * 20, lines[:3]
    assert not list(tmp_path.iterdir())


def _limit_file_size(nbytes):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))


@pytest.mark.parametrize("limit", [5_000, pytest.param(60_000, marks=pytest.mark.slow)])
def test_a_file_size_limit_while_writing_shards_is_exit_2_and_nothing_left(tmp_path, limit):
    log = speed.write_generated(tmp_path / "log.csv", 400, 30_000, seed=1)
    r = _cli(["partition", log, "-o", tmp_path / "s", "--parts", "2", "--no-progress"],
             preexec_fn=_limit_file_size(limit))
    assert r.returncode == 2, r.stderr
    assert "cannot write" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv"]


def test_a_file_size_limit_while_writing_a_run_is_exit_2_and_nothing_half_written(tmp_path):
    log = speed.write_generated(tmp_path / "log.csv", 200, 3_000, seed=1)
    r = _cli(["train", log, "--out", tmp_path / "run", "--epochs", "1", "--model", "jodie", "--no-progress"],
             preexec_fn=_limit_file_size(200_000))
    assert r.returncode == 2, r.stderr
    assert "cannot write" in r.stderr and "Traceback" not in r.stderr
    left = [p.name for p in (tmp_path / "run").iterdir()] if (tmp_path / "run").exists() else []
    assert not [n for n in left if n.startswith(".")], left  # no temporary file left behind


@pytest.mark.parametrize("extra", [[], ["--max-memory", "1G"]], ids=["in-memory", "out-of-core"])
def test_kill_9_of_partition_leaves_nothing_or_a_complete_output(tmp_path, extra):
    log = speed.write_generated(tmp_path / "log.csv", 20_000, 300_000, seed=2)
    rng = random.Random(7)
    out = tmp_path / "s"
    outcomes = set()
    for _ in range(3):
        proc = subprocess.Popen(SPEED + ["partition", str(log), "-o", str(out), "--parts", "4", "--overwrite",
                                         "--no-progress"] + extra,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 5.0))
        proc.kill()
        proc.wait()
        if out.exists():
            r = _cli(["plan", out, "--nproc", "2", "--json"])  # reads every shard file
            assert r.returncode == 0, r.stderr
            outcomes.add("complete")
        else:
            outcomes.add("nothing")
    # what a kill leaves under a temporary name is removed by the next write of the target
    assert main(["partition", str(log), "-o", str(out), "--parts", "4", "--overwrite", "--no-progress"] + extra) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "s"]


_CHECKPOINT_WRITER = """
import sys, torch
from speed.train.run.checkpoint import Checkpoint
big = {"w": torch.randn(2_000_000)}
k = 0
while True:
    k += 1
    Checkpoint(kind="last", epoch=k, model_name="tgn", config={}, model=big, optimizer={}, rng=[], history=[],
               stopping={}, best={}, num_nodes=1).save(sys.argv[1])
    print(k, flush=True)
"""


def test_kill_9_during_a_checkpoint_write_keeps_the_previous_one(tmp_path):
    from speed.train.run.checkpoint import load_checkpoint

    path = tmp_path / "last.json"
    rng = random.Random(3)
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", _CHECKPOINT_WRITER, str(path)], stdout=subprocess.PIPE,
                                text=True)
        proc.stdout.readline()  # one complete write
        time.sleep(rng.uniform(0.0, 0.3))
        proc.kill()
        proc.wait()
        assert load_checkpoint(path).epoch >= 1


def test_overwrite_replaces_only_what_speed_wrote(shards, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    log = speed.write_generated(tmp_path / "log.csv", 100, 1_000, seed=0)
    r = _cli(["partition", log, "-o", mine, "--overwrite"])
    assert r.returncode == 2 and "not a shards folder" in r.stderr
    r = _cli(["train", log, "--out", mine, "--overwrite", "--epochs", "1"])
    assert r.returncode == 2 and "not a run folder" in r.stderr
    assert (mine / "notes.txt").read_text() == "keep me"
    # a shards folder may be replaced
    args = ["partition", str(log), "-o", str(tmp_path / "again"), "--parts", "2", "--no-progress"]
    assert main(args) == 0
    assert main(args + ["--overwrite"]) == 0


def test_piping_into_head_ends_quietly(shards, tmp_path):
    log = speed.write_generated(tmp_path / "log.csv", 100, 1_000, seed=0)
    proc = subprocess.Popen(SPEED + ["partition", str(log), "-o", str(tmp_path / "s"), "--json", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE
    assert err == ""


def test_an_output_is_created_exclusively(tmp_path):
    """A writer that finds its output written by another command meanwhile writes nothing and
    says so (without overwrite); with overwrite it replaces it."""
    from speed._util import atomic_dir

    out = tmp_path / "out"
    with pytest.raises(speed.InputError, match="written by another command meanwhile"):
        with atomic_dir(out, kind="run folder") as tmp:
            (tmp / "metrics.json").write_text("1")
            with atomic_dir(out, kind="run folder") as other:  # the other command, finishing first
                (other / "metrics.json").write_text("2")
    assert (out / "metrics.json").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left
    with atomic_dir(out, overwrite=True, kind="run folder") as tmp:
        (tmp / "metrics.json").write_text("1")
    assert (out / "metrics.json").read_text() == "1"


def test_a_killed_launchers_rendezvous_folder_is_swept_by_the_next(tmp_path):
    """A launcher killed with -9 cannot remove its rendezvous folder (speed-rdzv-PID-*); the next
    launch removes the folders of launchers that are gone and keeps a live one's."""
    import importlib

    launch = importlib.import_module("speed.train.pac.launch")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"speed-rdzv-{dead.pid}-abc").mkdir()
    (tmp_path / f"speed-rdzv-{dead.pid}-abc" / "store").write_text("")
    (tmp_path / f"speed-rdzv-{os.getpid()}-def").mkdir()
    (tmp_path / "speed-rdzv-abcdef").mkdir()  # an older version's name: left alone
    launch._sweep_rendezvous(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"speed-rdzv-{os.getpid()}-def", "speed-rdzv-abcdef"]
