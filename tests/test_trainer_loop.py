"""The epoch loop alone (speed.train.loop.trainer.Trainer), driven with stand-in parts that keep
the interfaces of speed.train.loop.parts: early stopping, a cut epoch, resume, and a rank that
follows rank 0's decisions.  No model is trained: the whole file runs in well under a second."""

from typing import Dict, List, Optional

import numpy as np
import pytest
import torch

import speed
from speed.train.config import TrainConfig
from speed.train.loop.parts import Evaluation, Training
from speed.train.loop.trainer import Trainer
from speed.train.protocols import PROTOCOLS
from speed.train.step.engine import EpochLog
from speed.train.world import World


class StandInModel:
    name = "stand-in"

    def __init__(self):
        self.w = torch.zeros(3)

    def params_state_dict(self):
        return {"w": self.w}

    def load_params(self, params):
        self.w = params["w"].clone()


class StandInOptimizer:
    def __init__(self):
        self.steps = 0

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = int(state["steps"])


class StandInTraining:
    """Each epoch 'trains' (the weights become the epoch number); ``cut`` epochs stop early."""

    def __init__(self, cut=()):
        self.model, self.optimizer = StandInModel(), StandInOptimizer()
        self.device, self.note, self.state_on = torch.device("cpu"), "", "host"
        self.cut, self.epochs = set(cut), []

    def train_epoch(self, epoch: int, collect: Optional[list] = None) -> EpochLog:
        self.epochs.append(epoch)
        self.model.w = torch.full((3,), float(epoch))
        self.optimizer.steps += 1
        return EpochLog(epoch=epoch, train_seconds=0.0, train_events=10, train_events_per_s=0.0,
                        loss=1.0 / epoch, seconds={"train": 0.0}, cut=epoch in self.cut)

    def data_size(self):
        return 20, 40

    def data_summary(self) -> Dict:
        return {}

    def extra_metrics(self) -> Dict:
        return {}


class StandInEvaluator:
    protocol = PROTOCOLS["tgn"]
    stored_candidates = False

    def __init__(self):
        self.work: List = []

    def true_negative_counts(self):
        return {}

    def save_negatives(self, path):
        path.write_bytes(b"")


class StandInEvaluation:
    """Validation AP per epoch from ``scores``; the test figure is the best epoch's number, read
    from the weights kept at its best (so a wrong epoch restored shows)."""

    def __init__(self, training: StandInTraining, scores: Dict[int, float]):
        self.training, self.scores = training, scores
        self.evaluator, self.best = StandInEvaluator(), {}
        self.validated, self.bests, self.kept = [], [], None
        self.resumed_with = None

    def collector(self):
        return None

    def validate_epoch(self, log: EpochLog):
        self.validated.append(log.epoch)
        return {"transductive": {"ap": self.scores[log.epoch], "auc": self.scores[log.epoch]}}

    def on_best(self, log: EpochLog, checkpointer) -> None:
        self.bests.append(log.epoch)
        self.best = {"val": log.val}
        self.kept = (float(self.training.model.w[0]), checkpointer.record(log.epoch, self.best))

    def final_results(self, best_epoch: int, checkpointer) -> Dict:
        self.best = {"val": self.best.get("val"), "test": {"transductive": {"ap": self.kept[0], "auc": self.kept[0]}}}
        if checkpointer.writes:
            self.final_record = dict(self.kept[1], best=self.best)
        return self.best

    def save_last(self, epoch: int, checkpointer) -> None:
        checkpointer.write_last(epoch, self.best, {"kept_weight": None if self.kept is None else self.kept[0]})

    def resume(self, best: Dict, extra: Dict) -> None:
        self.best, self.resumed_with = best, extra
        self.kept = (extra["kept_weight"], {"epoch": None})

    def extra_metrics(self) -> Dict:
        return {}


class RankOne(World):
    """Rank 1 of 2, told rank 0's decisions: whether each validated epoch improved, whether to
    stop after it, and the best epoch (the loop asks, per epoch, "improved?" when it validated,
    then "stop?"; at the end, "is there a best epoch?")."""

    def __init__(self, improved, stop, best_epoch):
        super().__init__(1, 2)
        self.answers = {"improved": list(improved), "stop": list(stop)}
        self.best_epoch = best_epoch
        self._next = "improved"

    def agree(self, flag: bool) -> bool:
        kind, self._next = self._next, "stop" if self._next == "improved" else "improved"
        return self.answers[kind].pop(0) if self.answers[kind] else True

    def agree_value(self, value: int) -> int:
        return self.best_epoch

    def objects(self, obj, wait: bool = False):
        return [obj, obj]

    def barrier(self, wait: bool = False) -> None:
        pass


def small_log():
    rng = np.random.default_rng(0)
    return speed.Events.from_arrays(rng.integers(0, 10, 40), rng.integers(10, 20, 40), np.arange(40.0))


def trainer(scores, out=None, world=None, cut=(), **config):
    events = small_log()
    split = speed.chronological_split(events)
    training = StandInTraining(cut)
    evaluation = StandInEvaluation(training, scores)
    cfg = TrainConfig(progress=False, **config).validate()
    return Trainer(events, split, cfg, world=world or World.alone(), training=training, evaluation=evaluation,
                   out=out)


def test_the_stand_ins_keep_the_declared_interfaces():
    t = trainer({1: 0.5}, epochs=1)
    assert isinstance(t.training, Training) and isinstance(t.evaluation, Evaluation)


def test_early_stopping_tests_the_best_epoch_once():
    t = trainer({1: 0.5, 2: 0.7, 3: 0.6, 4: 0.65, 5: 0.9, 6: 0.95}, epochs=6, patience=2)
    m = t.fit()
    assert t.training.epochs == [1, 2, 3, 4]  # epochs 3 and 4 did not beat 2: stopped
    assert t.evaluation.bests == [1, 2] and m["best_epoch"] == 2
    assert m["test"]["transductive"]["ap"] == 2.0  # the weights kept at epoch 2, not the last ones
    assert [e["epoch"] for e in m["epochs"]] == [1, 2, 3, 4]


def test_a_cut_epoch_is_neither_validated_nor_the_best():
    t = trainer({1: 0.5, 2: 0.99, 3: 0.6}, epochs=3, patience=5, max_steps=1, cut=(2,))
    m = t.fit()
    assert t.evaluation.validated == [1, 3] and t.evaluation.bests == [1, 3] and m["best_epoch"] == 3
    assert [e["cut"] for e in m["epochs"]] == [False, True, False]


def test_val_every_validates_every_e_epochs_and_the_last():
    t = trainer({2: 0.5, 4: 0.6, 5: 0.7}, epochs=5, patience=5, val_every=2)
    t.fit()
    assert t.evaluation.validated == [2, 4, 5]


def test_resume_goes_on_from_last_json(tmp_path):
    scores = {1: 0.5, 2: 0.7, 3: 0.6, 4: 0.8, 5: 0.75}
    first = trainer(scores, out=tmp_path / "run", epochs=3, patience=5)
    first.fit()
    again = trainer(scores, out=tmp_path / "run", epochs=5, patience=5, resume=True)
    m = again.fit()
    assert again.training.epochs == [4, 5]  # epochs 1-3 came from last.json
    assert again.training.optimizer.steps == 3 + 2 and float(again.training.model.w[0]) == 5.0
    assert again.evaluation.resumed_with["kept_weight"] == 2.0  # what the evaluation kept, given back
    assert [e["epoch"] for e in m["epochs"]] == [1, 2, 3, 4, 5] and m["best_epoch"] == 4
    assert m["test"]["transductive"]["ap"] == 4.0
    assert again.evaluation.final_record["epoch"] == 4 and again.evaluation.final_record["history"][-1]["epoch"] == 4
    with pytest.raises(speed.InputError, match="resume with 1"):
        trainer(scores, out=tmp_path / "run", world=RankOne([], [], 4), epochs=6, resume=True).fit()


def test_a_rank_follows_rank_zeros_decisions():
    """On rank 1 nothing is offered to early stopping: which epochs improved, when to stop and
    the best epoch are rank 0's."""
    t = trainer({1: 0.1, 2: 0.1, 3: 0.1, 4: 0.1}, epochs=4, patience=1,
                world=RankOne(improved=[True, False, True], stop=[False, False, True], best_epoch=3))
    assert t.fit() is None  # the figures are rank 0's
    assert t.training.epochs == [1, 2, 3] and t.evaluation.bests == [1, 3]
    assert t.evaluation.best["test"]["transductive"]["ap"] == 3.0
