"""Partitioning a log larger than memory: ``speed partition ... --max-memory SIZE``.

The text is parsed once, block by block, into a binary spill (in the output's temporary
directory, removed at the end); every later step streams over the spill in chunks whose
size follows from the memory budget.  Memory is the per-node state (ids, centrality, SEP's
codes and parts: about 40 bytes a node) plus one chunk, whatever the number of events.

Why more than one pass: SEP needs, before its one assignment pass, the chronological
split (which needs the event count) and the training period's centrality (whose decay is
normalised by the training period's time span, known only once the split is).  So:

1. parse the text: spill raw ``src, dst, t[, label, msg]``; mark the node ids seen;
   check the times ascend; count the events;
2. split points from the spilled times (a few reads), then one pass that renumbers the
   ids in the spill in place, marks the nodes of the val/test events (for the inductive
   hold-out) and sums the centrality of the training events;
3. SEP's assignment over the training events (the same kernel as in memory);
4. the bucket of every event, counted; 5. the shard columns, written bucket by bucket
   (:class:`~speed.partition.columns.BucketColumns`).

The shards are identical, array for array, to those of the in-memory path on the same
input; only the manifest's timings differ.  Unsorted input is refused, naming the first
line whose time is earlier than the line before (sort it first: the message gives a ``sort`` command
for the file's separator and time column).
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from .._util import StageTimer, atomic_dir, full_time, progress_bar
from ..data import _kernels as data_kernels
from ..data.meta import EventsMeta
from ..data.readers import FORMAT_SPECS, RESTART, BlockStream
from ..data.readers.read import time_guess
from ..data.split import DEFAULT_NEW_NODE_FRACTION, DEFAULT_TEST, DEFAULT_VAL, check_fractions, held_out_nodes, \
    SplitPoints, split_points
from ..errors import InputError
from . import _kernels
from .api import DEFAULTS, PartitionResult, check_parts_for_nodes, validate_params
from .balance import balance_stats, spread_shared_chunks
from .centrality import decay_span, select_hubs
from .sep import SepStream
from .columns import BucketColumns
from .metrics import metrics_from_counts
from .shards import SHARDS_MARKERS, build_manifest, part_chunk, write_manifest, write_node_files
from .saved_stream import STATE_FILE, saved_after_partition

NODE_STATE_BYTES = 40  # per node: id map, marks, centrality, SEP code, parts, hold-out masks
CHUNK_BYTES_PER_EVENT = 160  # per event of a chunk: spilled columns, ids, bucket order, gathers
_FIXED_BYTES = 400 << 20  # the interpreter, numpy, numba, pyarrow
_MIN_CHUNK, _MAX_CHUNK = 1 << 16, 1 << 24
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text) -> int:
    """Bytes from ``"3G"``, ``"512M"``, ``"2.5GB"``, ``"1GiB"`` or a plain number of bytes."""
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        value = int(text)
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise InputError(f"max_memory must be a size such as 3G or 512M, got {text!r}")
        value = int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))
    if value <= 0:
        raise InputError(f"max_memory must be positive, got {text!r}")
    return value


def chunk_events(max_memory: int, num_nodes: int, row_bytes: int) -> int:
    """Events per chunk that keep node state plus one chunk within ``max_memory`` bytes."""
    free = max_memory - _FIXED_BYTES - NODE_STATE_BYTES * num_nodes
    per_event = CHUNK_BYTES_PER_EVENT + 2 * row_bytes
    if free < _MIN_CHUNK * per_event:
        need = _FIXED_BYTES + NODE_STATE_BYTES * num_nodes + _MIN_CHUNK * per_event
        raise InputError(f"max_memory {max_memory / 2**30:.2f} GiB is too small for this log: its {num_nodes:,} nodes "
                         f"need about {need / 2**30:.2f} GiB (node state and one chunk)")
    return int(min(_MAX_CHUNK, free // per_event))


# ------------------------------------------------------------------------------ spill
class LogSpill:
    """Raw event columns in flat binary files, appended to and read back by ranges."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir()
        self.files: Dict[str, tuple] = {}
        self.rows = 0

    def reset(self) -> None:
        for fd, *_ in self.files.values():
            os.ftruncate(fd, 0)
        self.rows = 0

    def append(self, block: Dict[str, np.ndarray]) -> None:
        for name, arr in block.items():
            if name not in self.files:
                fd = os.open(self.folder / f"{name}.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
                self.files[name] = (fd, arr.dtype, tuple(arr.shape[1:]))
            fd, dtype, row_shape = self.files[name]
            data = np.ascontiguousarray(arr, dtype=dtype)
            _pwrite_all(fd, memoryview(data.reshape(-1).view(np.uint8)), self.rows * _row_bytes(dtype, row_shape))
        self.rows += next(iter(block.values())).shape[0]

    def read(self, name: str, a: int, b: int) -> np.ndarray:
        fd, dtype, row_shape = self.files[name]
        rb = _row_bytes(dtype, row_shape)
        out = np.empty((b - a, *row_shape), dtype=dtype)
        view = memoryview(out.reshape(-1).view(np.uint8))
        got = 0
        while got < view.nbytes:
            n = os.preadv(fd, [view[got:]], a * rb + got)
            if n <= 0:
                raise OSError(f"spill file {name} is short")
            got += n
        return out

    def write(self, name: str, a: int, arr: np.ndarray) -> None:
        fd, dtype, row_shape = self.files[name]
        data = np.ascontiguousarray(arr, dtype=dtype)
        _pwrite_all(fd, memoryview(data.reshape(-1).view(np.uint8)), a * _row_bytes(dtype, row_shape))

    def memmap(self, name: str) -> np.ndarray:
        fd, dtype, row_shape = self.files[name]
        return np.memmap(self.folder / f"{name}.bin", dtype=dtype, mode="r", shape=(self.rows, *row_shape))

    def close(self) -> None:
        for fd, *_ in self.files.values():
            os.close(fd)
        self.files = {}


def _row_bytes(dtype, row_shape) -> int:
    return np.dtype(dtype).itemsize * int(np.prod(row_shape, dtype=np.int64))


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view.nbytes:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


# ------------------------------------------------------------------------------ ids
class _IdMarks:
    """The integer ids seen so far: a byte per id while ids are small and non-negative
    (grown as they come), else the sorted distinct ids merged block by block."""

    _DENSE_LIMIT = 1 << 32

    def __init__(self):
        self.dense: Optional[np.ndarray] = np.zeros(0, dtype=np.uint8)
        self.sparse: Optional[np.ndarray] = None

    def add(self, ids: np.ndarray) -> None:
        if ids.size == 0:
            return
        if self.dense is not None:
            lo, hi = int(ids.min()), int(ids.max())
            if lo >= 0 and hi < self._DENSE_LIMIT:
                if hi >= self.dense.size:
                    grown = np.zeros(max(hi + 1, int(self.dense.size * 1.5)), dtype=np.uint8)
                    grown[:self.dense.size] = self.dense
                    self.dense = grown
                self.dense[ids] = 1
                return
            self.sparse, self.dense = np.flatnonzero(self.dense).astype(np.int64), None
        self.sparse = np.union1d(self.sparse, ids)

    def values(self) -> np.ndarray:
        """Sorted distinct ids, int64."""
        return np.flatnonzero(self.dense).astype(np.int64) if self.dense is not None else self.sparse

    def mapper(self, offset: int = 0):
        """A function from raw ids to compact ids ``offset + rank``."""
        ids = self.values()
        if self.dense is not None:
            table = np.full(self.dense.size, -1, dtype=np.int64)
            table[ids] = np.arange(offset, offset + ids.size, dtype=np.int64)
            return lambda raw: table[raw]
        return lambda raw: np.searchsorted(ids, raw) + offset


# ------------------------------------------------------------------------------ split
@dataclass
class StreamedSplit(SplitPoints):
    """The chronological split of a log partitioned out of core: the split points, the
    hold-out mask and the count of unmasked training events (no per-event masks)."""

    num_train_masked: int = 0


@dataclass
class LogInfo:
    """What the manifest records of a log that is never held in memory (the parts of
    :class:`~speed.Events` that :func:`~speed.partition.shards.build_manifest` reads)."""

    num_events: int
    num_nodes: int
    bipartite: bool
    msg_dim: int
    label: Optional[bool]
    meta: EventsMeta = field(default_factory=EventsMeta)

    def __len__(self) -> int:
        return self.num_events


# ------------------------------------------------------------------------------ driver
def partition_file(path, out, max_memory, num_parts: int = DEFAULTS["num_parts"], topk: float = DEFAULTS["topk"],
                   beta: float = DEFAULTS["beta"], lam: float = DEFAULTS["lam"], eps: float = DEFAULTS["eps"],
                   seed: int = DEFAULTS["seed"], method: str = DEFAULTS["method"], val: float = DEFAULT_VAL,
                   test: float = DEFAULT_TEST, new_node_fraction: float = DEFAULT_NEW_NODE_FRACTION,
                   overwrite: bool = False, progress: Optional[bool] = None, reader: Optional[dict] = None,
                   split_times=None, balance: Optional[float] = DEFAULTS["balance"]) -> Path:
    """Split, partition (SEP) and write the shards of the log at ``path`` within ``max_memory``.

    The result equals ``read_events`` + ``chronological_split`` + ``partition(split.train(...))``
    + ``save`` (see the module docstring for how, and for what it refuses).

    Parameters
    ----------
    path : path-like
        An event log (any format :func:`speed.read_events` reads) with integer node ids,
        sorted by time.
    out : path-like
        Shards directory to create (atomically).
    max_memory : int or str
        Memory budget, bytes or a size such as ``"3G"``.
    num_parts, topk, beta, lam, eps, seed, method, balance
        As :func:`speed.partition`; only ``method="sep"`` streams.
    val, test, new_node_fraction, split_times
        As :func:`speed.chronological_split` (``seed`` seeds the hold-out, as in the CLI;
        ``split_times`` is its ``times``).
    reader : dict, optional
        Keyword arguments of :class:`~speed.data.readers.BlockStream` (columns, separator,
        header, time format).

    Returns
    -------
    pathlib.Path
    """
    budget = parse_size(max_memory)
    validate_params(num_parts, topk, beta, lam, eps, method, balance)
    if method != "sep":
        raise InputError(f"max_memory (out-of-core) partitions with method 'sep' only, got '{method}'")
    check_fractions(val, test, new_node_fraction)
    timer = StageTimer()
    reader = dict(reader or {})
    if reader.pop("split_col", None) is not None and split_times is None:
        raise InputError("a split column is read in memory only: give the split times (--split-times) "
                         "or partition without max_memory", path)
    source = BlockStream(path, **reader)
    source.check_streamable(has_split_times=split_times is not None)
    with atomic_dir(out, overwrite=overwrite, markers=SHARDS_MARKERS, kind="shards folder") as tmp:
        spill = LogSpill(tmp / ".spill")
        try:
            with timer.stage("read"):
                marks, info = _parse(source, spill, progress)
            with timer.stage("split"):
                sp = _split(spill, val, test, split_times)
            if sp.num_train == 0:
                raise InputError("no events to partition (the training period is empty)", path)
            shards = _Pipeline(source, spill, marks, info, sp, budget, num_parts, timer, progress)
            shards.run(topk, beta, lam, eps, seed, new_node_fraction, balance)
            shards.write(tmp, extra={"out_of_core": {"max_memory": budget, "chunk_events": shards.chunk}})
        finally:
            spill.close()
            for f in (tmp / ".spill").glob("*"):
                f.unlink()
            (tmp / ".spill").rmdir()
    return Path(out)


def _parse(source: BlockStream, spill: LogSpill, progress):
    """Pass 1: text to spill; id marks, order check, label kind."""
    src_marks = _IdMarks()
    dst_marks = _IdMarks()  # separate: bipartite formats number sides apart, others mark both here
    state = {"last_t": -math.inf, "whole_labels": True, "distinct": 0, "whole_times": True}
    size = os.path.getsize(source.path)
    with progress_bar(size, f"read {source.path.name}", unit="B", progress=progress) as bar:
        for block in source.blocks(on_bytes=bar.update):
            if block is RESTART:
                spill.reset()
                src_marks, dst_marks = _IdMarks(), _IdMarks()
                state = {"last_t": -math.inf, "whole_labels": True, "distinct": 0, "whole_times": True}
                continue
            t = block["t"]
            if t.size == 0:
                continue
            if t[0] < state["last_t"]:
                _unsorted(source, spill.rows, t[0], state["last_t"])
            k = int(data_kernels.first_unsorted(t))
            if k >= 0:
                _unsorted(source, spill.rows + k, t[k], t[k - 1])
            if "first_t" not in state and len(t):
                state["first_t"] = float(t[0])
            # distinct times and whether all are whole numbers: the reader's check of a default
            # time column (the log is sorted, so distinct values are the changes along it)
            state["distinct"] += int(np.count_nonzero(t[1:] != t[:-1])) + int(t[0] != state["last_t"])
            state["whole_times"] &= bool(np.all(t == np.round(t)))
            state["last_t"] = float(t[-1])
            if "label" in block:
                lab = block["label"]
                state["whole_labels"] &= bool(np.all(lab == np.round(lab)))
            src_marks.add(block["src"])
            dst_marks.add(block["dst"])
            spill.append(block)
    if spill.rows == 0:
        raise InputError("no events in the file", source.path)
    msg_dim = int(spill.files["msg"][2][0]) if "msg" in spill.files else 0
    info = LogInfo(num_events=spill.rows, num_nodes=0, bipartite=source.bipartite, msg_dim=msg_dim,
                   label=True if "label" in spill.files else None,
                   meta=EventsMeta(source=str(source.path), format=source.fmt, sorted_input=True,
                                   **source.provenance()))
    info.meta.whole_labels = state["whole_labels"]
    info.meta.t_range = (state.get("first_t", state["last_t"]), state["last_t"])
    if not source.time_named and not FORMAT_SPECS[source.fmt].names_time:
        info.meta.time_guess = time_guess(info.meta.columns["t"], spill.rows, 0, state["distinct"],
                                          info.meta.t_range[0], info.meta.t_range[1], state["whole_times"])
    return (src_marks, dst_marks), info


def sort_hint(source: BlockStream) -> str:
    """A ``sort`` command line that orders this text file by its time column (numbers), or ""."""
    lay, col = source.lay, source.cols.get("t")
    if lay is None or col is None or source.text_time or lay.header is not None or source.gz:
        return ""  # parquet, date-times, a header line or gzip: no one-liner sorts it right
    k = int(col) + 1
    sep = {",": "-t, ", ";": "-t';' ", "\t": "-t$'\\t' "}.get(lay.sep, "")  # spaces: sort's own fields
    return f" (e.g. sort {sep}-k{k},{k}g)"


def _unsorted(source: BlockStream, row: int, t, prev) -> None:
    raise InputError(f"time {full_time(t)} is earlier than the previous event's {full_time(prev)}: "
                     "out-of-core partitioning "
                     f"(max_memory) needs the log sorted by time; sort it first{sort_hint(source)} or "
                     f"partition in memory", source.path, source.line_of(row))


def _split(spill: LogSpill, val: float, test: float, times=None) -> StreamedSplit:
    t = spill.memmap("t")
    try:
        val_time, test_time, num_train, num_val, num_test = split_points(t, val, test, times)
    finally:
        del t
    return StreamedSplit(num_train=num_train, num_val=num_val, num_test=num_test, val_time=float(val_time),
                         test_time=float(test_time), new_nodes=np.zeros(0, dtype=bool), seed=0,
                         new_node_fraction=0.0)


class _Pipeline:
    """Passes 2-5 over the spill (see the module docstring)."""

    def __init__(self, source, spill, marks, info, sp, budget, num_parts, timer, progress):
        self.source, self.spill, self.info, self.sp = source, spill, info, sp
        self.num_parts, self.timer, self.progress = num_parts, timer, progress
        src_marks, dst_marks = marks
        self.users = 0
        if source.bipartite:  # users first, then items (the JODIE convention)
            users = src_marks.values()
            self.users = int(users.size)
            self.node_ids = np.concatenate([users, dst_marks.values()])
            self.map_src, self.map_dst = src_marks.mapper(), dst_marks.mapper(users.size)
        else:
            both = _IdMarks()
            for m in (src_marks, dst_marks):
                both.add(m.values())
            self.node_ids = both.values()
            self.map_src = self.map_dst = both.mapper()
            self.src_seen = src_marks
            self.dst_seen = dst_marks
        self.num_nodes = int(self.node_ids.size)
        info.num_nodes = self.num_nodes
        row_bytes = sum(_row_bytes(d, s) for _, d, s in spill.files.values())
        self.chunk = chunk_events(budget, self.num_nodes, row_bytes)

    def _chunks(self, a: int, b: int, desc: str):
        with progress_bar(b - a, desc, progress=self.progress) as bar:
            for lo in range(a, b, self.chunk):
                hi = min(b, lo + self.chunk)
                yield lo, hi
                bar.update(hi - lo)

    def run(self, topk, beta, lam, eps, seed, new_node_fraction, balance=DEFAULTS["balance"]) -> None:
        sp, n, ne = self.sp, self.num_nodes, self.info.num_events
        num_train = sp.num_train
        with self.timer.stage("centrality"):
            # pass 2: renumber ids in the spill, hold-out marks, centrality, input statistics
            in_later = np.zeros(n, dtype=bool)
            present = np.zeros(n, dtype=bool)
            cent = np.zeros(n, dtype=np.float64)
            t0 = float(self.spill.read("t", 0, 1)[0])
            t_last = float(self.spill.read("t", num_train - 1, num_train)[0]) if num_train else t0
            t_max, span = decay_span(t0, t_last)
            self_loops = dups = 0
            tail = None  # the previous chunk's last run of equal times, for duplicates across chunks
            for lo, hi in self._chunks(0, ne, "ids + centrality"):
                src = self.map_src(self.spill.read("src", lo, hi))
                dst = self.map_dst(self.spill.read("dst", lo, hi))
                t = self.spill.read("t", lo, hi)
                self.spill.write("src", lo, src)
                self.spill.write("dst", lo, dst)
                self_loops += int(np.count_nonzero(src == dst))
                dups += _duplicates(src, dst, t, n, tail)
                run = int(np.searchsorted(t, t[-1], side="left"))
                if run == 0 and tail is not None and tail[2][0] == t[0]:  # one run across whole chunks
                    tail = tuple(np.concatenate([x, y]) for x, y in zip(tail, (src, dst, t)))
                else:
                    tail = (src[run:], dst[run:], t[run:])
                m = max(0, min(hi, num_train) - lo)  # training events of this chunk
                if m:
                    present[src[:m]] = True
                    present[dst[:m]] = True
                    _kernels.centrality_add(src[:m], dst[:m], t[:m], float(beta), t_max, span, cent)
                if hi > num_train:
                    in_later[src[m:]] = True
                    in_later[dst[m:]] = True
            sp.new_nodes = held_out_nodes(in_later, new_node_fraction, seed, n)  # every mapped id occurs
            sp.seed, sp.new_node_fraction = seed, new_node_fraction
            del in_later
            hubs = select_hubs(cent, present, topk)
        if not self.source.bipartite:
            # bipartite if no node is both a source and a destination (as Events.from_arrays decides)
            s_ids, d_ids = self.src_seen.values(), self.dst_seen.values()
            self.info.bipartite = not bool(np.intersect1d(s_ids, d_ids, assume_unique=True).size)
        self.info.meta.update(self_loops=self_loops, duplicate_events=dups)

        check_parts_for_nodes(self.num_parts, int(np.count_nonzero(present)))
        with self.timer.stage("assign"):
            # pass 3: SEP's stream over the training events
            stream = SepStream(n, self.num_parts, cent, hubs, lam, eps, balance, num_train)
            masked = 0
            for lo, hi in self._chunks(0, num_train, "SEP assign"):
                src = self.spill.read("src", lo, hi)
                dst = self.spill.read("dst", lo, hi)
                event_part = np.empty(hi - lo, dtype=np.int32)
                stream.feed(src, dst, event_part)
                masked += int(np.count_nonzero(~(sp.new_nodes[src] | sp.new_nodes[dst])))
                self._part(lo, event_part)
            node_parts = stream.finish(self.num_parts)
            stream_stats = stream.stats()
            stream.decay = (float(beta), t_max, span)
            self.stream = stream
            if balance is not None:
                bounds = [(lo, min(num_train, lo + self.chunk)) for lo in range(0, num_train, self.chunk)]
                spread_shared_chunks(lambda: ((self.spill.read("src", lo, hi), self.spill.read("dst", lo, hi),
                                               self.spill.read("part", lo, hi)) for lo, hi in bounds),
                                     node_parts, self.num_parts,
                                     write=lambda i, part: self.spill.write("part", bounds[i][0], part))
            part_counts = np.zeros(self.num_parts, dtype=np.int64)
            for lo, hi in self._chunks(0, num_train, "part loads"):
                part = self.spill.read("part", lo, hi)
                part_counts += np.bincount(part[part >= 0], minlength=self.num_parts)
            sp.num_train_masked = masked

        with self.timer.stage("metrics"):
            # pass 4: events per bucket, for the training events and for all
            nb = _kernels.num_buckets(self.num_parts)
            first = np.zeros(nb, dtype=np.int64)
            total = np.zeros(nb, dtype=np.int64)
            for lo, hi in self._chunks(0, ne, "buckets"):
                f, a = _kernels.bucket_counts(self.spill.read("src", lo, hi), self.spill.read("dst", lo, hi),
                                              node_parts, self.num_parts, max(0, num_train - lo))
                first += f
                total += a
            stats = metrics_from_counts(present, node_parts, first, self.num_parts, num_train)
        self.present, self.first_counts = present, first
        stats.update(stream_stats)
        stats.update(balance_stats(part_counts))
        self.counts = total
        self.result = PartitionResult(
            node_parts=node_parts, shared=np.flatnonzero(node_parts == _kernels.SHARED).astype(np.int64),
            num_parts=self.num_parts, method="sep",
            params={"topk": topk, "beta": beta, "lam": lam, "eps": eps, "balance": balance, "seed": seed},
            stats=stats, events=None, event_part=None, centrality=cent, hubs=hubs)

    def _part(self, lo: int, event_part: np.ndarray) -> None:
        if "part" not in self.spill.files:
            fd = os.open(self.spill.folder / "part.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            self.spill.files["part"] = (fd, np.dtype(np.int32), ())
        self.spill.write("part", lo, event_part)

    def write(self, folder: Path, extra: dict) -> None:
        """Pass 5: the shard columns, then the node files and the manifest."""
        sp, ne, num_train = self.sp, self.info.num_events, self.sp.num_train
        start = time.perf_counter()
        fits = {"src": self.num_nodes <= np.iinfo(np.int32).max, "dst": self.num_nodes <= np.iinfo(np.int32).max,
                "eid": ne <= np.iinfo(np.int32).max}
        specs = {name: (np.dtype(np.int32 if fits[name] else np.int64), ()) for name in ("src", "dst")}
        specs["t"] = (np.dtype(np.float64), ())
        specs["eid"] = (np.dtype(np.int32 if fits["eid"] else np.int64), ())
        whole, self.info.meta.whole_labels = self.info.meta.whole_labels, None  # (not a fact for the manifest)
        if "label" in self.spill.files:
            specs["label"] = (np.dtype(np.int64 if whole else np.float64), ())
        if "msg" in self.spill.files:
            specs["msg"] = (np.dtype(np.float32), self.spill.files["msg"][2])
        specs["part"] = (np.dtype(np.int32), ())
        node_parts = self.result.node_parts
        (folder / "events").mkdir()
        bid = np.empty(self.chunk, dtype=_kernels.bucket_dtype(self.num_parts))
        with BucketColumns(folder / "events", self.counts, specs) as cols:
            for lo, hi in self._chunks(0, ne, "write shards"):
                src, dst = self.spill.read("src", lo, hi), self.spill.read("dst", lo, hi)
                _kernels.bucket_ids(src, dst, node_parts, self.num_parts, bid[:hi - lo])
                chunk = {"src": src, "dst": dst, "t": self.spill.read("t", lo, hi),
                         "eid": np.arange(lo, hi, dtype=np.int64)}
                for name in ("label", "msg"):
                    if name in specs:
                        chunk[name] = self.spill.read(name, lo, hi)
                if lo < num_train:
                    chunk["part"] = part_chunk(self.spill.read("part", lo, min(hi, num_train)), 0, hi - lo)
                else:
                    chunk["part"] = part_chunk(None, 0, hi - lo)
                cols.write(bid[:hi - lo], {k: chunk[k] for k in specs})
        write_node_files(folder, self.result, self.node_ids, sp, self.counts)
        is_src = np.arange(self.num_nodes) < self.users if self.source.bipartite else None
        saved_after_partition(self.stream, node_parts, self.present, self.result.hubs,
                              self.result.stats["assigned_events"], self.first_counts, num_train,
                              float(self.result.params["topk"]), is_src).save(folder / STATE_FILE)
        self.result.stream = self.stream
        self.timer.seconds["write"] = time.perf_counter() - start
        self.result.stats["seconds"] = self.timer.rounded()
        manifest = build_manifest(self.result, self.info, sp, extra, num_train_events=num_train)
        write_manifest(folder, manifest)


def _duplicates(src, dst, t, num_nodes, tail) -> int:
    """Duplicate events of a chunk, counting repeats of the previous chunk's last run of
    equal times (whose own repeats were counted with that chunk)."""
    if tail is None or tail[2][0] != t[0]:
        return int(data_kernels.count_duplicate_events(src, dst, t, num_nodes))
    ts, td, tt = tail
    both = int(data_kernels.count_duplicate_events(np.concatenate([ts, src]), np.concatenate([td, dst]),
                                                   np.concatenate([tt, t]), num_nodes))
    return both - int(data_kernels.count_duplicate_events(ts, td, tt, num_nodes))
