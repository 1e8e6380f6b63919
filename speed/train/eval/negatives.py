"""The evaluation negatives of the protocols.

Evaluation negatives follow the reference code of each protocol (:mod:`speed.train.protocols`):

* :func:`random_destinations` -- TGN's ``RandEdgeSampler`` and DyGLib's ``random``: each event's
  own source and a destination drawn uniformly from the distinct destinations of the data;
* :func:`edge_negatives` -- DyGLib's ``historical`` and ``inductive`` (after Poursafaei et al.,
  NeurIPS 2022), decided by time per evaluation batch;
* :func:`random_candidates`, :func:`hist_rnd_candidates` -- ranking candidates, distinct per
  event: uniformly random, or TGB's ``hist_rnd``.

They are seeded per period (:func:`eval_seed`), so every model and run on the same data scores
the same negatives.  Training negatives are drawn in :mod:`speed.train.step.negatives`.

:data:`STRATEGIES` maps each evaluation strategy (``config.EVAL_STRATEGIES``, ``--eval-negatives``)
to its drawing: a new strategy is its name there, its function here, and the protocol rows that
offer it (``Protocol.strategies``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from ..step.negatives import NegativeSampler, RandomNegatives

# The evaluation negatives of a period are seeded with seed + offset: one rule, used by
# every evaluation (per-epoch validation, final test, replay, the true-edge count).
EVAL_SEED_OFFSETS = {"val": 1, "test": 2}


def eval_seed(seed: int, period: str) -> int:
    """The seed of the evaluation negatives of ``period`` ("val" or "test")."""
    return int(seed) + EVAL_SEED_OFFSETS[period]


# ----------------------------------------------------------------- evaluation negatives


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


def random_destinations(dst_pool: np.ndarray, n: int, seed) -> np.ndarray:
    """``n`` destinations drawn uniformly, with replacement, from ``dst_pool`` (TGN's and DyGLib's
    random evaluation negatives; each event keeps its own source).  int64, shape (n,)."""
    return RandomNegatives(dst_pool, seed).draw(n, 1)[:, 0]


def _pair_keys(src, dst, base):
    return np.asarray(src, dtype=np.int64) * base + np.asarray(dst, dtype=np.int64)


def _fill(rng, need: int, src_pool: np.ndarray, dst_pool: np.ndarray, batch_keys: np.ndarray, base):
    """``need`` pairs from the possible pairs (``src_pool`` x ``dst_pool``) that are not pairs of
    the batch: distinct when there are enough of them, else with repetition (DyGLib's
    ``random_sample_with_collision_check``; where the batch holds every possible pair, which
    DyGLib refuses, any pair).  Returns keys, int64 (need,)."""
    if need == 0:
        return np.empty(0, dtype=np.int64)
    n_possible = src_pool.size * dst_pool.size
    if n_possible <= max(64 * need, 1 << 16):  # small enough to list the complement exactly
        every = (src_pool[:, None] * base + dst_pool[None, :]).ravel()
        allk = every[~np.isin(every, batch_keys)]
        allk = allk if allk.size else every
        return allk[rng.choice(allk.size, size=need, replace=allk.size < need)]
    out = np.empty(0, dtype=np.int64)  # rejection: the complement is most of a large set
    while out.size < need:
        m = 2 * (need - out.size) + 16
        k = src_pool[rng.integers(0, src_pool.size, m)] * base + dst_pool[rng.integers(0, dst_pool.size, m)]
        k = k[~np.isin(k, batch_keys)]
        k = k[np.sort(np.unique(k, return_index=True)[1])]  # distinct, in draw order
        out = np.concatenate([out, k[~np.isin(k, out)]])
    return out[:need]


def edge_negatives(src: np.ndarray, dst: np.ndarray, t: np.ndarray, batch_size: int, strategy: str, seed,
                   src_pool: np.ndarray, dst_pool: np.ndarray, ref, last_observed: float):
    """DyGLib's ``historical`` and ``inductive`` negative edges for the events ``(src, dst, t)``
    (time-sorted), one evaluation batch of ``batch_size`` events at a time.

    For a batch with times ``[start, end]`` (``utils.py:NegativeEdgeSampler`` in DyGLib):

    * historical edges: the distinct pairs of ``ref`` with a time ``<= start``;
    * the batch's edges: the distinct pairs of ``ref`` with a time in ``[start, end]`` -- by time,
      so an edge simultaneous with the batch is never a negative of it, wherever the batch
      boundaries fall;
    * ``historical``: the historical edges minus the batch's; ``inductive``: also minus the
      edges observed up to ``last_observed`` (the end of training for validation, of
      validation for the test);
    * when there are at least as many as events, that many are drawn without replacement;
      otherwise all of them, plus random pairs (``src_pool`` x ``dst_pool``) that are not pairs
      of the batch's events (distinct when possible).

    Parameters
    ----------
    src, dst, t : ndarray, shape (n,)
        The events to find negatives for.
    batch_size : int
        Events per evaluation batch.
    strategy : {"historical", "inductive"}
    seed : int or sequence of int
    src_pool, dst_pool : int64 ndarray
        Distinct sources and destinations of the sampler's data.
    ref : tuple of 3 ndarrays ``(src, dst, t)``
        The sampler's data, time-sorted (DyGLib: the whole log, or the new-node events of a
        period for the new-node pass).
    last_observed : float

    Returns
    -------
    neg_src, neg_dst : int64 ndarray, shape (n,)
    """
    if strategy not in ("historical", "inductive"):
        raise ValueError(f"unknown negative strategy {strategy!r}")
    rng = np.random.default_rng(seed)
    r_src, r_dst, r_t = (np.asarray(x) for x in ref)
    r_t = r_t.astype(np.float64)
    t = np.asarray(t, dtype=np.float64)
    base = np.int64(max(int(np.max(r_src, initial=0)), int(np.max(r_dst, initial=0)), int(src_pool.max()),
                        int(dst_pool.max()), int(np.max(src, initial=0)), int(np.max(dst, initial=0))) + 1)
    keys = _pair_keys(r_src, r_dst, base)
    uniq, first = np.unique(keys, return_index=True)
    order = np.argsort(first, kind="stable")
    pair_keys, pair_first_t = uniq[order], r_t[first[order]]  # distinct pairs by first appearance
    observed = int(np.searchsorted(pair_first_t, last_observed, side="right"))
    n = src.shape[0]
    out = np.empty(n, dtype=np.int64)
    for a in range(0, n, batch_size):
        b = min(n, a + batch_size)
        size, start, end = b - a, t[a], t[b - 1]
        lo = int(np.searchsorted(r_t, start, side="left"))
        hi = int(np.searchsorted(r_t, end, side="right"))
        current = np.unique(keys[lo:hi])
        until = int(np.searchsorted(pair_first_t, start, side="right"))  # first seen at or before start
        begin = 0 if strategy == "historical" else min(observed, until)
        cand = pair_keys[begin:until]
        cand = cand[~np.isin(cand, current)]
        if cand.size >= size:
            chosen = cand[rng.choice(cand.size, size=size, replace=False)]
        else:
            batch_keys = np.unique(_pair_keys(src[a:b], dst[a:b], base))
            chosen = np.concatenate([_fill(rng, size - cand.size, src_pool, dst_pool, batch_keys, base), cand])
        out[a:b] = chosen
    return out // base, out % base


def _distinct_from(rng, pool: np.ndarray, k: int, excluded: np.ndarray) -> np.ndarray:
    """Up to ``k`` distinct values of ``pool`` not in ``excluded``: ``k`` drawn without
    replacement, or every remaining one, each once, when fewer remain (TGB's generator at
    commit 997ad91; none at all is a valid answer, not an error)."""
    m = min(pool.size, k + excluded.size)
    cand = pool[rng.choice(pool.size, size=m, replace=False)] if m else pool[:0]
    cand = cand[~np.isin(cand, excluded)][:k]
    if cand.size < k:  # the draw hit too many excluded values: take from what remains
        rest = pool[~np.isin(pool, excluded)]
        cand = rest[rng.permutation(rest.size)[:k]]
    return cand


def _padded(rows, n: int, k: int, pad: np.ndarray):
    """Ragged candidate rows as ``(cand, valid)``, shapes (n, k): a short row is filled with
    ``pad[i]`` (the event's own destination, scored but never ranked) marked invalid."""
    cand = np.repeat(np.asarray(pad, dtype=np.int64)[:, None], k, axis=1)
    valid = np.zeros((n, k), dtype=bool)
    for i, row in enumerate(rows):
        cand[i, :row.size] = row
        valid[i, :row.size] = True
    return cand, valid


def _same_source_time(src: np.ndarray, dst: np.ndarray, t: np.ndarray):
    """For each event, the destinations of the events with its source and time (TGB's filter):
    ``(group, members)``, ``members[group[i]]`` an int64 array."""
    _, t_rank = np.unique(t, return_inverse=True)
    key = src.astype(np.int64) * np.int64(t_rank.max() + 1 if t_rank.size else 1) + t_rank
    uniq, group = np.unique(key, return_inverse=True)
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(uniq.size + 1))
    return group, [dst[order[bounds[g]:bounds[g + 1]]] for g in range(uniq.size)]


def random_candidates(src: np.ndarray, dst: np.ndarray, t: np.ndarray, dst_pool: np.ndarray, k: int,
                      seed):
    """Up to ``k`` distinct ranking candidates per event from ``dst_pool``, none a true
    destination of the event's source at the event's time (TGB's ``rnd`` strategy): fewer when
    fewer remain, as TGB gives.  ``(cand, valid)``: int64 and bool, shape (n, k); a row's
    invalid entries are padding."""
    rng = np.random.default_rng(seed)
    group, members = _same_source_time(src, dst, t)
    return _padded([_distinct_from(rng, dst_pool, k, members[g]) for g in group], src.size, k, dst)


def hist_rnd_candidates(src: np.ndarray, dst: np.ndarray, t: np.ndarray, dst_pool: np.ndarray, k: int, seed,
                        history, hist_ratio: float = 0.5):
    """TGB's ``hist_rnd`` ranking candidates: per event, up to ``int(k * hist_ratio)`` distinct
    destinations its source met in ``history`` (TGB: the training events), then random distinct
    destinations from ``dst_pool`` outside those, all excluding the true destinations of the
    source at the event's time (``linkproppred/negative_generator.py``).  Fewer when fewer
    remain, each once, as TGB gives.  ``(cand, valid)``: int64 and bool, shape (n, k)."""
    rng = np.random.default_rng(seed)
    h_src, h_dst = (np.asarray(x, dtype=np.int64) for x in history)
    seen_keys = np.unique(h_src * np.int64(max(int(h_dst.max(initial=0)), int(dst_pool.max())) + 1) + h_dst)
    base = np.int64(max(int(h_dst.max(initial=0)), int(dst_pool.max())) + 1)
    seen_src, seen_dst = seen_keys // base, seen_keys % base
    bounds = np.searchsorted(seen_src, np.arange(int(max(src.max(initial=0), seen_src.max(initial=0))) + 2))
    group, members = _same_source_time(src, dst, t)
    max_hist = int(k * hist_ratio)
    rows = []
    for i in range(src.size):
        true = members[group[i]]
        s = int(src[i])
        seen = seen_dst[bounds[s]:bounds[s + 1]] if s + 1 < bounds.size else seen_dst[:0]
        hist = seen[~np.isin(seen, true)]
        num_hist = min(max_hist, hist.size)
        chosen = hist[rng.choice(hist.size, size=num_hist, replace=False)] if num_hist else hist[:0]
        rows.append(np.concatenate([chosen, _distinct_from(rng, dst_pool, k - num_hist,
                                                           np.concatenate([true, seen]))]))
    return _padded(rows, src.size, k, dst)


@dataclass(frozen=True)
class Period:
    """What a strategy draws a period's negatives from.

    Attributes
    ----------
    src, dst, t : ndarray, shape (n,)
        The events to find negatives for, time-sorted.
    batch_size : int
        Events per evaluation batch.
    seed : sequence of int
        The period's seed (:func:`eval_seed`, and whether it is the new-node pass).
    src_pool, dst_pool : int64 ndarray
        Distinct sources and destinations of the sampler's data.
    ref : tuple of 3 ndarrays
        The sampler's data ``(src, dst, t)``, time-sorted.
    last_observed : float
        The end of what the model has observed before the period.
    """

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    batch_size: int
    seed: object
    src_pool: np.ndarray
    dst_pool: np.ndarray
    ref: tuple
    last_observed: float


def _random(p: Period) -> Tuple[Optional[np.ndarray], np.ndarray]:
    return None, random_destinations(p.dst_pool, p.src.size, p.seed)


def _edges(strategy: str) -> Callable[[Period], Tuple[np.ndarray, np.ndarray]]:
    def draw(p: Period):
        return edge_negatives(p.src, p.dst, p.t, p.batch_size, strategy, p.seed, p.src_pool, p.dst_pool, p.ref,
                              p.last_observed)
    return draw


# Each evaluation strategy: ``draw(period) -> (neg_src or None, neg_dst)``, int64 (n,) each (None:
# each event keeps its own source).
STRATEGIES: Dict[str, Callable[[Period], Tuple[Optional[np.ndarray], np.ndarray]]] = {
    "random": _random, "historical": _edges("historical"), "inductive": _edges("inductive")}
