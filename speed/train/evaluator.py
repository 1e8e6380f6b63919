"""Full-graph evaluation of a model: continue its state through the val and test events.

:class:`Evaluator` owns the evaluation protocol (DESIGN §5): the periods of the split, the
seeded negatives of each period (:func:`~speed.train.negatives.eval_seed`), the scores
(transductive and inductive AP/AUC, optional MRR), the count of negatives that are real
edges, dynamic node classification, and :meth:`Evaluator.replay`.

TGN's protocol is to *continue* the stream: after an epoch's training pass the model's
memory goes on through the validation events, and through the test events after those.
The single-process trainer evaluates its own model this way; a PAC rank 0 first loads the
memory gathered from the ranks into a full-graph model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np
import torch

from .._util import progress_bar
from ..data.events import Events
from ..data.split import Split
from .engine import Batches, EventTensors
from .evaluate import link_metrics, mean_reciprocal_rank, node_classification_auroc
from .negatives import NegativeSampler, RandomNegatives, eval_seed, negative_pool

PERIODS = ("val", "test")


@dataclass
class StreamResult:
    """Scores of one evaluation pass over a period."""

    pos: Optional[np.ndarray]
    neg: Optional[np.ndarray]
    mrr_neg: Optional[np.ndarray] = None
    z_src: Optional[np.ndarray] = None


@torch.no_grad()
def stream_scores(model, tensors: EventTensors, index: np.ndarray, batch_size: int,
                  negatives: Optional[NegativeSampler] = None, mrr_negatives: int = 0, collect_z: bool = False,
                  desc: str = "eval", progress: Optional[bool] = None) -> StreamResult:
    """Stream the events ``index`` of ``tensors`` through ``model`` without gradients,
    continuing from its state, scoring each against negatives from ``negatives``.

    Without ``negatives`` nothing is scored (the pass only rebuilds memory).
    """
    model.eval()
    dev = tensors.device
    pos, neg, mrr, zs = [], [], [], []
    with progress_bar(index.size, desc, progress=progress) as bar:
        for idx, _ in Batches(index, batch_size):
            src, dst, t, eid = tensors.batch(idx)
            n = idx.size
            nodes, times = [src, dst], [t, t]
            if negatives is not None:
                nodes.append(negatives.draw_tensor(n, 1, dev)[:, 0])
                times.append(t)
            z = model.embed(torch.cat(nodes), torch.cat(times))
            if negatives is not None:
                pos.append(model.score(z[:n], z[n:2 * n]).cpu())
                neg.append(model.score(z[:n], z[2 * n:]).cpu())
                if mrr_negatives:
                    cand = negatives.draw_tensor(n, mrr_negatives, dev)
                    zc = model.embed(cand.reshape(-1), t.repeat_interleave(mrr_negatives))
                    zsrc = z[:n].repeat_interleave(mrr_negatives, dim=0)
                    mrr.append(model.score(zsrc, zc).reshape(n, mrr_negatives).cpu())
            if collect_z:
                zs.append(z[:n].cpu())
            model.observe(src, dst, t, eid, z[:2 * n])
            bar.update(n)
    cat = (lambda xs: torch.cat(xs).numpy() if xs else None)
    return StreamResult(pos=cat(pos), neg=cat(neg), mrr_neg=cat(mrr), z_src=cat(zs))


class Evaluator:
    """Evaluate models on the full event log.

    Parameters
    ----------
    events : Events
        The whole log, global node ids.
    split : Split
    batch_size : int
    seed : int
        Base seed of the evaluation negatives.
    mrr_negatives : int
        Negatives per test event for MRR (0: no MRR).
    device : torch.device
    node_classification : bool
        Report dynamic node classification where the log has labels.
    progress : bool, optional
    tensors : EventTensors, optional
        ``events`` as tensors, when the caller already holds them.
    """

    def __init__(self, events: Events, split: Split, batch_size: int, seed: int, mrr_negatives: int = 0,
                 device: torch.device = torch.device("cpu"), node_classification: bool = True,
                 progress: Optional[bool] = None, tensors: Optional[EventTensors] = None):
        self.events, self.split = events, split
        self.batch_size, self.seed, self.mrr_negatives = int(batch_size), int(seed), int(mrr_negatives)
        self.device, self.progress = device, progress
        self.with_node_classification = bool(node_classification) and events.label is not None
        self.train_index = np.flatnonzero(split.train_mask)
        self.pool = negative_pool(events.src[self.train_index], events.dst[self.train_index], events.bipartite)
        self.stream_tensors = tensors if tensors is not None else EventTensors(events, device)

    # ------------------------------------------------------------------ periods
    def period(self, name: str) -> np.ndarray:
        """Event positions of ``"train"`` (masked training events), ``"val"`` or ``"test"``."""
        sp = self.split
        if name == "train":
            return self.train_index
        if name == "val":
            return np.arange(sp.num_train, sp.num_train + sp.num_val)
        if name == "test":
            return np.arange(sp.num_train + sp.num_val, sp.num_train + sp.num_val + sp.num_test)
        raise ValueError(f"unknown period {name!r}")

    def negatives(self, period: str) -> RandomNegatives:
        """The seeded negative stream of an evaluation period."""
        return RandomNegatives(self.pool, eval_seed(self.seed, period))

    def inductive(self, period: str) -> np.ndarray:
        return self.split.val_inductive if period == "val" else self.split.test_inductive

    # -------------------------------------------------------------------- passes
    def stream(self, model, index: np.ndarray, negatives: Optional[NegativeSampler] = None, mrr_negatives: int = 0,
               collect_z: bool = False, desc: str = "eval") -> StreamResult:
        """Stream events of the log through ``model`` (see :func:`stream_scores`)."""
        return stream_scores(model, self.stream_tensors, index, self.batch_size, negatives, mrr_negatives, collect_z,
                             desc, self.progress)

    def evaluate(self, model, period: str, collect_z: bool = False):
        """Continue ``model`` through ``period`` ("val" or "test") with its seeded negatives.

        Returns
        -------
        scores : dict
            ``{"transductive": {...}, "inductive": {...}}`` (AP, AUC, count; MRR on test
            when ``mrr_negatives``).
        result : StreamResult
        """
        k = self.mrr_negatives if period == "test" else 0
        res = self.stream(model, self.period(period), self.negatives(period), mrr_negatives=k,
                          collect_z=collect_z, desc=period)
        return self.scores(res, self.inductive(period)), res

    def scores(self, res: StreamResult, inductive: np.ndarray) -> Dict:
        out = {"transductive": link_metrics(res.pos, res.neg),
               "inductive": link_metrics(res.pos[inductive], res.neg[inductive])}
        if res.mrr_neg is not None:
            out["transductive"]["mrr"] = mean_reciprocal_rank(res.pos, res.mrr_neg)
        return out

    def prepare(self, model) -> None:
        """Make a model whose memory was loaded (not streamed) ready to continue: its
        neighbour sampler gets the training events."""
        e, tr = self.events, self.train_index
        model.insert_neighbors(e.src[tr], e.dst[tr], e.t_float()[tr], e.eid[tr])

    def replay(self, model) -> Dict:
        """Rebuild ``model``'s state from scratch on the training events with its current
        weights, then score val and test (and node classification where labels exist)."""
        model.reset_state()
        collect = self.with_node_classification
        tr = self.stream(model, self.train_index, collect_z=collect, desc="replay train")
        val, val_res = self.evaluate(model, "val", collect_z=collect)
        test, test_res = self.evaluate(model, "test", collect_z=collect)
        out = {"val": val, "test": test}
        if collect:
            nc = self.node_classification(tr.z_src, val_res.z_src, test_res.z_src)
            if nc is not None:
                out["node_classification"] = nc
        return out

    # ---------------------------------------------------------------- extras
    def count_true_negatives(self, period: str) -> int:
        """Evaluation negatives of ``period`` that are real edges of the log (same pair, any time)."""
        ev = self.events
        keys = np.unique(ev.src * np.int64(ev.num_nodes) + ev.dst)
        idx = self.period(period)
        neg = self.negatives(period).draw(idx.size, 1)[:, 0]
        return int(np.isin(ev.src[idx] * np.int64(ev.num_nodes) + neg, keys).sum())

    def true_negative_counts(self) -> Dict[str, int]:
        return {p: self.count_true_negatives(p) for p in PERIODS}

    def node_classification(self, z_train, z_val, z_test) -> Optional[Dict]:
        """AUROC of a classifier on frozen source embeddings of train/val/test events."""
        idx = np.concatenate([self.train_index, self.period("val"), self.period("test")])
        z = np.concatenate([z_train, z_val, z_test])
        n_tr, n_val = self.train_index.size, self.split.num_val
        masks = [np.zeros(idx.size, bool) for _ in range(3)]
        masks[0][:n_tr] = True
        masks[1][n_tr:n_tr + n_val] = True
        masks[2][n_tr + n_val:] = True
        return node_classification_auroc(z, self.events.label[idx], *masks, seed=self.seed, device=str(self.device))
