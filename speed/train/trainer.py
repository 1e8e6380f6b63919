"""Single-process training and evaluation of a temporal GNN on one event stream.

The loop is written so that one PAC rank is this same loop over its sub-graph:
``Trainer._run_epoch`` streams whatever events it is given.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from .._util import atomic_file, jsonable, progress_bar
from ..data.events import Events
from ..data.split import Split, chronological_split
from ..errors import InputError
from .evaluate import link_metrics, mean_reciprocal_rank, node_classification_auroc
from .models import MODELS, TemporalGNN, build_model


@dataclass
class TrainConfig:
    """Hyperparameters of a training run (stored unchanged in ``metrics.json``)."""

    model: str = "tgn"
    epochs: int = 10
    batch_size: int = 200
    lr: float = 1e-4
    memory_dim: int = 100
    time_dim: int = 100
    embedding_dim: int = 100
    neighbors: int = 10
    device: str = "auto"
    seed: int = 0
    patience: int = 5
    mrr_negatives: int = 0
    deterministic: bool = False
    num_threads: Optional[int] = None
    val: float = 0.15
    test: float = 0.15
    new_node_fraction: float = 0.1
    node_classification: bool = True
    progress: Optional[bool] = None

    def validate(self) -> None:
        if self.model not in MODELS:
            raise InputError(f"unknown model '{self.model}' (choose from {', '.join(MODELS)})")
        for name in ("epochs", "batch_size", "memory_dim", "time_dim", "embedding_dim", "neighbors"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be an integer >= 1, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"lr must be a positive number, got {self.lr!r}")
        if self.patience < 1:
            raise InputError(f"patience must be >= 1, got {self.patience}")
        if self.mrr_negatives < 0:
            raise InputError(f"mrr_negatives must be >= 0, got {self.mrr_negatives}")
        if self.num_threads is not None and self.num_threads < 1:
            raise InputError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise InputError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError(f"device {self.device!r} requested but CUDA is not available")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def time_scale(events: Events) -> float:
    """Mean gap between a node's consecutive events (JODIE's Δt normaliser), vectorised."""
    nodes = np.concatenate([events.src, events.dst])
    t = np.concatenate([events.t_float(), events.t_float()])
    order = np.lexsort((t, nodes))
    n, tt = nodes[order], t[order]
    same = n[1:] == n[:-1]
    gaps = (tt[1:] - tt[:-1])[same]
    scale = float(gaps.mean()) if gaps.size else 1.0
    return scale if scale > 0 else 1.0


@dataclass
class StreamResult:
    """Scores of one evaluation pass."""

    pos: np.ndarray
    neg: np.ndarray
    mrr_neg: Optional[np.ndarray] = None
    z_src: Optional[np.ndarray] = None
    eids: Optional[np.ndarray] = None


@dataclass
class EpochLog:
    epoch: int
    train_seconds: float
    train_events: int
    train_events_per_s: float
    loss: float
    val: Dict = field(default_factory=dict)


class Trainer:
    """Train a temporal GNN on chronological batches and evaluate it on the full stream.

    Parameters
    ----------
    events : Events
        The whole log (train, val and test periods).
    split : Split
        Its chronological split; training uses ``split.train_mask`` events only.
    config : TrainConfig
    model : TemporalGNN, optional
        Built from ``config`` when omitted.
    """

    def __init__(self, events: Events, split: Split, config: TrainConfig, model: Optional[TemporalGNN] = None):
        config.validate()
        self.events = events
        self.split = split
        self.config = config
        self.device = resolve_device(config.device)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        seed_everything(config.seed, config.deterministic)
        train = split.train(events)
        self.model = (model or build_model(
            config.model, events.num_nodes, msg_dim=events.msg_dim, memory_dim=config.memory_dim,
            time_dim=config.time_dim, embedding_dim=config.embedding_dim, neighbors=config.neighbors,
            time_scale=time_scale(train))).to(self.device)
        self.model.set_edge_features(events.msg)
        # foreach: one kernel per step for all parameters instead of a Python loop over them
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, foreach=True)
        # Negatives come from the destination side of the training events (items of a
        # bipartite log, every node otherwise), as in TGN.
        self.train_index = np.flatnonzero(split.train_mask)
        tr_src, tr_dst = events.src[self.train_index], events.dst[self.train_index]
        self.neg_pool = np.unique(tr_dst if events.bipartite else np.concatenate([tr_src, tr_dst]))
        # torch.tensor copies: event arrays may be read-only views (arrow, memory maps)
        self._src = torch.tensor(events.src)
        self._dst = torch.tensor(events.dst)
        self._t = torch.tensor(events.t_float())
        self._eid = torch.tensor(events.eid)
        self.history: List[EpochLog] = []

    # ---------------------------------------------------------------------- batches
    def _batches(self, index: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
        for start in range(0, index.size, batch_size):
            yield index[start:start + batch_size]

    def _tensors(self, idx: np.ndarray):
        i = torch.from_numpy(idx)
        dev = self.device
        return self._src[i].to(dev), self._dst[i].to(dev), self._t[i].to(dev), self._eid[i].to(dev)

    def _negatives(self, rng: np.random.Generator, n: int, k: int = 1) -> torch.Tensor:
        return torch.from_numpy(self.neg_pool[rng.integers(0, self.neg_pool.size, size=(n, k))]).to(self.device)

    def forward(self, src, dst, neg, t):
        """The model's forward (a DDP-wrapped one under PAC)."""
        return self.model(src, dst, neg, t)

    def _run_batch(self, idx: np.ndarray, rng: np.random.Generator, collect: Optional[list] = None) -> float:
        """One optimiser step on the events ``idx`` (in the documented memory order)."""
        model = self.model
        src, dst, t, eid = self._tensors(idx)
        neg = self._negatives(rng, idx.size)[:, 0]
        self.optimizer.zero_grad()
        n = idx.size
        pos_logit, neg_logit, z = self.forward(src, dst, neg, t)
        loss = F.binary_cross_entropy_with_logits(pos_logit, torch.ones_like(pos_logit)) + \
            F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))
        # stored states come from the weights that produced this batch's loss (PyG's order)
        model.observe(src, dst, t, eid, z[:2 * n])
        if collect is not None:
            collect.append(z[:n].detach().cpu())
        loss.backward()
        self.optimizer.step()
        model.detach()
        return float(loss.detach())

    def _run_epoch(self, epoch: int, index: Optional[np.ndarray] = None, collect: Optional[list] = None) -> EpochLog:
        """Reset memory, then one pass over ``index`` (default: the training events).
        Source embeddings are appended to ``collect`` when given."""
        index = self.train_index if index is None else index
        model = self.model
        model.train()
        model.reset_state()
        rng = np.random.default_rng([self.config.seed, epoch, 0])  # PAC ranks use [seed, epoch, rank]
        losses = []
        start = time.perf_counter()
        with progress_bar(index.size, f"epoch {epoch}", progress=self.config.progress) as bar:
            for idx in self._batches(index, self.config.batch_size):
                losses.append(self._run_batch(idx, rng, collect))
                bar.update(idx.size)
                bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        seconds = time.perf_counter() - start
        return EpochLog(epoch=epoch, train_seconds=seconds, train_events=int(index.size),
                        train_events_per_s=index.size / max(seconds, 1e-9), loss=float(np.mean(losses)))

    @torch.no_grad()
    def stream(self, index: np.ndarray, seed: Optional[int], mrr_negatives: int = 0, collect_z: bool = False,
               desc: str = "eval") -> StreamResult:
        """Stream events without gradients, continuing from the current state.

        With ``seed`` None no negatives are scored (used to rebuild memory).
        """
        model = self.model
        model.eval()
        rng = None if seed is None else np.random.default_rng(seed)
        pos, neg, mrr, zs = [], [], [], []
        bs = self.config.batch_size
        with progress_bar(index.size, desc, progress=self.config.progress) as bar:
            for idx in self._batches(index, bs):
                src, dst, t, eid = self._tensors(idx)
                n = idx.size
                nodes, times = [src, dst], [t, t]
                if rng is not None:
                    nodes.append(self._negatives(rng, n)[:, 0])
                    times.append(t)
                z = model.embed(torch.cat(nodes), torch.cat(times))
                if rng is not None:
                    pos.append(model.score(z[:n], z[n:2 * n]).cpu())
                    neg.append(model.score(z[:n], z[2 * n:]).cpu())
                    if mrr_negatives:
                        cand = self._negatives(rng, n, mrr_negatives)
                        zc = model.embed(cand.reshape(-1), t.repeat_interleave(mrr_negatives))
                        zsrc = z[:n].repeat_interleave(mrr_negatives, dim=0)
                        mrr.append(model.score(zsrc, zc).reshape(n, mrr_negatives).cpu())
                if collect_z:
                    zs.append(z[:n].cpu())
                model.observe(src, dst, t, eid, z[:2 * n])
                bar.update(n)
        cat = (lambda xs: torch.cat(xs).numpy() if xs else None)
        return StreamResult(pos=cat(pos), neg=cat(neg), mrr_neg=cat(mrr), z_src=cat(zs))

    # ------------------------------------------------------------------- evaluation
    def _period(self, name: str) -> np.ndarray:
        sp = self.split
        if name == "val":
            return np.arange(sp.num_train, sp.num_train + sp.num_val)
        return np.arange(sp.num_train + sp.num_val, sp.num_train + sp.num_val + sp.num_test)

    def _scores(self, res: StreamResult, inductive: np.ndarray) -> Dict:
        out = {"transductive": link_metrics(res.pos, res.neg),
               "inductive": link_metrics(res.pos[inductive], res.neg[inductive])}
        if res.mrr_neg is not None:
            out["transductive"]["mrr"] = mean_reciprocal_rank(res.pos, res.mrr_neg)
        return out

    def validate_epoch(self) -> Dict:
        """Continue from the end of the training pass through the validation events."""
        res = self.stream(self._period("val"), seed=self.config.seed + 1, desc="val")
        return self._scores(res, self.split.val_inductive)

    def count_true_negatives(self, period: str) -> int:
        """Evaluation negatives that are real edges of the log (same pairs, any time)."""
        ev = self.events
        keys = np.unique(ev.src * np.int64(ev.num_nodes) + ev.dst)
        idx = self._period(period)
        rng = np.random.default_rng(self.config.seed + (1 if period == "val" else 2))
        neg = self.neg_pool[rng.integers(0, self.neg_pool.size, size=(idx.size, 1))][:, 0]
        return int(np.isin(ev.src[idx] * np.int64(ev.num_nodes) + neg, keys).sum())

    def final_evaluation(self) -> Dict:
        """Replay the stream with the current weights: rebuild memory on the training
        events, then score val and test, collecting source embeddings for node
        classification (PAC's ``--eval replay``)."""
        cfg = self.config
        self.model.reset_state()
        collect = cfg.node_classification and self.events.label is not None
        tr = self.stream(self.train_index, seed=None, collect_z=collect, desc="replay train")
        val = self.stream(self._period("val"), seed=cfg.seed + 1, collect_z=collect, desc="val")
        test = self.stream(self._period("test"), seed=cfg.seed + 2, mrr_negatives=cfg.mrr_negatives,
                           collect_z=collect, desc="test")
        out = {"val": self._scores(val, self.split.val_inductive),
               "test": self._scores(test, self.split.test_inductive),
               "negatives_true_edges": {p: self.count_true_negatives(p) for p in ("val", "test")}}
        if collect:
            nc = self._node_classification(tr.z_src, val.z_src, test.z_src)
            if nc is not None:
                out["node_classification"] = nc
        return out

    # --------------------------------------------------------------------------- fit
    def fit(self, out: Optional[Path] = None) -> Dict:
        """Train with early stopping on validation AP; report the best epoch.

        Evaluation follows TGN's protocol: after each epoch's training pass the stream goes
        on through the validation events, and when the epoch is the best so far, on through
        the test events too.  (Replaying the training events from scratch with the final
        weights, :meth:`final_evaluation`, rebuilds a memory those weights were never
        trained on, and scores much lower.)  Writes ``metrics.json``, ``curves.png`` and
        ``checkpoint.pt`` (best by val AP) into ``out`` when given.
        """
        cfg = self.config
        collect = cfg.node_classification and self.events.label is not None
        best_ap, best, best_epoch, waited = -1.0, None, None, 0
        started = time.perf_counter()
        for epoch in range(1, cfg.epochs + 1):
            z_train: Optional[list] = [] if collect else None
            log = self._run_epoch(epoch, collect=z_train)
            val = self.stream(self._period("val"), seed=cfg.seed + 1, collect_z=collect, desc="val")
            log.val = self._scores(val, self.split.val_inductive)
            self.history.append(log)
            ap = log.val["transductive"]["ap"]
            if ap > best_ap:
                best_ap, best_epoch, waited = ap, epoch, 0
                test = self.stream(self._period("test"), seed=cfg.seed + 2, mrr_negatives=cfg.mrr_negatives,
                                   collect_z=collect, desc="test")
                best = {"val": log.val, "test": self._scores(test, self.split.test_inductive)}
                if collect:
                    nc = self._node_classification(torch.cat(z_train).numpy(), val.z_src, test.z_src)
                    if nc is not None:
                        best["node_classification"] = nc
                if out is not None:
                    self.save_checkpoint(Path(out) / "checkpoint.pt", epoch, ap)
            else:
                waited += 1
                if waited >= cfg.patience:
                    break
        metrics = {
            "model": cfg.model,
            "nproc": 1,
            "config": {k: v for k, v in asdict(cfg).items() if k != "progress"},
            "data": {"num_events": len(self.events), "num_nodes": self.events.num_nodes,
                     "num_train_events": int(self.train_index.size), "num_val_events": self.split.num_val,
                     "num_test_events": self.split.num_test, "msg_dim": self.events.msg_dim,
                     "source": self.events.meta.get("source")},
            "epochs": [asdict(h) for h in self.history],
            "best_epoch": best_epoch,
            **best,
            "negatives_true_edges": {p: self.count_true_negatives(p) for p in ("val", "test")},
            "seconds": {"total": time.perf_counter() - started},
        }
        if out is not None:
            write_run(Path(out), metrics)
        return metrics

    def _node_classification(self, z_train, z_val, z_test) -> Optional[Dict]:
        idx = np.concatenate([self.train_index, self._period("val"), self._period("test")])
        z = np.concatenate([z_train, z_val, z_test])
        n_tr, n_val = self.train_index.size, self.split.num_val
        masks = [np.zeros(idx.size, bool) for _ in range(3)]
        masks[0][:n_tr] = True
        masks[1][n_tr:n_tr + n_val] = True
        masks[2][n_tr + n_val:] = True
        return node_classification_auroc(z, self.events.label[idx], *masks, seed=self.config.seed,
                                          device=str(self.device))

    def save_checkpoint(self, path: Path, epoch: int, val_ap: float) -> None:
        """Model, optimiser, epoch and RNG states, written atomically."""
        state = {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch,
            "val_ap": val_ap, "config": asdict(self.config), "model_name": self.model.name,
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        }
        with atomic_file(path) as tmp:
            torch.save(state, tmp)


def write_run(out: Path, metrics: Dict) -> None:
    """``metrics.json`` and ``curves.png`` (loss and validation AP per epoch), atomically."""
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / "metrics.json") as tmp:
        tmp.write_text(json.dumps(jsonable(metrics), indent=2) + "\n")
    plot_curves(metrics, out / "curves.png")


def plot_curves(metrics: Dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = [e["epoch"] for e in metrics["epochs"]]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    ax[0].plot(ep, [e["loss"] for e in metrics["epochs"]], "o-")
    ax[0].set_xlabel("epoch")
    ax[0].set_ylabel("training loss (BCE)")
    ax[1].plot(ep, [e["val"]["transductive"]["ap"] for e in metrics["epochs"]], "o-", label="transductive")
    ax[1].plot(ep, [e["val"]["inductive"]["ap"] for e in metrics["epochs"]], "s--", label="inductive")
    ax[1].set_xlabel("epoch")
    ax[1].set_ylabel("validation AP")
    ax[1].legend()
    for a in ax:
        a.grid(alpha=0.3)
    fig.suptitle(f"{metrics['model']} on {Path(str(metrics['data'].get('source'))).name}")
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def train(events_or_shards, model: str = "tgn", out=None, split: Optional[Split] = None,
          nproc: Optional[int] = None, sync: str = "last", shuffle: bool = True, eval: str = "assemble",
          **kwargs) -> Dict:
    """Train a temporal GNN and return its metrics (the library form of ``speed train``).

    Parameters
    ----------
    events_or_shards : Events, Shards, or path-like
        An event log (split chronologically here), a :class:`~speed.Shards` (trained on the
        merged graph, with the split stored at partitioning time), or a path to either.
    model : {"jodie", "dyrep", "tgn", "tige"}
    out : path-like, optional
        Run directory for ``metrics.json``, ``curves.png`` and ``checkpoint.pt``.
    split : Split, optional
        Overrides the chronological split of an event log.
    nproc : int, optional
        Train in parallel (PAC) with this many spawned ranks; needs shards and ``out``.
    sync, shuffle, eval : optional
        PAC's shared-node sync rule, part shuffling and evaluation mode (see
        :class:`speed.train.pac.PacConfig`).
    **kwargs
        Fields of :class:`TrainConfig` (``epochs``, ``batch_size``, ``lr``, ...).

    Returns
    -------
    dict
        The metrics written to ``metrics.json``.
    """
    if nproc is not None:
        from .launch import run_parallel
        from .pac import PacConfig

        path = events_or_shards.path if hasattr(events_or_shards, "path") else events_or_shards
        if not Path(path).is_dir():
            raise InputError("parallel training needs a shards directory from `speed partition`", path)
        return run_parallel(path, TrainConfig(model=model, **kwargs),
                            PacConfig(nproc=nproc, sync=sync, shuffle=shuffle, eval=eval), out)
    from ..data.readers import read_events
    from ..partition.shards import Shards

    config = TrainConfig(model=model, **kwargs)
    config.validate()
    src = events_or_shards
    if isinstance(src, (str, Path)):
        p = Path(src)
        src = Shards(p) if p.is_dir() else read_events(p, progress=config.progress)
    if isinstance(src, Shards):
        events, split = src.events(), (split or src.split())
    else:
        events = src
        split = split or chronological_split(events, val=config.val, test=config.test,
                                             new_node_fraction=config.new_node_fraction, seed=config.seed)
    trainer = Trainer(events, split, config)
    return trainer.fit(None if out is None else Path(out))
