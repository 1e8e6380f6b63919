"""Evaluation: link prediction (AP, AUC, MRR) and dynamic node classification (AUROC)."""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from ..modules import NodeClassifier


def link_metrics(pos: np.ndarray, neg: np.ndarray) -> Dict[str, float]:
    """AP and AUC of positives against negatives (scikit-learn).

    Parameters
    ----------
    pos, neg : float ndarray, shape (n,) and (m,)
        Scores (logits or probabilities: both metrics only use the order).

    Returns
    -------
    dict
        ``{"ap", "auc", "count"}``; NaN metrics when a side is empty.
    """
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        return {"ap": float("nan"), "auc": float("nan"), "count": int(pos.size)}
    y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    s = np.concatenate([pos, neg])
    return {"ap": float(average_precision_score(y, s)), "auc": float(roc_auc_score(y, s)), "count": int(pos.size)}


def batch_link_metrics(pos: np.ndarray, neg: np.ndarray, batch_size: int, aggregate: str = "per_batch",
                       reference: bool = False) -> Dict:
    """AP and AUC pooled over a period and averaged over its evaluation batches.

    TGN and DyGLib score each batch of ``batch_size`` events against its negatives and report
    the mean over batches; a pooled figure ranks the whole period at once.  Both are reported;
    ``ap`` and ``auc`` are the ``aggregate`` one.

    Parameters
    ----------
    pos, neg : float ndarray, shape (n,)
        Scores of the events and of their negatives, in event order.
    batch_size : int
    aggregate : {"per_batch", "pooled"}
    reference : bool
        Also the per-batch figures as TGN's and DyGLib's code computes them: on float32 sigmoid
        probabilities, where logits beyond about +-17 saturate to 1.0 and tie (``float32``).
        ``speed``'s own figures rank the float64 logits, which never tie that way.

    Returns
    -------
    dict
        ``{"ap", "auc", "aggregate", "pooled": {"ap", "auc"}, "per_batch": {"ap", "auc"},
        "count", "batches"}`` (and ``"float32": {"ap", "auc"}`` with ``reference``); NaN
        figures when there are no events.
    """
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg, dtype=np.float64)
    pooled = link_metrics(pos, neg)
    per = [link_metrics(pos[a:a + batch_size], neg[a:a + batch_size]) for a in range(0, pos.size, batch_size)]
    per_batch = {k: float(np.mean([m[k] for m in per])) if per else float("nan") for k in ("ap", "auc")}
    pooled = {k: pooled[k] for k in ("ap", "auc")}
    head = per_batch if aggregate == "per_batch" else pooled
    out = {"ap": head["ap"], "auc": head["auc"], "aggregate": aggregate, "pooled": pooled, "per_batch": per_batch,
           "count": int(pos.size), "batches": len(per)}
    if reference:
        p32 = torch.sigmoid(torch.from_numpy(pos.astype(np.float32))).numpy()
        n32 = torch.sigmoid(torch.from_numpy(neg.astype(np.float32))).numpy()
        ref = [link_metrics(p32[a:a + batch_size], n32[a:a + batch_size]) for a in range(0, pos.size, batch_size)]
        out["float32"] = {k: float(np.mean([m[k] for m in ref])) if ref else float("nan") for k in ("ap", "auc")}
    return out


def ranking_metrics(pos: np.ndarray, negs: np.ndarray, valid: Optional[np.ndarray] = None,
                    ks=(1, 3, 10)) -> Dict[str, float]:
    """One-vs-many ranks of each positive among its own K negatives, as TGB ranks them.

    The rank is the mean of the optimistic rank (negatives scored strictly higher, + 1) and
    the pessimistic one (negatives scored higher or equal, + 1), so ties cost half.
    Filtered: a negative marked invalid (a true edge at the same time) is not counted.

    Parameters
    ----------
    pos : float ndarray, shape (n,)
    negs : float ndarray, shape (n, K)
    valid : bool ndarray, shape (n, K), optional
    ks : tuple of int
        Cut-offs of Hits@k.

    Returns
    -------
    dict
        ``{"mrr", "hits@k"..., "count"}``.
    """
    pos = np.asarray(pos, dtype=np.float64)[:, None]
    negs = np.asarray(negs, dtype=np.float64)
    valid = np.ones(negs.shape, dtype=bool) if valid is None else valid
    if pos.shape[0] == 0:
        return {"mrr": float("nan"), **{f"hits@{k}": float("nan") for k in ks}, "count": 0}
    optimistic = ((negs > pos) & valid).sum(axis=1)
    pessimistic = ((negs >= pos) & valid).sum(axis=1)
    rank = 0.5 * (optimistic + pessimistic) + 1.0
    out = {"mrr": float(np.mean(1.0 / rank))}
    out.update({f"hits@{k}": float(np.mean(rank <= k)) for k in ks})
    out["count"] = int(rank.size)
    return out


def true_edge_mask(src: np.ndarray, dst: np.ndarray, t: np.ndarray, cand: np.ndarray, num_nodes: int) -> np.ndarray:
    """Which candidate destinations are true edges at the same time: ``(src[i], cand[i, k])``
    is an event at ``t[i]`` among the given events (the period's).

    Parameters
    ----------
    src, dst : int64 ndarray, shape (n,)
    t : float ndarray, shape (n,)
    cand : int64 ndarray, shape (n, K)
    num_nodes : int

    Returns
    -------
    bool ndarray, shape (n, K)
    """
    _, t_rank = np.unique(t, return_inverse=True)
    _, group = np.unique(src * np.int64(t_rank.max() + 1) + t_rank, return_inverse=True)  # (src, time) groups
    n = np.int64(num_nodes)
    true_keys = np.unique(group * n + dst)
    return np.isin(group[:, None] * n + cand, true_keys)


def node_classification_auroc(z: np.ndarray, y: np.ndarray, train: np.ndarray, val: np.ndarray, test: np.ndarray,
                              epochs: int = 30, lr: float = 1e-3, batch_size: int = 1000, seed: int = 0,
                              device: str = "cpu") -> Optional[Dict[str, float]]:
    """Train :class:`NodeClassifier` on frozen embeddings; AUROC of the best-on-val epoch.

    Parameters
    ----------
    z : float32 ndarray, shape (E, d)
        Source-node embedding at each event's time.
    y : ndarray, shape (E,)
        Binary label of the source node at that event.
    train, val, test : bool ndarray, shape (E,)

    Returns
    -------
    dict or None
        ``{"auroc", "val_auroc", "epoch"}``, or None when a split has one class only.
    """
    y = (np.asarray(y) > 0).astype(np.float32)
    for mask in (train, val, test):
        if mask.sum() == 0 or len(np.unique(y[mask])) < 2:
            return None
    # seeded without touching the global RNG: evaluation must not move training's random streams
    cuda = [torch.device(device).index or 0] if str(device).startswith("cuda") else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        return _fit_node_classifier(z, y, train, val, test, epochs, lr, batch_size, seed, device)


def _fit_node_classifier(z, y, train, val, test, epochs, lr, batch_size, seed, device):
    g = torch.Generator().manual_seed(seed)
    clf = NodeClassifier(z.shape[1]).to(device)
    opt = torch.optim.Adam(clf.parameters(), lr=lr)
    zt = torch.from_numpy(np.ascontiguousarray(z, dtype=np.float32)).to(device)
    yt = torch.from_numpy(y).to(device)
    tr = torch.from_numpy(np.flatnonzero(train))
    pos_weight = torch.tensor(min(100.0, float((y[train] == 0).sum()) / max(1.0, float(y[train].sum()))),
                              device=device)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)

    def auroc(mask):
        clf.eval()
        with torch.no_grad():
            s = clf(zt[torch.from_numpy(np.flatnonzero(mask))]).cpu().numpy()
        clf.train()
        return float(roc_auc_score(y[mask], s))

    best = {"val_auroc": -1.0}
    for epoch in range(epochs):
        perm = tr[torch.randperm(tr.numel(), generator=g)]
        for start in range(0, perm.numel(), batch_size):
            idx = perm[start:start + batch_size].to(device)
            opt.zero_grad()
            loss_fn(clf(zt[idx]), yt[idx]).backward()
            opt.step()
        v = auroc(val)
        if v > best["val_auroc"]:
            best = {"val_auroc": v, "auroc": auroc(test), "epoch": epoch}
    return best
