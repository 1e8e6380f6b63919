"""The partitioned log in time order, as files that every process maps instead of holding.

A shards folder stores its events grouped into buckets by their endpoints' parts, which is what a
rank's training reads.  The full-graph evaluation streams the whole log in time order, and every
PAC rank takes part, so every rank used to gather the buckets into one time-ordered copy in its
own memory (two copies while gathering: 3.2 GB each at 10⁸ events).  Instead, one process writes
the time-ordered columns once (:func:`write_ordered_log`), a window of events at a time, and
every rank maps them read-only (:func:`map_ordered_log`): the log's pages are then the page
cache's, shared by the ranks of a host, read as the evaluation reaches them and given back to
the system when it needs them, rather than each rank's private memory.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Dict

import numpy as np

from ..data.events import Events
from ..data.meta import EventsMeta
from .._util import release_arrays
from ..errors import InputError
from .shards import Shards

# columns written (the stored ids may be int32: Events holds int64, so they are widened on write)
_COLUMNS = ("src", "dst", "t", "eid", "msg", "label")
_WIDEN = ("src", "dst", "eid")
WINDOW = 1 << 21  # events per window while writing (each column's window is held once)


def _dtype(name: str, stored: np.ndarray) -> np.dtype:
    return np.dtype(np.int64) if name in _WIDEN else stored.dtype


def write_ordered_log(shards: Shards, folder, window: int = WINDOW) -> Path:
    """Write the events of ``shards``' split (its first segment) in time order, one ``.npy``
    per column, into ``folder`` (created).

    Each stored bucket holds its events in time order, so a window of event ids
    ``[lo, lo + window)`` is one slice of every bucket (found by a search on its ids); a
    window is filled from those slices and written, so this holds one window of each column,
    never the log.  Checks that every event id of the log is written once.

    Parameters
    ----------
    shards : Shards
    folder : path-like
    window : int
        Events per window.

    Returns
    -------
    pathlib.Path
        ``folder``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    seg = shards.segments[0]
    n = seg.num_events
    arrays = {name: seg.arrays[name] for name in _COLUMNS if name in seg.arrays}
    offsets = np.asarray(seg.offsets, dtype=np.int64)
    eid = arrays["eid"]
    buckets = [(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:]) if b > a]
    for a, b in buckets:  # time order within each bucket is what lets a window be one slice
        ids = eid[a:b]
        for lo in range(0, b - a, WINDOW):
            part = np.asarray(ids[lo:lo + WINDOW + 1])
            if part.size > 1 and np.any(part[1:] <= part[:-1]):
                raise InputError("the stored events of a bucket are not in time order", seg.folder / "eid.npy")
    outs = {name: np.lib.format.open_memmap(folder / f"{name}.npy", mode="w+", dtype=_dtype(name, a),
                                            shape=(n,) + a.shape[1:])
            for name, a in arrays.items()}
    try:
        for lo in range(0, n, window):
            hi = min(lo + window, n)
            pos = []  # (bucket start, slice start, slice end) of the window's events in each bucket
            filled = 0
            for a, b in buckets:
                i, j = (a + int(x) for x in np.searchsorted(eid[a:b], [lo, hi]))
                if j > i:
                    pos.append((i, j))
                    filled += j - i
            if filled != hi - lo:
                raise InputError(f"the stored event ids do not cover {lo}..{hi - 1} once "
                                 f"({filled} events found)", seg.folder / "eid.npy")
            where = [np.asarray(eid[i:j], dtype=np.int64) - lo for i, j in pos]
            for name, a in arrays.items():
                block = np.empty((hi - lo,) + a.shape[1:], dtype=_dtype(name, a))
                for (i, j), w in zip(pos, where):
                    block[w] = a[i:j]
                outs[name][lo:hi] = block
            if not np.array_equal(outs["eid"][lo:hi], np.arange(lo, hi)):
                raise InputError(f"the stored event ids do not cover {lo}..{hi - 1} once", seg.folder / "eid.npy")
            release_arrays(list(arrays.values()) + [eid])  # the shards' pages read for the window
            for out in outs.values():  # let the window's pages go: written, not held
                out.flush()
                out._mmap.madvise(mmap.MADV_DONTNEED)
    finally:
        for out in outs.values():
            out._mmap.close()
    return folder


def map_ordered_log(shards: Shards, folder) -> Events:
    """The events :func:`write_ordered_log` wrote into ``folder``, as an :class:`Events` whose
    columns are read-only memory maps of its files (as ``shards.events("split")`` gives them,
    without holding them)."""
    folder = Path(folder)
    cols: Dict[str, np.ndarray] = {}
    for name in _COLUMNS:
        path = folder / f"{name}.npy"
        if path.exists():
            cols[name] = np.load(path, mmap_mode="r")
    n = shards.segments[0].num_events
    if any(c.shape[0] != n for c in cols.values()) or not {"src", "dst", "t", "eid"} <= set(cols):
        raise InputError(f"not the time-ordered log of {n} events of {shards.path}", folder)
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], eid=cols["eid"], num_nodes=shards.num_nodes,
                  msg=cols.get("msg"), label=cols.get("label"), node_ids=shards.node_ids,
                  bipartite=shards.bipartite, meta=EventsMeta(source=str(shards.path), format="shards"))


def release_pages(events: Events) -> None:
    """Let the pages of ``events``' mapped columns go from this process (``MADV_DONTNEED``):
    they stay in the page cache, and come back from it when next read.  Called after each pass
    over the log, so that a rank's resident memory holds the log only while it streams it.
    Columns held in memory are left alone."""
    release_arrays(getattr(events, name, None) for name in _COLUMNS)
