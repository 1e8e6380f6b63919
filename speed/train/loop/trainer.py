"""The one epoch loop of every run: one process, or one rank of N.

A :class:`Trainer` is given its world (:class:`~speed.train.world.World`: a world of one for a
single process), its data, how it trains an epoch and how it evaluates (the interfaces of both
are :mod:`.parts`):

* ``training``: :class:`~.training.StreamTraining` (one process over the training stream) or
  :class:`speed.train.pac.rank.RankTraining` (a PAC rank: groups, sub-graphs, syncs,
  averaging);
* ``evaluation``: :class:`~.evaluation.WholeEvaluation` (the trained model continued on the
  full graph) or :class:`speed.train.pac.evaluation.ShardedEvaluation` (the ranks' state
  brought to its owners, the work divided).

The loop trains an epoch, validates on the full graph, stops early on the protocol's
validation figure, keeps the best epoch's state and scores the test period from it once, at
the end (:mod:`.kept`), writes ``last.json`` and ``best.json`` (:mod:`.checkpointer`), resumes,
and assembles ``metrics.json``.  Both
kinds of training step with the same :class:`~speed.train.step.engine.Engine`, and both
evaluations stream with the same :class:`~speed.train.eval.evaluator.Evaluator`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from typing import Dict, List, Optional

from ...data.events import Events
from ...data.split import Split
from ..config import TrainConfig
from ..model.network import StatefulModel
from ..run import checkpoint as ckpt
from ..run.folder import RunFolder
from ..run.report import data_block
from ..step.engine import EarlyStopping, EpochLog, epoch_line
from ..step.runtime import peak_device_bytes, peak_rss_bytes
from ..world import World
from .checkpointer import Checkpointer
from .parts import Evaluation, Training


class Trainer:
    """Train with early stopping on validation, checkpoint, resume and report.

    :meth:`Trainer.local` builds one that trains in this process (its parts:
    :func:`~.training.local_parts`); a PAC rank is a Trainer given its world and parts
    (:func:`speed.train.pac.rank.rank_trainer`).

    Parameters
    ----------
    events : Events
        The whole log (train, val and test periods): what evaluation streams.
    split : Split
        Its chronological split.
    config : TrainConfig
        Validated by the caller (:func:`speed.train`), with the process's thread count.
    world : World
        This process's place in the run.
    training : Training
        How an epoch trains (:class:`~.parts.Training`).
    evaluation : Evaluation
        How the model is evaluated (:class:`~.parts.Evaluation`).
    out : RunFolder or path-like, optional
        Run directory (:class:`~speed.train.run.folder.RunFolder`, the run's own when given one),
        written by the main process.
    threads_why : str
        How the thread count was chosen (the summary says it).
    """

    def __init__(self, events: Events, split: Split, config: TrainConfig, *, world: World, training: Training,
                 evaluation: Evaluation, out=None, threads_why: str = ""):
        self.events, self.split, self.config = events, split, config
        self.world, self.training, self.evaluation = world, training, evaluation
        self.folder = RunFolder.of(out)
        self.threads_why = threads_why
        self.history: List[EpochLog] = []
        self.stopping = EarlyStopping(config.patience)
        self.checkpointer = Checkpointer(self.folder, world, config, training, self.stopping, self.history)
        self.start_epoch = 1
        if training.note:
            self.announce(training.note)

    @classmethod
    def local(cls, events: Events, split: Split, config: TrainConfig, model: Optional[StatefulModel] = None,
              out=None) -> "Trainer":
        """A trainer of this process alone: a world of one, its thread count chosen, and
        :func:`~.training.local_parts` (``model``: the one to train, built from ``config`` when
        omitted)."""
        from .training import local_parts

        folder = RunFolder.of(out)
        world, config, training, evaluation, why = local_parts(events, split, config, model, folder)
        return cls(events, split, config, world=world, training=training, evaluation=evaluation, out=folder,
                   threads_why=why)

    # the parts' own, named as a user of the trainer reads them
    @property
    def model(self) -> StatefulModel:
        return self.training.model

    @property
    def optimizer(self):
        return self.training.optimizer

    @property
    def engine(self):
        return self.training.engine

    @property
    def device(self):
        return self.training.device

    @property
    def evaluator(self):
        return self.evaluation.evaluator

    @property
    def is_main(self) -> bool:
        return self.world.is_main

    # ------------------------------------------------------------------ the loop
    def announce(self, line: str) -> None:
        """One line of progress on stderr as it happens (also when it is a file, not a
        terminal: a batch job's log shows each epoch as it ends); not with ``progress=False``."""
        if self.is_main and self.config.progress is not False:
            print(line, file=sys.stderr, flush=True)

    def selection_score(self, val: Dict) -> float:
        """The validation figure that picks the best epoch: the protocol's (AP, or TGB's MRR),
        on the negatives it selects on (DyGLib's: random); AP where the validation ranked
        nothing (PAC's per-rank approximation)."""
        scores = val.get("selection", val)["transductive"]
        return float(scores.get(self.evaluator.protocol.select_on, scores["ap"]))

    def fit(self) -> Optional[Dict]:
        """Train with early stopping on validation.

        Evaluation follows TGN's protocol: after each epoch's training the stream goes on
        through the validation events; the best epoch's state at the end of them is kept, and the
        test events are streamed once, from it, when training ends (the evaluation's
        ``final_results``).
        Returns the metrics (also written to ``out/metrics.json``) on the main process,
        None elsewhere.
        """
        cfg, world = self.config, self.world
        if cfg.resume:
            self.load_last()
            self.announce(f"resumed from epoch {self.start_epoch - 1} ({self.folder.last}); "
                          f"training epochs {self.start_epoch} to {cfg.epochs}")
        elif self.is_main and self.folder is not None:
            self.folder.clear_stale()
        started = time.perf_counter()
        for epoch in range(self.start_epoch, cfg.epochs + 1):
            log = self.training.train_epoch(epoch, collect=self.evaluation.collector())
            if self.is_main:
                self.history.append(log)
            # (a cut epoch is known to every process: PAC ranks agree on the steps; a bounded
            # evaluation measures a cut epoch's evaluation too)
            if (not log.cut or cfg.eval_max_steps) and (epoch % cfg.val_every == 0 or epoch == cfg.epochs):
                val = self.evaluation.validate_epoch(log)
                improved = False
                if self.is_main:
                    log.val = val
                    improved = self.stopping.offer(epoch, self.selection_score(val))
                if world.agree(improved):
                    self.evaluation.on_best(log, self.checkpointer)
            stop = world.agree(self.stopping.should_stop)
            self.evaluation.save_last(epoch, self.checkpointer)
            if self.is_main:
                self.announce(epoch_line(log, cfg.epochs, self.stopping.best_epoch == epoch and log.val is not None))
            if stop:
                break
        train_seconds = time.perf_counter() - started
        t0 = time.perf_counter()
        # no best epoch when every epoch was cut (--max-steps): nothing was validated or tested;
        # every process takes part in the final evaluation
        final = {}
        if world.agree(self.stopping.best_epoch is not None):
            best_epoch = int(world.agree_value(self.stopping.best_epoch or 0))
            final = self.evaluation.final_results(best_epoch, self.checkpointer)
        # (collectives, on every process once training ends, before the others leave)
        work = world.objects(self.evaluator.work, wait=True)
        peaks = [int(p) for p in world.objects(peak_rss_bytes(), wait=True)]
        device_peaks = world.objects(peak_device_bytes(self.device), wait=True)
        if not self.is_main:
            return None
        metrics = self._metrics(final, work, peaks, device_peaks, started, train_seconds, t0)
        if self.folder is not None:
            self.folder.write_results(metrics, negatives=self.evaluator)
        return metrics

    def run(self) -> Optional[Dict]:
        """:meth:`fit`, then wait for the main process's last evaluation and writes."""
        metrics = self.fit()
        self.world.barrier(wait=True)
        return metrics

    def _metrics(self, final: Dict, work: list, peaks: list, device_peaks: list, started: float,
                 train_seconds: float, t0: float) -> Dict:
        cfg, events, split = self.config, self.events, self.split
        metrics = {
            "model": cfg.model,
            "protocol": cfg.protocol_name,
            "nproc": self.world.size,
            "config": cfg.to_dict(),
            "data": {**data_block(events, split), **self.training.data_summary(),
                     **({"ranking_candidates": "stored"} if self.evaluator.stored_candidates else {})},
            **self.training.extra_metrics(),
            **self.evaluation.extra_metrics(),
            # every process's work in each evaluation pass (one process: all of it)
            "evaluation_work": work,
            "node_state_on": self.training.state_on,  # --state-device's choice (the last epoch's, under PAC)
            # the figures follow the thread count: how many, and why (the summary says it)
            "threads": {"processes": self.world.size, "per_process": int(cfg.num_threads or 0),
                        "why": self.threads_why},
            "epochs": [asdict(h) for h in self.history],
            "best_epoch": self.stopping.best_epoch,
            **final,
            "negatives_true_edges": self.evaluator.true_negative_counts(),
            "seconds": {"total": time.perf_counter() - started, "train": train_seconds,
                        "final_evaluation": time.perf_counter() - t0},
            "peak_rss_bytes": peak_rss_bytes(),  # of this process (PAC: rank 0)
            "rank_peak_rss_bytes": peaks,  # of every process over the whole run, evaluation included
        }
        if any(p is not None for p in device_peaks):  # torch.cuda.max_memory_allocated, per process
            metrics["rank_peak_device_bytes"] = device_peaks
        return metrics

    # ------------------------------------------------------------- checkpoints
    def load_last(self) -> None:
        """Continue from ``out/last.json``: weights, optimiser, RNG, history, early stopping."""
        saved = self.checkpointer.read_last()
        self.model.load_params(saved.model)
        self.optimizer.load_state_dict(saved.optimizer)
        ckpt.set_rng_state(saved.rng[self.world.rank])
        self.history[:] = [EpochLog(**h) for h in saved.history]  # (the checkpointer reads this list)
        self.stopping.load_state_dict(saved.stopping)
        self.evaluation.resume(saved.best, saved.extra)
        self.start_epoch = saved.epoch + 1
