"""numba kernels for partitioning.

Arrays and scalars in, arrays out; no RNG, no Python objects.  Arrays with one entry per
node are allocated by the caller with numpy, never inside a kernel: numpy asks the kernel
for huge pages for large arrays, and the random accesses into node state ran 3-5x slower
without them here (TLB misses; e.g. 83 vs 15 ns per event for two lookups, 4.5M nodes).  The Python side
(:mod:`speed.partition.sep`) validates inputs, chooses chunk sizes and reports progress.

State of the SEP stream (the SPEED paper, Alg. 1):

``code[i]``     int64, one word per node so each endpoint costs one random memory access:
                ``p >= 0`` a non-hub living in partition ``p``; ``UNPLACED`` (-1) a non-hub
                not yet placed; ``HUB_ROW0 - r`` (-2 - r) a hub whose partition set is row
                ``r`` of ``hub_mask``.
``hub_mask``    uint64 (rows, ceil(P / 64)), the partition set A(i) of each hub as bits: the
                selected hubs first, then the dynamic hubs the capacity promotes.
``load[p]``     int64, events assigned to partition ``p`` so far.
"""

from __future__ import annotations

import numba
import numpy as np

# Part codes of ``node_parts`` (the result of every method):
SHARED = -1  # the node is in several parts: placed in every part
NO_PART = -2  # no event placed the node (yet); fill_unplaced gives it a home
# Part of an event (``event_part``, int32, one per partitioned event) that no part took:
DROPPED = -1  # SEP's Case 3 (a cut event), or an edge-cut method's event across parts

# Bucket of an event: the unordered pair of its endpoints' codes, 0 = shared, p + 1 = part p.
@numba.njit(cache=True)
def bucket_id(a, b, num_parts):
    """Bucket of the unordered code pair ``(a, b)``; codes are 0 (shared) .. ``num_parts``."""
    if a > b:
        a, b = b, a
    q = num_parts + 1
    return a * q - a * (a - 1) // 2 + (b - a)


def num_buckets(num_parts: int) -> int:
    return (num_parts + 1) * (num_parts + 2) // 2



def centrality_add(src, dst, t, beta, t_max, span, cent):
    """Add the events' time-decayed weights to ``cent``: ``exp(beta * (t - t_max) / span)``
    to each endpoint (a self-loop counts twice, as in the degree).

    Each thread owns a range of node ids and streams every event, adding only to its own
    nodes: each node's sum is then taken in event order, exactly as one thread would.

    Parameters
    ----------
    src, dst : int64 ndarray, shape (E,)
    t : float64 ndarray, shape (E,)
    beta : float
        Decay; 0 gives the plain degree.
    t_max, span : float
        Last time and span (> 0) of the whole stream, so chunks can be added one by one.
    cent : float64 ndarray, shape (num_nodes,)
        Accumulated in place.
    """
    _centrality_ranges(src, dst, t, float(beta), float(t_max), float(span), cent,
                       _bounds(cent.shape[0], numba.get_num_threads()))


def _bounds(n: int, pieces: int) -> np.ndarray:
    """``pieces + 1`` boundaries splitting ``range(n)`` evenly."""
    return np.linspace(0, n, pieces + 1).astype(np.int64)


@numba.njit(cache=True, parallel=True)
def _centrality_ranges(src, dst, t, beta, t_max, span, cent, bounds):
    for r in numba.prange(bounds.shape[0] - 1):
        lo = bounds[r]
        hi = bounds[r + 1]
        for e in range(src.shape[0]):
            i = src[e]
            j = dst[e]
            own_i = lo <= i < hi
            own_j = lo <= j < hi
            if own_i or own_j:
                w = np.exp(beta * (t[e] - t_max) / span)
                if own_i:
                    cent[i] += w
                if own_j:
                    cent[j] += w


UNPLACED = -1  # SEP stream code of a non-hub not yet placed
HUB_ROW0 = -2  # SEP stream code of hub row r is HUB_ROW0 - r


def initial_codes(num_nodes: int, hubs: np.ndarray) -> np.ndarray:
    """``code`` for a fresh stream: every node unplaced, hub ``hubs[r]`` pointing at row ``r``."""
    code = np.full(num_nodes, UNPLACED, dtype=np.int64)
    code[hubs] = HUB_ROW0 - np.arange(hubs.size, dtype=np.int64)
    return code


@numba.njit(cache=True, inline="always")
def _load_range(load):
    """(largest, smallest) load: the balance term's maxsize and minsize."""
    max_load = load[0]
    min_load = load[0]
    for q in range(1, load.shape[0]):
        if load[q] > max_load:
            max_load = load[q]
        if load[q] < min_load:
            min_load = load[q]
    return max_load, min_load


@numba.njit(cache=True, inline="always")
def _member(c, p, hub_mask):
    """Whether partition ``p`` is in A(i) for a node with state ``c``."""
    if c <= HUB_ROW0:
        return (hub_mask[HUB_ROW0 - c, p >> 6] >> np.uint64(p & 63)) & np.uint64(1) != np.uint64(0)
    return c == p


@numba.njit(cache=True, inline="always")
def _join(i, c, p, code, hub_mask):
    if c <= HUB_ROW0:
        hub_mask[HUB_ROW0 - c, p >> 6] |= np.uint64(1) << np.uint64(p & 63)
    else:
        code[i] = p


@numba.njit(cache=True, inline="always")
def _full(load, q, cap, min_load):
    """Whether partition ``q`` may take no more events: one more would pass the capacity, and it
    is not the lightest (the lightest always may, so an event always has a home)."""
    return load[q] + 1 > cap and load[q] > min_load


@numba.njit(cache=True, inline="always")
def _promote(i, p, code, hub_mask, rows):
    """Make placed non-hub ``i`` (living in ``p``) a hub whose partition set is {p} (a dynamic
    hub): it may now be replicated.  Returns its new code."""
    r = rows[0]
    rows[0] = r + 1
    for w in range(hub_mask.shape[1]):
        hub_mask[r, w] = np.uint64(0)
    hub_mask[r, p >> 6] |= np.uint64(1) << np.uint64(p & 63)
    code[i] = HUB_ROW0 - r
    return code[i]


@numba.njit(cache=True)
def sep_assign(src, dst, start, end, cent, code, hub_mask, rows, load, lam, eps, balance, floor_events,
               event_part):
    """Stream events ``[start, end)`` through SEP, updating the state in place.

    For event (i, j): a non-hub already placed pins the event to its partition; two
    pins that disagree drop the event (Case 3); otherwise the candidates are every
    partition (no pin) or the pinned one.  Among several candidates the score
    ``h(i,p) + h(j,p) + lam * (maxload - load[p]) / (eps + maxload - minload)`` is
    maximised, ties going to the lowest partition id; ``h(i,p) = 1 + (1 - theta(i))``
    when ``p`` is in A(i), else 0, with ``theta(i) = Cent(i) / (Cent(i) + Cent(j))``.

    Capacity (``balance`` = b, ``inf`` turns it off): a partition is full when one more event
    would take it past ``cap = (1 + b) * max(placed + 1, floor_events) / P`` (``placed``: events
    assigned so far) and it is not the lightest.  Full partitions are not candidates; an event
    pinned to a full partition promotes its pinned endpoints to hubs (dynamic hubs, A = their
    partition), which then score like any hub.  Every partition's final load is therefore at
    most ``max(cap(placed_final), placed_final / P + 1)``.

    ``rows`` (int64, shape (1,)) counts the used rows of ``hub_mask``; a promotion needs a free
    row, and when there are fewer than two the kernel stops before event ``e`` so the caller
    can grow ``hub_mask`` and call again from ``e``.

    ``event_part[e]`` (int32, shape (E,)) receives the partition of event ``e``, or
    DROPPED.

    Returns
    -------
    (int, int)
        Events dropped in ``[start, stop)``, and ``stop`` (``end`` unless it stopped early).
    """
    num_parts = load.shape[0]
    dropped = 0
    placed = 0
    for q in range(num_parts):
        placed += load[q]
    for e in range(start, end):
        i = src[e]
        j = dst[e]
        pin_i = code[i]  # >= 0 only for a placed non-hub
        pin_j = code[j]
        if pin_i >= 0 and pin_j >= 0 and pin_i != pin_j:
            dropped += 1
            event_part[e] = DROPPED
            continue
        max_load, min_load = _load_range(load)
        cap = (1.0 + balance) * max(placed + 1.0, floor_events) / num_parts
        pin = pin_i if pin_i >= 0 else pin_j
        if pin >= 0 and _full(load, pin, cap, min_load):
            if rows[0] + 2 > hub_mask.shape[0]:
                return dropped, e
            if pin_i >= 0:
                pin_i = _promote(i, pin_i, code, hub_mask, rows)
            if pin_j >= 0 and j != i:
                pin_j = _promote(j, pin_j, code, hub_mask, rows)
            elif j == i:
                pin_j = pin_i
            pin = -1
        if pin >= 0:
            best_p = pin
        else:
            ci = cent[i]
            cj = cent[j]
            denom = ci + cj
            if denom > 0.0:
                theta_i = ci / denom
                theta_j = cj / denom
            else:
                theta_i = 0.5
                theta_j = 0.5
            h_i = 1.0 + (1.0 - theta_i)
            h_j = 1.0 + (1.0 - theta_j)
            best = -np.inf
            best_p = 0
            for q in range(num_parts):
                if _full(load, q, cap, min_load):
                    continue
                score = 0.0
                if _member(pin_i, q, hub_mask):
                    score += h_i
                if _member(pin_j, q, hub_mask):
                    score += h_j
                score += lam * (max_load - load[q]) / (eps + max_load - min_load)
                if score > best:
                    best = score
                    best_p = q
        load[best_p] += 1
        placed += 1
        event_part[e] = best_p
        _join(i, pin_i, best_p, code, hub_mask)
        if j != i:
            _join(j, pin_j, best_p, code, hub_mask)
    return dropped, end


@numba.njit(cache=True)
def finalize_parts(code, hub_mask, out):
    """Node to partition after the stream, into ``out`` (int64, shape (num_nodes,)): the
    single partition, SHARED for nodes in several, and NO_PART for nodes no event placed."""
    n = code.shape[0]
    for i in range(n):
        c = code[i]
        if c >= 0:
            out[i] = c
        elif c == UNPLACED:
            out[i] = NO_PART
        else:
            r = HUB_ROW0 - c
            count = 0
            first = -1
            for w in range(hub_mask.shape[1]):
                x = hub_mask[r, w]
                b = 0
                while x:
                    if x & np.uint64(1):
                        count += 1
                        if first < 0:
                            first = 64 * w + b
                    x >>= np.uint64(1)
                    b += 1
            out[i] = NO_PART if count == 0 else (SHARED if count > 1 else first)
    return out


@numba.njit(cache=True)
def fill_unplaced(node_parts, num_parts):
    """Give every unplaced node (NO_PART) a home: the partition with the fewest nodes so far,
    lowest id on ties, in node-id order.  Keeps node counts balanced for nodes that only
    occur outside the partitioned events (e.g. in val/test)."""
    count = np.zeros(num_parts, dtype=np.int64)
    for i in range(node_parts.shape[0]):
        if node_parts[i] >= 0:
            count[node_parts[i]] += 1
    for i in range(node_parts.shape[0]):
        if node_parts[i] == NO_PART:
            best = 0
            for q in range(1, num_parts):
                if count[q] < count[best]:
                    best = q
            node_parts[i] = best
            count[best] += 1
    return node_parts


# Counting kernels gather a block of bucket ids first and count them after: interleaving the
# random lookups with the counter updates ran 2.5x slower here (the lookups wait behind the
# stores), 1.6 vs 0.6 s for 20M events.
_BLOCK = 1024


@numba.njit(cache=True, inline="always")
def _bucket_block(src, dst, node_parts, num_parts, lo, hi, out):
    for e in range(lo, hi):
        out[e - lo] = bucket_id(node_parts[src[e]] + 1, node_parts[dst[e]] + 1, num_parts)


def bucket_counts(src, dst, node_parts, num_parts, num_first):
    """Events per bucket (the unordered pair of endpoint codes; code 0 is SHARED, ``p + 1``
    is partition ``p``, see :func:`bucket_id`), for the first ``num_first`` events and for all.

    Threads count disjoint ranges of events into their own rows (integer sums: exact).

    Returns
    -------
    first, total : int64 ndarray, shape (num_buckets,)
    """
    bounds = _bounds(src.shape[0], 4 * numba.get_num_threads())
    first, total = _bucket_ranges(src, dst, node_parts, num_parts, num_first, np.empty(0, dtype=np.int8), bounds)
    return first.sum(axis=0), total.sum(axis=0)


@numba.njit(cache=True, parallel=True)
def _bucket_ranges(src, dst, node_parts, num_parts, num_first, bid, bounds):
    """Per range of events (one thread each): events per bucket among the first ``num_first``
    and among all, and each event's bucket into ``bid`` unless it is empty."""
    q = num_parts + 1
    nb = q * (q + 1) // 2
    m = min(num_first, src.shape[0])
    write = bid.shape[0] > 0
    pieces = bounds.shape[0] - 1
    first = np.zeros((pieces, nb), dtype=np.int64)
    total = np.zeros((pieces, nb), dtype=np.int64)
    for r in numba.prange(pieces):
        buf = np.empty(_BLOCK, dtype=np.int64)
        for lo in range(bounds[r], bounds[r + 1], _BLOCK):
            hi = min(bounds[r + 1], lo + _BLOCK)
            _bucket_block(src, dst, node_parts, num_parts, lo, hi, buf)
            for e in range(lo, hi):
                k = buf[e - lo]
                if write:
                    bid[e] = k
                total[r, k] += 1
                if e < m:
                    first[r, k] += 1
    return first, total


def part_event_counts(bucket_events: np.ndarray, num_parts: int):
    """Events of each node-induced part, and the cut events, from events per bucket.

    Part ``p`` holds every event whose endpoints are both in ``V_p`` or shared; an event
    between non-shared nodes of different parts is cut.

    Parameters
    ----------
    bucket_events : int64 ndarray, shape (num_buckets,)
        From :func:`bucket_counts`.
    num_parts : int

    Returns
    -------
    part_events : int64 ndarray, shape (num_parts,)
    cut : int
    shared_shared : int
        Events between two shared nodes (present in every part).
    """
    counts = np.zeros(num_parts, dtype=np.int64)
    cut = 0
    for a in range(num_parts + 1):
        for b in range(a, num_parts + 1):
            c = int(bucket_events[bucket_id(a, b, num_parts)])
            if a == 0 and b > 0:
                counts[b - 1] += c
            elif a == b and a > 0:
                counts[a - 1] += c
            elif a != b:
                cut += c
    both_shared = int(bucket_events[bucket_id(0, 0, num_parts)])
    return counts + both_shared, cut, both_shared


def bucket_dtype(num_parts: int):
    """The narrowest integer type that holds every bucket id of ``num_parts`` parts."""
    nb = num_buckets(num_parts)
    return np.int8 if nb <= 127 else np.int16 if nb <= 32767 else np.int32


def bucket_ids(src, dst, node_parts, num_parts, bid):
    """Bucket of each event into ``bid`` (see :func:`bucket_dtype`), and events per bucket
    (threads take disjoint ranges of events).

    Returns
    -------
    counts : int64 ndarray, shape (num_buckets,)
    """
    bounds = _bounds(src.shape[0], 4 * numba.get_num_threads())
    return _bucket_ranges(src, dst, node_parts, num_parts, 0, bid, bounds)[1].sum(axis=0)


@numba.njit(cache=True)
def bucket_order(bid, num_buckets, order):
    """Positions of a chunk of events grouped by bucket, each bucket in event order (a stable
    counting sort of the chunk's bucket ids ``bid``), into ``order`` (int64, at least the
    chunk's length); returns the events per bucket (int64, shape (num_buckets,))."""
    n = bid.shape[0]
    counts = np.zeros(num_buckets, dtype=np.int64)
    for e in range(n):
        counts[bid[e]] += 1
    pos = np.empty(num_buckets, dtype=np.int64)
    acc = 0
    for k in range(num_buckets):
        pos[k] = acc
        acc += counts[k]
    for e in range(n):
        k = bid[e]
        order[pos[k]] = e
        pos[k] += 1
    return counts


# ------------------------------------------------------------------ vertex-cut baselines
@numba.njit(cache=True, inline="always")
def _has(mask, i, p):
    return (mask[i, p >> 6] >> np.uint64(p & 63)) & np.uint64(1) != np.uint64(0)


@numba.njit(cache=True, inline="always")
def _set(mask, i, p):
    mask[i, p >> 6] |= np.uint64(1) << np.uint64(p & 63)


# hdrf_assign scores like sep_assign but keeps its own loop: one shared helper taking A(i) as
# bit rows cost SEP about 13% (7.0 -> 6.1 M events/s over 5M events, P=8, same loads), as
# SEP's membership test reads a hub row or nothing without building row views.
@numba.njit(cache=True)
def hdrf_assign(src, dst, start, end, degree, mask, load, lam, eps, event_part):
    """HDRF (Petroni et al., CIKM 2015) over events ``[start, end)``, state updated in place.

    Partial degrees are counted as the stream goes (``degree`` is incremented for both
    endpoints before scoring, as in the paper).  With ``theta(i) = d(i) / (d(i) + d(j))``
    and ``g(i,p) = 1 + (1 - theta(i))`` when ``p`` is in A(i), the event goes to the
    partition maximising ``g(i,p) + g(j,p) + lam * (maxload - load[p]) / (eps + maxload -
    minload)``, ties to the lowest id.  Every node may be replicated.

    Parameters
    ----------
    degree : int64 ndarray, shape (num_nodes,)
    mask : uint64 ndarray, shape (num_nodes, ceil(P / 64))
        A(i) as bits.
    load : int64 ndarray, shape (P,)
    event_part : int32 ndarray, shape (E,)
        Receives each event's partition.
    """
    num_parts = load.shape[0]
    for e in range(start, end):
        i = src[e]
        j = dst[e]
        degree[i] += 1
        degree[j] += 1
        di = float(degree[i])
        dj = float(degree[j])
        theta_i = di / (di + dj)
        theta_j = dj / (di + dj)
        g_i = 1.0 + (1.0 - theta_i)
        g_j = 1.0 + (1.0 - theta_j)
        max_load, min_load = _load_range(load)
        best = -np.inf
        best_p = 0
        for q in range(num_parts):
            score = 0.0
            if _has(mask, i, q):
                score += g_i
            if _has(mask, j, q):
                score += g_j
            score += lam * (max_load - load[q]) / (eps + max_load - min_load)
            if score > best:
                best = score
                best_p = q
        load[best_p] += 1
        event_part[e] = best_p
        _set(mask, i, best_p)
        _set(mask, j, best_p)


@numba.njit(cache=True)
def greedy_assign(src, dst, start, end, remaining, mask, load, event_part):
    """PowerGraph's greedy vertex-cut (Gonzalez et al., OSDI 2012) over ``[start, end)``.

    For event (i, j) the candidates are: the partitions shared by A(i) and A(j) if any;
    else, when both are placed, the partitions of the endpoint with more unassigned
    events (``remaining``; both on a tie); else those of the placed endpoint; else all.
    The least-loaded candidate wins, ties to the lowest id.

    Parameters
    ----------
    remaining : int64 ndarray, shape (num_nodes,)
        Events of each node not yet assigned (its degree at the start).
    mask : uint64 ndarray, shape (num_nodes, ceil(P / 64))
    load : int64 ndarray, shape (P,)
    event_part : int32 ndarray, shape (E,)
    """
    num_parts = load.shape[0]
    for e in range(start, end):
        i = src[e]
        j = dst[e]
        has_i = False
        has_j = False
        both = False
        for q in range(num_parts):
            a = _has(mask, i, q)
            b = _has(mask, j, q)
            has_i |= a
            has_j |= b
            both |= a and b
        best_p = -1
        for q in range(num_parts):
            a = _has(mask, i, q)
            b = _has(mask, j, q)
            if both:
                ok = a and b
            elif has_i and has_j:
                if remaining[i] > remaining[j]:
                    ok = a
                elif remaining[j] > remaining[i]:
                    ok = b
                else:
                    ok = a or b
            elif has_i:
                ok = a
            elif has_j:
                ok = b
            else:
                ok = True
            if ok and (best_p < 0 or load[q] < load[best_p]):
                best_p = q
        load[best_p] += 1
        event_part[e] = best_p
        remaining[i] -= 1
        remaining[j] -= 1
        _set(mask, i, best_p)
        _set(mask, j, best_p)


@numba.njit(cache=True)
def mask_to_parts(mask, num_parts, out):
    """Node to partition from A(i) bits, into ``out`` (int64, shape (num_nodes,)): the single
    part, SHARED for several, NO_PART for none."""
    n = mask.shape[0]
    for i in range(n):
        count = 0
        first = -1
        for q in range(num_parts):
            if _has(mask, i, q):
                count += 1
                if first < 0:
                    first = q
        out[i] = NO_PART if count == 0 else (SHARED if count > 1 else first)
    return out


@numba.njit(cache=True)
def endpoint_event_parts(src, dst, node_parts):
    """Part of each event for an edge-cut assignment: its endpoints' common part, or
    DROPPED when they differ (a cut event).  Shared endpoints do not occur there."""
    out = np.empty(src.shape[0], dtype=np.int32)
    for e in range(src.shape[0]):
        a = node_parts[src[e]]
        b = node_parts[dst[e]]
        out[e] = a if a == b else DROPPED
    return out
