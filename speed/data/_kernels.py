"""numba kernels for the data layer: arrays and scalars in, no hidden state."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def count_duplicate_events(src, dst, t, num_nodes):
    """Count events that repeat an earlier (src, dst, t) triple.

    ``t`` must be sorted; equal-time runs are sorted locally, so the cost is
    O(E) for the usual short runs.

    Parameters
    ----------
    src, dst : int64 ndarray, shape (E,)
    t : float64 or int64 ndarray, shape (E,), non-decreasing
    num_nodes : int
        Ids are below it; ``src * num_nodes + dst`` is a unique pair key.

    Returns
    -------
    int
    """
    n = src.shape[0]
    dup = 0
    start = 0
    while start < n:
        end = start + 1
        while end < n and t[end] == t[start]:
            end += 1
        if end - start > 1:
            keys = src[start:end] * num_nodes + dst[start:end]
            keys = np.sort(keys)
            for k in range(1, keys.shape[0]):
                if keys[k] == keys[k - 1]:
                    dup += 1
        start = end
    return dup


@numba.njit(cache=True)
def first_unsorted(t):
    """Index of the first element smaller than its predecessor, or -1."""
    for k in range(1, t.shape[0]):
        if t[k] < t[k - 1]:
            return k
    return -1


@numba.njit(cache=True)
def compact_dense(src, dst, max_id):
    """Renumber non-negative int ids ``<= max_id`` to ``0..N-1`` in increasing id order.

    One pass to mark, a prefix sum, one pass to map: O(E + max_id), no sort.

    Parameters
    ----------
    src : int64 ndarray, shape (E,)
    dst : int64 ndarray, shape (F,)
        May differ in length from ``src`` (one side of a bipartite log is compacted
        alone by passing a one-element ``dst`` taken from ``src``).
    max_id : int

    Returns
    -------
    new_src, new_dst : int64 ndarray, shapes (E,) and (F,)
    ids : int64 ndarray, shape (N,)
        Original id of each compact id.
    """
    mapping = np.zeros(max_id + 1, dtype=np.int64)
    for e in range(src.shape[0]):
        mapping[src[e]] = 1
    for e in range(dst.shape[0]):
        mapping[dst[e]] = 1
    n = 0
    for v in range(max_id + 1):
        if mapping[v]:
            mapping[v] = n
            n += 1
        else:
            mapping[v] = -1
    ids = np.empty(n, dtype=np.int64)
    for v in range(max_id + 1):
        if mapping[v] >= 0:
            ids[mapping[v]] = v
    new_src = np.empty(src.shape[0], dtype=np.int64)
    new_dst = np.empty(dst.shape[0], dtype=np.int64)
    for e in range(src.shape[0]):
        new_src[e] = mapping[src[e]]
    for e in range(dst.shape[0]):
        new_dst[e] = mapping[dst[e]]
    return new_src, new_dst, ids
