"""PAC: parallel training over shards (paper §II-C and Alg. 2; DESIGN §5).

One process per GPU (or CPU process) trains the same model with DistributedDataParallel on
the node-induced sub-graph of its group of parts.  Per epoch:

1. the |P| = m·N parts are permuted with a seed derived from (seed, epoch) -- or kept in
   order with ``shuffle=False`` -- and rank r takes ``perm[r*m:(r+1)*m]``;
2. the rank builds its sub-graph (its parts plus the shared nodes, cut events between its
   parts recovered) in *local* node ids: shared nodes first, identical on every rank, then
   the group's own nodes.  Memory is sized to these nodes, not to |V|;
3. all ranks agree (all_reduce MAX) on the number of steps; a rank that runs out of batches
   backs its memory up (end of a complete pass), resets it and starts its data again;
4. at epoch end every rank restores its last backup, applies pending messages, and the
   shared nodes are synchronised: the state with the latest ``last_update`` wins
   (``sync="last"``), or the mean across ranks (``"mean"``), or nothing (``"none"``);
5. rank 0 assembles a global memory (non-shared nodes from their rank, shared nodes by the
   sync rule) and evaluates on the full graph, continuing through val (and test at the end):
   ``eval="assemble"``; or replays every event with the trained weights: ``eval="replay"``.

If |P| is not a multiple of N the run is refused with a clear error (groups stay equal).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from .._util import atomic_file
from ..data.events import Events
from ..errors import InputError
from ..partition.shards import Shards
from .models import TemporalGNN, build_model
from .trainer import EpochLog, TrainConfig, Trainer, resolve_device, seed_everything, time_scale, write_run

SYNC_MODES = ("last", "mean", "none")
EVAL_MODES = ("assemble", "replay")


@dataclass
class PacConfig:
    """How to run in parallel (stored in ``metrics.json`` next to :class:`TrainConfig`)."""

    nproc: int = 2
    sync: str = "last"
    shuffle: bool = True
    eval: str = "assemble"
    timeout: float = 300.0
    resume: bool = False
    lr_scaling: bool = True  # learning rate x N: each step averages N ranks' batches

    def validate(self, num_parts: int, world: int) -> None:
        if self.sync not in SYNC_MODES:
            raise InputError(f"sync must be one of {', '.join(SYNC_MODES)}, got {self.sync!r}")
        if self.eval not in EVAL_MODES:
            raise InputError(f"eval must be one of {', '.join(EVAL_MODES)}, got {self.eval!r}")
        if world < 1:
            raise InputError(f"--nproc must be >= 1, got {world}")
        if num_parts % world:
            raise InputError(f"the shards have {num_parts} parts, which is not a multiple of {world} processes: "
                             f"use --nproc that divides {num_parts} (or re-partition with --parts a multiple of it)")


def part_groups(num_parts: int, world: int, seed: int, epoch: int, shuffle: bool) -> List[np.ndarray]:
    """The parts of each rank in ``epoch``: a seeded permutation cut into ``world`` groups."""
    perm = np.random.default_rng([seed, epoch]).permutation(num_parts) if shuffle else np.arange(num_parts)
    m = num_parts // world
    return [np.sort(perm[r * m:(r + 1) * m]) for r in range(world)]


@dataclass
class RankGraph:
    """A rank's training sub-graph in local node ids.

    Attributes
    ----------
    nodes : int64 ndarray, shape (n,)
        Global id of each local node: shared nodes first, then the group's own.
    num_shared : int
    events : Events
        Training events (inductive mask applied) with local ``src``/``dst`` and global ``eid``.
    """

    parts: np.ndarray
    nodes: np.ndarray
    num_shared: int
    events: Events


def rank_graph(shards: Shards, group: np.ndarray, new_nodes: Optional[np.ndarray]) -> RankGraph:
    own = np.flatnonzero(np.isin(shards.node_parts, group))
    nodes = np.concatenate([shards.shared, own])
    g2l = np.full(shards.num_nodes, -1, dtype=np.int64)
    g2l[nodes] = np.arange(nodes.size)
    ev = shards.merge(group, period="train")
    if new_nodes is not None and new_nodes.any():
        ev = ev.select(~(new_nodes[ev.src] | new_nodes[ev.dst]))
    local = Events(src=g2l[ev.src], dst=g2l[ev.dst], t=ev.t, eid=ev.eid, num_nodes=int(nodes.size),
                   bipartite=ev.bipartite, meta={"source": str(shards.path), "parts": group.tolist()})
    return RankGraph(parts=group, nodes=nodes, num_shared=int(shards.shared.size), events=local)


def memory_bytes(model: TemporalGNN) -> int:
    """Bytes of the node state a rank holds: memories and their timestamps."""
    total = 0
    for mem in (model.memory, model.left_memory):
        if mem is not None:
            total += mem.memory.numel() * mem.memory.element_size() + mem.last_update.numel() * 8
    return int(total)


def sync_shared(model: TemporalGNN, num_shared: int, mode: str, world: int) -> float:
    """Make the shared nodes' state agree across ranks; returns the seconds spent.

    The shared nodes' pending events are applied first, so each rank offers a complete
    state.  With ``mode="last"`` the rank whose state has the largest ``last_update`` wins
    (ties: the lowest rank); ``"mean"`` averages states and keeps the latest time; ``"none"``
    leaves each rank's own.  Other nodes keep their pending events.
    """
    start = time.perf_counter()
    if mode == "none" or num_shared == 0 or world == 1:
        return time.perf_counter() - start
    shared = torch.arange(num_shared, device=model.memory.memory.device)
    with torch.no_grad():
        state, last = model.memory_of(shared)
        model.memory.write(shared, state, last)
        model.store.clear(shared)
        for mem in (model.memory, model.left_memory):
            if mem is None:
                continue
            s, lu = mem.memory[:num_shared].contiguous(), mem.last_update[:num_shared].contiguous()
            all_s = [torch.empty_like(s) for _ in range(world)]
            all_lu = [torch.empty_like(lu) for _ in range(world)]
            dist.all_gather(all_s, s)
            dist.all_gather(all_lu, lu)
            new_s, new_lu = combine_shared(torch.stack(all_s), torch.stack(all_lu), mode)
            mem.write(shared, new_s, new_lu)
    return time.perf_counter() - start


def combine_shared(states: torch.Tensor, last: torch.Tensor, mode: str):
    """The sync rule on gathered states ``(W, S, d)`` and times ``(W, S)``."""
    if mode == "mean":
        return states.mean(0), last.max(0).values
    winner = torch.argmax(last, dim=0)  # first maximum: the lowest rank wins ties
    cols = torch.arange(states.shape[1], device=states.device)
    return states[winner, cols], last[winner, cols]


class PacRank:
    """One rank of a PAC run.  ``run()`` returns the metrics on rank 0 (None elsewhere)."""

    def __init__(self, shards: Shards, config: TrainConfig, pac: PacConfig, rank: int, world: int, out: Optional[Path]):
        config.validate()
        pac.validate(shards.num_parts, world)
        self.shards, self.config, self.pac = shards, config, pac
        self.rank, self.world = rank, world
        self.out = None if out is None else Path(out)
        self.device = resolve_device(config.device)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        seed_everything(config.seed, config.deterministic)
        self.events = shards.events()
        self.split = shards.split(self.events)
        train = self.split.train(self.events)
        self.model = build_model(config.model, 1, msg_dim=self.events.msg_dim, memory_dim=config.memory_dim,
                                 time_dim=config.time_dim, embedding_dim=config.embedding_dim,
                                 neighbors=config.neighbors, time_scale=time_scale(train)).to(self.device)
        self.model.set_edge_features(self.events.msg)
        # Built while every rank's memory has the same (1-row) shape: DDP broadcasts buffers at
        # construction.  Memories are rank-local afterwards, so never broadcast again.
        self.ddp = torch.nn.parallel.DistributedDataParallel(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            broadcast_buffers=False, find_unused_parameters=True)
        # N ranks take N times fewer steps per epoch on N times larger (averaged) batches; the
        # usual linear scaling keeps the per-epoch progress (measured on Wikipedia, TGN, P=4:
        # test AP 0.810 -> 0.836 after 2 epochs, unpartitioned 0.857).
        lr = config.lr * (world if pac.lr_scaling else 1)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, foreach=True)
        self.history: List[EpochLog] = []
        self.start_epoch = 1
        self.best = {"ap": -1.0, "epoch": None, "params": None, "state": None}
        self.waited = 0

    # ----------------------------------------------------------------- one epoch
    def _batches(self, n: int):
        bs = self.config.batch_size
        return [np.arange(s, min(n, s + bs)) for s in range(0, n, bs)]

    def run_epoch(self, epoch: int) -> Dict:
        cfg = self.config
        group = part_groups(self.shards.num_parts, self.world, cfg.seed, epoch, self.pac.shuffle)[self.rank]
        rg = rank_graph(self.shards, group, self.split.new_nodes)
        self.graph = rg
        ev = rg.events
        if len(ev) == 0:
            raise RuntimeError(f"rank {self.rank}: parts {group.tolist()} hold no training events")
        model = self.model
        model.resize(rg.nodes.size)
        model.train()
        dev = self.device
        src, dst = torch.from_numpy(ev.src).to(dev), torch.from_numpy(ev.dst).to(dev)
        t = torch.tensor(ev.t_float(), device=dev)
        eid = torch.from_numpy(ev.eid).to(dev)
        pool = np.unique(ev.dst if ev.bipartite else np.concatenate([ev.src, ev.dst]))
        batches = self._batches(len(ev))
        steps = torch.tensor([len(batches)], dtype=torch.long, device=dev)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        steps = int(steps.item())
        rng = np.random.default_rng([cfg.seed, epoch, self.rank])
        model.reset_state()
        backup, pos, losses = None, 0, []
        start = time.perf_counter()
        for _ in range(steps):
            idx = torch.from_numpy(batches[pos]).to(dev)
            neg = torch.from_numpy(pool[rng.integers(0, pool.size, size=idx.numel())]).to(dev)
            self.optimizer.zero_grad()
            pos_logit, neg_logit, z = self.ddp(src[idx], dst[idx], neg, t[idx])
            loss = F.binary_cross_entropy_with_logits(pos_logit, torch.ones_like(pos_logit)) + \
                F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))
            model.observe(src[idx], dst[idx], t[idx], eid[idx], z[:2 * idx.numel()])
            loss.backward()
            self.optimizer.step()
            model.detach()
            losses.append(float(loss.detach()))
            pos += 1
            if pos == len(batches):  # a complete pass: back up, then start the data again
                backup = model.backup()
                model.reset_state()
                pos = 0
        model.restore(backup)
        seconds = time.perf_counter() - start
        sync_s = sync_shared(model, rg.num_shared, self.pac.sync, self.world)
        return {"rank": self.rank, "parts": group.tolist(), "nodes": int(rg.nodes.size), "events": int(len(ev)),
                "steps": steps, "passes": steps / len(batches), "memory_bytes": memory_bytes(model),
                "loss": float(np.mean(losses)), "seconds": seconds, "sync_seconds": sync_s}

    # --------------------------------------------------------------- evaluation
    def _gather_states(self):
        """Rank 0 gets every rank's (global ids, states, times[, left states, times])."""
        m, lm = self.model.memory, self.model.left_memory
        nodes, ns = self.graph.nodes, self.graph.num_shared
        # pending events of every local node, in global ids (shared ones are empty after a sync)
        local = torch.arange(self.model.num_nodes, device=m.memory.device)
        row, other, t, eid = self.model.store.gather(local)
        g = torch.from_numpy(nodes)
        pending = (g[row.cpu()], g[other.cpu()], t.cpu(), eid.cpu())
        payload = (nodes, ns, m.memory.cpu(), m.last_update.cpu(),
                   None if lm is None else lm.memory.cpu(), None if lm is None else lm.last_update.cpu(), pending)
        out = [None] * self.world
        dist.all_gather_object(out, payload)
        return out

    def assemble(self, payloads) -> Dict:
        """Global state: non-shared nodes' memory and pending events from their rank, shared
        nodes by the sync rule (``last`` when sync is ``none``, so evaluation sees one state
        per node; their pending events then come from the winning rank)."""
        n = self.shards.num_nodes
        out = {}
        ns = payloads[0][1]
        shared = torch.from_numpy(payloads[0][0][:ns])
        rule = "last" if self.pac.sync == "none" else self.pac.sync
        winner = None
        for k, (mi, li) in {"memory": (2, 3), "left_memory": (4, 5)}.items():
            if payloads[0][mi] is None:
                continue
            dim = payloads[0][mi].shape[1]
            mem = torch.zeros(n, dim)
            last = torch.zeros(n, dtype=torch.float64)
            for p in payloads:
                own = torch.from_numpy(p[0][ns:])
                mem[own] = p[mi][ns:]
                last[own] = p[li][ns:]
            if ns:
                l_all = torch.stack([p[li][:ns] for p in payloads])
                mem[shared], last[shared] = combine_shared(torch.stack([p[mi][:ns] for p in payloads]), l_all, rule)
                if k == "memory":
                    winner = torch.argmax(l_all, dim=0)
            out[k] = (mem, last)
        parts = []
        for r, p in enumerate(payloads):
            node, other, t, eid = p[6]
            keep = ~torch.isin(node, shared)
            if ns and winner is not None:  # a shared node's pending events come from its winning rank
                pos = torch.searchsorted(shared, node).clamp(max=max(ns - 1, 0))
                keep |= torch.isin(node, shared) & (winner[pos] == r)
            parts.append((node[keep], other[keep], t[keep], eid[keep]))
        out["pending"] = tuple(torch.cat([q[i] for q in parts]) for i in range(4))
        return out

    def _eval_trainer(self) -> Trainer:
        if not hasattr(self, "_evaluator"):
            # building (and seeding) the evaluator must not move this rank's RNG streams, or a
            # resumed run would diverge from an uninterrupted one
            torch_state, np_state = torch.get_rng_state(), np.random.get_state()
            model = build_model(self.config.model, self.shards.num_nodes, msg_dim=self.events.msg_dim,
                                memory_dim=self.config.memory_dim, time_dim=self.config.time_dim,
                                embedding_dim=self.config.embedding_dim, neighbors=self.config.neighbors,
                                time_scale=self.model.embedding.time_scale
                                if hasattr(self.model.embedding, "time_scale") else 1.0)
            cfg = copy.copy(self.config)
            self._evaluator = Trainer(self.events, self.split, cfg, model=model.to(self.device))
            torch.set_rng_state(torch_state)
            np.random.set_state(np_state)
        ev = self._evaluator
        params = {k: v for k, v in self.model.state_dict().items() if not k.startswith(("memory.", "left_memory."))}
        ev.model.load_state_dict(params, strict=False)
        return ev

    def _load_global(self, ev: Trainer, state: Dict) -> None:
        model = ev.model
        model.reset_state()
        for k in ("memory", "left_memory"):
            if k in state:
                mem, last = state[k]
                target = getattr(model, k)
                target.memory = mem.to(self.device)
                target.last_update = last.to(self.device)
        node, other, t, eid = (x.to(self.device) for x in state["pending"])
        if node.numel():
            model.store.replace(node, other, t, eid)
        tr = ev.train_index
        e = self.events
        model.sampler.insert(e.src[tr], e.dst[tr], e.t_float()[tr], e.eid[tr])

    def validate(self, state: Dict) -> Dict:
        ev = self._eval_trainer()
        self._load_global(ev, state)
        res = ev.stream(ev._period("val"), seed=self.config.seed + 1, desc="val")
        return ev._scores(res, self.split.val_inductive)

    def final(self) -> Dict:
        ev = self._eval_trainer()
        ev.model.load_state_dict({k: v for k, v in self.best["params"].items()
                                  if not k.startswith(("memory.", "left_memory."))}, strict=False)
        if self.pac.eval == "replay":
            return ev.final_evaluation()
        self._load_global(ev, self.best["state"])
        cfg = self.config
        val = ev.stream(ev._period("val"), seed=cfg.seed + 1, desc="val")
        test = ev.stream(ev._period("test"), seed=cfg.seed + 2, mrr_negatives=cfg.mrr_negatives, desc="test")
        return {"val": ev._scores(val, self.split.val_inductive), "test": ev._scores(test, self.split.test_inductive),
                "negatives_true_edges": {p: ev.count_true_negatives(p) for p in ("val", "test")}}

    # ---------------------------------------------------------------- the run
    def _rng_states(self):
        return {"torch": torch.get_rng_state(), "numpy": np.random.get_state()}

    def save_last(self, epoch: int) -> None:
        """Everything --resume needs, written by rank 0 atomically (RNG of every rank)."""
        rngs = [None] * self.world
        dist.all_gather_object(rngs, self._rng_states())
        if self.rank != 0 or self.out is None:
            return
        state = {"epoch": epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "rng": rngs, "history": [asdict(h) for h in self.history], "best": self.best,
                 "waited": self.waited, "config": asdict(self.config), "pac": asdict(self.pac)}
        with atomic_file(self.out / "last.pt") as tmp:
            torch.save(state, tmp)

    def load_last(self) -> None:
        path = self.out / "last.pt" if self.out is not None else None
        if path is None or not path.exists():
            raise InputError("nothing to resume (no last.pt)", self.out)
        state = torch.load(path, map_location="cpu", weights_only=False)
        params = {k: v for k, v in state["model"].items() if not k.startswith(("memory.", "left_memory."))}
        self.model.load_state_dict(params, strict=False)
        self.optimizer.load_state_dict(state["optimizer"])
        rng = state["rng"][self.rank]
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        self.history = [EpochLog(**h) for h in state["history"]]
        self.best, self.waited = state["best"], state["waited"]
        self.start_epoch = state["epoch"] + 1

    def run(self) -> Optional[Dict]:
        cfg = self.config
        if self.pac.resume:
            self.load_last()
        started = time.perf_counter()
        for epoch in range(self.start_epoch, cfg.epochs + 1):
            stats = self.run_epoch(epoch)
            all_stats = [None] * self.world
            dist.all_gather_object(all_stats, stats)
            payloads = self._gather_states()
            stop = [False]
            if self.rank == 0:
                state = self.assemble(payloads)
                val = self.validate(state)
                log = EpochLog(epoch=epoch, train_seconds=max(s["seconds"] for s in all_stats),
                               train_events=sum(s["events"] for s in all_stats),
                               train_events_per_s=sum(s["events"] * s["passes"] for s in all_stats)
                               / max(max(s["seconds"] for s in all_stats), 1e-9),
                               loss=float(np.mean([s["loss"] for s in all_stats])), val=val)
                log.val["ranks"] = all_stats
                log.val["sync_seconds"] = max(s["sync_seconds"] for s in all_stats)
                self.history.append(log)
                ap = val["transductive"]["ap"]
                if ap > self.best["ap"]:
                    self.best = {"ap": ap, "epoch": epoch, "params": copy.deepcopy(self.model.state_dict()),
                                 "state": state}
                    self.waited = 0
                    if self.out is not None:
                        self._save_best(epoch, ap)
                else:
                    self.waited += 1
                stop = [self.waited >= cfg.patience]
            dist.broadcast_object_list(stop, src=0)
            self.save_last(epoch)
            if stop[0]:
                break
        train_seconds = time.perf_counter() - started
        if self.rank != 0:
            dist.barrier()
            return None
        t0 = time.perf_counter()
        final = self.final()
        dist.barrier()
        metrics = {
            "model": cfg.model, "nproc": self.world,
            "config": {k: v for k, v in asdict(cfg).items() if k != "progress"} | {"pac": asdict(self.pac)},
            "data": {"num_events": len(self.events), "num_nodes": self.shards.num_nodes,
                     "num_parts": self.shards.num_parts, "num_shared": int(self.shards.shared.size),
                     "num_train_events": int(self.split.train_mask.sum()), "num_val_events": self.split.num_val,
                     "num_test_events": self.split.num_test, "msg_dim": self.events.msg_dim,
                     "source": str(self.shards.path)},
            "memory_bytes_unpartitioned": memory_bytes_for(self.model, self.shards.num_nodes),
            "epochs": [self._epoch_json(h) for h in self.history],
            "best_epoch": self.best["epoch"],
            **final,
            "seconds": {"train": train_seconds, "final_evaluation": time.perf_counter() - t0},
        }
        if self.out is not None:
            write_run(self.out, metrics)
        return metrics

    @staticmethod
    def _epoch_json(h: EpochLog) -> Dict:
        d = asdict(h)
        d["ranks"] = d["val"].pop("ranks", [])
        d["sync_seconds"] = d["val"].pop("sync_seconds", 0.0)
        return d

    def _save_best(self, epoch: int, ap: float) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch,
                 "val_ap": ap, "config": asdict(self.config), "model_name": self.model.name,
                 "memory": {k: v for k, v in self.best["state"].items()},
                 "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state()}}
        with atomic_file(self.out / "checkpoint.pt") as tmp:
            torch.save(state, tmp)


def memory_bytes_for(model: TemporalGNN, num_nodes: int) -> int:
    """Node-state bytes an unpartitioned run of this model would hold for ``num_nodes``."""
    per = model.memory.memory_dim * 4 + 8
    if model.left_memory is not None:
        per += model.left_memory.memory_dim * 4 + 8
    return int(per * num_nodes)
