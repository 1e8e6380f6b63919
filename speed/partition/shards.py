"""The shard format: writing partitioned events and reading any group of parts back.

Layout of a shards directory::

    manifest.json        metrics, parameters, split, layout version
    nodes.npz            node_parts (int64, -1 = shared), centrality, hubs, node_ids,
                         new_nodes (inductive held-out nodes)
    events/{src,dst,t,eid[,label,msg]}.npy
                         every stored event, grouped into buckets by the unordered pair of
                         its endpoints' codes (0 = shared, p + 1 = part p), each bucket in
                         time order; src, dst and eid are int32 when they fit
    events/offsets.npy   int64 (num_buckets + 1,), bucket boundaries
    events/part.npy      int32, the part the partitioner assigned each event to (-1: cut,
                         or not partitioned: val/test), same order as the other arrays

A group of parts G is the node-induced sub-graph of ``V_G ∪ S``: the buckets whose two
codes both lie in ``{0} ∪ {p + 1 : p in G}``.  Event arrays are memory-mapped, so a
group reads only its own buckets, and the cut events between the parts of G come back.

Sub-graph modes of a group (``merge(..., subgraph=...)``):

* ``induced`` -- the node-induced sub-graph above (the paper's definition).  Events between
  two shared nodes (bucket (0, 0)) are in every group.
* ``assigned`` -- the same, except that of the shared-shared events a group keeps those the
  partitioner assigned to one of its parts.  Groups that cover the parts then hold every
  training event once (apart from cut events between groups).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import numpy as np

from .._util import atomic_dir, jsonable, progress_bar, release_arrays
from ..data.events import Events
from ..data.meta import EventsMeta
from ..errors import InputError
from . import _kernels
from .columns import BucketColumns
from .saved_stream import STATE_FILE, saved_after_partition

FORMAT_VERSION = 1
APPENDED_VERSION = 2  # shards with appended segments: an older reader must refuse them, not read a part
READ_VERSIONS = (FORMAT_VERSION, APPENDED_VERSION)
# periods of merge()/events(): "split" is the log the split covers (train, val and test: the first
# segment), "train" and "eval" its parts, "appended" the events appended since
PERIODS = ("all", "train", "eval", "split", "appended")
SUBGRAPHS = ("induced", "assigned")
_EVENT_ARRAYS = ("src", "dst", "t", "eid", "label", "msg")
_ID_ARRAYS = ("src", "dst", "eid")
_CHUNK = 1 << 22  # events per read when a whole stored array is scanned
_INT32_MAX = np.iinfo(np.int32).max


def _fits_int32(events: Events, name: str) -> bool:
    bound = events.num_nodes if name in ("src", "dst") else (int(events.eid.max()) + 1 if len(events) else 0)
    return bound <= _INT32_MAX



def _time_range(events) -> dict:
    """``t_min``/``t_max`` of a log: from its times, or from ``meta.t_range`` when the log
    was streamed (out of core) and never held."""
    if events.meta.t_range is not None:
        lo, hi = events.meta.t_range
    elif hasattr(events, "t_float") and len(events):
        t = events.t_float()
        lo, hi = t[0], t[-1]
    else:
        return {}
    return {"t_min": float(lo), "t_max": float(hi)}

def build_manifest(result, events: Events, split=None, extra: Optional[dict] = None,
                   num_train_events: Optional[int] = None) -> dict:
    """The manifest dictionary for ``result`` stored with ``events``.

    ``num_train_events`` (the partitioned events) defaults to ``len(result.events)``.
    """
    st = result.stats
    manifest = {
        "format_version": FORMAT_VERSION,
        "num_events": len(events),
        "num_train_events": len(result.events) if num_train_events is None else num_train_events,
        "num_nodes": int(events.num_nodes),
        "num_parts": result.num_parts,
        "method": result.method,
        "params": dict(result.params),
        "replication_factor": st["replication_factor"],
        "edge_cut": st["edge_cut"],
        "shared_nodes": st["shared_nodes"],
        "part_events": st["part_events"],
        "part_nodes": st["part_nodes"],
        "stream_loads": st.get("stream_loads"),
        "seconds": dict(st.get("seconds", {})),
    }
    manifest.update({k: v for k, v in st.items() if k not in manifest})
    manifest["input"] = {
        "source": events.meta.source,
        "format": events.meta.format,
        "sorted_input": events.meta.sorted_input,
        "self_loops": events.meta.self_loops,
        "duplicate_events": events.meta.duplicate_events,
        "bipartite": bool(events.bipartite),
        "msg_dim": events.msg_dim,
        "has_label": events.label is not None,
        **{k: getattr(events.meta, k) for k in ("columns", "out_of_order_rows", "time_text", "time_guess")
           if getattr(events.meta, k) is not None},
        **_time_range(events),
    }
    if split is not None:
        manifest["split"] = split.summary()
    manifest["layout"] = {
        "codes": "0 = shared node, p + 1 = part p",
        "bucket": "a * (P + 1) - a * (a - 1) // 2 + (b - a) for codes a <= b",
        "num_buckets": _kernels.num_buckets(result.num_parts),
        "event_part": "events/part.npy: the part each event was assigned to, -1 for cut or later events",
    }
    if getattr(result, "stream", None) is not None:
        manifest["version"] = 1
        manifest["sep_state"] = STATE_FILE
    if extra:
        manifest.update(extra)
    return jsonable(manifest)


_WRITE_CHUNK = 1 << 22  # events grouped and written at a time: memory is O(chunk), not O(log)


def column_specs(events: Events) -> dict:
    """``name -> (dtype, row_shape)`` of the stored event columns of ``events``."""
    specs = {}
    for name in _EVENT_ARRAYS:
        arr = getattr(events, name)
        if arr is None:
            continue
        dtype = np.int32 if name in _ID_ARRAYS and _fits_int32(events, name) else arr.dtype  # narrow ids
        specs[name] = (np.dtype(dtype), tuple(arr.shape[1:]))
    specs["part"] = (np.dtype(np.int32), ())
    return specs


def part_chunk(event_part: Optional[np.ndarray], a: int, b: int) -> np.ndarray:
    """``events/part.npy`` rows ``[a, b)``: the partitioned events' parts, DROPPED after them."""
    part = np.full(b - a, _kernels.DROPPED, dtype=np.int32)
    if event_part is not None and a < event_part.size:
        known = event_part[a:min(b, event_part.size)]
        part[:known.size] = known
    return part


# a folder holding this is a shards folder: --overwrite may replace it
SHARDS_MARKERS = ("manifest.json",)


def write_shards(path, result, events: Optional[Events] = None, split=None, overwrite: bool = False,
                 progress: Optional[bool] = None, extra: Optional[dict] = None) -> Path:
    """Write ``result`` (a :class:`~speed.partition.api.PartitionResult`) as shards.

    The directory is built under a temporary name and renamed into place, so a failure
    leaves nothing behind.  See the module docstring for the layout.
    """
    events = result.events if events is None else events
    if events.num_nodes != result.node_parts.shape[0]:
        raise InputError(f"events have {events.num_nodes} nodes but the partition has {result.node_parts.shape[0]}")
    start = time.perf_counter()
    node_parts = result.node_parts
    n = len(events)
    bid = np.empty(n, dtype=_kernels.bucket_dtype(result.num_parts))
    counts = _kernels.bucket_ids(events.src, events.dst, node_parts, result.num_parts, bid)
    with atomic_dir(path, overwrite=overwrite, markers=SHARDS_MARKERS, kind="shards folder") as tmp:
        (tmp / "events").mkdir()
        specs = column_specs(events)
        with BucketColumns(tmp / "events", counts, specs) as cols, \
                progress_bar(n, "write shards", progress=progress) as bar:
            for a in range(0, n, _WRITE_CHUNK):
                b = min(n, a + _WRITE_CHUNK)
                chunk = {name: getattr(events, name)[a:b] for name in specs if name != "part"}
                chunk["part"] = part_chunk(result.event_part, a, b)
                cols.write(bid[a:b], chunk)
                bar.update(b - a)
        write_node_files(tmp, result, events.node_ids, split, counts)
        if result.stream is not None:
            n_part = len(result.events)
            nb = _kernels.num_buckets(result.num_parts)
            is_src = np.arange(events.num_nodes) <= int(events.src.max()) if numbers_sides_apart(events.meta) else None
            saved_after_partition(result.stream, node_parts, result.events.node_mask(), result.hubs,
                                  result.stats["assigned_events"], np.bincount(bid[:n_part], minlength=nb),
                                  n_part, float(result.params["topk"]), is_src).save(tmp / STATE_FILE)
        manifest = build_manifest(result, events, split, extra)
        manifest["seconds"]["write"] = round(time.perf_counter() - start, 4)
        write_manifest(tmp, manifest)
    return Path(path)


def numbers_sides_apart(meta: EventsMeta) -> bool:
    """Whether a log's reader numbered sources and destinations apart (JODIE's format), so one
    id may name a source and a destination that are different nodes."""
    from ..data.readers.formats import FORMAT_SPECS

    spec = FORMAT_SPECS.get(meta.format)
    return bool(spec is not None and spec.bipartite)


def write_node_files(folder: Path, result, node_ids: Optional[np.ndarray], split, counts: np.ndarray) -> None:
    """``events/offsets.npy`` from the bucket sizes, and ``nodes.npz``."""
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    np.save(folder / "events" / "offsets.npy", offsets)
    nodes = {"node_parts": result.node_parts}
    if result.centrality is not None:
        nodes["centrality"] = result.centrality
    if result.hubs is not None:
        nodes["hubs"] = result.hubs
    if node_ids is not None:
        nodes["node_ids"] = node_ids.astype(str) if node_ids.dtype == object else node_ids
    if split is not None:
        nodes["new_nodes"] = split.new_nodes
    np.savez(folder / "nodes.npz", **nodes)


def write_manifest(folder: Path, manifest: dict) -> None:
    with open(folder / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


def _whole(m: dict, key: str, where, low: int = 0, high: Optional[int] = None, label: Optional[str] = None) -> int:
    v = m.get(key)
    name = label or key
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(f"{name} is {v!r}, not a whole number", where)
    if v < low:
        raise InputError(f"{name} is {v:,}, below {low:,}", where)
    if high is not None and v > high:
        raise InputError(f"{name} is {v:,}, above {high:,}", where)
    return v


def _plain_name(v, name: str, where) -> str:
    """A file or folder name inside the shards folder: no path, no way out of it."""
    if not isinstance(v, str) or not v or v in (".", "..") or "/" in v or "\\" in v or "\0" in v:
        raise InputError(f"{name} is {v!r}: the manifest names files inside the shards folder only", where)
    return v


def check_manifest(m: dict, where) -> None:
    """Refuse a manifest whose entries have the wrong type, contradict each other, or name a
    file outside its folder (:class:`~speed.InputError` naming the entry): a shards folder may
    come from anyone, and its manifest is read before any array."""
    if not isinstance(m, dict):
        raise InputError("manifest.json is not a JSON object", where)
    _whole(m, "num_parts", where, 1, 32767)
    _whole(m, "num_nodes", where, 0)
    events = _whole(m, "num_events", where, 0)
    _whole(m, "num_train_events", where, 0, events)
    for key in ("split", "input", "params", "layout"):
        if key in m and m[key] is not None and not isinstance(m[key], dict):
            raise InputError(f"{key} is {type(m[key]).__name__}, not an object", where)
    split = m.get("split")
    if isinstance(split, dict):
        counts = [_whole(split, k, where, 0, events, f"split.{k}")
                  for k in ("num_train_events", "num_val_events", "num_test_events") if k in split]
        if sum(counts) > events:
            raise InputError(f"split counts {sum(counts):,} events, the manifest {events:,}", where)
        for k in ("val_time", "test_time", "new_node_fraction"):
            if k in split and (isinstance(split[k], bool) or not isinstance(split[k], (int, float))):
                raise InputError(f"split.{k} is {split[k]!r}, not a number", where)
    for key in ("nodes_file", "sep_state"):
        if m.get(key) is not None:
            _plain_name(m[key], key, where)
    segments = m.get("segments")
    if segments is not None:
        if not isinstance(segments, list) or not segments:
            raise InputError("segments is not a list of segments", where)
        for i, seg in enumerate(segments):
            if not isinstance(seg, dict):
                raise InputError(f"segments[{i}] is not an object", where)
            _plain_name(seg.get("dir"), f"segments[{i}].dir", where)
            _whole(seg, "first_eid", where, 0, events, f"segments[{i}].first_eid")
            _whole(seg, "num_events", where, 0, events, f"segments[{i}].num_events")


class Shards:
    """A shards directory opened for reading (see :func:`load_shards`).

    Attributes
    ----------
    path : pathlib.Path
    manifest : dict
    num_parts : int
    num_nodes : int
    node_parts : int64 ndarray, shape (num_nodes,)
    shared : int64 ndarray, shape (S,)
    node_ids : ndarray, shape (num_nodes,), optional
    new_nodes : bool ndarray, shape (num_nodes,), optional
    """

    def __init__(self, path):
        self.path = Path(path)
        mpath = self.path / "manifest.json"
        if not mpath.is_file():
            raise InputError("not a shards directory (no manifest.json)", self.path)
        try:
            with open(mpath) as f:
                self.manifest = json.load(f)
        except json.JSONDecodeError as exc:
            raise InputError(f"manifest.json is not valid JSON: {exc}", mpath, exc.lineno) from None
        if self.manifest.get("format_version") not in READ_VERSIONS:
            raise InputError(f"unsupported shard format {self.manifest.get('format_version')!r} (this version reads "
                             f"formats {', '.join(map(str, READ_VERSIONS))})", mpath)
        missing = [k for k in ("num_parts", "num_nodes", "num_events", "num_train_events") if k not in self.manifest]
        if missing:
            raise InputError(f"manifest.json lacks {', '.join(missing)}", mpath)
        check_manifest(self.manifest, mpath)
        self.num_parts = int(self.manifest["num_parts"])
        self.num_nodes = int(self.manifest["num_nodes"])
        npz = self.path / self.manifest.get("nodes_file", "nodes.npz")
        try:
            with np.load(npz) as z:
                self.node_parts = z["node_parts"]
                self.node_ids = z["node_ids"] if "node_ids" in z else None
                self.new_nodes = z["new_nodes"] if "new_nodes" in z else None
                self.centrality = z["centrality"] if "centrality" in z else None
        except FileNotFoundError:
            raise InputError("missing file", npz) from None
        except Exception as exc:  # truncated zip, or no node_parts in it
            raise InputError(f"unreadable ({type(exc).__name__}: {exc})", npz) from None
        if self.node_parts.shape != (self.num_nodes,):
            raise InputError(f"node_parts has shape {self.node_parts.shape}, expected ({self.num_nodes},)", npz)
        self.shared = np.flatnonzero(self.node_parts == _kernels.SHARED).astype(np.int64)
        listed = self.manifest.get("segments") or [{"dir": "events", "first_eid": 0, "num_events": self.num_events}]
        self.segments = [_Segment.open(self.path, seg, self.num_parts) for seg in listed]
        if sum(seg.num_events for seg in self.segments) != self.num_events:
            raise InputError(f"the segments hold {sum(seg.num_events for seg in self.segments)} events, the manifest "
                             f"says {self.num_events}", mpath)
        # the partitioned log's own arrays (the first segment: every training-period event is there)
        base = self.segments[0]
        self.offsets, self._arrays, self._part = base.offsets, base.arrays, base.part

    @property
    def event_columns(self) -> Dict[str, np.ndarray]:
        """The partitioned log's event columns (memory-mapped arrays of the first segment), by
        name: ``src``, ``dst``, ``t``, ``eid``, and ``msg``, ``label`` where stored."""
        return self._arrays

    def release_pages(self) -> None:
        """Let the pages of the mapped event columns go from this process (they stay in the
        page cache): once a PAC rank has read its sub-graph and trained, it does not read them
        again before the next epoch."""
        release_arrays([seg.part for seg in self.segments]
                       + [a for seg in self.segments for a in seg.arrays.values()])

    def require_trainable(self) -> None:
        """Refuse shards whose split leaves a period empty (see :meth:`Split.require_trainable`)."""
        from ..data.split import require_periods

        sp = self.manifest.get("split")
        if sp is None:
            raise InputError("the shards were written without a split (use `speed partition`, or "
                             "PartitionResult.save(..., split=...))", self.path)
        masked = sp.get("num_train_events_masked", sp["num_train_events"])
        require_periods(int(sp["num_train_events"]), int(masked), int(sp["num_val_events"]),
                        int(sp["num_test_events"]), self.path)

    @property
    def num_events(self) -> int:
        return int(self.manifest["num_events"])

    @property
    def num_train_events(self) -> int:
        return int(self.manifest["num_train_events"])

    def _buckets(self, parts: Iterable[int]) -> List[int]:
        codes = sorted({0} | {int(p) + 1 for p in parts})
        return [int(_kernels.bucket_id(a, b, self.num_parts)) for i, a in enumerate(codes) for b in codes[i:]]

    def merge(self, parts: Iterable[int], period: str = "all", subgraph: str = "induced",
              features: bool = True) -> Events:
        """The sub-graph of the union of ``parts`` and the shared nodes.

        Parameters
        ----------
        parts : iterable of int
            Part ids in ``[0, num_parts)``.
        period : {"all", "train", "eval", "split", "appended"}
            All stored events; the training period's (partitioned at first); the validation and
            test periods'; those three (the log the split covers); or the events appended since.
        subgraph : {"induced", "assigned"}
            Node-induced, or node-induced but keeping only the shared-shared events assigned
            to one of ``parts`` (see the module docstring).
        features : bool
            Also gather the edge features and labels (a PAC rank reads features by event id
            instead, :meth:`feature_rows`).

        Returns
        -------
        Events
            Chronological, in the node ids of the full log, with the original ``eid``.
        """
        parts = [int(p) for p in parts]
        bad = [p for p in parts if not 0 <= p < self.num_parts]
        if bad:
            raise InputError(f"part {bad[0]} out of range (the shards have {self.num_parts} parts)", self.path)
        if subgraph not in SUBGRAPHS:
            raise InputError(f"subgraph must be one of {', '.join(SUBGRAPHS)}, got {subgraph!r}")
        wanted = self._buckets(parts)
        shared_pair = int(_kernels.bucket_id(0, 0, self.num_parts))
        selectors = []
        for seg in self.segments:  # each segment's events lie in the buckets of its own node parts
            chosen = [slice(int(seg.offsets[b]), int(seg.offsets[b + 1])) for b in wanted]
            if subgraph == "assigned" and seg.offsets[shared_pair + 1] > seg.offsets[shared_pair]:
                if seg.part is None:
                    raise InputError("these shards do not record which part each event was assigned to (written by "
                                     "an older version): re-partition them, or use subgraph 'induced'", self.path)
                lo, hi = int(seg.offsets[shared_pair]), int(seg.offsets[shared_pair + 1])
                chosen[wanted.index(shared_pair)] = lo + np.flatnonzero(np.isin(seg.part[lo:hi], parts))
            selectors.append(chosen)
        return self._gather(selectors, period, None if features else ("src", "dst", "t", "eid"))

    def train_counts(self):
        """Training events per bucket, and the shared–shared ones per assigned part.

        Returns
        -------
        per_bucket : int64 ndarray, shape (num_buckets,)
            Indexed by :func:`speed.partition._kernels.bucket_id` of the endpoints' codes.
        shared_assigned : int64 ndarray, shape (num_parts,), or None
            Training events between two shared nodes by the part they were assigned to (None
            for shards without ``events/part.npy``).
        """
        eid = self._arrays["eid"]
        lo, hi = self.offsets[:-1], self.offsets[1:]
        # a bucket is in time (eid) order: its training events come first
        per_bucket = np.array([int(np.searchsorted(eid[a:b], self.num_train_events)) for a, b in zip(lo, hi)],
                              dtype=np.int64)
        pair = int(_kernels.bucket_id(0, 0, self.num_parts))
        if self._part is None:
            return per_bucket, None
        part = np.asarray(self._part[int(lo[pair]):int(lo[pair]) + int(per_bucket[pair])])
        return per_bucket, np.bincount(part[part >= 0], minlength=self.num_parts)[:self.num_parts].astype(np.int64)

    @property
    def msg_dim(self) -> int:
        """Edge feature width (0 without features)."""
        msg = self._arrays.get("msg")
        return 0 if msg is None else int(msg.shape[1]) if msg.ndim > 1 else 1

    @property
    def bipartite(self) -> bool:
        return bool(self.manifest.get("input", {}).get("bipartite", False))

    def feature_rows(self):
        """The edge features as stored (memory-mapped, shape (E, d)) and each event id's
        stored row (int32 or int64, shape (E,)), or None without features.  Reading a batch's
        rows through them never loads the whole array."""
        msg = self._arrays.get("msg")
        if msg is None or self.msg_dim == 0:
            return None
        eid = self._arrays["eid"]
        n = self.segments[0].num_events  # the split's log (appended events are not trained from shards)
        position = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
        for a in range(0, n, _CHUNK):
            b = min(n, a + _CHUNK)
            position[np.asarray(eid[a:b])] = np.arange(a, b, dtype=position.dtype)
        return msg.reshape(n, -1), position

    def trained_endpoints(self, new_nodes: Optional[np.ndarray] = None):
        """Which nodes are a source, and which a destination, of a training-period event that
        touches no held-out node (``new_nodes``), read in chunks from the stored arrays.

        Returns
        -------
        src_seen, dst_seen : bool ndarray, shape (num_nodes,)
        """
        src_seen = np.zeros(self.num_nodes, dtype=bool)
        dst_seen = np.zeros(self.num_nodes, dtype=bool)
        src, dst, eid = self._arrays["src"], self._arrays["dst"], self._arrays["eid"]
        held = new_nodes is not None and new_nodes.any()
        n = self.segments[0].num_events
        for a in range(0, n, _CHUNK):
            s, d, e = (np.asarray(x[a:a + _CHUNK]) for x in (src, dst, eid))
            keep = e < self.num_train_events
            if held:
                keep &= ~(new_nodes[s] | new_nodes[d])
            src_seen[s[keep]] = True
            dst_seen[d[keep]] = True
        return src_seen, dst_seen

    def part(self, p: int, period: str = "all") -> Events:
        """Part ``p``: its own nodes plus the shared nodes, node-induced."""
        return self.merge([p], period)

    def events(self, period: str = "all") -> Events:
        """Every stored event of ``period`` (see :meth:`merge`), in time order."""
        return self._gather([[slice(0, seg.num_events)] for seg in self.segments], period)

    def _gather(self, selectors: List, period: str, names: Optional[Iterable[str]] = None) -> Events:
        """Events at the stored positions ``selectors`` (per segment, a list of slices or index
        arrays), in time order (the arrays ``names``, default all)."""
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")
        segments = [(seg, sel) for seg, sel in zip(self.segments, selectors)
                    if period not in ("train", "eval", "split") or seg.first_eid == 0]  # appends come later
        if period == "appended":
            segments = [(seg, sel) for seg, sel in segments if seg.first_eid > 0]
        present = self._arrays if names is None else {k: v for k, v in self._arrays.items() if k in names}
        cat = {name: np.concatenate([seg.arrays[name][s] for seg, sel in segments for s in sel] or
                                    [self._arrays[name][:0]]) for name in present}
        for name in _ID_ARRAYS:  # stored as int32 when they fit; Events always holds int64
            cat[name] = cat[name].astype(np.int64, copy=False)
        order = np.argsort(cat["eid"], kind="stable")
        if period in ("train", "eval"):
            eid = cat["eid"][order]
            cutoff = int(np.searchsorted(eid, self.num_train_events))
            order = order[:cutoff] if period == "train" else order[cutoff:]
        out = {name: np.ascontiguousarray(a[order]) for name, a in cat.items()}
        inp = self.manifest.get("input", {})
        return Events(
            src=out["src"], dst=out["dst"], t=out["t"], eid=out["eid"], num_nodes=self.num_nodes,
            msg=out.get("msg"), label=out.get("label"), node_ids=self.node_ids,
            bipartite=self.bipartite,
            meta=EventsMeta(source=str(self.path), format="shards"),
        )

    def split(self, events: Optional[Events] = None):
        """The chronological split recorded when the shards were written.

        Parameters
        ----------
        events : Events, optional
            The log the split covers (default: ``events("split")``), which its masks refer to.
        """
        from ..data.split import Split

        sp = self.manifest.get("split")
        if sp is None:
            raise InputError("the shards were written without a split (use `speed partition`, or "
                             "PartitionResult.save(..., split=...))", self.path)
        new_nodes = self.new_nodes if self.new_nodes is not None else np.zeros(self.num_nodes, dtype=bool)
        return Split(num_train=int(sp["num_train_events"]), num_val=int(sp["num_val_events"]),
                     num_test=int(sp["num_test_events"]), val_time=float(sp["val_time"]),
                     test_time=float(sp["test_time"]), new_nodes=new_nodes, seed=int(sp["seed"]),
                     new_node_fraction=float(sp["new_node_fraction"]),
                     events=self.events("split") if events is None else events)

    def __repr__(self) -> str:
        m = self.manifest
        return (f"Shards({str(self.path)!r}, num_parts={self.num_parts}, num_events={m['num_events']}, "
                f"shared_nodes={len(self.shared)}, method={m['method']!r})")


class _Segment:
    """The event arrays of one segment: the partitioned log (``events/``) or one append
    (``events.vN/``), each grouped into buckets by the node parts of its own version."""

    def __init__(self, folder: Path, first_eid: int, num_events: int, offsets, arrays, part):
        self.folder, self.first_eid, self.num_events = folder, first_eid, num_events
        self.offsets, self.arrays, self.part = offsets, arrays, part

    @classmethod
    def open(cls, root: Path, entry: dict, num_parts: int) -> "_Segment":
        edir = root / entry["dir"]
        n = int(entry["num_events"])
        offsets = _load_array(edir / "offsets.npy", required=True)
        if offsets.shape != (_kernels.num_buckets(num_parts) + 1,) or offsets[-1] != n:
            raise InputError(f"offsets do not match the manifest ({num_parts} parts, {n} events)",
                             edir / "offsets.npy")
        arrays = {}
        for name in _EVENT_ARRAYS:
            arr = _load_array(edir / f"{name}.npy", required=name in ("src", "dst", "t", "eid"))
            if arr is not None:
                if arr.shape[0] != n:
                    raise InputError(f"{arr.shape[0]} rows, expected {n}", edir / f"{name}.npy")
                arrays[name] = arr
        # shards written before per-event parts were stored lack it (induced mode only)
        part = _load_array(edir / "part.npy", required=False)
        if part is not None and part.shape != (n,):
            raise InputError(f"{part.shape[0]} rows, expected {n}", edir / "part.npy")
        return cls(edir, int(entry["first_eid"]), n, offsets, arrays, part)


def _load_array(path: Path, required: bool) -> Optional[np.ndarray]:
    """A memory-mapped ``.npy``; a missing (when required) or damaged file is an InputError."""
    if not path.exists():
        if required:
            raise InputError("missing file (the shards directory is incomplete)", path)
        return None
    try:
        return np.load(path, mmap_mode="r")
    except (ValueError, OSError) as exc:  # truncated: the header promises more than the file holds
        raise InputError(f"unreadable or truncated array ({exc})", path) from None


def load_shards(path) -> Shards:
    """Open a shards directory written by ``speed partition`` or ``PartitionResult.save``.

    Returns
    -------
    Shards
        Use ``.merge(parts)`` for the node-induced sub-graph of any set of parts.
    """
    return Shards(path)
