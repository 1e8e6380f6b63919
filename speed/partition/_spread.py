"""numba kernels of the shared–shared spread (:mod:`speed.partition.balance`).

An event between two shared nodes may train on any part (both nodes are in every part), so
after partitioning these events are the slack that evens out the parts' training events.
"""

from __future__ import annotations

import numba
import numpy as np

from ._kernels import SHARED


@numba.njit(cache=True)
def assigned_counts(src, dst, node_parts, event_part, base, ss):
    """Add to ``base[p]`` (int64, (P,)) the events assigned to ``p`` that are not shared–shared,
    and to ``ss[p]`` the shared–shared events assigned to ``p`` (``ss[P]``: those no part took)."""
    num_parts = base.shape[0]
    for e in range(src.shape[0]):
        k = event_part[e]
        if node_parts[src[e]] == SHARED and node_parts[dst[e]] == SHARED:
            ss[k if k >= 0 else num_parts] += 1
        elif k >= 0:
            base[k] += 1


@numba.njit(cache=True)
def spread_shared(src, dst, node_parts, event_part, ss, keep, seen, need):
    """Move shared–shared events, in place, so that part ``p`` keeps ``keep[p]`` of its ``ss[p]``
    and receives ``need[p]`` more.

    A part keeps an evenly spaced subset of its events (the ``s``-th is kept when
    ``floor((s + 1) keep / ss)`` steps up), so what stays is spread over the whole period; each
    moved event goes to the part with the largest remaining need (lowest id on ties).
    ``seen`` (int64, (P,), zero at the start) carries the counts between chunks.
    """
    num_parts = keep.shape[0]
    for e in range(src.shape[0]):
        if node_parts[src[e]] != SHARED or node_parts[dst[e]] != SHARED:
            continue
        k = event_part[e]
        if k >= 0:
            s = seen[k]
            seen[k] = s + 1
            if (s + 1) * keep[k] // ss[k] > s * keep[k] // ss[k]:
                continue
        best = 0
        for q in range(1, num_parts):
            if need[q] > need[best]:
                best = q
        need[best] -= 1
        event_part[e] = best
