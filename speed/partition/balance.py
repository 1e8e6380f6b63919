"""Even training work across parts: the shared–shared spread, and the balance figures.

In ``assigned`` training each event trains on one part: the one the partitioner assigned it
to.  Events between two shared nodes can go to any part, so after any partitioner they are
handed out to even the parts' loads: the part loads without them are filled up to a common
level (water filling), each part keeping as many of its own as the level allows, spaced
evenly over time, and the rest moving to the parts below the level.  SEP's capacity
(``balance``) bounds what the shared–shared events cannot fix.
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

import numpy as np

from . import _spread


def water_level(base: np.ndarray, extra: int) -> np.ndarray:
    """Integer quotas ``q`` (int64, (P,)), ``sum(q) == extra``, that minimise ``max(base + q)``
    (and, among those, fill the lowest parts first, lowest id on ties)."""
    base = np.asarray(base, dtype=np.int64)
    q = np.zeros_like(base)
    if extra <= 0:
        return q
    order = np.argsort(base, kind="stable")
    b = base[order].astype(np.float64)
    level = b[-1] + (extra - (b[-1] * b.size - b.sum())) / b.size  # everything under water
    for k in range(1, b.size + 1):  # water over the k lowest parts only
        lv = (extra + b[:k].sum()) / k
        if k == b.size or lv <= b[k]:
            level = lv
            break
    q = np.maximum(0, np.floor(level - base)).astype(np.int64)
    rest = extra - int(q.sum())
    if rest > 0:  # the remainder, one each, to the parts that end lowest
        top_up = np.lexsort((np.arange(base.size), base + q))[:rest]
        q[top_up] += 1
    return q


def spread_plan(base: np.ndarray, ss: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(keep, need), int64 (P,): shared–shared events each part keeps of its own ``ss[:P]`` and
    receives, given the other loads ``base`` (P,) and ``ss`` (P + 1,; ``ss[P]``: unassigned)."""
    quota = water_level(base, int(ss.sum()))
    keep = np.minimum(ss[:-1], quota)
    return keep, quota - keep


def spread_shared_events(src: np.ndarray, dst: np.ndarray, node_parts: np.ndarray, event_part: np.ndarray,
                         num_parts: int) -> None:
    """Spread the shared–shared events of one in-memory stream (``event_part`` changes in place)."""
    spread_shared_chunks(lambda: [(src, dst, event_part)], node_parts, num_parts)


def spread_shared_chunks(chunks, node_parts: np.ndarray, num_parts: int, write=None, loads=None) -> None:
    """The same over a stream read in chunks: ``chunks()`` yields ``(src, dst, event_part)``
    (it is called twice: once to count, once to move); ``write(i, event_part)`` stores the
    ``i``-th chunk's parts back when they are not views of the stored array.  ``loads``
    (int64, (P,)): events the parts hold already from earlier in the stream (an append's)."""
    base = np.zeros(num_parts, dtype=np.int64) if loads is None else np.array(loads, dtype=np.int64)
    ss = np.zeros(num_parts + 1, dtype=np.int64)
    for src, dst, part in chunks():
        _spread.assigned_counts(src, dst, node_parts, part, base, ss)
    if not ss.sum():
        return
    keep, need = spread_plan(base, ss)
    seen = np.zeros(num_parts, dtype=np.int64)
    for i, (src, dst, part) in enumerate(chunks()):
        _spread.spread_shared(src, dst, node_parts, part, ss, keep, seen, need)
        if write is not None:
            write(i, part)


def balance_stats(part_counts: Iterable[int]) -> Dict:
    """``assigned_events`` per part (the events each part trains in ``assigned`` mode), their std,
    and ``largest_part_ratio``: the largest over the mean (1 is perfect balance)."""
    c = np.asarray(list(part_counts), dtype=np.int64)
    mean = float(c.mean()) if c.size else 0.0
    return {"assigned_events": [int(x) for x in c], "assigned_events_std": float(c.std()) if c.size else 0.0,
            "largest_part_ratio": float(c.max() / mean) if mean > 0 else 1.0}
