"""numba kernels of training-time graph structure: recent-neighbour rings and plan building.

Each node keeps its ``k`` most recent interactions in a ring: ``nbr[i, slot]``,
``nbr_t[i, slot]``, ``nbr_e[i, slot]``; ``head[i]`` is the next slot to write and
``count[i]`` how many slots are filled (at most ``k``).  Events reach the rings through a
time-sorted *held* buffer and enter them only when a query at a strictly later time asks, so a
ring never holds an event at or after the time of the query it answers.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _ring_put(a, b, t, e, nbr, nbr_t, nbr_e, head, count):
    k = nbr.shape[1]
    h = head[a]
    nbr[a, h] = b
    nbr_t[a, h] = t
    nbr_e[a, h] = e
    head[a] = (h + 1) % k
    if count[a] < k:
        count[a] += 1


@numba.njit(cache=True, nogil=True)
def ring_flush(hold_src, hold_dst, hold_t, hold_e, lo, hi, before, nbr, nbr_t, nbr_e, head, count, undirected):
    """Insert the held events ``[lo, hi)`` (time-sorted) with ``t < before`` into the rings,
    in order; returns the position of the first event left held."""
    j = lo
    while j < hi and hold_t[j] < before:
        a = hold_src[j]
        b = hold_dst[j]
        _ring_put(a, b, hold_t[j], hold_e[j], nbr, nbr_t, nbr_e, head, count)
        if undirected and a != b:  # a self-loop is one interaction, not two
            _ring_put(b, a, hold_t[j], hold_e[j], nbr, nbr_t, nbr_e, head, count)
        j += 1
    return j


@numba.njit(cache=True, nogil=True)
def ring_sample(nodes, times, order, hold_src, hold_dst, hold_t, hold_e, lo, hi, nbr, nbr_t, nbr_e, head, count,
                undirected, out_n, out_t, out_e, out_mask):
    """Answer queries ``(nodes[b], times[b])`` in the time order ``order``: before each, the held
    events strictly earlier than its time enter the rings; then the ring's entries with
    ``t < time`` are its neighbours, most recent first.  Returns the new held start.

    Outputs are (B, k) arrays filled left to right; ``out_mask`` marks real entries and unused
    slots keep node 0, time 0, eid -1.  A query earlier than an answered one (DyRep's
    message-time queries) only reads: entries at or after its time are skipped.
    """
    k = nbr.shape[1]
    j = lo
    for a in range(order.shape[0]):
        b = order[a]
        q = times[b]
        if j < hi and hold_t[j] < q:
            j = ring_flush(hold_src, hold_dst, hold_t, hold_e, j, hi, q, nbr, nbr_t, nbr_e, head, count, undirected)
        i = nodes[b]
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
    return j


@numba.njit(cache=True, nogil=True)
def pending_counts(nodes, times, start, cnt, pend_t):
    """For each query ``(nodes[b], times[b])``, how many of the node's pending events (a
    time-sorted segment ``pend_t[start[i]:start[i] + cnt[i]]``) are strictly earlier."""
    out = np.empty(nodes.shape[0], dtype=np.int64)
    for b in range(nodes.shape[0]):
        i = nodes[b]
        lo = start[i]
        hi = lo + cnt[i]
        q = times[b]
        # binary search: first position with t >= q
        while lo < hi:
            mid = (lo + hi) >> 1
            if pend_t[mid] < q:
                lo = mid + 1
            else:
                hi = mid
        out[b] = lo - start[i]
    return out


@numba.njit(cache=True, nogil=True)
def _sorted_ranks(values):
    """The rank of each of the distinct int64 ``values`` in ascending order (LSD radix sort, 11
    bits a pass, over the bits the values span: no comparisons, O(n) a pass)."""
    n = values.shape[0]
    rank = np.empty(n, dtype=np.int64)
    if n == 0:
        return rank
    lo = values.min()
    span = np.uint64(values.max() - lo)
    order = np.arange(n)
    tmp = np.empty(n, dtype=np.int64)
    shift = np.uint64(0)
    count = np.empty(2049, dtype=np.int64)
    while True:
        count[:] = 0
        for a in range(n):
            d = ((np.uint64(values[order[a]] - lo)) >> shift) & np.uint64(2047)
            count[d + np.uint64(1)] += 1
        for d in range(2048):
            count[d + 1] += count[d]
        for a in range(n):
            i = order[a]
            d = ((np.uint64(values[i] - lo)) >> shift) & np.uint64(2047)
            tmp[count[d]] = i
            count[d] += 1
        order, tmp = tmp, order
        shift += np.uint64(11)
        if shift >= np.uint64(64) or (span >> shift) == np.uint64(0):
            break
    for a in range(n):
        rank[order[a]] = a
    return rank


@numba.njit(cache=True, nogil=True)
def unique_first_inverse(keys):
    """``np.unique(keys, return_index=True, return_inverse=True)`` for int64 ``keys``, the same
    three arrays: the distinct values ascending, each one's first position, and each key's
    place among them.  Distinct keys are found by hashing (O(n)) and only they are sorted, so a
    step's memory keys (many slots of one hub) cost their distinct count, not their number."""
    n = keys.shape[0]
    cap = 16
    bits = 4
    while cap < 2 * n:
        cap <<= 1
        bits += 1
    mask = cap - 1
    slot_key = np.empty(cap, dtype=np.int64)
    slot_id = np.full(cap, -1, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    ids = np.empty(n, dtype=np.int64)
    u = 0
    for i in range(n):
        key = keys[i]
        h = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
        while True:
            j = slot_id[h]
            if j == -1:
                slot_id[h] = u
                slot_key[h] = key
                first[u] = i
                ids[i] = u
                u += 1
                break
            if slot_key[h] == key:
                ids[i] = j
                break
            h = (h + 1) & mask
    distinct = np.empty(u, dtype=np.int64)
    for a in range(u):
        distinct[a] = keys[first[a]]
    rank = _sorted_ranks(distinct)
    values = np.empty(u, dtype=np.int64)
    firsts = np.empty(u, dtype=np.int64)
    for a in range(u):
        values[rank[a]] = distinct[a]
        firsts[rank[a]] = first[a]
    inverse = np.empty(n, dtype=np.int64)
    for i in range(n):
        inverse[i] = rank[ids[i]]
    return values, firsts, inverse
