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


@numba.njit(cache=True, nogil=True, inline="always")
def _hash_slot(key, bits):
    """Slot of int64 ``key`` in an open-addressing table of ``2**bits`` slots (Fibonacci hashing:
    the product's high bits, which every bit of the key reaches)."""
    return np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))


@numba.njit(cache=True, nogil=True, parallel=True)
def ring_sample(nodes, times, hold_src, hold_dst, hold_t, hold_e, lo, hi, nbr, nbr_t, nbr_e, head, count,
                undirected, out_n, out_t, out_e, out_mask):
    """Answer queries ``(nodes[b], times[b])`` as if in time order, each after the held events
    strictly earlier than its time entered the rings: the latest ``k`` entries of its ring then,
    those with ``t < time``, most recent first.  Returns the new held start (the held events
    earlier than the latest query are in the rings afterwards).

    The queries run in parallel (``prange``), none waiting for another's insertions: the held
    events earlier than every query enter the rings first; those between the earliest and the
    latest query are indexed by ring owner (a hash table of per-owner lists, newest first), and
    each query reads its node's list (the ones before its time) ahead of its ring, as the ring
    would hold them after those insertions.  Then the rest enter the rings.

    Outputs are (B, k) arrays filled left to right; ``out_mask`` marks real entries and unused
    slots keep node 0, time 0, eid -1.  A query earlier than entries already in its ring
    (DyRep's message-time queries) only reads: entries at or after its time are skipped.
    """
    nq = nodes.shape[0]
    k = nbr.shape[1]
    if nq == 0:
        return lo
    q_min = times[0]
    q_max = times[0]
    for b in range(1, nq):
        q_min = min(q_min, times[b])
        q_max = max(q_max, times[b])
    j = ring_flush(hold_src, hold_dst, hold_t, hold_e, lo, hi, q_min, nbr, nbr_t, nbr_e, head, count, undirected)
    end = j
    while end < hi and hold_t[end] < q_max:
        end += 1
    # the ring entries events j..end-1 would add, each owner's linked newest first (open addressing)
    cap, bits = 16, 4
    while cap < 4 * (end - j):
        cap, bits = cap * 2, bits + 1
    owner = np.full(cap, -1, dtype=np.int64)
    newest = np.empty(cap, dtype=np.int64)
    older = np.empty(2 * (end - j), dtype=np.int64)
    ent_ev = np.empty(2 * (end - j), dtype=np.int64)
    ent_nb = np.empty(2 * (end - j), dtype=np.int64)
    m = 0
    for x in range(j, end):
        a = hold_src[x]
        c = hold_dst[x]
        sides = 2 if undirected and a != c else 1  # a self-loop is one interaction, not two
        for side in range(sides):
            o = a if side == 0 else c
            h = _hash_slot(o, bits)
            while owner[h] != -1 and owner[h] != o:
                h = (h + 1) & (cap - 1)
            older[m] = newest[h] if owner[h] == o else -1
            owner[h] = o
            newest[h] = m
            ent_ev[m] = x
            ent_nb[m] = c if side == 0 else a
            m += 1
    for b in numba.prange(nq):
        i = nodes[b]
        q = times[b]
        filled = 0
        taken = 0  # of the k newest entries the ring would hold
        if m:
            h = _hash_slot(i, bits)
            while owner[h] != -1 and owner[h] != i:
                h = (h + 1) & (cap - 1)
            r = newest[h] if owner[h] == i else -1
            while r >= 0 and hold_t[ent_ev[r]] >= q:  # entered after this query
                r = older[r]
            while r >= 0 and taken < k:
                x = ent_ev[r]
                out_n[b, filled] = ent_nb[r]
                out_t[b, filled] = hold_t[x]
                out_e[b, filled] = hold_e[x]
                out_mask[b, filled] = True
                filled += 1
                taken += 1
                r = older[r]
        hd = head[i]
        for rr in range(min(count[i], k - taken)):
            slot = (hd - 1 - rr) % k
            if nbr_t[i, slot] < q:
                out_n[b, filled] = nbr[i, slot]
                out_t[b, filled] = nbr_t[i, slot]
                out_e[b, filled] = nbr_e[i, slot]
                out_mask[b, filled] = True
                filled += 1
        for rr in range(filled, k):
            out_n[b, rr] = 0
            out_t[b, rr] = 0.0
            out_e[b, rr] = -1
            out_mask[b, rr] = False
    return ring_flush(hold_src, hold_dst, hold_t, hold_e, j, hi, q_max, nbr, nbr_t, nbr_e, head, count, undirected)


@numba.njit(cache=True, nogil=True, parallel=True)
def pending_counts(nodes, times, start, cnt, pend_t):
    """For each query ``(nodes[b], times[b])``, how many of the node's pending events (a
    time-sorted segment ``pend_t[start[i]:start[i] + cnt[i]]``) are strictly earlier.  Queries
    in parallel (each a binary search of its own)."""
    out = np.empty(nodes.shape[0], dtype=np.int64)
    for b in numba.prange(nodes.shape[0]):
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
        h = _hash_slot(key, bits)
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


@numba.njit(cache=True, nogil=True)
def merge_pending(node, other, t, eid, before, start, count, s_other, s_t, s_eid):
    """A batch's events joining the pending store (:meth:`MessageStore.merge`), off the
    interpreter lock: for each distinct node of ``node`` (int64, (M,)), its pending events at
    ``before`` or later (the tail of its segment ``s_*[start[u]:start[u] + count[u]]``, which is
    sorted by time, then event id) merged with its new ones (``other``, ``t``, ``eid``) in that
    order, ties keeping the old before the new and the new in their given order (what a stable
    sort of the old and the new, one after the other, by node, time and event id gives).

    Returns
    -------
    uniq : int64 (U,)
        The distinct nodes, ascending.
    counts : int64 (U,)
        Each one's events now.
    out_other, out_t, out_eid : (sum(counts),)
        Their events, node after node.
    """
    uniq, _, inv = unique_first_inverse(node)
    u = uniq.shape[0]
    n = node.shape[0]
    # the new events by (node, time, event id), stable: three stable sorts, the least significant first
    order = np.argsort(eid, kind="mergesort")
    order = order[np.argsort(t[order], kind="mergesort")]
    order = order[np.argsort(inv[order], kind="mergesort")]
    new_count = np.zeros(u, dtype=np.int64)
    for i in range(n):
        new_count[inv[i]] += 1
    kept_from = np.empty(u, dtype=np.int64)
    kept_count = np.empty(u, dtype=np.int64)
    total = 0
    for j in range(u):
        lo = start[uniq[j]]
        end = lo + count[uniq[j]]
        hi = end
        while lo < hi:  # the first of the node's events at `before` or later
            mid = (lo + hi) >> 1
            if s_t[mid] < before:
                lo = mid + 1
            else:
                hi = mid
        kept_from[j] = lo
        kept_count[j] = end - lo
        total += end - lo + new_count[j]
    out_other = np.empty(total, dtype=np.int64)
    out_t = np.empty(total, dtype=np.float64)
    out_eid = np.empty(total, dtype=np.int64)
    counts = np.empty(u, dtype=np.int64)
    w = 0
    p = 0
    for j in range(u):
        a = kept_from[j]
        a_end = a + kept_count[j]
        p_end = p + new_count[j]
        while a < a_end or p < p_end:
            old = p >= p_end
            if not old and a < a_end:
                q = order[p]
                old = s_t[a] < t[q] or (s_t[a] == t[q] and s_eid[a] <= eid[q])
            if old:
                out_other[w] = s_other[a]
                out_t[w] = s_t[a]
                out_eid[w] = s_eid[a]
                a += 1
            else:
                q = order[p]
                out_other[w] = other[q]
                out_t[w] = t[q]
                out_eid[w] = eid[q]
                p += 1
            w += 1
        counts[j] = kept_count[j] + new_count[j]
    return uniq, counts, out_other, out_t, out_eid
