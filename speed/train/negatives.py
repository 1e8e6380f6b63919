"""Negative destinations for link prediction: one object per stream, seeded.

Training draws one random negative per event from the pool of the training events'
destinations (items of a bipartite log, every node otherwise), as TGN does.  Evaluation
draws from the same pool with a fixed seed per period (:func:`eval_seed`), so every model and
every run on the same data scores the same negatives.

To add a sampling strategy: subclass :class:`NegativeSampler` and implement ``draw``.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import torch

# The evaluation negatives of a period are seeded with seed + offset: one rule, used by
# every evaluation (per-epoch validation, final test, replay, the true-edge count).
EVAL_SEED_OFFSETS = {"val": 1, "test": 2}

Seed = Union[int, Sequence[int]]


def eval_seed(seed: int, period: str) -> int:
    """The seed of the evaluation negatives of ``period`` ("val" or "test")."""
    return int(seed) + EVAL_SEED_OFFSETS[period]


def train_seed(seed: int, epoch: int, rank: int = 0) -> list:
    """The seed of the training negatives of one rank in one epoch (a single process is rank 0)."""
    return [int(seed), int(epoch), int(rank)]


def negative_pool(src: np.ndarray, dst: np.ndarray, bipartite: bool) -> np.ndarray:
    """Candidate negative destinations: the distinct destinations (bipartite) or endpoints.

    Parameters
    ----------
    src, dst : int64 ndarray, shape (E,)
        The events negatives are drawn for (the training events).
    bipartite : bool

    Returns
    -------
    int64 ndarray, shape (C,), ascending
    """
    return np.unique(dst if bipartite else np.concatenate([src, dst]))


class NegativeSampler:
    """Draws negative destinations; subclasses choose how."""

    def draw(self, n: int, k: int = 1) -> np.ndarray:  # pragma: no cover - interface
        """``(n, k)`` int64 node ids."""
        raise NotImplementedError

    def draw_tensor(self, n: int, k: int = 1, device=None) -> torch.Tensor:
        return torch.from_numpy(self.draw(n, k)).to(device)

    def next_edges(self, n: int):
        """Negatives of the next ``n`` events: ``(src or None, dst)``, int64 (n,); None keeps
        each event's own source (destination corruption, as in training)."""
        return None, self.draw(n, 1)[:, 0]


class RandomNegatives(NegativeSampler):
    """Uniform draws from a pool, from one seeded stream.

    Parameters
    ----------
    pool : int64 ndarray, shape (C,)
    seed : int or sequence of int
        Seeds ``numpy.random.default_rng``.
    """

    def __init__(self, pool: np.ndarray, seed: Seed):
        if pool.size == 0:
            raise ValueError("no candidate negatives (empty pool)")
        self.pool = pool
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def draw(self, n: int, k: int = 1) -> np.ndarray:
        return self.pool[self.rng.integers(0, self.pool.size, size=(n, k))]


# ----------------------------------------------------------------- evaluation negatives
from .config import EVAL_STRATEGIES  # noqa: E402  (the names live with the config)

NEG_CHUNK = 200  # events per draw of historical/inductive negatives (DyGLib's evaluation batch)


class FixedNegatives(NegativeSampler):
    """Negative edges drawn in advance for a period, handed out in event order.

    Parameters
    ----------
    dst : int64 ndarray, shape (n,)
    src : int64 ndarray, shape (n,), optional
        Negative sources; None means each event's own source (destination corruption).
    """

    def __init__(self, dst: np.ndarray, src: Optional[np.ndarray] = None):
        self.dst, self.src, self.cursor = dst, src, 0

    def next_edges(self, n: int):
        a, self.cursor = self.cursor, self.cursor + n
        return (None if self.src is None else self.src[a:a + n]), self.dst[a:a + n]

    def draw(self, n: int, k: int = 1) -> np.ndarray:
        if k != 1:
            raise ValueError("fixed negatives hold one destination per event")
        return self.next_edges(n)[1][:, None]


def edge_negatives(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, num_train: int, strategy: str, seed,
                   src_pool: np.ndarray, dst_pool: np.ndarray):
    """Negative edges for the events ``[lo, hi)`` of a time-sorted log, after Poursafaei et al.
    (NeurIPS 2022) as DyGLib evaluates them.

    Events are taken :data:`NEG_CHUNK` at a time.  For a chunk starting at event ``a``:

    * ``historical`` -- distinct pairs seen before ``a`` (training included);
    * ``inductive`` -- distinct pairs first seen after training and before ``a``;

    never a pair of the chunk itself, drawn without replacement; when there are too few, the
    rest are random pairs (a source from ``src_pool``, a destination from ``dst_pool``) that
    are not in the chunk either.  Positions, not timestamps, mark "before", so events of
    the chunk never count as history.

    Parameters
    ----------
    src, dst : int64 ndarray, shape (E,)
        The whole log, sorted by time.
    lo, hi : int
        The period.
    num_train : int
        Training events are ``[0, num_train)``.
    strategy : {"historical", "inductive"}
    seed : int or sequence of int
    src_pool, dst_pool : int64 ndarray
        Candidate sources and destinations of random pairs.

    Returns
    -------
    neg_src, neg_dst : int64 ndarray, shape (hi - lo,)
    """
    if strategy not in ("historical", "inductive"):
        raise ValueError(f"unknown negative strategy {strategy!r}")
    rng = np.random.default_rng(seed)
    base = np.int64(max(int(src.max()), int(dst.max())) + 1)
    keys = src[:hi] * base + dst[:hi]
    uniq, first = np.unique(keys, return_index=True)
    order = np.argsort(first, kind="stable")
    pair_keys, pair_first = uniq[order], first[order]  # distinct pairs by first appearance
    start_inductive = int(np.searchsorted(pair_first, num_train))
    out_src = np.empty(hi - lo, dtype=np.int64)
    out_dst = np.empty(hi - lo, dtype=np.int64)
    for a in range(lo, hi, NEG_CHUNK):
        b = min(hi, a + NEG_CHUNK)
        size = b - a
        batch = np.unique(keys[a:b])
        end = int(np.searchsorted(pair_first, a))  # pairs first seen before the chunk
        begin = 0 if strategy == "historical" else min(start_inductive, end)
        avail = end - begin
        if avail <= 2 * size:
            cand = pair_keys[begin:end][rng.permutation(avail)]
        else:
            cand = pair_keys[begin + rng.choice(avail, size=2 * size, replace=False)]
        cand = cand[~np.isin(cand, batch)]
        if cand.size > size:
            cand = cand[:size]
        chosen = np.empty(size, dtype=np.int64)
        chosen[:cand.size] = cand
        filled = cand.size
        for attempt in range(64):  # random pairs, not in the chunk
            if filled == size:
                break
            need = size - filled
            r = src_pool[rng.integers(0, src_pool.size, need)] * base + dst_pool[rng.integers(0, dst_pool.size, need)]
            if attempt < 63:  # a tiny graph may have no pair outside the chunk: then take any
                r = r[~np.isin(r, batch)]
            chosen[filled:filled + r.size] = r
            filled += r.size
        out_src[a - lo:b - lo], out_dst[a - lo:b - lo] = chosen // base, chosen % base
    return out_src, out_dst
