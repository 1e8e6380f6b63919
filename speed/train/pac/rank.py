"""One rank of a PAC run: the shared engine and epoch loop, plus groups, sync and exchange.

Per epoch (Alg. 2):

1. the |P| = m·N parts are permuted with a seed derived from (seed, epoch) -- or kept in
   order with ``shuffle=False`` -- and rank r takes ``perm[r*m:(r+1)*m]``;
2. the rank builds its sub-graph in local node ids (:func:`~.groups.rank_graph`) and sizes
   its node state to it;
3. all ranks agree (all_reduce MAX) on the number of steps; the engine cycles a rank's
   batches, backing the state up at the end of each complete pass and restoring the last
   backup at the end (:class:`~speed.train.engine.CyclingBatches`); gradients are averaged
   every step (DDP), or with ``average_every = K > 1`` weights every K steps (:mod:`.averaging`);
4. the shared nodes are synchronised (:mod:`.sync`);
5. rank 0 gathers a full-graph state (:mod:`.state`) into its evaluation model, and the
   shared loop validates, stops early and checkpoints.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist

from ..._threads import apply_threads, default_threads
from ..._util import tune_allocator
from ...partition.shards import Shards
from .. import checkpoint as ckpt
from ..config import TrainConfig
from ..engine import Batches, CyclingBatches, Engine, EpochLog, sync_due
from ..loader import EventStream
from ..eval.evaluator import Evaluator
from ..models import StatefulModel
from ..state.features import MappedFeatures
from ..eval.negatives import RandomNegatives, negative_pool, train_seed
from ..trainer import (EpochLoop, configured_model, peak_rss_bytes, place_state, resolve_device, seed_everything,
                       time_scale)
from ..static import make_optimizer, merge_static, prepare_static
from .groups import PartLoads, RankGraph, own_nodes, part_groups, part_loads, rank_graph
from .state import assemble, gather_state
from .averaging import WeightAverager, averaged_parameters, local_step_hook
from .sync import sync_shared
from .validate import local_validation, transfer_warning


class PacRank(EpochLoop):
    """One rank of a PAC run; :meth:`run` returns the metrics on rank 0 (None elsewhere).

    Parameters
    ----------
    shards : Shards
    config : TrainConfig
        Validated, with the device this rank uses.
    rank, world : int
    out : path-like, optional
        Run directory (written by rank 0).
    wait_group : ProcessGroup, optional
        Where the ranks wait for rank 0's decisions and its final evaluation: a gloo group with a
        long timeout (default: the host group).
    host_group : ProcessGroup, optional
        A gloo group for host-memory exchanges when the default group is NCCL.
    """

    def __init__(self, shards: Shards, config: TrainConfig, rank: int, world: int, out=None, host_group=None,
                 wait_group=None):
        self.shards, self.config = shards, config
        self.rank, self.world, self.is_main = rank, world, rank == 0
        self.out = None if out is None else Path(out)
        self.host_group = host_group
        self.wait_group = wait_group if wait_group is not None else host_group
        self.device = resolve_device(config.device)
        if config.num_threads:
            apply_threads(config.num_threads)
        tune_allocator()  # steps allocate and free MiB-sized tensors: keep them mapped
        seed_everything(config.seed, config.deterministic)
        # the whole log in memory only where it is read whole: rank 0's full-graph evaluation,
        # and a static memory's preparation; the other ranks read their sub-graphs and edge
        # features from the shards' memory maps
        whole = self.is_main or config.static_memory != "none"
        self.events = shards.events("split") if whole else None
        self.split = shards.split(self.events) if whole else None
        self._train = self.split.train(self.events) if whole else None
        self.new_nodes = shards.new_nodes if shards.new_nodes is not None else np.zeros(shards.num_nodes, bool)
        scale = [time_scale(self._train) if self.is_main else None]
        dist.broadcast_object_list(scale, src=0, group=host_group)  # JODIE's time unit, from rank 0's log
        self.time_scale = float(scale[0])
        self.model = self._build_model(1).to(self.device)
        net = self.model.net
        self.static = net.static  # DistTGL's static memory, or None (speed.train.static)
        if self.static is not None:
            train = self.split.train_mask  # over the training period (self._train)
            src, dst = self._train.src[train], self._train.dst[train]
            prepare_static(net, src, dst, negative_pool(src, dst, self.events.bipartite), config.seed,
                           progress=config.progress if self.is_main else False, rank=rank, world=world,
                           group=host_group)
        # each rank trains its own rows of a learned static table; merged at the end of an epoch
        torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            net, net.local_parameters())
        # DDP wraps the weights alone: the node state is rank-local and never passes through it
        self.ddp = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            # every parameter is in every step's graph (tested per model), so no unused-parameter
            # search; small buckets start the gradient all-reduce during backward (a rank ran 13%
            # faster with 0.2 MB than with one 25 MB bucket for TGN's 0.8 MB of gradients, gloo)
            find_unused_parameters=False, bucket_cap_mb=0.2, gradient_as_bucket_view=True)
        self._averaged = None  # local SGD (--average-every K > 1): the weights the ranks average
        if config.average_every > 1:
            self.ddp.register_comm_hook(None, local_step_hook)
            self._averaged = averaged_parameters(self.ddp)
        # N ranks take N times fewer steps per epoch on N times larger (averaged) batches; the
        # usual linear scaling keeps the per-epoch progress (measured on Wikipedia, TGN, P=4:
        # test AP 0.810 -> 0.836 after 2 epochs, unpartitioned 0.857).
        lr = config.lr * (world if config.lr_scaling else 1)
        self.optimizer = make_optimizer(net, lr, config.static_lr)
        self.engine = Engine(self.model, self.optimizer, forward=self.ddp,
                             progress=config.progress if self.is_main else False, pipeline=config.pipeline,
                             staleness=config.staleness)
        self.graph: Optional[RankGraph] = None
        self._eval_model: Optional[StatefulModel] = None
        self._evaluator: Optional[Evaluator] = None
        self._val_pool: Optional[np.ndarray] = None
        self._seen: Optional[np.ndarray] = None  # nodes of the masked training events (local validation)
        self._best_state: Optional[Dict] = None  # the best epoch's full-graph state, after a resume
        self._best_in_eval_model = False  # or held by the evaluation model itself (local validation)
        self.evaluation_threads: Optional[int] = None  # rank 0's threads while it evaluates alone
        self._loads: Optional[PartLoads] = None  # the parts' training events, for balanced groups
        self._init_loop()

    def _build_model(self, num_nodes: int) -> StatefulModel:
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
        return part_groups(self.shards.num_parts, self.world, self.config.seed, epoch, self.config.shuffle,
                           self._loads)

    def train_epoch(self, epoch: int) -> EpochLog:
        cfg = self.config
        group = self.groups(epoch)[self.rank]
        rg = self.graph = rank_graph(self.shards, group, self.new_nodes, cfg.subgraph)
        ev = rg.events
        if len(ev) == 0:
            raise RuntimeError(f"rank {self.rank}: parts {group.tolist()} hold no training events")
        self.model.state.resize(rg.nodes.size)
        self.state_on = place_state(self.model, cfg.state_device, self.device, rg.nodes.size)
        learned = self.static is not None and self.static.trainable
        if self.static is not None:
            self.static.map_rows(rg.nodes)
            start = self.static.table.detach().clone() if learned else None
        stream = EventStream(ev)
        index = np.arange(len(ev))
        steps = torch.tensor([Batches(index, cfg.batch_size).num_batches], dtype=torch.long, device=self.device)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)  # every rank takes the same number of steps
        full = int(steps.item())
        cut = bool(cfg.max_steps) and cfg.max_steps < full  # the same on every rank
        batches = CyclingBatches(index, cfg.batch_size, min(full, cfg.max_steps) if cut else full)
        negatives = RandomNegatives(negative_pool(ev.src, ev.dst, ev.bipartite), train_seed(cfg.seed, epoch, self.rank))
        periodic = [0.0, 0]  # seconds and rounds of the in-epoch syncs

        averager = None if self._averaged is None else WeightAverager(self._averaged, cfg.average_every, self.world)

        def after_step(step: int) -> None:  # the same steps on every rank, so collectives line up
            if averager is not None:
                averager.after_step(step, batches.steps)
            if sync_due(step, cfg.sync_every) and step < batches.steps:
                # pending events at the latest time stay: a later batch may still query that time
                periodic[0] += sync_shared(self.model, rg.num_shared, cfg.sync, self.world,
                                           before=self._latest_time(ev, batches, step))
                periodic[1] += 1

        stats = self.engine.run_epoch(stream, batches, negatives, desc=f"epoch {epoch}",
                                      on_step=after_step if cfg.sync_every or averager else None,
                                      sync_every=cfg.sync_every,
                                      observed=self._observed(rg, ev.t_float()))
        sync_s = periodic[0] + sync_shared(self.model, rg.num_shared, cfg.sync, self.world)
        static_s = merge_static(self.static, start, self.world, self.host_group,
                                optimizer=self.optimizer.sparse) if learned else 0.0
        mine = {"rank": self.rank, "parts": group.tolist(), "nodes": int(rg.nodes.size), "events": int(len(ev)),
                "steps": stats.steps, "passes": stats.passes, "memory_bytes": self.model.state.nbytes(),
                "loss": stats.loss, "seconds": stats.seconds, "train_seconds": stats.seconds - periodic[0],
                "sync_seconds": sync_s, "sync_rounds": periodic[1] + 1, "threads": torch.get_num_threads(),
                "peak_rss_bytes": peak_rss_bytes(),
                **({"static_merge_seconds": static_s} if learned else {}),
                **({"average_seconds": averager.seconds, "average_rounds": averager.rounds} if averager else {})}
        ranks = [None] * self.world
        dist.all_gather_object(ranks, mine)  # a few numbers per rank
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

    # ---------------------------------------------------------------- evaluation
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
        if self._best_state is not None:  # a resumed run: the best epoch's state came from last.pt
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

    # ---------------------------------------------------------------- collectives
    def agree(self, flag: bool) -> bool:
        """Rank 0's decision, broadcast."""
        t = torch.tensor([int(flag)], dtype=torch.long)
        dist.broadcast(t, src=0, group=self.wait_group)  # rank 0 may have evaluated meanwhile
        return bool(t.item())

    def _last_extra(self) -> Dict:
        # with local validation the best epoch's full-graph state is needed at the end
        best = self._best_state
        if best is None and self._best_in_eval_model:
            best = self._eval_model.state.backup()
        return {**super()._last_extra(), "best_state": best}

    def _load_extra(self, extra: Dict) -> None:
        super()._load_extra(extra)
        self._best_state = extra.get("best_state")

    def rng_states(self) -> List[Dict]:
        rngs = [None] * self.world
        dist.all_gather_object(rngs, ckpt.rng_state())
        return rngs

    # ------------------------------------------------------------------- report
    def data_summary(self) -> Dict:
        return {"num_nodes": self.shards.num_nodes, "num_parts": self.shards.num_parts,
                "num_shared": int(self.shards.shared.size), "source": str(self.shards.path)}

    def extra_metrics(self) -> Dict:
        return {"memory_bytes_unpartitioned": self.model.state.nbytes(self.shards.num_nodes),
                "evaluation_threads": self.evaluation_threads or torch.get_num_threads()}

    def run(self) -> Optional[Dict]:
        metrics = self.fit()
        dist.barrier(group=self.wait_group)  # the others wait for rank 0's final evaluation
        return metrics
