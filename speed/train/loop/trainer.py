"""The epoch loop of every run, and the single-process trainer.

:class:`EpochLoop` is the one loop: train an epoch (a hook), validate on the full graph,
stop early on validation AP, score the test period at each best epoch, write ``last.json`` and
``best.json`` (:mod:`speed.train.run.checkpoint`), resume, and assemble ``metrics.json``.
:class:`Trainer` fills its hooks for one process over one stream; a PAC rank
(:class:`speed.train.pac.rank.PacRank`) fills them for one rank of a parallel run.  Both
train with the same :class:`~speed.train.step.engine.Engine` and evaluate with the same
:class:`~speed.train.eval.evaluator.Evaluator`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from ...data.events import Events
from ...data.split import Split
from ..._threads import apply_threads, choose_threads, default_threads, usable_cores
from ..._util import tune_allocator
from ...errors import InputError
from ..run import checkpoint as ckpt
from ..config import TrainConfig
from ..step.engine import Batches, EarlyStopping, Engine, EpochLog, epoch_line
from ..step.loader import EventStream
from ..eval.evaluator import Evaluator
from ..model.network import StatefulModel
from ..step.negatives import RandomNegatives, negative_pool, train_seed
from ..step.optim import make_optimizer
from ..step.runtime import peak_device_bytes, peak_rss_bytes, resolve_device, seed_everything
from ..model.build import model_for, place_state
from ..run.predictor import predictor_payload
from ..run.report import write_run
from ..model.static import prepare_static
from ..world import World


# files of an updated run (speed update) that a new training run in its folder would leave stale
STALE_AFTER_TRAINING = ("updates.png",)


class EpochLoop:
    """Train, validate, stop early, checkpoint and report: the loop shared by every run.

    Subclasses set ``config, events, split, device, model, optimizer, evaluator, out`` and
    implement :meth:`train_epoch`; the other hooks have single-process defaults.
    """

    is_main = True  # the process that evaluates and writes files
    threads_why = ""  # how the thread count was chosen (_threads.choose_threads)
    world = World.alone()  # this process alone; a PAC rank has its own (speed.train.world)
    state_on = "device"  # where the node memories live (see place_state)

    def _init_loop(self) -> None:
        self.history: List[EpochLog] = []
        self.stopping = EarlyStopping(self.config.patience)
        self.best: Dict = {}
        self.best_params: Optional[Dict] = None
        self.start_epoch = 1
        self._z_train: Optional[list] = None

    # ------------------------------------------------------------------ hooks
    def train_epoch(self, epoch: int) -> EpochLog:  # pragma: no cover - interface
        raise NotImplementedError

    def eval_model(self) -> StatefulModel:
        """The full-graph model that evaluation continues (ready after :meth:`prepare_eval`)."""
        return self.model

    def prepare_eval(self, log: EpochLog) -> None:
        """Bring :meth:`eval_model` to the end of this epoch's training; runs on every
        process (PAC: the ranks' state is gathered)."""

    def agree(self, flag: bool) -> bool:
        """The main process's decision, known to every process."""
        return flag

    def rng_states(self) -> List[Dict]:
        """RNG state of every process, in rank order (collective under PAC)."""
        return [ckpt.rng_state()]

    def data_summary(self) -> Dict:
        appended = self.events.meta.appended
        return {"appended_events_not_trained": int(appended)} if appended else {}

    def data_size(self) -> Tuple[int, int]:
        """``(nodes, events)`` of the data this run trains on (a resumed run must find the same)."""
        return self.events.num_nodes, len(self.events)

    def extra_metrics(self) -> Dict:
        # each evaluation pass's work (one process: all of it), as PAC ranks report theirs
        return {"evaluation_work": [self.evaluator.work]}

    def peak_rss(self) -> List[int]:
        """Every process's peak resident memory so far, in rank order (collective under PAC)."""
        return [peak_rss_bytes()]

    def peak_device(self) -> List[Optional[int]]:
        """Every process's peak GPU memory so far, in rank order (None on a CPU; collective
        under PAC)."""
        return [peak_device_bytes(self.device)]

    # ------------------------------------------------------------ evaluation
    def selection_score(self, val: Dict) -> float:
        """The validation figure that picks the best epoch: the protocol's (AP, or TGB's MRR),
        on the negatives it selects on (DyGLib's: random); AP where the validation ranked
        nothing (PAC's per-rank approximation)."""
        scores = val.get("selection", val)["transductive"]
        return float(scores.get(self.evaluator.protocol.select_on, scores["ap"]))

    def validate_epoch(self, log: EpochLog) -> Optional[Dict]:
        """This epoch's validation scores on the main process (None elsewhere); runs on every
        process.  Here: bring the evaluation model to the end of training
        (:meth:`prepare_eval`), then continue it through the validation period."""
        t0 = time.perf_counter()
        self.prepare_eval(log)
        log.seconds["exchange"] = time.perf_counter() - t0
        if not self.is_main:
            return None
        t0 = time.perf_counter()
        scores = self.validate(log)
        log.seconds["validate"] = time.perf_counter() - t0
        return scores

    def on_best(self, log: EpochLog) -> None:
        """A new best epoch, on every process: score the test period and save the checkpoint."""
        if self.is_main:
            if self.config.eval == "replay":
                self.best_params = self._params_copy()
            self.best = self._best_results(log)
            self._save_best(log.epoch)

    def _params_copy(self) -> Dict:
        return {k: v.detach().clone() for k, v in self.model.params_state_dict().items()}

    def validate(self, log: Optional[EpochLog] = None) -> Dict:
        """Continue the evaluation model through the validation period (on the protocol's
        neighbour graph, see :meth:`Evaluator.prepare`)."""
        model = self.eval_model()
        if model is self.model:  # a model that just trained holds the training stream's neighbours
            self.evaluator.prepare(model)
        scores, res = self.evaluator.evaluate(model, "val", collect_z=self._z_train is not None, selection=True)
        self._val_z = res.z_src
        return scores

    def _best_results(self, log: EpochLog) -> Dict:
        """Scores of a new best epoch: its validation, then the test period continued."""
        model = self.eval_model()
        test, res = self.evaluator.evaluate(model, "test", collect_z=self._z_train is not None)
        best = {"val": log.val, "test": test}
        if self._z_train is not None:
            nc = self.evaluator.node_classification(torch.cat(self._z_train).numpy(), self._val_z, res.z_src)
            if nc is not None:
                best["node_classification"] = nc
        return best

    def announce(self, line: str) -> None:
        """One line of progress on stderr as it happens (also when it is a file, not a
        terminal: a batch job's log shows each epoch as it ends); not with ``progress=False``."""
        if self.is_main and self.config.progress is not False:
            print(line, file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- the loop
    def fit(self) -> Optional[Dict]:
        """Train with early stopping on validation AP.

        Evaluation follows TGN's protocol: after each epoch's training the stream goes on
        through the validation events, and at a best epoch on through the test events too.
        Returns the metrics (also written to ``out/metrics.json``) on the main process,
        None elsewhere.
        """
        cfg = self.config
        if cfg.resume:
            self.load_last()
            self.announce(f"resumed from epoch {self.start_epoch - 1} ({Path(self.out) / 'last.json'}); "
                          f"training epochs {self.start_epoch} to {cfg.epochs}")
        elif self.is_main and self.out is not None:
            for name in STALE_AFTER_TRAINING:  # a replaced run's files that this run does not write again
                (Path(self.out) / name).unlink(missing_ok=True)
        started = time.perf_counter()
        for epoch in range(self.start_epoch, cfg.epochs + 1):
            log = self.train_epoch(epoch)
            if self.is_main:
                self.history.append(log)
            # (a cut epoch is known to every process: PAC ranks agree on the steps; a bounded
            # evaluation measures a cut epoch's evaluation too)
            if (not log.cut or cfg.eval_max_steps) and (epoch % cfg.val_every == 0 or epoch == cfg.epochs):
                val = self.validate_epoch(log)
                improved = False
                if self.is_main:
                    log.val = val
                    improved = self.stopping.offer(epoch, self.selection_score(val))
                if self.agree(improved):
                    self.on_best(log)
            stop = self.agree(self.stopping.should_stop)
            self.save_last(epoch)
            if self.is_main:
                self.announce(epoch_line(log, cfg.epochs, self.stopping.best_epoch == epoch and log.val is not None))
            if stop:
                break
        train_seconds = time.perf_counter() - started
        t0 = time.perf_counter()
        # no best epoch when every epoch was cut (--max-steps): nothing was validated or tested;
        # under PAC every rank takes part in the final evaluation
        final = self.final_results() if self.agree(self.stopping.best_epoch is not None) else {}
        peaks = self.peak_rss()
        device_peaks = self.peak_device()  # collective under PAC: before the other ranks leave
        if not self.is_main:
            return None
        metrics = {
            "model": cfg.model,
            "protocol": cfg.protocol_name,
            "nproc": self.world.size,
            "config": cfg.to_dict(),
            "data": {"num_events": len(self.events), "num_nodes": self.events.num_nodes,
                     "num_train_events": int(self.split.train_mask.sum()), "num_val_events": self.split.num_val,
                     "num_test_events": self.split.num_test, "msg_dim": self.events.msg_dim,
                     "source": self.events.meta.source, **self.data_summary(),
                     "num_train_period_events": int(self.split.num_train),
                     **{k: getattr(self.events.meta, k) for k in ("columns", "time_text", "out_of_order_rows")
                        if getattr(self.events.meta, k) is not None},
                     **({"t_min": float(self.events.t_float()[0]), "t_max": float(self.events.t_float()[-1])}
                        if len(self.events) else {}),
                     **({"ranking_candidates": "stored"} if self.evaluator.stored_candidates else {})},
            **self.extra_metrics(),
            "node_state_on": self.state_on,  # --state-device's choice (the last epoch's, under PAC)
            # the figures follow the thread count: how many, and why (the summary says it)
            "threads": {"processes": self.world.size, "per_process": int(self.config.num_threads or 0),
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
        if self.out is not None:
            write_run(self.out, metrics)
            self.evaluator.save_negatives(Path(self.out) / "negatives.npz")
        return metrics

    def final_results(self) -> Dict:
        """The reported results: those of the best epoch, or a replay with its weights."""
        if self.config.eval == "replay":
            model = self.eval_model()
            model.load_params(self.best_params)
            self.best = self.evaluator.replay(model)
            self._save_best(self.stopping.best_epoch)  # the checkpoint holds the state these results came from
        return self.best

    # ------------------------------------------------------------- checkpoints
    def _record(self, epoch: int, rng: Optional[List[Dict]] = None) -> Dict:
        """The run's record a checkpoint keeps (:data:`speed.train.run.checkpoint.RECORD`)."""
        return dict(epoch=epoch, model_name=self.model.name, config=self.config.to_dict(),
                    optimizer=self.optimizer.state_dict(), rng=rng if rng is not None else [ckpt.rng_state()],
                    history=[asdict(h) for h in self.history], stopping=self.stopping.state_dict(), best=self.best,
                    num_nodes=self.data_size()[0], val_ap=self.stopping.best_score, num_events=self.data_size()[1])

    def _save_best(self, epoch: int) -> None:
        """``best.json``: weights and the full-graph node state after the log, at the best epoch."""
        model = self.eval_model()
        if self.out is None:
            return
        predictor = None
        if model.net.spec is not None:  # built by build_model, so load_run can build it again
            start = self.evaluator.test_start
            if start is not None:  # the evaluator kept the rows the test changed: the whole state, for the file
                start = {"t": start["t"], "state": model.state.whole_backup(start["state"])}
            predictor = predictor_payload(model, self.events, self.config.batch_size, start)
        ckpt.write_checkpoint(Path(self.out) / ckpt.BEST, "best", self._record(epoch), model=model,
                              predictor=predictor)

    def save_last(self, epoch: int) -> None:
        """``last.json``: everything ``resume`` needs (every process's RNG state)."""
        rngs = self.rng_states()
        if not self.is_main or self.out is None:
            return
        ckpt.write_checkpoint(Path(self.out) / ckpt.LAST, "last", self._record(epoch, rngs),
                              params=self.model.params_state_dict(), extra=self._last_extra())

    def _last_extra(self) -> Dict:
        """What else ``last.json`` must hold to finish the run after a resume."""
        return {"best_params": self.best_params}

    def _load_extra(self, extra: Dict) -> None:
        self.best_params = extra.get("best_params")

    def load_last(self) -> None:
        """Continue from ``out/last.json``: weights, optimiser, RNG, history, early stopping."""
        if self.out is None:
            raise InputError("resume needs the run directory (out=...)")
        saved = ckpt.load_checkpoint(Path(self.out) / ckpt.LAST)
        if saved.model_name != self.model.name:
            raise InputError(f"cannot resume: the run trained {saved.model_name}, not {self.model.name}",
                             Path(self.out) / ckpt.LAST)
        if len(saved.rng) != self.world.size:
            raise InputError(f"cannot resume: the run had {len(saved.rng)} processes, not {self.world.size} (each "
                             "process's random streams go on where it stopped, and the parts' grouping follows the "
                             f"number of processes: resume with {len(saved.rng)}, or train a new run)",
                             Path(self.out) / ckpt.LAST)
        nodes, events = self.data_size()
        if saved.num_events is not None and (saved.num_nodes, saved.num_events) != (nodes, events):
            raise InputError(f"cannot resume: the run trained on data of {saved.num_nodes:,} nodes and "
                             f"{saved.num_events:,} events, and this data has {nodes:,} and {events:,} (events "
                             "appended since?): train a new run, or update this one (speed update)",
                             Path(self.out) / ckpt.LAST)
        self.model.load_params(saved.model)
        self.optimizer.load_state_dict(saved.optimizer)
        ckpt.set_rng_state(saved.rng[self.world.rank])
        self.history = [EpochLog(**h) for h in saved.history]
        self.stopping.load_state_dict(saved.stopping)
        self.best = saved.best
        self._load_extra(saved.extra)
        self.start_epoch = saved.epoch + 1


class Trainer(EpochLoop):
    """Train a temporal GNN in this process on chronological batches of the training events.

    Parameters
    ----------
    events : Events
        The whole log (train, val and test periods).
    split : Split
        Its chronological split; training uses ``split.train_mask`` events only.
    config : TrainConfig
        Validated by the caller (:func:`speed.train`).
    model : StatefulModel, optional
        Built from ``config`` when omitted.
    out : path-like, optional
        Run directory for ``metrics.json``, ``curves.png``, ``best.json`` and ``last.json``.
    """

    def __init__(self, events: Events, split: Split, config: TrainConfig, model: Optional[StatefulModel] = None,
                 out=None):
        self.out = None if out is None else Path(out)
        self.device = resolve_device(config.device)
        # the thread count is part of the result (the figures follow it): recorded in the config
        # (metrics.json, last.json), and a resumed run trains on with the count it began with
        recorded = ckpt.recorded_threads(self.out) if config.resume and self.out is not None else None
        self.threads, self.threads_why = choose_threads(1, config.num_threads, recorded, config.deterministic)
        config = replace(config, num_threads=self.threads)
        self.events, self.split, self.config = events, split, config
        apply_threads(self.threads)
        if self.threads < default_threads(1, measure=False) and self.device.type == "cpu":
            self.announce(f"other processes are using the CPU: training with {self.threads} thread(s) of "
                          f"{usable_cores()} cores (--threads to choose)")
        tune_allocator()  # steps allocate and free MiB-sized tensors: keep them mapped
        seed_everything(config.seed, config.deterministic)
        self.train_index = np.flatnonzero(split.train_mask)
        self.model = (model or model_for(config, events.num_nodes, events, split.train(events))).to(self.device)
        self.state_on = place_state(self.model, config.state_device, self.device, events.num_nodes)
        self.neg_pool = negative_pool(events.src[self.train_index], events.dst[self.train_index], events.bipartite)
        # a pre-trained static memory learns from the training events only
        prepare_static(self.model.net, events.src[self.train_index], events.dst[self.train_index], self.neg_pool,
                       config.seed, progress=config.progress)
        self.optimizer = make_optimizer(self.model.net, config.lr, config.static_lr)
        self.engine = Engine(self.model, self.optimizer, progress=config.progress, pipeline=config.pipeline_on(self.device),
                             staleness=config.staleness)
        self.stream = EventStream(events)
        self.evaluator = Evaluator(events, split, config.batch_size, config.seed, config.mrr_negatives, self.device,
                                   node_classification=config.node_classification, progress=config.progress,
                                   stream=self.stream, strategy=config.eval_negatives,
                                   keep_test_start=self.out is not None, protocol=config.protocol_name,
                                   max_steps=config.eval_max_steps)
        self._init_loop()

    def train_epoch(self, epoch: int) -> EpochLog:
        """Reset memory, then one pass over the training events (its first ``max_steps``
        batches when the config bounds the epoch)."""
        self._z_train = [] if self.evaluator.with_node_classification else None
        index, cfg = self.train_index, self.config
        cut = bool(cfg.max_steps) and index.size > cfg.max_steps * cfg.batch_size
        if cut:
            index = index[:cfg.max_steps * cfg.batch_size]
        stats = self.engine.run_epoch(self.stream, Batches(index, cfg.batch_size),
                                      RandomNegatives(self.neg_pool, train_seed(cfg.seed, epoch)),
                                      desc=f"epoch {epoch}", collect=self._z_train)
        n = int(index.size)
        return EpochLog(epoch=epoch, train_seconds=stats.seconds, train_events=n,
                        train_events_per_s=n / max(stats.seconds, 1e-9), loss=stats.loss,
                        seconds={"train": stats.seconds}, cut=cut)
