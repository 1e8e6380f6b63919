"""Training in one process: an epoch is one pass over the training stream.

:func:`local_parts` builds what a single-process :class:`~.trainer.Trainer` is given: a world of
one, its thread count, :class:`StreamTraining` and :class:`~.evaluation.WholeEvaluation`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..._threads import apply_threads, choose_threads, default_threads, usable_cores
from ..._util import tune_allocator
from ...data.events import Events
from ...data.split import Split
from ..config import ConfigError, TrainConfig
from ..eval.evaluator import Evaluator
from ..model.build import model_for, place_state
from ..model.network import StatefulModel
from ..model.static import prepare_static
from ..run.folder import RunFolder, kept_threads
from ..step.captured import CapturedStep
from ..step.engine import Batches, Engine, EpochLog
from ..step.loader import EventStream
from ..step.negatives import negative_pool, train_seed, training_negatives
from ..step.optim import make_optimizer
from ..step.runtime import resolve_device, seed_everything
from ..world import World
from .evaluation import WholeEvaluation


class StreamTraining:
    """One process training on chronological batches of the training events.

    Parameters
    ----------
    events : Events
        The whole log; training uses ``split.train_mask`` events only.
    split : Split
    config : TrainConfig
        With its thread count chosen (:func:`local_parts`).
    device : torch.device
    model : StatefulModel, optional
        Built from ``config`` when omitted.
    """

    def __init__(self, events: Events, split: Split, config: TrainConfig, device, model: Optional[StatefulModel] = None):
        self.events, self.config, self.device = events, config, device
        self.note = ""  # a line the trainer announces (set by local_parts)
        tune_allocator()  # steps allocate and free MiB-sized tensors: keep them mapped
        seed_everything(config.seed, config.deterministic)
        self.train_index = np.flatnonzero(split.train_mask)
        self.model = (model or model_for(config, events.num_nodes, events, split.train(events))).to(device)
        self.state_on = place_state(self.model, config.state_device, device, events.num_nodes)
        self.neg_pool = negative_pool(events.src[self.train_index], events.dst[self.train_index], events.bipartite)
        # a pre-trained static memory learns from the training events only
        prepare_static(self.model.net, events.src[self.train_index], events.dst[self.train_index], self.neg_pool,
                       config.seed, progress=config.progress)
        self.optimizer = make_optimizer(self.model.net, config.lr, config.static_lr)
        if config.cuda_graph:
            why = CapturedStep.why_not(self.model, self.optimizer, config)
            if why is not None:
                raise ConfigError("cuda_graph", f"cannot capture {config.model}'s step: {why}")
        self.engine = Engine(self.model, self.optimizer, progress=config.progress, pipeline=config.pipeline_threads(device, captured=config.cuda_graph),
                             staleness=config.staleness, capture=config.cuda_graph)
        self.stream = EventStream(events)

    def train_epoch(self, epoch: int, collect: Optional[list] = None) -> EpochLog:
        """Reset memory, then one pass over the training events (its first ``max_steps``
        batches when the config bounds the epoch); ``collect`` receives the batches' source
        embeddings."""
        index, cfg = self.train_index, self.config
        cut = bool(cfg.max_steps) and index.size > cfg.max_steps * cfg.batch_size
        if cut:
            index = index[:cfg.max_steps * cfg.batch_size]
        stats = self.engine.run_epoch(self.stream, Batches(index, cfg.batch_size),
                                      training_negatives(self.neg_pool, train_seed(cfg.seed, epoch)),
                                      desc=f"epoch {epoch}", collect=collect)
        n = int(index.size)
        return EpochLog(epoch=epoch, train_seconds=stats.seconds, train_events=n,
                        train_events_per_s=n / max(stats.seconds, 1e-9), loss=stats.loss,
                        seconds={"train": stats.seconds}, cut=cut)

    def data_size(self) -> Tuple[int, int]:
        """``(nodes, events)`` of the data this run trains on (a resumed run must find the same)."""
        return self.events.num_nodes, len(self.events)

    def data_summary(self) -> Dict:
        appended = self.events.meta.appended
        return {"appended_events_not_trained": int(appended)} if appended else {}

    def extra_metrics(self) -> Dict:
        """With ``--cuda-graph``: the shapes recorded, the steps replayed, and why recording
        failed if it did (the steps then ran eagerly)."""
        cap = self.engine.captured
        if cap is None:
            return {}
        return {"cuda_graph": cap.metrics()}


def local_parts(events: Events, split: Split, config: TrainConfig, model: Optional[StatefulModel],
                folder: Optional[RunFolder]) -> Tuple[World, TrainConfig, StreamTraining, WholeEvaluation, str]:
    """What a single-process trainer is given: ``(world, config, training, evaluation,
    threads_why)``, the config carrying the thread count chosen for this process."""
    device = resolve_device(config.device)
    # the thread count is part of the result (the figures follow it): recorded in the config
    # (metrics.json, last.json), and a resumed run trains on with the count it began with
    threads, why = choose_threads(1, config.num_threads, kept_threads(config, folder), config.deterministic)
    config = replace(config, num_threads=threads)
    apply_threads(threads)
    training = StreamTraining(events, split, config, device, model)
    if threads < default_threads(1, measure=False) and device.type == "cpu":
        training.note = (f"other processes are using the CPU: training with {threads} thread(s) of "
                         f"{usable_cores()} cores (--threads to choose)")
    evaluation = WholeEvaluation(
        training.model, Evaluator.for_run(events, split, config, device, stream=training.stream,
                                          keep_test_start=folder is not None),
        config, events)
    return World.alone(device), config, training, evaluation, why


__all__: List[str] = ["StreamTraining", "local_parts"]
