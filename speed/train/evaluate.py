"""Evaluation: link prediction (AP, AUC, MRR) and dynamic node classification (AUROC)."""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from .modules import NodeClassifier


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


def mean_reciprocal_rank(pos: np.ndarray, negs: np.ndarray) -> float:
    """MRR of each positive among its own K negatives (ties count against the positive).

    Parameters
    ----------
    pos : float ndarray, shape (n,)
    negs : float ndarray, shape (n, K)
    """
    rank = 1 + (negs >= pos[:, None]).sum(axis=1)
    return float(np.mean(1.0 / rank))


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
