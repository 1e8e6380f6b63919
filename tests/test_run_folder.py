"""The run folder's owner (speed.train.run.folder.RunFolder): its lock, its refusals, its files."""

import fnmatch
import os
from pathlib import Path

import numpy as np
import pytest

import speed
from speed.cli import main
from speed.train.run import folder as run_folder
from speed.train.run.folder import RunFolder

from conftest import TINY  # noqa: E402


def small_log(n=400):
    rng = np.random.default_rng(0)
    return speed.Events.from_arrays(rng.integers(0, 20, n), rng.integers(20, 40, n),
                                    np.sort(rng.uniform(0, 1e3, n)).round(2), remap=True)


def test_a_second_run_into_a_folder_being_written_is_refused(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out).lock():
        with pytest.raises(speed.InputError, match="another run is writing this run folder"):
            speed.train(small_log(), model="tgn", out=out, epochs=1, **TINY)
        assert not (out / "metrics.json").exists()
    metrics = speed.train(small_log(), model="tgn", out=out, epochs=1, **TINY)  # free again
    assert metrics["best_epoch"] == 1 and (out / "best.json").exists()


def test_a_run_that_fails_before_writing_leaves_no_folder(tmp_path):
    out = tmp_path / "new" / "run"
    with pytest.raises(speed.InputError):
        speed.train(tmp_path / "missing.csv", model="tgn", out=out, epochs=1, **TINY)
    assert not out.exists()


def test_the_folder_says_why_it_cannot_be_used(tmp_path):
    run = RunFolder(tmp_path / "run")
    with pytest.raises(speed.InputError, match="no such run directory"):
        run.require_finished()
    run.path.mkdir()
    with pytest.raises(speed.InputError, match=r"no best\.json here"):
        run.require_finished()
    (run.path / run_folder.OLD_BEST).write_bytes(b"")
    with pytest.raises(speed.InputError, match="earlier version"):
        run.require_finished()
    with pytest.raises(speed.InputError, match="no checkpoint here to resume from"):
        run.require_resumable()
    (run.path / "metrics.json").write_text('{"model": "edgebank"}')
    (run.path / run_folder.OLD_BEST).unlink()
    with pytest.raises(speed.InputError, match="edgebank is a baseline"):
        run.require_finished()
    with pytest.raises(speed.InputError, match="already exists"):
        run.check_new_training(overwrite=False, resume=False)
    run.check_new_training(overwrite=True, resume=False)  # a run folder: --overwrite may replace it
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("x")
    with pytest.raises(speed.InputError, match="not a run folder"):
        RunFolder(tmp_path / "notes").check_new_training(overwrite=True, resume=False)
    with pytest.raises(speed.InputError, match="its own folder"):
        run.check_update_output(RunFolder(tmp_path / "run"), overwrite=True)


def test_a_resumed_run_keeps_its_thread_count_and_a_new_one_does_not(tmp_path):
    from speed.train.config import TrainConfig

    log = tmp_path / "log.csv"
    speed.write_generated(log, 60, 800, seed=1)
    out = tmp_path / "run"
    assert main(["train", str(log), "--out", str(out), "--epochs", "1", "--memory-dim", "8", "--time-dim", "8",
                 "--embedding-dim", "8", "--no-progress", "--threads", "1"]) == 0
    assert RunFolder(out).recorded_threads() == 1
    assert run_folder.kept_threads(TrainConfig(resume=True), out) == 1
    assert run_folder.kept_threads(TrainConfig(resume=False), out) is None
    assert run_folder.kept_threads(TrainConfig(resume=True), None) is None
    assert (out / "config.toml").exists() and not (out / "updates.png").exists()
    written = sorted(p.name for p in Path(out).iterdir())
    assert all(any(fnmatch.fnmatch(n, pat) for pat in run_folder.OWNED) for n in written), written
    assert {"metrics.json", "curves.png", "best.json", "last.json", "negatives.npz", "config.toml"} <= set(written)


def test_scratch_space_lies_in_the_run_folder_when_it_exists(tmp_path):
    run = RunFolder(tmp_path / "run")
    outside = run.scratch("speed-log")
    assert Path(outside).parent != run.path  # no folder yet: the system's temporary folder
    os.rmdir(outside)
    run.path.mkdir()
    inside = run.scratch("speed-log")
    assert inside.parent == run.path and inside.name.startswith(".speed-log.tmp-")


def test_a_new_run_replaces_every_file_of_the_old_one_and_says_what_it_wrote(tmp_path, capsys):
    log = tmp_path / "log.csv"
    speed.write_generated(log, 60, 1500, seed=2)
    out = tmp_path / "run"
    args = ["train", str(log), "--out", str(out), "--epochs", "1", "--memory-dim", "8", "--time-dim", "8",
            "--embedding-dim", "8", "--no-progress", "--threads", "1", "--batch-size", "100"]
    assert main(args) == 0
    assert (out / "best.json").exists()
    (out / "updates.png").write_bytes(b"an updated run's plot")
    capsys.readouterr()
    assert main(args + ["--overwrite", "--max-steps", "2"]) == 0  # every epoch cut: no best epoch
    said = capsys.readouterr().out
    assert not (out / "best.json").exists() and not list(out.glob("best.*")) and not (out / "updates.png").exists()
    assert said.strip().splitlines()[-1] == f"wrote {out}/metrics.json, curves.png, last.json, negatives.npz, config.toml"


def test_speed_train_refuses_a_run_folder_in_use_as_the_command_does(tmp_path):
    """speed.train applies the command's rule: a folder with anything in it is refused unless
    overwrite (a run's folder only) or resume says what to do with it."""
    ev, run = small_log(), tmp_path / "run"
    cfg = {**TINY, "epochs": 1, "seed": 0}
    speed.train(ev, model="jodie", out=run, **cfg)
    with pytest.raises(speed.InputError, match="already exists"):
        speed.train(ev, model="jodie", out=run, **cfg)
    assert speed.train(ev, model="jodie", out=run, overwrite=True, **cfg)["best_epoch"] == 1
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine\n")
    with pytest.raises(speed.InputError):
        speed.train(ev, model="jodie", out=notes, overwrite=True, **cfg)
    assert (notes / "todo.txt").read_text() == "mine\n"
