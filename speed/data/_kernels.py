"""numba kernels for the data layer: arrays and scalars in, no hidden state."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def count_duplicate_events(src, dst, t, num_nodes):
    """Count events that repeat an earlier (src, dst, t) triple.

    ``t`` must be sorted, so duplicates lie in runs of equal times.  Short runs (the
    usual case) are compared pairwise in place; longer ones are sorted in a scratch
    buffer that is reused, so the cost is O(E) with no allocation per run.

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
    scratch = np.empty(64, dtype=np.int64)
    a = 1
    while a < n:
        if t[a] != t[a - 1]:  # most events: no run
            a += 1
            continue
        start = a - 1
        end = a + 1
        while end < n and t[end] == t[start]:
            end += 1
        r = end - start
        if r <= 8:
            for x in range(start + 1, end):  # x repeats if an earlier event of the run has its pair
                for y in range(start, x):
                    if src[x] == src[y] and dst[x] == dst[y]:
                        dup += 1
                        break
        else:
            if scratch.shape[0] < r:
                scratch = np.empty(2 * r, dtype=np.int64)
            keys = scratch[:r]
            for k in range(r):
                keys[k] = src[start + k] * num_nodes + dst[start + k]
            keys.sort()
            for k in range(1, r):
                if keys[k] == keys[k - 1]:
                    dup += 1
        a = end
    return dup


@numba.njit(cache=True)
def node_time_spans(src, dst, t, first, last, count):
    """Each node's earliest and latest time and its number of endpoints, updated in place with
    the events ``src, dst, t`` (any order; ``first``/``last`` float64 start at +inf/-inf)."""
    for i in range(src.shape[0]):
        ti = np.float64(t[i])
        for side in range(2):
            v = np.int64(src[i]) if side == 0 else np.int64(dst[i])
            if ti < first[v]:
                first[v] = ti
            if ti > last[v]:
                last[v] = ti
            count[v] += 1


@numba.njit(cache=True)
def first_unsorted(t):
    """Index of the first element smaller than its predecessor, or -1."""
    for k in range(1, t.shape[0]):
        if t[k] < t[k - 1]:
            return k
    return -1


def compact_dense(src, dst, max_id):
    """Renumber non-negative int ids ``<= max_id`` to ``0..N-1`` in increasing id order, in place.

    One pass to mark, a prefix sum, one pass to map: O(E + max_id), no sort.  The marks
    are bytes and the map int32 where it fits, so both stay in cache for longer (the
    passes are random accesses into them).

    Parameters
    ----------
    src : int64 ndarray, shape (E,)
    dst : int64 ndarray, shape (F,)
        May differ in length from ``src`` (one side of a bipartite log is compacted
        alone by passing an empty ``dst``).  Both are overwritten
        with the new ids.
    max_id : int

    Returns
    -------
    ids : int64 ndarray, shape (N,)
        Original id of each compact id.
    """
    seen = np.zeros(max_id + 1, dtype=np.uint8)
    _mark(src, dst, seen)
    n = int(seen.sum(dtype=np.int64))
    ids = np.empty(n, dtype=np.int64)
    # the map is allocated by numpy (huge pages for large arrays, see partition._kernels)
    _apply_dense(src, dst, seen, ids, np.empty(max_id + 1, dtype=np.int32 if n <= np.iinfo(np.int32).max
                                                 else np.int64))
    return ids


@numba.njit(cache=True)
def _mark(src, dst, seen):
    for e in range(src.shape[0]):
        seen[src[e]] = 1
    for e in range(dst.shape[0]):
        seen[dst[e]] = 1


@numba.njit(cache=True)
def _apply_dense(src, dst, seen, ids, mapping):
    k = 0
    for v in range(seen.shape[0]):
        if seen[v]:
            mapping[v] = k
            ids[k] = v
            k += 1
    for e in range(src.shape[0]):
        src[e] = mapping[src[e]]
    for e in range(dst.shape[0]):
        dst[e] = mapping[dst[e]]


# ------------------------------------------------------------------ numeric text parsing
# Roles of the columns of a record for :func:`parse_records`.
ROLE_SKIP, ROLE_SRC, ROLE_DST, ROLE_TIME, ROLE_LABEL = 0, 1, 2, 3, 4
# Exact powers of ten: m / 10**k is correctly rounded when m < 2**53 and k <= 22 (both exact).
_POW10 = np.array([10.0 ** k for k in range(23)])
_MAX_EXACT = 1 << 53


@numba.njit(cache=True, inline="always")
def _field_end(c, sep):
    return c == sep or c == 10 or c == 13


@numba.njit(cache=True)
def parse_records(buf, lo, hi, sep, roles, src, dst, t, label, row0):
    """Parse the plain numeric records in ``buf[lo:hi]`` into preallocated columns.

    The fast path of the text reader: it accepts only what it can convert exactly as the
    general reader (pyarrow) would -- integer ids of at most 18 digits, decimal numbers without
    exponent whose digits form an integer below 2**53, one separator between fields, ``\\n`` or
    ``\\r\\n`` line ends, no quotes, comments or blank lines.  Anything else makes it give up,
    and the caller reads the file with the general reader, which also names bad lines.

    Parameters
    ----------
    buf : uint8 ndarray
        Whole records; ``hi`` is a line end or the end of the file.
    lo, hi : int
    sep : int
        Separator byte.
    roles : int64 ndarray, shape (ncols,)
        ``ROLE_*`` of each column.
    src, dst : int64 ndarray
    t, label : float64 ndarray
        Outputs, written from row ``row0`` on (``label`` may have length 0).
    row0 : int

    Returns
    -------
    int
        Records parsed, or -1 (give up).
    """
    ncols = roles.shape[0]
    row = row0
    pos = lo
    while pos < hi:
        if buf[pos] == 35 or buf[pos] == 37:  # a '#' or '%' comment line
            return -1
        for col in range(ncols):
            role = roles[col]
            if role == ROLE_SKIP:
                while pos < hi and not _field_end(buf[pos], sep):
                    if buf[pos] == 34:  # a quote: leave it to the general reader
                        return -1
                    pos += 1
            else:
                neg = buf[pos] == 45 if pos < hi else False  # '-'
                if neg:
                    pos += 1
                # digits: at most 18 (no int64 overflow), counted rather than checked one by one
                start = pos
                m = 0
                while pos < hi:
                    d = np.int64(buf[pos]) - 48
                    if d < 0 or d > 9:
                        break
                    m = m * 10 + d
                    pos += 1
                digits = pos - start
                if digits == 0 or digits > 18:
                    return -1
                if role == ROLE_SRC:
                    src[row] = -m if neg else m
                elif role == ROLE_DST:
                    dst[row] = -m if neg else m
                else:
                    k = 0
                    if pos < hi and buf[pos] == 46:  # '.'
                        pos += 1
                        start = pos
                        while pos < hi:
                            d = np.int64(buf[pos]) - 48
                            if d < 0 or d > 9:
                                break
                            m = m * 10 + d
                            pos += 1
                        k = pos - start
                        if k == 0 or digits + k > 18:
                            return -1
                    if m >= _MAX_EXACT:  # m / 10**k is exact-then-rounded only below 2**53
                        return -1
                    x = m / _POW10[k]
                    if neg:
                        x = -x
                    if role == ROLE_TIME:
                        t[row] = x
                    else:
                        label[row] = x
            # the field must end at a separator (not after the last column) or a line end
            if col < ncols - 1:
                if pos >= hi or buf[pos] != sep:
                    return -1
                pos += 1
            else:
                if pos < hi and buf[pos] == 13:
                    pos += 1
                    if pos < hi and buf[pos] != 10:
                        return -1
                if pos < hi:
                    if buf[pos] != 10:
                        return -1
                    pos += 1
        row += 1
        if pos < hi and (buf[pos] == 10 or buf[pos] == 13):
            return -1  # a blank line
    return row - row0


@numba.njit(cache=True)
def count_lines(buf, lo, hi):
    """Line ends in ``buf[lo:hi]``, plus one for a last line without one."""
    n = 0
    for k in range(lo, hi):
        n += buf[k] == 10  # branch-free, so the loop vectorises
    if hi > lo and buf[hi - 1] != 10:
        n += 1
    return n


@numba.njit(cache=True, parallel=True)
def count_ranges(buf, cuts):
    """Records (lines) in each range ``cuts[k]..cuts[k+1]`` of ``buf``, one thread per range."""
    r = cuts.shape[0] - 1
    rows = np.empty(r, dtype=np.int64)
    for k in numba.prange(r):
        rows[k] = count_lines(buf, cuts[k], cuts[k + 1])
    return rows


@numba.njit(cache=True, parallel=True)
def parse_ranges(buf, cuts, rows, sep, roles, src, dst, t, label, row0):
    """:func:`parse_records` over the ranges ``cuts[k]..cuts[k+1]`` at once, one thread each,
    range ``k`` written from row ``row0 + rows[:k].sum()``.

    ``cuts`` (int64, shape (R + 1,)) are offsets of line starts and ``rows`` (from
    :func:`count_ranges`) the records of each range.  Returns False when any range gives up.
    """
    r = cuts.shape[0] - 1
    start = np.empty(r, dtype=np.int64)
    acc = row0
    for k in range(r):
        start[k] = acc
        acc += rows[k]
    ok = np.ones(r, dtype=np.bool_)
    for k in numba.prange(r):
        got = parse_records(buf, cuts[k], cuts[k + 1], sep, roles, src, dst, t, label, start[k])
        ok[k] = got == rows[k]
    for k in range(r):
        if not ok[k]:
            return False
    return True
