"""Evaluation in a PAC run: exact, on the full graph, its work divided among the ranks.

At an evaluation every rank brings its trained node state into one evaluation model whose
memories are sharded by owner (:mod:`.sharded`): each node's rows live on one rank, and no
process holds every node's.  All ranks then stream the val (and test) events together, the
same plans on each; each step's work is divided (:mod:`speed.train.eval.divided`): an owner
computes its nodes' memory keys, each rank embeds and scores a share of the events, and a
rank receives from the owners only what its share needs.  The figures equal a single
process's evaluation of the same state, bit for bit (tested).

Per-epoch validation is chosen once, where the rank's trainer is built (:func:`sharded_evaluation`):
:class:`FullValidation`, this full-graph evaluation (``validation="full"``, the default), or the
approximate :class:`LocalValidation` (``validation="local"``, :mod:`.validate`: each rank its own
group at once), which chooses the best epoch on the ranks' own figures; val and test are then
scored exactly, on the best epoch's state kept sharded where its rows are.  Both read the rank's
training through :class:`TrainedRank`.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Protocol

import numpy as np

from ..._util import trim_heap
from ...partition.ordered import release_pages
from ..eval.evaluator import Evaluator
from ..model.network import StatefulModel
from ..run import checkpoint as ckpt
from ..loop.checkpointer import Checkpointer
from ..run.predictor import predictor_payload
from ..step.engine import EpochLog
from ..step.runtime import PeakWatch
from .groups import own_nodes
from ..state.sharded import Exchange, ShardedMemory, ShardedSampler, ShardWriter
from .sharded import owners, shard_state
from ..eval.divided import DividedStep
from .validate import local_validation, transfer_warning
from ..loop.kept import KeptBest


class TrainedRank(Protocol):
    """What a rank's evaluation reads of its training (:class:`~.rank.RankTraining`).

    Attributes
    ----------
    config : TrainConfig
    shards : Shards
    world : World
    device : torch.device
    model : StatefulModel
        The rank's trained model, its rows the sub-graph's (``graph.nodes``).
    graph : RankGraph
        The sub-graph of this epoch's group (``nodes``, ``num_shared``; ``events`` let go once
        the state is handed over).
    new_nodes : int64 ndarray
        The held-out new nodes (masked out of training).
    """

    config: object
    shards: object
    world: object
    device: object
    model: StatefulModel
    graph: object
    new_nodes: np.ndarray

    def groups(self, epoch: int) -> List[np.ndarray]:
        """Each rank's parts at ``epoch``."""

    def build_model(self, num_nodes: int) -> StatefulModel:
        """A model of the run's architecture (its weights seeded as the training's)."""


def sharded_evaluation(training: TrainedRank, events, split, folder) -> "ShardedEvaluation":
    """The rank's evaluation, its per-epoch validation chosen once (``config.validation``)."""
    kind = LocalValidation if training.config.validation == "local" else FullValidation
    return kind(training, events, split, folder)


class ShardedEvaluation:
    """A PAC rank's evaluation: the ranks' trained state brought to its owners, every step's
    work divided (the rank's :class:`~speed.train.loop.trainer.Trainer` is given it; the
    interface is :class:`~speed.train.loop.parts.Evaluation`).  What this class holds is
    common to both validations; :class:`FullValidation` and :class:`LocalValidation` validate,
    keep the best epoch and score the test.

    Parameters
    ----------
    training : TrainedRank
        The rank's training: its trained model and sub-graph, its groups of parts, the world
        and the shards, and how a model is built.
    events : Events
        The whole log, mapped by every rank.
    split : Split
    folder : RunFolder, optional
        Where ``best.json`` goes (rank 0 writes it; every rank its own rows).
    """

    def __init__(self, training, events, split, folder):
        self.training = training
        self.config, self.shards, self.world = training.config, training.shards, training.world
        self.is_main, self.device = self.world.is_main, training.device
        self.events, self.split, self.folder = events, split, folder
        self.best: Dict = {}
        self.best_params: Optional[Dict] = None
        self._eval_model: Optional[StatefulModel] = None
        self._evaluator: Optional[Evaluator] = None
        self.exchange = Exchange()  # rows read from other ranks during evaluation
        self._sharded_for: Optional[int] = None  # the epoch whose groups own the evaluation model's rows
        self._live_epoch: Optional[int] = None  # the epoch whose end of validation the evaluation model holds
        self.best_write: Optional[list] = None  # each rank's figures of the latest best.json write

    @property
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            cfg = self.config
            # the run's pipeline: a world of one plans ahead as a single process does; a step
            # divided among ranks too, its part cut out in the planning thread, whose collectives
            # go over the world's planning group (speed.train.eval.evaluator.stream_scores)
            self._evaluator = Evaluator.for_run(self.events, self.split, cfg, self.device, node_classification=False,
                                                progress=cfg.progress if self.is_main else False,
                                                keep_test_start=self.folder is not None,
                                                scores_here=self.is_main)  # rank 0 reports the figures
        return self._evaluator

    def collector(self) -> None:
        """Node classification is a single process's: no training embeddings are kept."""
        return None

    def eval_model(self) -> StatefulModel:
        """The evaluation model: this rank's weights, memories sharded over the ranks (their
        owners are set by :meth:`_shard_memories`), pending events and neighbours whole."""
        if self._eval_model is None:
            # building (and seeding) the model must not move this rank's RNG streams, or a
            # resumed run would diverge from an uninterrupted one
            rng = ckpt.rng_state()
            model = self.training.build_model(0)
            model.keep_state_on("cpu")  # the exchange runs on host memory; each step moves its rows
            self._eval_model = model.to(self.device)
            ckpt.set_rng_state(rng)
        return self._eval_model

    def _shard_memories(self, epoch: int) -> np.ndarray:
        """Give the evaluation model fresh sharded memories and neighbour rings whose owners
        follow ``epoch``'s groups (and empty pending events); returns the owners."""
        model = self.eval_model()
        groups = self.training.groups(epoch)
        own = [own_nodes(self.shards, g) for g in groups]
        owner = owners(self.shards.num_nodes, self.shards.shared, own, self.world.size)
        model.state.use_memories(
            lambda name, mem: ShardedMemory(owner, mem.memory_dim, self.world, self.exchange),
            # (the sampler answers in the plans, which may be built ahead in a thread: its
            # collectives go over the planning group, World.planning)
            lambda k: ShardedSampler(owner, k, self.world.planning(), self.exchange))
        # the ranks run the same steps, each its owners' keys and a share of the queries
        model.divide(DividedStep(self.world, owner))
        self._sharded_for = epoch
        self._live_epoch = None  # fresh rows: no epoch's validated state
        return owner

    def prepare_eval(self, log: EpochLog) -> None:
        """Bring every rank's trained state into the sharded evaluation model (collective)."""
        trained, rg = self.training.model, self.training.graph
        # the training rings are not handed over (evaluation rebuilds the rings from the log):
        # let them go before the evaluation state is made
        trained.state.drop_neighbors()
        self.shards.release_pages()  # the sub-graph was read from them: their pages need not stay
        release_pages(self.events)
        trim_heap()
        owner = self._shard_memories(log.epoch)
        model = self.eval_model()
        model.load_params(trained.params_state_dict())
        rule = "last" if self.config.sync == "none" else self.config.sync
        # (which lets the rank's own state go: not read again before the next epoch builds it)
        shard_state(trained, model, rg.nodes, rg.num_shared, self.shards.shared, owner, rule, self.world)
        rg.events = None  # nor is its sub-graph
        trim_heap()  # what the hand-over freed
        self.evaluator.prepare(model)

    def _params_copy(self) -> Dict:
        return {k: v.detach().clone() for k, v in self.training.model.params_state_dict().items()}

    # ------------------------------------------------------------------ checkpoints
    def _save_best(self, epoch: int, checkpointer: Checkpointer) -> None:
        """``best.json``: rank 0 writes the weights and what every rank holds whole, and each
        rank the memory and neighbour-ring rows it owns, into the same file (collective: the
        others :meth:`ShardWriter.serve`).  What each rank held before, its peak while writing
        and the bytes of rows it wrote go to ``metrics.json`` (``best_write``).  The record is
        the kept best epoch's, or the run's now (:class:`~speed.train.loop.kept.KeptBest`)."""
        if not checkpointer.writes:
            return
        writer = ShardWriter(self.world)  # the others wait while rank 0 starts the file
        with PeakWatch() as watch:
            self._write_best(epoch, writer, checkpointer)
        release_pages(self.events)
        trim_heap()
        self.best_write = self.world.objects({**watch.as_dict(), "rows_bytes": writer.bytes_written}, wait=True)

    def _write_best(self, epoch: int, writer: ShardWriter, checkpointer: Checkpointer) -> None:
        model = self.eval_model()
        end = model.state.snapshots.written_snapshot(writer)
        start = self.evaluator.test_start
        start_state = None if start is None else model.state.snapshots.written_snapshot(writer, start["state"])
        if not self.is_main:
            writer.serve()
            return
        try:
            test_start = None if start is None else {"t": start["t"], "state": start_state}
            memories = {f"{n}.{f}": d for n, fields in end["memories"].items() for f, d in fields.items()}
            predictor = None
            if model.net.spec is not None:
                predictor = predictor_payload(model, self.events, self.config.batch_size, test_start,
                                              end={k: v for k, v in end.items() if k != "memories"})
            record = self._kept_record() or checkpointer.record(epoch, self.best)
            checkpointer.write_best(record, model, predictor, memories)
        except BaseException:
            writer.abort()  # the others are waiting to write their rows
            raise
        writer.check()

    def _replay(self, best_epoch: int, checkpointer: Checkpointer) -> None:
        """The reported results from a replay of every event with the best epoch's weights."""
        model = self.eval_model()
        model.load_params(self.best_params)
        result = self.evaluator.replay(model)
        if self.is_main:
            self.best = result
        self._save_best(best_epoch, checkpointer)

    def _kept_record(self) -> Optional[Dict]:
        """The best epoch's record as kept when it was the best (None: the run's record now)."""
        return None

    def extra_metrics(self) -> Dict:
        # rank 0's traffic while evaluating: the rows it read from their owners, its share of
        # the embeddings gathered from the others (every rank reads the same rows)
        return {"evaluation_exchange": self.exchange.as_dict(),
                # each rank's resident memory before best.json's write, its peak during it, the
                # bytes of rows it wrote there (its own), and the write's seconds
                **({"best_write": self.best_write} if self.best_write is not None else {})}


class FullValidation(ShardedEvaluation):
    """Every epoch validated on the full graph, exactly, by every rank together; the best
    epoch's state kept (each rank its own rows) and the test scored from it once, at the end."""

    def __init__(self, training: TrainedRank, events, split, folder):
        super().__init__(training, events, split, folder)
        self._kept = KeptBest()  # the best epoch's state, this rank's rows, until the test

    def validate_epoch(self, log: EpochLog) -> Optional[Dict]:
        """This epoch's validation, on every rank; the scores on rank 0 (None elsewhere)."""
        t0 = time.perf_counter()
        self.prepare_eval(log)
        log.seconds["exchange"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        before = self.exchange.seconds
        # every rank streams val; the figures are rank 0's
        scores, _ = self.evaluator.evaluate(self.eval_model(), "val", selection=True)
        self._live_epoch = log.epoch
        log.seconds["validate"] = time.perf_counter() - t0
        log.seconds["validate_exchange"] = self.exchange.seconds - before
        release_pages(self.events)  # the mapped log's val pages: read again next epoch, not held
        return scores if self.is_main else None

    def on_best(self, log: EpochLog, checkpointer: Checkpointer) -> None:
        """A new best epoch, on every rank: keep the weights and each rank the rows it owns of
        the state at the end of validation (the test period is scored once, from them, at the
        end: :meth:`final_results`)."""
        self.best_params = self._params_copy()
        if self.is_main:
            self.best = {"val": log.val}
        if self.config.eval != "replay":
            self._kept.keep(log.epoch, checkpointer.record(log.epoch, self.best) if self.is_main else None,
                            self.eval_model().state)

    def final_results(self, best_epoch: int, checkpointer: Checkpointer) -> Dict:
        """On every rank; the figures on rank 0."""
        if self.config.eval == "replay":
            self._replay(best_epoch, checkpointer)
            return self.best
        if self._kept.tested_earlier(self.best):  # (every rank read the same last.json)
            return self.best
        model = self.eval_model()
        model.load_params(self.best_params)
        if self._live_epoch == best_epoch and self._kept.epoch == best_epoch and not self._kept.resumed:
            # the evaluation model still holds the best epoch's state at the end of its
            # validation (the last epoch validated was the best): no copy to put back
            self._kept.drop()
        else:
            self._shard_memories(best_epoch)  # the best epoch's owners, each rank's rows put back
            self._kept.restore_into(model.state)
        test, _ = self.evaluator.evaluate(model, "test")  # every rank streams the test period
        if self.is_main:
            self.best = {"val": self.best["val"], "test": test}
        self._save_best(best_epoch, checkpointer)
        return self.best

    def save_last(self, epoch: int, checkpointer: Checkpointer) -> None:
        """``last.json`` (collective), with the kept best epoch's rows, each written by its owner."""
        writer, kept = None, {}
        if self._kept.epoch is not None and checkpointer.writes:
            # the evaluation model is sharded by the best epoch's groups for it (its live state is
            # not read again: the next evaluation shards it afresh)
            if self._kept.resumed:  # a resumed run's, whole as last.json gave it: rank 0 writes it back
                snapshot = self._kept.state if self.is_main else None
            else:
                if self._sharded_for != self._kept.epoch:
                    self._shard_memories(self._kept.epoch)
                writer = ShardWriter(self.world)
                snapshot = self.eval_model().state.snapshots.written_snapshot(writer, self._kept.state)
            kept = self._kept.saved(snapshot) if self.is_main else {}
        checkpointer.write_last(epoch, self.best, {"best_params": self.best_params, "best_state": None, **kept})
        _finish_write(writer, self.is_main)
        self._kept.release()  # (its rows were read through for the write)

    def resume(self, best: Dict, extra: Dict) -> None:
        self.best = best
        self.best_params = extra.get("best_params")
        self._kept.resume(extra)

    def _kept_record(self) -> Optional[Dict]:
        return self._kept.record_for(self.best)


class LocalValidation(ShardedEvaluation):
    """Every rank validates its own group's val events at once (an approximation that picks the
    best epoch); the best epoch's state is brought together and kept in the evaluation model,
    and val and test are scored on it exactly, at the end."""

    def __init__(self, training: TrainedRank, events, split, folder):
        super().__init__(training, events, split, folder)
        self._val_pool: Optional[np.ndarray] = None
        self._seen: Optional[np.ndarray] = None  # nodes of the masked training events
        self._best_state: Optional[Dict] = None  # the best epoch's full-graph back-up, after a resume
        self._best_in_eval_model = False  # the evaluation model holds the best epoch's state

    def validate_epoch(self, log: EpochLog) -> Optional[Dict]:
        cfg, trained = self.config, self.training.model
        log.seconds["exchange"] = 0.0  # only a best epoch brings the state together (on_best)
        t0 = time.perf_counter()
        backup = trained.state.snapshots.backup()  # the state at the end of training, for on_best
        if self._val_pool is None:  # the masked training events' endpoints, as negative_pool takes them
            src_seen, dst_seen = self.shards.trained_endpoints(self.training.new_nodes)
            self._seen = src_seen | dst_seen
            self._val_pool = np.flatnonzero(dst_seen if self.shards.bipartite else self._seen)
        scores = local_validation(trained, self.shards, self.training.graph, self._seen, self._val_pool, cfg.seed,
                                  cfg.batch_size, self.device, self.world)
        trained.state.snapshots.restore(backup)
        log.seconds["validate"] = time.perf_counter() - t0
        return scores

    def on_best(self, log: EpochLog, checkpointer: Checkpointer) -> None:
        """A new best epoch, on every rank: keep its state, sharded; val and test run on it
        once, at the end."""
        t0 = time.perf_counter()
        self.prepare_eval(log)
        log.seconds["exchange"] += time.perf_counter() - t0
        self.best_params = self._params_copy()
        self._best_state = None
        self._best_in_eval_model = True
        if self.is_main:
            self.best = {"val": log.val}

    def final_results(self, best_epoch: int, checkpointer: Checkpointer) -> Dict:
        """On every rank; the figures on rank 0."""
        model = self.eval_model()
        model.load_params(self.best_params)
        if self._best_state is not None:  # a resumed run: the best epoch's state came from last.json
            self._shard_memories(best_epoch)
            model.state.snapshots.restore(self._best_state)
            self._best_state = None
        if self.config.eval == "replay":
            result = self.evaluator.replay(model)
        else:
            val, _ = self.evaluator.evaluate(model, "val")
            test, _ = self.evaluator.evaluate(model, "test")
            result = {"val": val, "test": test}
        if self.is_main:
            self.best = {**result, "val_local": self.best["val"]}
            warning = None if "val" not in result else \
                transfer_warning(result["val"], self.best["val_local"], self.config.average_every)
            if warning:  # speed.train warns with it; the summary prints it
                self.best["warnings"] = [warning]
        self._save_best(best_epoch, checkpointer)
        return self.best

    def save_last(self, epoch: int, checkpointer: Checkpointer) -> None:
        """``last.json`` (collective), with the best epoch's state (needed at the end: every
        rank writes its own rows)."""
        best_state, writer = None, None
        if checkpointer.writes:
            if self._best_state is not None:  # a resumed run's, not evaluated yet
                best_state = self._best_state if self.is_main else None
            elif self._best_in_eval_model:
                writer = ShardWriter(self.world)
                best_state = self.eval_model().state.snapshots.written_snapshot(writer)
        checkpointer.write_last(epoch, self.best, {"best_params": self.best_params, "best_state": best_state})
        _finish_write(writer, self.is_main)

    def resume(self, best: Dict, extra: Dict) -> None:
        self.best = best
        self.best_params = extra.get("best_params")
        self._best_state = extra.get("best_state")


def _finish_write(writer: Optional[ShardWriter], is_main: bool) -> None:
    """After ``last.json``'s write: rank 0 checks the rows every rank wrote, the others serve theirs."""
    if writer is None:
        return
    if is_main:
        writer.check()
    else:
        writer.serve()
