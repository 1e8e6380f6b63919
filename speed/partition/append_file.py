"""Appending a file to shards (``speed partition MORE -o SHARDS --append``): read in memory, or
streamed from disk within a memory budget (``--max-memory``), with the same result.

The appending itself is :mod:`speed.partition.append`; this module reads the file.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from .._util import StageTimer, full_time
from ..errors import InputError
from .append import (ChunkSource, stored_node_index, sweep_versions, append_events, check_appendable, check_columns,
                     already_stored, check_header, append_lock, check_whole_times, commit, continue_stream,
                     last_time, write_version)
from .shards import Shards
from .saved_stream import SavedStream


def append_file(path, shards, progress: Optional[bool] = None, max_memory=None, sort: bool = True,
                reader: Optional[dict] = None) -> Dict:
    """Append the events of the file at ``path`` to ``shards`` (``speed partition ... --append``).

    ``max_memory`` streams the file from disk in chunks (:class:`SpillSource`) instead of reading
    it whole; it needs integer node ids and time-sorted input.  Returns the new manifest.
    """
    from ..data.readers import read_events

    if not Path(shards).is_dir():
        raise InputError("no shards folder here to append to", shards)
    if max_memory is not None:
        return append_out_of_core(path, shards, max_memory, progress, reader)
    events = read_events(path, sort=sort, progress=progress, **(reader or {}))
    manifest = append_events(shards, events, progress=progress)[0]
    return manifest


# ------------------------------------------------------------------------------ out of core
class SpillSource(ChunkSource):
    """New events streamed from a file into a binary spill, read back by ranges and mapped to
    shard ids on the way (:func:`append_out_of_core`)."""

    def __init__(self, spill, index, t_dtype, columns, chunk: int):
        self.spill, self.index, self.t_dtype, self.names, self.chunk = spill, index, t_dtype, columns, chunk
        self.num_events = spill.rows

    def columns(self, lo: int, hi: int) -> Dict[str, np.ndarray]:
        out = {"src": self.index.lookup(self.spill.read("src", lo, hi), "src"),
               "dst": self.index.lookup(self.spill.read("dst", lo, hi), "dst"),
               "t": self.spill.read("t", lo, hi).astype(self.t_dtype, copy=False)}
        for name, dtype in self.names.items():
            out[name] = self.spill.read(name, lo, hi).astype(dtype, copy=False)
        return out


def append_out_of_core(path, shards_path, max_memory, progress: Optional[bool] = None,
                       reader: Optional[dict] = None) -> Dict:
    """:func:`append_events` for a file streamed from disk within ``max_memory`` bytes: memory
    is the per-node state plus one chunk.  The result is identical, array for array, to
    appending the file read in memory (new ids are numbered the same way)."""
    with append_lock(shards_path):
        return _append_out_of_core(path, shards_path, max_memory, progress, reader)


def _append_out_of_core(path, shards_path, max_memory, progress: Optional[bool], reader: Optional[dict]) -> Dict:
    from ..data.readers import RESTART, BlockStream
    from .outofcore import LogSpill, chunk_events, parse_size

    started = time.perf_counter()
    timer = StageTimer()
    budget = parse_size(max_memory)
    shards = Shards(shards_path)
    state_path = check_appendable(shards)
    source = BlockStream(path, **{k: v for k, v in (reader or {}).items() if k != "split_col"})
    source.check_streamable(has_split_times=True)
    check_header(shards, source.provenance()["columns"], source.path)
    t_last = last_time(shards)
    root = Path(shards_path)
    sweep_versions(root, int(shards.manifest.get("version", 1)))
    tmp = Path(tempfile.mkdtemp(prefix=".append-", dir=root))
    spill = None
    try:
        spill = LogSpill(tmp / ".spill")
        saved = SavedStream.load(state_path, 0)  # (continue_stream sets the capacity's floor)
        index = stored_node_index(shards, saved)
        with timer.stage("read"):
            # pass 1: the file into the spill; order checks; the ids the shards do not know
            new_src, new_dst = [], []
            last = -math.inf
            for block in source.blocks():
                if block is RESTART:
                    spill.reset()
                    new_src, new_dst, last = [], [], -math.inf
                    continue
                t = block["t"]
                if t.size == 0:
                    continue
                bad = np.flatnonzero((t < t_last) | np.r_[t[0] < last, t[1:] < t[:-1]])
                if bad.size:
                    k = int(bad[0])
                    prev = last if k == 0 else float(t[k - 1])
                    why = (f"earlier than the shards' last event ({full_time(t_last)}): only later events can be "
                           "appended (equal times are allowed)") if t[k] < t_last else \
                        (f"earlier than the previous event's {full_time(prev)}: an out-of-core append (max_memory) "
                         "needs the file sorted by time")
                    raise InputError(f"time {full_time(t[k])} is {why}", source.path, source.line_of(spill.rows + k))
                last = float(t[-1])
                new_src.append(np.unique(block["src"][index.lookup(block["src"], "src") < 0]))
                new_dst.append(np.unique(block["dst"][index.lookup(block["dst"], "dst") < 0]))
                spill.append(block)
            if spill.rows == 0:
                raise InputError("no events to append", source.path)
            if (saved.is_src is not None) != source.bipartite:
                raise InputError("these events number sources and destinations apart and the shards do not, or the "
                                 "other way round (read them in the format the shards were partitioned from)",
                                 source.path)
            # new ids numbered as the in-memory append numbers them: sources first, then destinations
            index.rows(np.unique(np.concatenate(new_src)), "src")
            _, num_nodes = index.rows(np.unique(np.concatenate(new_dst)), "dst")
            base = shards.segments[0].arrays
            msg_dim = int(spill.files["msg"][2][0]) if "msg" in spill.files else 0
            check_columns(shards, "label" in spill.files, msg_dim, source.path)
            names = {name: base[name].dtype for name in ("label", "msg") if name in base}
            tt = spill.memmap("t")
            check_whole_times(shards, tt, source.path, lambda k: source.line_of(k))
            # the events at the shards' last time come first: any the shards hold already is refused
            # (in memory they are left out; here that would mean rewriting the spill)
            boundary = int(np.searchsorted(tt, t_last, side="right"))
            del tt
            for lo in range(0, boundary, 1 << 20):
                hi = min(lo + (1 << 20), boundary)
                again = already_stored(shards, index.lookup(spill.read("src", lo, hi), "src"),
                                       index.lookup(spill.read("dst", lo, hi), "dst"),
                                       spill.read("t", lo, hi).astype(np.float64), t_last)
                if again.any():
                    k = lo + int(np.argmax(again))
                    raise InputError(f"this event is stored already (at the shards' last time, {full_time(t_last)}): "
                                     "an out-of-core append (max_memory) stores every event of the file, so remove "
                                     "those the shards hold, or append in memory, which leaves them out",
                                     source.path, source.line_of(k))
        saved.is_src = None if saved.is_src is None else (index.sides == "src")
        row_bytes = sum(np.dtype(d).itemsize * int(np.prod(s, dtype=np.int64)) for _, d, s in spill.files.values())
        chunk = chunk_events(budget, num_nodes, row_bytes)
        src = SpillSource(spill, index, base["t"].dtype, names, chunk)
        event_part = np.lib.format.open_memmap(tmp / ".spill" / "event_part.npy", mode="w+", dtype=np.int32,
                                               shape=(spill.rows,))
        t0, t1 = float(spill.read("t", 0, 1)[0]), float(spill.read("t", spill.rows - 1, spill.rows)[0])
        node_parts, stats = continue_stream(saved, src, num_nodes, shards.num_parts, t1, event_part, progress, timer)
        out = tmp / "version"
        out.mkdir()
        manifest = write_version(shards, saved, src, node_parts, index.ids, event_part, stats, (t0, t1), timer,
                                 progress, out, started, origin=str(path))
        manifest["appends"][-1]["out_of_core"] = {"max_memory": budget, "chunk_events": chunk}
        del event_part
        spill.close()
        spill = None
        commit(shards, out, manifest)
    finally:
        if spill is not None:
            spill.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest
