"""One rank of a PAC run: the trainer given its world, :class:`RankTraining` and the sharded
evaluation (:func:`rank_trainer`).

Per epoch (Alg. 2):

1. the |P| = m·N parts are permuted with a seed derived from (seed, epoch) -- or kept in
   order with ``shuffle=False`` -- and rank r takes ``perm[r*m:(r+1)*m]``;
2. the rank builds its sub-graph in local node ids (:func:`~.groups.rank_graph`) and sizes
   its node state to it;
3. all ranks agree (all_reduce MAX) on the number of steps; the engine cycles a rank's
   batches, backing the state up at the end of each complete pass and restoring the last
   backup at the end (:class:`~speed.train.step.engine.CyclingBatches`); gradients are averaged
   every step (DDP), or with ``average_every = K > 1`` weights every K steps (:mod:`.averaging`);
4. the shared nodes are synchronised (:mod:`.sync`);
5. the trained state is brought to the owners of its rows (:func:`~.sharded.shard_state`), and
   the shared loop validates on the full graph, every rank streaming its share of each step,
   stops early and checkpoints (:mod:`.evaluation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

from ..._util import trim_heap, tune_allocator
from ...partition.shards import Shards
from ..config import ConfigError, TrainConfig
from ..step.captured import CapturedStep
from ..step.engine import Batches, CyclingBatches, Engine, EpochLog, sync_due
from ..step.loader import EventStream
from ..model.network import StatefulModel
from ..state.features import MappedFeatures
from ..step.negatives import negative_pool, train_seed, training_negatives
from ..step.optim import make_optimizer
from ..step.runtime import peak_device_bytes, peak_rss_bytes, resolve_device, seed_everything
from ..model.build import configured_model, place_state, time_scale
from ..model.static import merge_static, prepare_static
from .evaluation import sharded_evaluation
from .groups import PartLoads, RankGraph, part_groups, part_loads, rank_graph
from .log import shared_log
from ...partition.ordered import release_pages
from .averaging import WeightAverager, averaged_parameters, local_step_hook
from .sync import SharedSync
from ..world import World
from ..loop.trainer import Trainer
from ..run.folder import RunFolder


class RankTraining:
    """A PAC rank's training: its groups of parts, its sub-graph, the engine's epoch over it,
    the shared-node syncs and weight averaging (the rank's :class:`~speed.train.loop.trainer.Trainer`
    is given it).

    Parameters
    ----------
    shards : Shards
    config : TrainConfig
        Validated, with the device this rank uses.
    world : World
        This rank's place in the run and every collective (:class:`~speed.train.world.World`).
    events : Events
        The whole log, mapped (:func:`~.log.shared_log`): its training period gives the time
        unit and a static memory's pre-training.
    split : Split
    """

    def __init__(self, shards: Shards, config: TrainConfig, world: World, events, split):
        self.shards, self.config, self.world = shards, config, world
        self.rank, self.is_main = world.rank, world.is_main
        self.device = resolve_device(config.device)  # (its threads were set by World.start)
        self.events = events
        self.note = ""
        self._train = split.train(events)
        self.new_nodes = shards.new_nodes if shards.new_nodes is not None else np.zeros(shards.num_nodes, bool)
        # JODIE's time unit, from rank 0's log
        self.time_scale = float(world.broadcast_objects([time_scale(self._train) if self.is_main else None])[0])
        self.model = self.build_model(1).to(self.device)
        net = self.model.net
        self.static = net.static  # DistTGL's static memory, or None (speed.train.model.static)
        if self.static is not None:
            train = split.train_mask  # over the training period (self._train)
            src, dst = self._train.src[train], self._train.dst[train]
            prepare_static(net, src, dst, negative_pool(src, dst, events.bipartite), config.seed,
                           progress=config.progress if self.is_main else False, world=world)
        release_pages(events)  # what the split and the time unit read of the mapped log
        # N ranks take N times fewer steps per epoch on N times larger (averaged) batches; the
        # usual linear scaling keeps the per-epoch progress (measured on Wikipedia, TGN, P=4:
        # test AP 0.810 -> 0.836 after 2 epochs, unpartitioned 0.857).  Made before the DDP
        # wrapper: the optimiser lays the weights out in one buffer (FlatAdam).
        lr = config.lr * (world.size if config.lr_scaling else 1)
        self.optimizer = make_optimizer(net, lr, config.static_lr)
        # DDP wraps the weights alone: the node state is rank-local and never passes through it;
        # each rank trains its own rows of a learned static table (merged at the end of an
        # epoch).  Every parameter is in every step's graph (tested per model), so no
        # unused-parameter search; small buckets start the gradient all-reduce during backward (a
        # rank ran 13% faster with 0.2 MB than with one 25 MB bucket for TGN's 0.8 MB, gloo).
        self._averaged = None  # local SGD (--average-every K > 1): the weights the ranks average
        if config.cuda_graph:
            # a captured step has no DDP wrapper: its gradients are averaged in one collective
            # over the optimiser's flat gradient buffer, between the step's graph and the
            # optimiser's (speed.train.step.captured); the ranks start from rank 0's weights, as
            # the wrapper would make them
            why = CapturedStep.why_not(self.model, self.optimizer, config)
            if why is not None:
                raise ConfigError("cuda_graph", f"cannot capture {config.model}'s step: {why}")
            self.ddp = None
            world.broadcast(self.optimizer.flat)
        else:
            self.ddp = world.wrap(net, ignore=net.local_parameters(), bucket_mb=0.2)
            if config.average_every > 1:
                self.ddp.register_comm_hook(None, local_step_hook)
                self._averaged = averaged_parameters(self.ddp)
        self.engine = Engine(self.model, self.optimizer, forward=self.ddp or net,
                             progress=config.progress if self.is_main else False,
                             pipeline=config.pipeline_threads(self.device, captured=config.cuda_graph),
                             staleness=config.staleness, capture=config.cuda_graph,
                             reduce=world.all_mean_ if config.cuda_graph else None)
        self.graph: Optional[RankGraph] = None
        self.state_on = "device"  # where the node memories live (the last epoch's choice, place_state)
        self._loads: Optional[PartLoads] = None  # the parts' training events, for balanced groups

    def build_model(self, num_nodes: int) -> StatefulModel:
        """The configured model for ``num_nodes`` state rows, with the log's edge features: from
        the log where this rank holds it, else read in place from the shards."""
        shards = self.shards
        if self.events is not None:
            features = self.events.msg
        else:
            rows = shards.feature_rows()
            features = None if rows is None else MappedFeatures(*rows)
        return configured_model(self.config, num_nodes, shards.msg_dim, shards.num_nodes, self.time_scale, features)

    # ------------------------------------------------------------------ training
    def groups(self, epoch: int) -> List[np.ndarray]:
        if self._loads is None and self.config.grouping == "balanced":
            self._loads = part_loads(self.shards, self.config.subgraph)
        return part_groups(self.shards.num_parts, self.world.size, self.config.seed, epoch, self.config.shuffle,
                           self._loads)

    def train_epoch(self, epoch: int, collect: Optional[list] = None) -> EpochLog:
        """One epoch on this rank's group of parts (``collect`` is not taken: node classification
        is a single process's)."""
        cfg = self.config
        group = self.groups(epoch)[self.rank]
        self.graph = None  # the last epoch's sub-graph goes before this one is read
        rg = self.graph = rank_graph(self.shards, group, self.new_nodes, cfg.subgraph)
        self.shards.release_pages()  # read into the sub-graph: the mapped pages need not stay
        trim_heap()
        ev = rg.events
        if len(ev) == 0:
            raise RuntimeError(f"rank {self.rank}: parts {group.tolist()} hold no training events")
        self.model.state.resize(rg.nodes.size)
        self.state_on = place_state(self.model, cfg.state_device, self.device, rg.nodes.size)
        if cfg.cuda_graph and self.model.state.memory_device() != self.device:
            raise ConfigError("cuda_graph", f"needs the node state on the device: rank {self.rank}'s "
                              f"{rg.nodes.size:,} nodes went to host memory ({cfg.state_device} placement); run "
                              "with more ranks or --state-device device")
        learned = self.static is not None and self.static.trainable
        if self.static is not None:
            self.static.map_rows(rg.nodes)
            start = self.static.table.detach().clone() if learned else None
        stream = EventStream(ev)
        index = np.arange(len(ev))
        full = self.world.all_max(Batches(index, cfg.batch_size).num_batches)  # every rank: the same steps
        cut = bool(cfg.max_steps) and cfg.max_steps < full  # the same on every rank
        batches = CyclingBatches(index, cfg.batch_size, min(full, cfg.max_steps) if cut else full)
        negatives = training_negatives(negative_pool(ev.src, ev.dst, ev.bipartite), train_seed(cfg.seed, epoch, self.rank))
        periodic = [0.0, 0]  # seconds and rounds of the in-epoch syncs
        sync = SharedSync(self.model, rg.num_shared, cfg.sync, self.world)

        averager = None if self._averaged is None else WeightAverager(self._averaged, cfg.average_every, self.world)

        def after_step(step: int) -> None:  # the same steps on every rank, so collectives line up
            if averager is not None:
                averager.after_step(step, batches.steps)
            if sync_due(step, cfg.sync_every) and step < batches.steps:
                # pending events at the latest time stay: a later batch may still query that time
                periodic[0] += sync(before=self._latest_time(ev, batches, step))
                periodic[1] += 1

        stats = self.engine.run_epoch(stream, batches, negatives, desc=f"epoch {epoch}",
                                      on_step=after_step if cfg.sync_every or averager else None,
                                      sync_every=cfg.sync_every,
                                      observed=self._observed(rg, ev.t_float()), on_start=sync.start)
        sync_s = periodic[0] + sync()
        if cfg.cuda_graph:  # the gradients were averaged by hand: the ranks' weights must be one
            drift = self.world.drift(self.optimizer.flat)
            if drift != 0.0:
                raise RuntimeError(f"--cuda-graph: after epoch {epoch} the ranks' weights differ by up to {drift:g} "
                                   "(each step's gradient average should keep them identical)")
        static_s = merge_static(self.static, start, self.world, optimizer=self.optimizer.sparse) if learned else 0.0
        mine = {"rank": self.rank, "parts": group.tolist(), "nodes": int(rg.nodes.size), "events": int(len(ev)),
                "steps": stats.steps, "passes": stats.passes, "memory_bytes": self.model.state.nbytes(),
                "loss": stats.loss, "seconds": stats.seconds, "train_seconds": stats.seconds - periodic[0],
                "sync_seconds": sync_s, "sync_rounds": periodic[1] + 1, "sync": sync.stats.as_dict(),
                "threads": torch.get_num_threads(),
                "peak_rss_bytes": peak_rss_bytes(), "peak_device_bytes": peak_device_bytes(self.device),
                **({"static_merge_seconds": static_s} if learned else {}),
                **({"average_seconds": averager.seconds, "average_rounds": averager.rounds} if averager else {})}
        ranks = self.world.objects(mine)  # a few numbers per rank
        slowest = max(r["train_seconds"] for r in ranks)  # in-epoch syncs are reported apart
        # a cut epoch trained each rank's first steps only
        trained = sum(round(r["events"] * min(r["passes"], 1.0)) if cut else r["events"] for r in ranks)
        return EpochLog(epoch=epoch, train_seconds=slowest, train_events=trained, cut=cut,
                        train_events_per_s=sum(r["events"] * r["passes"] for r in ranks) / max(slowest, 1e-9),
                        loss=float(np.mean([r["loss"] for r in ranks])), ranks=ranks,
                        seconds={"train": slowest, "sync": max(r["sync_seconds"] + r.get("static_merge_seconds", 0.0)
                                                               for r in ranks)})

    def _observed(self, rg: RankGraph, t: np.ndarray):
        """``observe="shared"``: the events between shared nodes that other groups train, handed
        to each step with the times it covers (after the previous step's last event, up to its
        own); None otherwise."""
        if self.config.observe != "shared" or rg.num_shared == 0:
            return None
        induced = self.shards.merge(rg.parts, period="train", subgraph="induced", features=False)
        other = induced.select(~np.isin(induced.eid, rg.events.eid))  # what the rank does not train
        new = self.new_nodes
        if new.any():
            other = other.select(~(new[other.src] | new[other.dst]))
        g2l = rg.global_to_local(self.shards.num_nodes)
        src, dst, eid = g2l[other.src], g2l[other.dst], np.asarray(other.eid, dtype=np.int64)
        when = np.asarray(other.t_float(), dtype=np.float64)
        t = np.asarray(t, dtype=np.float64)

        def observed(positions: np.ndarray):
            first, last = int(positions[0]), int(positions[-1])
            lo = 0 if first == 0 else np.searchsorted(when, t[first - 1], side="right")
            hi = np.searchsorted(when, t[last], side="right")
            return src[lo:hi], dst[lo:hi], when[lo:hi], eid[lo:hi]

        return observed

    @staticmethod
    def _latest_time(ev, batches: CyclingBatches, step: int) -> float:
        """The time of the last event trained by ``step`` steps (cycling over the stream)."""
        n = batches.num_batches
        idx = batches.batch((step - 1) % n)
        return float(ev.t[idx[-1]])

    # ------------------------------------------------------------------- report
    def data_size(self):
        """``(nodes, events)`` of the shards (every rank knows them; the log is rank 0's)."""
        return self.shards.num_nodes, self.shards.num_events

    def data_summary(self) -> Dict:
        appended = self.shards.num_events - self.shards.segments[0].num_events
        return {"num_nodes": self.shards.num_nodes, "num_parts": self.shards.num_parts,
                "num_shared": int(self.shards.shared.size), "source": str(self.shards.path),
                # events appended to the shards since the partition: not in the split, not trained on
                **({"appended_events_not_trained": int(appended)} if appended else {})}

    def extra_metrics(self) -> Dict:
        cap = self.engine.captured  # (rank 0's: every rank replays the same steps)
        return {"memory_bytes_unpartitioned": self.model.state.nbytes(self.shards.num_nodes),
                **({"cuda_graph": cap.metrics()} if cap is not None else {})}


def rank_trainer(shards: Shards, config: TrainConfig, world: World, out=None, threads_why: str = "") -> Trainer:
    """A PAC rank's :class:`~speed.train.loop.trainer.Trainer`: its world, the whole log mapped
    (every rank streams the full-graph evaluation; its sub-graph for training is read from the
    shards' memory maps), :class:`RankTraining` and :class:`~.evaluation.ShardedEvaluation`.
    ``Trainer.run`` returns the metrics on rank 0 (None elsewhere)."""
    tune_allocator()  # steps allocate and free MiB-sized tensors: keep them mapped
    seed_everything(config.seed, config.deterministic)
    folder = None if out is None else RunFolder(out)
    # one time-ordered copy, written by rank 0 and mapped by every rank
    events = shared_log(shards, None if out is None else Path(out), world)
    split = shards.split(events)
    training = RankTraining(shards, config, world, events, split)
    evaluation = sharded_evaluation(training, events, split, folder)
    return Trainer(events, split, config, out=folder, world=world, training=training, evaluation=evaluation,
                   threads_why=threads_why)
