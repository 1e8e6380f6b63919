"""Node ids to compact ids ``0..N-1``: integers by a numba marking pass (or a sort when sparse),
strings by Arrow's dictionary encoding; sources and destinations apart for bipartite logs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import _kernels

def _compact_ints(s: np.ndarray, d: np.ndarray):
    """Compact int ids: O(E) by marking when they are dense enough, else by sorting.

    ``s`` and ``d`` (int64, owned by the caller) are overwritten with the compact ids and
    returned, with the original id of each compact id.
    """
    both = [a for a in (s, d) if a.size]
    lo = min(int(a.min()) for a in both)
    hi = max(int(a.max()) for a in both)
    if lo >= 0 and hi < 4 * (s.size + d.size) + (1 << 20):
        return s, d, _kernels.compact_dense(s, d, hi)
    ids, inv = np.unique(np.concatenate([s, d]), return_inverse=True)
    s[:] = inv[: s.size]
    d[:] = inv[s.size:]
    return s, d, ids


def compact(src_col, dst_col, bipartite: bool):
    """Compact ids from two columns: numpy integer arrays, or arrow string columns.

    Integer arrays are renumbered in place when they are int64 (the reader's own arrays).
    Returns int64 src, dst and the original ids.
    """
    if isinstance(src_col, np.ndarray) and isinstance(dst_col, np.ndarray):
        s, d = (a.astype(np.int64, copy=not a.flags.writeable) for a in (src_col, dst_col))
        if bipartite:
            # numbered separately: users first, then items (the JODIE convention)
            none = np.empty(0, dtype=np.int64)
            si, _, us = _compact_ints(s, none)
            di, _, vs = _compact_ints(d, none)
            di += len(us)
            return si, di, np.concatenate([us, vs])
        return _compact_ints(s, d)
    src_col = pa.chunked_array([pa.array(src_col)]) if isinstance(src_col, np.ndarray) else src_col
    dst_col = pa.chunked_array([pa.array(dst_col)]) if isinstance(dst_col, np.ndarray) else dst_col
    src_col = src_col.cast(pa.string())
    dst_col = dst_col.cast(pa.string())
    if bipartite:
        (si, us), (di, vs) = _encode_sorted(src_col.chunks), _encode_sorted(dst_col.chunks)
        return si, di + len(us), np.concatenate([us, vs])
    inv, ids = _encode_sorted(src_col.chunks + dst_col.chunks)
    n = len(src_col)
    return inv[:n], inv[n:], ids


def _encode_sorted(chunks):
    """Dictionary-encode string chunks (in C++), numbering the distinct values in sorted order
    so ids do not depend on the order of first appearance."""
    enc = pa.chunked_array(chunks, type=pa.string()).combine_chunks().dictionary_encode()
    values = enc.dictionary.to_numpy(zero_copy_only=False).astype(str)
    order = np.argsort(values, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[enc.indices.to_numpy().astype(np.int64)], values[order]

