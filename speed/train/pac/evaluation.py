"""Evaluation in a PAC run: rank 0 evaluates on the full graph.

The ranks' node states are gathered into rank 0's full-graph model (:mod:`.gather`) when it
validates (``--validation full``) or keeps a best epoch; with the default local validation
every rank validates its own group at once (:mod:`.validate`) and rank 0 scores val and test
on the gathered state of the best epoch at the end.  While rank 0 evaluates alone the other
ranks wait in a collective, and on CPU it takes their cores for the while.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Dict, Optional

import numpy as np
import torch

from ..._threads import apply_threads, default_threads
from ..eval.evaluator import Evaluator
from ..loop.trainer import EpochLoop
from ..model.build import place_state
from ..model.network import StatefulModel
from ..run import checkpoint as ckpt
from ..step.engine import EpochLog
from .gather import assemble, gather_state
from .groups import own_nodes
from .validate import local_validation, transfer_warning


class RankEvaluation(EpochLoop):
    """The evaluation hooks of a PAC rank (:class:`~.rank.PacRank` is the training half).

    Reads the rank's ``config, shards, model, graph, rank, world, is_main, device, out,
    host_group`` and ``groups(epoch)``.
    """

    def _init_evaluation(self) -> None:
        self._eval_model: Optional[StatefulModel] = None
        self._evaluator: Optional[Evaluator] = None
        self._val_pool: Optional[np.ndarray] = None
        self._seen: Optional[np.ndarray] = None  # nodes of the masked training events (local validation)
        self._best_state: Optional[Dict] = None  # the best epoch's full-graph state, after a resume
        self._best_in_eval_model = False  # or held by the evaluation model itself (local validation)
        self.evaluation_threads: Optional[int] = None  # rank 0's threads while it evaluates alone

    @property
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            cfg = self.config
            self._evaluator = Evaluator(self.events, self.split, cfg.batch_size, cfg.seed, cfg.mrr_negatives,
                                        self.device, node_classification=False, progress=cfg.progress,
                                        strategy=cfg.eval_negatives, keep_test_start=self.out is not None,
                                        protocol=cfg.protocol_name)
        return self._evaluator

    def eval_model(self) -> StatefulModel:
        """Rank 0's full-graph model (weights and state are loaded by :meth:`prepare_eval`)."""
        if self._eval_model is None:
            # building (and seeding) the model must not move this rank's RNG streams, or a
            # resumed run would diverge from an uninterrupted one
            rng = ckpt.rng_state()
            self._eval_model = self._build_model(self.shards.num_nodes).to(self.device)
            # the full-graph state on the device only where it fits (else each batch moves its rows)
            place_state(self._eval_model, self.config.state_device, self.device, self.shards.num_nodes)
            ckpt.set_rng_state(rng)
        return self._eval_model

    def prepare_eval(self, log: EpochLog) -> None:
        """Gather every rank's node state into rank 0's full-graph model."""
        rg = self.graph
        payloads = gather_state(self.model, rg.nodes, rg.num_shared, self.world, self.rank, self.host_group)
        # the rank's own state is not read again before the next epoch sizes it afresh: let it
        # go, so rank 0 does not hold it beside the full-graph evaluation state
        self.model.state.resize(0)
        if not self.is_main:
            return
        groups = self.groups(log.epoch)
        own = [own_nodes(self.shards, g) for g in groups]
        rule = "last" if self.config.sync == "none" else self.config.sync
        state = assemble(payloads, own, self.shards.shared, self.shards.num_nodes, rule)
        model = self.eval_model()
        model.load_params(self.model.params_state_dict())
        model.state.reset()
        model.state.load_rows(torch.arange(self.shards.num_nodes, device=self.device), state)
        self.evaluator.prepare(model)

    def validate_epoch(self, log: EpochLog) -> Optional[Dict]:
        if self.config.validation == "full":
            return super().validate_epoch(log)
        cfg = self.config
        log.seconds["exchange"] = 0.0  # only a best epoch gathers state (on_best)
        t0 = time.perf_counter()
        backup = self.model.state.backup()  # the state at the end of training, for a best-epoch exchange
        if self._val_pool is None:  # the masked training events' endpoints, as negative_pool takes them
            src_seen, dst_seen = self.shards.trained_endpoints(self.new_nodes)
            self._seen = src_seen | dst_seen
            self._val_pool = np.flatnonzero(dst_seen if self.shards.bipartite else self._seen)
        scores = local_validation(self.model, self.shards, self.graph, self._seen, self._val_pool, cfg.seed,
                                  cfg.batch_size, self.device, self.rank, self.world, self.host_group)
        self.model.state.restore(backup)
        log.seconds["validate"] = time.perf_counter() - t0
        return scores

    def on_best(self, log: EpochLog) -> None:
        if self.config.validation == "full":
            return super().on_best(log)
        # keep the best epoch's full-graph state; val and test run on it once, at the end
        t0 = time.perf_counter()
        self.prepare_eval(log)
        log.seconds["exchange"] += time.perf_counter() - t0
        if self.is_main:
            self.best_params = self._params_copy()
            # with local validation nothing else loads the evaluation model before the end: it
            # holds the best epoch's state itself (a back-up is a full-graph copy, 1 GiB on a
            # 10M-event log)
            self._best_state = None
            self._best_in_eval_model = True
            self.best = {"val": log.val}

    @contextmanager
    def _alone(self):
        """Rank 0 evaluating the full graph while the other ranks wait in a collective: on CPU it
        takes the idle cores of its host for the while (its share is cores / ranks on the host),
        then gives them back.  Not with ``--deterministic``, whose figures depend on the thread
        count."""
        if not self.is_main or self.world == 1 or self.device.type != "cpu" or self.config.deterministic:
            yield
            return
        before = torch.get_num_threads()
        self.evaluation_threads = max(before, default_threads(1))
        apply_threads(self.evaluation_threads)
        try:
            yield
        finally:
            apply_threads(before)

    def validate(self, log: Optional[EpochLog] = None) -> Dict:
        with self._alone():
            return super().validate(log)

    def _best_results(self, log: EpochLog) -> Dict:
        with self._alone():
            return super()._best_results(log)

    def final_results(self) -> Dict:
        with self._alone():
            return self._final_results()

    def _final_results(self) -> Dict:
        if self.config.validation == "full":
            return super().final_results()
        model = self.eval_model()
        model.load_params(self.best_params)
        if self._best_state is not None:  # a resumed run: the best epoch's state came from last.json
            model.state.restore(self._best_state)
            self._best_state = None
        if self.config.eval == "replay":
            result = self.evaluator.replay(model)
        else:
            val, _ = self.evaluator.evaluate(model, "val")
            test, _ = self.evaluator.evaluate(model, "test")
            result = {"val": val, "test": test}
        self.best = {**result, "val_local": self.best["val"]}
        warning = None if "val" not in result else \
            transfer_warning(result["val"], self.best["val_local"], self.config.average_every)
        if warning:  # speed.train warns with it; the summary prints it
            self.best["warnings"] = [warning]
        self._save_best(self.stopping.best_epoch)
        return self.best


    def _last_extra(self) -> Dict:
        # with local validation the best epoch's full-graph state is needed at the end
        best = self._best_state
        if best is None and self._best_in_eval_model:
            best = self._eval_model.state.backup()
        return {**super()._last_extra(), "best_state": best}

    def _load_extra(self, extra: Dict) -> None:
        super()._load_extra(extra)
        self._best_state = extra.get("best_state")

