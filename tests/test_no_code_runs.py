"""Opening a folder never runs code: run folders hold no pickle, a stray TGB pickle is never
opened, TGL's features load as tensors only, and an old pickled run is converted only when
the user says they trust it.

Each planted file carries a payload that creates a marker file when unpickled; no command
may create it.
"""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import speed
from speed.cli import main
from speed.train.run import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample.csv"
from conftest import TINY  # noqa: E402  (the tests' one small model)
RUN = {**TINY, "epochs": 1, "deterministic": True}


class Payload:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run and the shards it was trained from (with events appended since)."""
    root = tmp_path_factory.mktemp("trusted")
    lines = SAMPLE.read_text().splitlines()
    cut = int(0.9 * (len(lines) - 1)) + 1
    (root / "base.csv").write_text("\n".join(lines[:cut]) + "\n")
    (root / "more.csv").write_text("\n".join([lines[0]] + lines[cut:]) + "\n")
    assert main(["partition", str(root / "base.csv"), "-o", str(root / "shards"), "--parts", "2",
                 "--no-progress"]) == 0
    speed.train(str(root / "shards"), model="jodie", out=root / "run", **RUN)
    assert main(["partition", str(root / "more.csv"), "-o", str(root / "shards"), "--append", "--no-progress"]) == 0
    return root


def old_format(run: Path, dest: Path, payload=None) -> Path:
    """``run`` in the pickled format of earlier versions (format 1), optionally carrying ``payload``."""
    dest.mkdir()
    for name in ("metrics.json", "negatives.npz"):
        shutil.copy2(run / name, dest / name)
    for new, old in ((ckpt.BEST, ckpt.OLD_BEST), (ckpt.LAST, ckpt.OLD_LAST)):
        saved = ckpt.load_checkpoint(run / new)
        state = {name: getattr(saved, name) for name in ckpt.Checkpoint.__dataclass_fields__}
        state["format"] = 1

        def stored(x):
            if isinstance(x, np.ndarray) and x.dtype != np.uint32 and x.dtype.kind in "biuf":  # as format 1 did
                return ckpt.StoredArray(torch.from_numpy(np.array(x)))
            if isinstance(x, torch.Tensor):
                return x.clone()
            if isinstance(x, dict):
                return {k: stored(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return type(x)(stored(v) for v in x)
            return x

        state = stored(state)
        if payload is not None:
            state["extra"]["payload"] = payload
        torch.save(state, dest / old)
    return dest


def test_an_old_pickled_run_is_refused_by_every_command_and_runs_nothing(trained, tmp_path, capsys):
    marker = tmp_path / "ran"
    old = old_format(trained / "run", tmp_path / "old", Payload(marker))
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("src,dst\n573,288\n")
    shards = str(trained / "shards")
    commands = [
        ["score", str(old), str(pairs), "-o", str(tmp_path / "s.csv")],
        ["embed", str(old), "-o", str(tmp_path / "e.npy")],
        ["update", str(old), str(trained / "more.csv"), "--out", str(tmp_path / "u1")],
        ["update", str(old), shards, "--out", str(tmp_path / "u2"), "--nproc", "2"],
        ["train", str(SAMPLE), "--out", str(old), "--resume", "--epochs", "2", "--no-progress"],
        ["train", shards, "--out", str(old), "--resume", "--nproc", "2", "--epochs", "2", "--no-progress"],
        ["convert-run", str(old), str(tmp_path / "converted")],  # without --trust-pickle
    ]
    for argv in commands:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert "convert-run" in err or "--trust-pickle" in err, (argv, err)
    with pytest.raises(speed.InputError, match="convert-run OLD NEW --trust-pickle"):
        speed.load_run(old)
    assert not marker.exists()
    assert not (tmp_path / "converted").exists() and not (tmp_path / "u1").exists()


def test_convert_run_with_trust_gives_the_same_scores(trained, tmp_path):
    old = old_format(trained / "run", tmp_path / "old")
    assert main(["convert-run", str(old), str(tmp_path / "new"), "--trust-pickle"]) == 0
    assert (tmp_path / "new" / ckpt.BEST).exists() and (tmp_path / "new" / ckpt.LAST).exists()
    assert not list((tmp_path / "new").glob("*.pt"))
    a, b = speed.load_run(trained / "run"), speed.load_run(tmp_path / "new")
    t = a.t_last + 10
    src, dst = a.node_ids[:20], a.node_ids[20:40]
    np.testing.assert_allclose(a.score(src, dst, t=t), b.score(src, dst, t=t), atol=1e-6, rtol=0)
    np.testing.assert_allclose(a.embed(src, t=t), b.embed(src, t=t), atol=1e-6, rtol=0)
    assert main(["convert-run", str(old), str(tmp_path / "new"), "--trust-pickle"]) == 2  # never over a folder


def test_a_stray_tgb_pickle_in_a_shards_folder_is_never_opened(trained, tmp_path, capsys):
    marker = tmp_path / "ran"
    shards = tmp_path / "shards"
    shutil.copytree(trained / "shards", shards)
    torch.save(Payload(marker), shards / "ml_evil.pkl")  # a pickle, as TGB's tables are
    assert main(["train", str(shards), "--out", str(tmp_path / "r"), "--epochs", "1", "--memory-dim", "8",
                 "--time-dim", "8", "--embedding-dim", "8", "--no-progress", "--threads", "1"]) == 0
    main(["partition", str(shards), "-o", str(tmp_path / "p"), "--parts", "2", "--no-progress"])
    capsys.readouterr()
    assert not marker.exists()
    # a folder that looks like a TGB dataset is read only when asked, and the message says why
    tgb = tmp_path / "tgb"
    tgb.mkdir()
    torch.save(Payload(marker), tgb / "ml_evil.pkl")
    assert main(["train", str(tgb), "--out", str(tmp_path / "r2"), "--no-progress"]) == 2
    assert "--format tgb" in capsys.readouterr().err
    with pytest.raises(speed.InputError, match="--format tgb"):
        speed.train(str(tgb), out=tmp_path / "r3", **RUN)
    assert not marker.exists()


def test_tgl_features_load_as_tensors_only(tmp_path, capsys):
    marker = tmp_path / "ran"
    lines = [",src,dst,time,ext_roll"] + [f"{k},{k % 7},{k % 5 + 10},{k},0" for k in range(60)]
    (tmp_path / "edges.csv").write_text("\n".join(lines) + "\n")
    torch.save({"features": torch.zeros(60, 2), "p": Payload(marker)}, tmp_path / "edge_features.pt")
    assert main(["partition", str(tmp_path / "edges.csv"), "-o", str(tmp_path / "s"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "edge_features.pt" in err and "tensors only" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "s").exists()
    torch.save(torch.ones(60, 2), tmp_path / "edge_features.pt")  # a plain tensor file is read
    assert speed.read_events(tmp_path / "edges.csv", progress=False).msg.shape == (60, 2)
