"""numba kernels for training-time graph structure: the recent-neighbour ring buffers.

Each node keeps its ``k`` most recent interactions in a ring: ``nbr[i, slot]``,
``nbr_t[i, slot]``, ``nbr_e[i, slot]``; ``head[i]`` is the next slot to write and
``count[i]`` how many slots are filled (at most ``k``).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def ring_insert(src, dst, t, eid, nbr, nbr_t, nbr_e, head, count, undirected):
    """Append events in order: ``dst`` to the ring of ``src`` (and ``src`` to ``dst``'s when
    ``undirected``).  Older entries are overwritten once a ring is full."""
    k = nbr.shape[1]
    for e in range(src.shape[0]):
        for side in range(2 if undirected else 1):
            a = src[e] if side == 0 else dst[e]
            b = dst[e] if side == 0 else src[e]
            if side == 1 and a == b:
                continue  # a self-loop is one interaction, not two
            h = head[a]
            nbr[a, h] = b
            nbr_t[a, h] = t[e]
            nbr_e[a, h] = eid[e]
            head[a] = (h + 1) % k
            if count[a] < k:
                count[a] += 1


@numba.njit(cache=True, nogil=True)
def ring_query(nodes, times, nbr, nbr_t, nbr_e, head, count, out_n, out_t, out_e, out_mask):
    """For each (node, time), the stored neighbours with ``t < time``, most recent first.

    Outputs are (B, k) arrays filled left to right; ``out_mask`` marks real entries and
    unused slots keep node 0, time 0, eid -1.
    """
    k = nbr.shape[1]
    for b in range(nodes.shape[0]):
        i = nodes[b]
        q = times[b]
        filled = 0
        for r in range(count[i]):
            slot = (head[i] - 1 - r) % k
            if nbr_t[i, slot] < q:
                out_n[b, filled] = nbr[i, slot]
                out_t[b, filled] = nbr_t[i, slot]
                out_e[b, filled] = nbr_e[i, slot]
                out_mask[b, filled] = True
                filled += 1
        for r in range(filled, k):
            out_n[b, r] = 0
            out_t[b, r] = 0.0
            out_e[b, r] = -1
            out_mask[b, r] = False
