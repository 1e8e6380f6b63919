"""Evaluation: link prediction (AP, AUC, MRR) and dynamic node classification (AUROC)."""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch

from ..model.modules import NodeClassifier


def grouped_ap_auc(pos: np.ndarray, neg: np.ndarray, batch_size: Optional[int] = None):
    """AP and AUC of each batch of positives against the same batch of negatives, all batches
    in one vectorised pass (scikit-learn's definitions: AP = sum over distinct thresholds of
    the recall gained times the precision there; AUC = the chance a positive outranks a
    negative, ties counting half).  scikit-learn's own functions validate their arguments on
    each call, which cost more than the arithmetic on a period of 200-event batches.

    Parameters
    ----------
    pos, neg : float64 ndarray, shape (n,) and (m,)
    batch_size : int, optional
        Events per batch: batch ``b`` holds ``pos[b*size:(b+1)*size]`` and the same slice of
        ``neg``.  None: one batch of everything.

    Returns
    -------
    ap, auc : float64 ndarray, shape (num_batches,)
        NaN for a batch without positives or without negatives.
    """
    size = max(pos.size, neg.size, 1) if batch_size is None else int(batch_size)
    num = -(-max(pos.size, neg.size) // size)
    if num == 0:
        return np.empty(0), np.empty(0)
    s = np.concatenate([pos, neg])
    y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    g = np.concatenate([np.arange(pos.size) // size, np.arange(neg.size) // size])
    order = np.lexsort((-s, g))  # by batch, then by score, highest first
    s, y, g = s[order], y[order], g[order]
    n = s.size
    start = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])  # where each (non-empty) batch begins
    k = np.repeat(np.arange(start.size), np.diff(np.r_[start, n]))
    cum = np.cumsum(y)
    tp = cum - (cum - y)[start][k]  # positives at or above each position, within its batch
    fp = np.arange(n) - start[k] + 1 - tp
    ends = np.flatnonzero(np.r_[(s[1:] != s[:-1]) | (g[1:] != g[:-1]), True])  # the last of each tie run
    ke, tpe, fpe = k[ends], tp[ends], fp[ends]
    first = np.r_[True, ke[1:] != ke[:-1]]
    dp = tpe - np.where(first, 0.0, np.r_[0.0, tpe[:-1]])  # positives in each tie run
    dn = fpe - np.where(first, 0.0, np.r_[0.0, fpe[:-1]])
    npos = np.bincount(ke, weights=dp, minlength=start.size)
    nneg = np.bincount(ke, weights=dn, minlength=start.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ap = np.bincount(ke, weights=dp * tpe / (tpe + fpe), minlength=start.size) / npos
        auc = np.bincount(ke, weights=dp * (nneg[ke] - fpe) + 0.5 * dp * dn, minlength=start.size) / (npos * nneg)
    bad = (npos == 0) | (nneg == 0)
    ap[bad], auc[bad] = np.nan, np.nan
    out_ap, out_auc = np.full(num, np.nan), np.full(num, np.nan)
    out_ap[g[start]], out_auc[g[start]] = ap, auc
    return out_ap, out_auc


# batches scored together by batch_link_metrics: a period's metrics then hold a chunk's arrays at a
# time, not the whole period's (1.5M events of a 10M log took 0.55 GiB on every rank at once)
CHUNK_BATCHES = 512


def _per_batch_ap_auc(pos: np.ndarray, neg: np.ndarray, batch_size: int):
    """:func:`grouped_ap_auc` of batches of ``batch_size``, :data:`CHUNK_BATCHES` batches at a
    time: the same figures (each batch's are computed from its own events alone), the memory of
    a chunk."""
    step = CHUNK_BATCHES * int(batch_size)
    parts = [grouped_ap_auc(pos[i:i + step], neg[i:i + step], batch_size)
             for i in range(0, max(pos.size, neg.size), step)]
    if not parts:
        return np.empty(0), np.empty(0)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def pooled_ap_auc(pos: np.ndarray, neg: np.ndarray):
    """AP and AUC of all of ``pos`` against all of ``neg`` (float64, both non-empty): the figures
    of :func:`grouped_ap_auc` with one batch, bit for bit (the same sums, in the same order), in a
    third of its memory (no batch ids, no per-event batch arrays).  Returns two floats."""
    n = pos.size + neg.size
    s = np.concatenate([pos, neg])
    order = np.argsort(-s, kind="stable")  # the order of lexsort((-s, zeros)): stable, highest first
    s = s[order]
    y = order < pos.size  # positives come first in ``s`` before the sort
    del order
    tp = np.cumsum(y, dtype=np.float64)  # positives at or above each position
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])  # the last of each tie run
    del s, y
    tpe = tp[ends]
    fpe = (ends + 1).astype(np.float64) - tpe
    del tp, ends
    dp = tpe - np.r_[0.0, tpe[:-1]]  # positives in each tie run
    dn = fpe - np.r_[0.0, fpe[:-1]]
    zero = np.zeros(tpe.size, dtype=np.int64)
    npos = np.bincount(zero, weights=dp, minlength=1)
    nneg = np.bincount(zero, weights=dn, minlength=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ap = np.bincount(zero, weights=dp * tpe / (tpe + fpe), minlength=1) / npos
        auc = np.bincount(zero, weights=dp * (nneg[0] - fpe) + 0.5 * dp * dn, minlength=1) / (npos * nneg)
    if npos[0] == 0 or nneg[0] == 0:
        return float("nan"), float("nan")
    return float(ap[0]), float(auc[0])


def link_metrics(pos: np.ndarray, neg: np.ndarray) -> Dict[str, float]:
    """AP and AUC of positives against negatives (scikit-learn's definitions, see
    :func:`grouped_ap_auc`).

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
    ap, auc = pooled_ap_auc(pos, neg)
    return {"ap": ap, "auc": auc, "count": int(pos.size)}


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
    pooled = {k: pooled[k] for k in ("ap", "auc")}
    batches = -(-pos.size // batch_size)

    def mean_over_batches(p, n):
        ap, auc = _per_batch_ap_auc(p[:batches * batch_size], n[:batches * batch_size], batch_size)
        return {"ap": float(np.mean(ap)) if batches else float("nan"),
                "auc": float(np.mean(auc)) if batches else float("nan")}

    per_batch = mean_over_batches(pos, neg)
    head = per_batch if aggregate == "per_batch" else pooled
    out = {"ap": head["ap"], "auc": head["auc"], "aggregate": aggregate, "pooled": pooled, "per_batch": per_batch,
           "count": int(pos.size), "batches": batches}
    if reference:
        p32 = torch.sigmoid(torch.from_numpy(pos.astype(np.float32))).numpy().astype(np.float64)
        n32 = torch.sigmoid(torch.from_numpy(neg.astype(np.float32))).numpy().astype(np.float64)
        out["float32"] = mean_over_batches(p32, n32)
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
        from sklearn.metrics import roc_auc_score  # labels of any balance, as scikit-learn checks them

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
