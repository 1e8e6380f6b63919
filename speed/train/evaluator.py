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
from .engine import Batches
from .loader import EventStream, PlanLoader
from .evaluate import link_metrics, node_classification_auroc, ranking_metrics, true_edge_mask
from .negatives import EVAL_STRATEGIES, FixedNegatives, NegativeSampler, RandomNegatives, edge_negatives, \
    eval_seed, negative_pool

PERIODS = ("val", "test")


@dataclass
class StreamResult:
    """Scores of one evaluation pass over a period."""

    pos: Optional[np.ndarray]
    neg: Optional[np.ndarray]
    mrr_neg: Optional[np.ndarray] = None
    z_src: Optional[np.ndarray] = None


@torch.no_grad()
def stream_scores(model, stream: EventStream, index: np.ndarray, batch_size: int,
                  negatives: Optional[NegativeSampler] = None, mrr_candidates: Optional[np.ndarray] = None,
                  collect_z: bool = False, desc: str = "eval", progress: Optional[bool] = None,
                  pipeline: bool = False) -> StreamResult:
    """Stream the events ``index`` of ``stream`` through ``model`` without gradients,
    continuing from its state, scoring each against a negative edge from ``negatives``
    (its own source and a negative destination, or a whole negative edge) and, with
    ``mrr_candidates`` (int64, shape (len(index), K)), against K negative destinations.

    Negatives and candidates are queried in the step's own plan, at the event's time, so they
    see exactly what the event's endpoints see.  Without ``negatives`` nothing is scored (the
    pass only rebuilds memory).
    """
    model.eval()
    pos, neg, mrr, zs = [], [], [], []
    extra = None
    if mrr_candidates is not None:
        k = mrr_candidates.shape[1]
        first = int(index[0]) if index.size else 0
        where = np.full(int(index.max()) + 1 - first if index.size else 0, -1, dtype=np.int64)
        where[index - first] = np.arange(index.size)

        def candidates(positions, t):  # each event's K candidates at its time
            rows = mrr_candidates[where[positions - first]]
            return rows.reshape(-1), np.repeat(t, k)

        extra = candidates

    loader = PlanLoader(model, stream, Batches(index, batch_size),
                        negatives.next_edges if negatives is not None else None, pipeline=pipeline,
                        extra_queries=extra)
    with progress_bar(index.size, desc, progress=progress) as bar:
        for step in loader:
            n = len(step)
            z, states, lasts = model.compute(step.plan)
            if negatives is not None:
                pos.append(model.score(z[:n], z[n:2 * n]).cpu())
                neg_z = z[:n] if step.neg_src is None else z[3 * n:4 * n]
                neg.append(model.score(neg_z, z[2 * n:3 * n]).cpu())
            if extra is not None:
                base = 2 * n + (n if step.neg_dst is not None else 0) + (n if step.neg_src is not None else 0)
                zc = z[base:base + n * k]
                mrr.append(model.score(z[:n].repeat_interleave(k, dim=0), zc).reshape(n, k).cpu())
            if collect_z:
                zs.append(z[:n].cpu())
            model.observe(step.plan, states, lasts, z)
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
        Negative destinations per test event for the ranking metrics (0: none).
    device : torch.device
    node_classification : bool
        Report dynamic node classification where the log has labels.
    progress : bool, optional
    stream : EventStream, optional
        ``events`` as host arrays, when the caller already holds them.
    strategy : {"random", "historical", "inductive"}
        How the evaluation negatives are drawn (:data:`~speed.train.negatives.EVAL_STRATEGIES`).
    keep_test_start : bool
        Keep the model's state as the test period begins (:attr:`test_start`), for the
        checkpoint that :func:`speed.load_run` reads.

    Attributes
    ----------
    test_start : dict or None
        ``{"t": time of the last event before the test period, "state": model.backup()}``,
        from the latest test pass (with ``keep_test_start``).
    """

    def __init__(self, events: Events, split: Split, batch_size: int, seed: int, mrr_negatives: int = 0,
                 device: torch.device = torch.device("cpu"), node_classification: bool = True,
                 progress: Optional[bool] = None, stream: Optional[EventStream] = None,
                 strategy: str = "random", keep_test_start: bool = False):
        self.keep_test_start = bool(keep_test_start)
        self.test_start: Optional[dict] = None
        if strategy not in EVAL_STRATEGIES:
            raise ValueError(f"unknown evaluation negatives {strategy!r} (choose from {', '.join(EVAL_STRATEGIES)})")
        self.strategy = strategy
        self._negatives: Dict[str, tuple] = {}
        self.events, self.split = events, split
        self.batch_size, self.seed, self.mrr_negatives = int(batch_size), int(seed), int(mrr_negatives)
        self.device, self.progress = device, progress
        self.with_node_classification = bool(node_classification) and events.label is not None
        self.train_index = np.flatnonzero(split.train_mask)
        self.pool = negative_pool(events.src[self.train_index], events.dst[self.train_index], events.bipartite)
        self.event_stream = stream if stream is not None else EventStream(events)

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

    def negative_edges(self, period: str):
        """The negatives of ``period``'s events: ``(src or None, dst)``, int64 (n,) each.

        ``random``: each event's own source and a destination drawn from the training
        pool; ``historical`` / ``inductive``: whole edges (:func:`edge_negatives`).  Seeded
        by the evaluation seed, so every model and run on the same data gets the same ones.
        """
        if period not in self._negatives:
            idx = self.period(period)
            seed = eval_seed(self.seed, period)
            if self.strategy == "random":
                self._negatives[period] = (None, RandomNegatives(self.pool, seed).draw(idx.size, 1)[:, 0])
            else:
                ev, n = self.events, idx.size
                lo = int(idx[0]) if n else 0
                pools = (np.unique(ev.src), np.unique(ev.dst))
                self._negatives[period] = edge_negatives(ev.src, ev.dst, lo, lo + n, self.split.num_train,
                                                         self.strategy, [seed, EVAL_STRATEGIES.index(self.strategy)],
                                                         *pools) if n else (None, np.empty(0, dtype=np.int64))
        return self._negatives[period]

    def negatives(self, period: str) -> FixedNegatives:
        """The negatives of ``period`` as a stream handed out in event order."""
        src, dst = self.negative_edges(period)
        return FixedNegatives(dst, src)

    @property
    def stored_candidates(self) -> bool:
        """The log brought its own ranking negatives (e.g. TGB's, :func:`speed.read_tgb`)."""
        return self.events.meta.get("eval_candidates") is not None

    def ranking_candidates(self, period: str):
        """``mrr_negatives`` destinations per event of ``period`` from the training pool (seeded
        apart from the one-to-one negatives), and which of them are filtered out: true edges
        of the same source at the same time.  ``(cand, valid)``, shapes (n, K).

        A log with stored candidates (``events.meta["eval_candidates"]``, e.g. TGB's) is
        ranked against those instead: ``valid`` then marks the real ones of each padded row.
        """
        if self.stored_candidates:  # already filtered by whoever made them (TGB does), used as they are
            return self.events.meta["eval_candidates"][period]
        idx, k, ev = self.period(period), self.mrr_negatives, self.events
        cand = RandomNegatives(self.pool, [eval_seed(self.seed, period), k]).draw(idx.size, k)
        valid = ~true_edge_mask(ev.src[idx], ev.dst[idx], ev.t[idx], cand, ev.num_nodes)
        return cand, valid

    def save_negatives(self, path) -> None:
        """Write the evaluation negatives to ``path`` (``.npz``) for other tools to reuse:
        ``{period}_src`` (-1: the event's own source), ``{period}_dst``, the event positions
        ``{period}_eid``, and with ranking metrics ``test_candidates`` / ``test_valid``."""
        out = {"strategy": np.array(self.strategy), "seed": np.array(self.seed)}
        for p in PERIODS:
            src, dst = self.negative_edges(p)
            out[f"{p}_eid"] = self.events.eid[self.period(p)]
            out[f"{p}_src"] = np.full(dst.size, -1, dtype=np.int64) if src is None else src
            out[f"{p}_dst"] = dst
        if self.mrr_negatives or self.stored_candidates:
            out["test_candidates"], out["test_valid"] = self.ranking_candidates("test")
        np.savez(path, **out)

    def inductive(self, period: str) -> np.ndarray:
        return self.split.val_inductive if period == "val" else self.split.test_inductive

    # -------------------------------------------------------------------- passes
    def stream(self, model, index: np.ndarray, negatives: Optional[NegativeSampler] = None,
               mrr_candidates: Optional[np.ndarray] = None, collect_z: bool = False, desc: str = "eval") -> StreamResult:
        """Stream events of the log through ``model`` (see :func:`stream_scores`)."""
        return stream_scores(model, self.event_stream, index, self.batch_size, negatives, mrr_candidates, collect_z,
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
        ranked = period == "test" and (self.mrr_negatives or self.stored_candidates)
        cand, valid = self.ranking_candidates(period) if ranked else (None, None)
        if period == "test" and self.keep_test_start:
            first = self.split.num_train + self.split.num_val
            t = float(self.events.t_float()[first - 1]) if first else -np.inf
            self.test_start = {"t": t, "state": model.backup()}
        res = self.stream(model, self.period(period), self.negatives(period), mrr_candidates=cand,
                          collect_z=collect_z, desc=period)
        return self.scores(res, self.inductive(period), valid), res

    def scores(self, res: StreamResult, inductive: np.ndarray, valid: Optional[np.ndarray] = None) -> Dict:
        out = {"transductive": link_metrics(res.pos, res.neg),
               "inductive": link_metrics(res.pos[inductive], res.neg[inductive])}
        if res.mrr_neg is not None:
            ranks = ranking_metrics(res.pos, res.mrr_neg, valid)
            out["transductive"].update({k: v for k, v in ranks.items() if k != "count"})
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
        src, neg = self.negative_edges(period)
        src = ev.src[idx] if src is None else src
        return int(np.isin(src * np.int64(ev.num_nodes) + neg, keys).sum())

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
