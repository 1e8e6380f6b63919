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
