"""Evaluation in one process: the trained model itself continues on the full graph.

:class:`WholeEvaluation` is what a single-process :class:`~.trainer.Trainer` is given; a PAC
rank is given :class:`speed.train.pac.evaluation.ShardedEvaluation`, with the same methods.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

import torch

from ...data.events import Events
from ..config import TrainConfig
from ..eval.evaluator import Evaluator
from ..model.network import StatefulModel
from ..run.predictor import predictor_payload
from ..step.engine import EpochLog
from .checkpointer import Checkpointer
from .kept import KeptBest


class WholeEvaluation:
    """Validation, test and ``best.json`` of a model trained in this process.

    Parameters
    ----------
    model : StatefulModel
        The model training steps; evaluation continues it (its node state is the training's).
    evaluator : Evaluator
    config : TrainConfig
    events : Events
        The whole log (the predictor payload of ``best.json`` keeps its node ids).
    """

    def __init__(self, model: StatefulModel, evaluator: Evaluator, config: TrainConfig, events: Events):
        self.model, self.evaluator, self.config, self.events = model, evaluator, config, events
        self.best: Dict = {}
        self.best_params: Optional[Dict] = None
        self._z_train: Optional[list] = None  # the epoch's training embeddings (node classification)
        self._val_z = None
        self._kept = KeptBest()

    def collector(self) -> Optional[list]:
        """A list for this epoch's training embeddings when node classification scores them."""
        self._z_train = [] if self.evaluator.with_node_classification else None
        return self._z_train

    def validate_epoch(self, log: EpochLog) -> Dict:
        """This epoch's validation scores: the model, holding the training stream's neighbours,
        takes the protocol's neighbour graph (:meth:`Evaluator.prepare`) and continues through
        the validation period."""
        log.seconds["exchange"] = 0.0  # nothing to bring together
        t0 = time.perf_counter()
        self.evaluator.prepare(self.model)
        scores, res = self.evaluator.evaluate(self.model, "val", collect_z=self._z_train is not None, selection=True)
        self._val_z = res.z_src
        log.seconds["validate"] = time.perf_counter() - t0
        return scores

    def on_best(self, log: EpochLog, checkpointer: Checkpointer) -> None:
        """A new best epoch: keep what its test figures come from -- the weights, the node state
        at the end of validation (spilled to disk), its record for ``best.json`` and, for node
        classification, its embeddings.  The test period is scored once, from them, at the end
        (:meth:`final_results`)."""
        self.best_params = {k: v.detach().clone() for k, v in self.model.params_state_dict().items()}
        z = None if self._z_train is None else (torch.cat(self._z_train).numpy(), self._val_z)
        self.best = {"val": log.val}
        if self.config.eval == "replay":  # the figures come from a replay at the end, with the weights alone
            return
        self._kept.keep(log.epoch, checkpointer.record(log.epoch, self.best), self.model.state, z)

    def final_results(self, best_epoch: int, checkpointer: Checkpointer) -> Dict:
        """The reported results: the test period scored once from the best epoch's state at the
        end of its validation (or a replay with its weights), and ``best.json``."""
        if self.config.eval != "replay" and self._kept.tested_earlier(self.best):
            return self.best
        self.model.load_params(self.best_params)
        if self.config.eval == "replay":
            self.best = self.evaluator.replay(self.model)
        else:
            # copied: the kept back-up stays as it is, the test-start state best.json keeps
            self._kept.restore_into(self.model.state, keep=checkpointer.writes)
            z = self._kept.embeddings
            test, res = self.evaluator.evaluate(self.model, "test", collect_z=z is not None)
            best = {"val": self.best["val"], "test": test}
            if z is not None:
                nc = self.evaluator.node_classification(z[0], z[1], res.z_src)
                if nc is not None:
                    best["node_classification"] = nc
            self.best = best
        # the checkpoint holds the state these results came from, and the best epoch's record
        if checkpointer.writes:
            self._save_best(self._kept.record_for(self.best) or checkpointer.record(best_epoch, self.best),
                            checkpointer)
        self._kept.drop()
        return self.best

    def _save_best(self, record: Dict, checkpointer: Checkpointer) -> None:
        """``best.json``: weights and the full-graph node state after the log, at the best epoch."""
        model, predictor = self.model, None
        if model.net.spec is not None:  # built by build_model, so load_run can build it again
            start = self.evaluator.test_start
            kept = self._kept.test_start()
            if start is not None and kept is not None:  # the best epoch's kept state is where the test began
                start = {"t": start["t"], "state": kept}
            elif start is not None:  # the evaluator kept the rows the test changed: the whole state, for the file
                start = {"t": start["t"], "state": model.state.snapshots.whole_backup(start["state"])}
            predictor = predictor_payload(model, self.events, self.config.batch_size, start)
        checkpointer.write_best(record, model, predictor)

    # ------------------------------------------------------------------ last.json
    def save_last(self, epoch: int, checkpointer: Checkpointer) -> None:
        """``last.json``, with what a resumed run needs of the evaluation: the best epoch's
        weights, and the state and record its test figures come from."""
        checkpointer.write_last(epoch, self.best, {"best_params": self.best_params,
                                                   **self._kept.saved(self._kept.for_file())})
        self._kept.release()  # (what of it the write did not let go)

    def resume(self, best: Dict, extra: Dict) -> None:
        self.best = best
        self.best_params = extra.get("best_params")
        self._kept.resume(extra)

    def extra_metrics(self) -> Dict:
        cap = self.evaluator.captured  # with --cuda-graph: the evaluation's replayed steps
        return {"cuda_graph_evaluation": cap.metrics()} if cap is not None else {}
