"""The test period is scored once, at the end of a run, from the best epoch's kept state.

A run whose best epoch is not its last keeps that epoch's weights and node state at the end of
its validation, trains on, and scores the test period from them when training ends: the figures
(and best.json) must be those of a run that stopped at that epoch, and the test period must be
streamed once, whatever the number of improvements.
"""

import json

import numpy as np
import pytest

import speed
from speed.train.loop.trainer import Trainer
from speed.train.run.checkpoint import load_checkpoint

from conftest import TINY


def _log():
    ev = speed.generate_events(120, 2500, seed=3)
    return ev


@pytest.fixture
def first_epoch_best(monkeypatch):
    """Every later epoch scores worse on validation: the best epoch is the first."""
    monkeypatch.setattr(Trainer, "selection_score", lambda self, val: 1.0 / self.history[-1].epoch)


def _passes(metrics):
    return [w["pass"] for w in metrics["evaluation_work"][0]]  # (the main process's)


def _core(m):
    return json.dumps({"test": m["test"], "val": m["val"], "best": m["best_epoch"]}, sort_keys=True)


@pytest.mark.parametrize("model", ["tgn", "tige", "dyrep"])
def test_the_best_epochs_state_is_what_the_test_is_scored_from(tmp_path, first_epoch_best, model):
    ev = _log()
    cfg = dict(model=model, seed=0, deterministic=True, patience=10, lr=1e-2, **TINY)
    three = speed.train(ev, epochs=3, out=tmp_path / "three", **cfg)
    one = speed.train(ev, epochs=1, out=tmp_path / "one", **cfg)
    assert three["best_epoch"] == one["best_epoch"] == 1
    # the later epochs trained on (their losses differ) but the test figures are epoch 1's
    assert len({e["loss"] for e in three["epochs"]}) == 3
    assert _core(three) == _core(one)
    # and the best checkpoint holds epoch 1's weights, state and record
    a, b = load_checkpoint(tmp_path / "three" / "best.json"), load_checkpoint(tmp_path / "one" / "best.json")
    assert a.epoch == b.epoch == 1 and a.best == b.best
    assert [(h["loss"], h["val"]) for h in a.history] == [(h["loss"], h["val"]) for h in b.history]
    for name, value in b.model.items():
        assert np.array_equal(np.asarray(a.model[name]), np.asarray(value)), name
    for x, y in zip(a.optimizer["state"].values(), b.optimizer["state"].values()):
        for k in y:
            assert np.array_equal(np.asarray(x[k]), np.asarray(y[k]))


def test_the_test_period_is_streamed_once_however_often_the_run_improves(tmp_path, monkeypatch):
    monkeypatch.setattr(Trainer, "selection_score", lambda self, val: float(self.history[-1].epoch))  # each improves
    ev = _log()
    m = speed.train(ev, model="tgn", epochs=3, seed=0, val_every=1, patience=10, lr=1e-2, **TINY)
    passes = _passes(m)
    # every epoch validates (its new-node pass, then the period); the test comes once, at the end
    assert passes == ["val new nodes", "val"] * 3 + ["test new nodes", "test"]
    assert m["best_epoch"] == 3 and m["test"]["transductive"]["count"] > 0


def test_a_resumed_run_scores_the_test_from_the_best_epoch_before_the_resume(tmp_path, first_epoch_best):
    ev = _log()
    cfg = dict(model="tgn", seed=0, deterministic=True, patience=10, lr=1e-2, **TINY)
    full = speed.train(ev, epochs=3, out=tmp_path / "full", **cfg)
    speed.train(ev, epochs=2, out=tmp_path / "part", **cfg)
    resumed = speed.train(ev, epochs=3, resume=True, out=tmp_path / "part", **cfg)
    assert resumed["best_epoch"] == 1
    assert _core(full) == _core(resumed)
    a, b = load_checkpoint(tmp_path / "full" / "best.json"), load_checkpoint(tmp_path / "part" / "best.json")
    for name, value in a.model.items():
        assert np.array_equal(np.asarray(b.model[name]), np.asarray(value)), name


def test_node_classification_comes_from_the_best_epochs_embeddings(tmp_path, first_epoch_best):
    rng = np.random.default_rng(0)
    ev = speed.generate_events(80, 2000, seed=5)
    ev = speed.Events.from_arrays(ev.src, ev.dst, ev.t, label=(rng.random(len(ev)) < 0.2).astype(np.int64))
    cfg = dict(model="tgn", seed=0, deterministic=True, patience=10, lr=1e-2, **TINY)
    three = speed.train(ev, epochs=3, **cfg)
    one = speed.train(ev, epochs=1, **cfg)
    assert "node_classification" in one
    assert three["node_classification"] == one["node_classification"]


def test_pac_scores_the_test_once_from_the_best_epochs_sharded_state(tmp_path):
    """Under PAC each rank keeps its own rows of the best epoch's state; the test period is
    scored from them, resharded by the best epoch's groups, also after a resume."""
    ev = speed.generate_events(300, 3000, seed=1)
    split = speed.chronological_split(ev, seed=0)
    speed.partition(split.train(ev), 4, topk=0.05).save(tmp_path / "s", events=ev, split=split)
    # a learning rate this high makes the later epochs worse (the ranks' figures are not patched)
    cfg = dict(model="tgn", seed=0, deterministic=True, patience=10, lr=0.1, nproc=2, **TINY)
    three = speed.train(tmp_path / "s", epochs=3, out=tmp_path / "three", **cfg)
    assert three["best_epoch"] == 1, "the premise: a best epoch before the last"
    assert _passes(three) == ["val new nodes", "val"] * 3 + ["test new nodes", "test"]
    one = speed.train(tmp_path / "s", epochs=1, out=tmp_path / "one", **cfg)
    assert _core(three) == _core(one)
    speed.train(tmp_path / "s", epochs=2, out=tmp_path / "part", **cfg)
    resumed = speed.train(tmp_path / "s", epochs=3, resume=True, out=tmp_path / "part", **cfg)
    assert _core(three) == _core(resumed)
    a, b = load_checkpoint(tmp_path / "one" / "best.json"), load_checkpoint(tmp_path / "part" / "best.json")
    for name, value in a.model.items():
        assert np.array_equal(np.asarray(b.model[name]), np.asarray(value)), name


def test_a_run_resumed_from_a_last_json_that_kept_no_state_keeps_its_tested_best(tmp_path, first_epoch_best):
    """A last.json of a version that tested at every best epoch holds the best's test figures and
    no kept state: resumed without a better epoch, the run reports those figures."""
    from speed.train.run.checkpoint import load_checkpoint, write_checkpoint

    ev = _log()
    cfg = dict(model="tgn", seed=0, deterministic=True, patience=10, lr=1e-2, **TINY)
    first = speed.train(ev, epochs=1, out=tmp_path / "run", **cfg)
    last = load_checkpoint(tmp_path / "run" / "last.json")
    record = last.record(best={"val": first["val"], "test": first["test"]})
    extra = {k: v for k, v in last.extra.items() if not k.startswith("best_") or k == "best_params"}
    write_checkpoint(tmp_path / "run" / "last.json", "last", record, params=last.model, extra=extra)
    resumed = speed.train(ev, epochs=2, resume=True, out=tmp_path / "run", **cfg)
    assert resumed["best_epoch"] == 1 and resumed["test"] == first["test"]
