"""Appending events to shards: SEP goes on from its saved stream state (``speed partition
MORE.csv -o SHARDS --append``, :func:`append_events`).

An append is one more stretch of the same stream:

* the centrality, decayed to the shards' last partitioned event, is decayed on to the new last
  event and the new events are added with the same time unit (the first stream's span), so it
  is what the first pass would have computed for the whole stream but for that unit;
* the hub set is topped up to ``floor(topk * |V|)`` of the nodes seen so far, with the nodes
  of highest centrality that are not hubs yet; a hub is never demoted, since its earlier events
  may already sit in several parts (see :data:`ADVICE`);
* the new events stream through the same kernel from the saved codes, hub rows and loads, with
  the capacity's floor taken over all the partitioned events;
* events between two shared nodes are spread over the parts given every part's load so far.

Nothing stored moves.  The new events go to a new segment ``events.vN/`` grouped into buckets
by the node parts after the append (a node's parts only ever grow: a node placed in part ``p``
stays there or becomes shared, so each older segment's buckets stay right for its own events),
with new ``nodes.vN.npz`` and ``sep.vN.npz``; then ``manifest.json`` is replaced in one rename.
A reader that opened the previous version keeps reading files that never change; a killed append
leaves the previous version whole (the next append clears what it left).

The shards' metrics are updated from the new events alone (:class:`SavedStream` keeps what
they are made of): each segment's events count in the buckets it is stored in.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

from .._util import first_copies, StageTimer, full_time, jsonable, progress_bar
from ..data.events import Events
from ..errors import InputError
from . import _kernels
from .balance import balance_stats, spread_shared_chunks
from .centrality import num_hubs, top_nodes
from .columns import BucketColumns
from .metrics import metrics_from_counts
from .sep import FLOOR
from ..data.readers.read import check_same_columns
from .shards import APPENDED_VERSION, Shards, numbers_sides_apart
from .saved_stream import SavedStream

_CHUNK = 1 << 21  # events per kernel call and per write
# When to advise partitioning again: the quality of the appended shards against that of the
# partition they grew from.  Measured in docs/partitioning.md ("Appending events"): after ten 5%
# appends the replication factor and edge cut stayed within 10% of a from-scratch SEP while the
# shards' own figures stayed within these margins; past them, a fresh partition does better.
ADVICE = {"edge_cut_increase": 0.10, "replication_increase": 0.10, "appended_fraction": 1.0}


class ChunkSource:
    """The new events, in shard ids, read by ranges: ``columns(lo, hi)`` gives ``src, dst``
    (int64), ``t`` (the stored time dtype) and ``label``/``msg`` when the shards store them;
    :func:`chunks` reads them ``chunk`` events at a time."""

    num_events: int
    chunk: int = _CHUNK

    def columns(self, lo: int, hi: int) -> Dict[str, np.ndarray]:  # pragma: no cover - interface
        raise NotImplementedError


def chunks(source: ChunkSource, desc: Optional[str] = None,
           progress: Optional[bool] = None) -> Iterator[Tuple[int, int, Dict[str, np.ndarray]]]:
    """``(lo, hi, columns)`` of ``source``'s events, ``source.chunk`` at a time."""
    n = source.num_events
    with progress_bar(n, desc or "append", progress=progress if desc else False) as bar:
        for lo in range(0, n, source.chunk):
            hi = min(n, lo + source.chunk)
            yield lo, hi, source.columns(lo, hi)
            bar.update(hi - lo)


class ArraySource(ChunkSource):
    """New events held in memory (already mapped to shard ids)."""

    def __init__(self, arrays: Dict[str, np.ndarray]):
        self.arrays = arrays
        self.num_events = int(arrays["src"].shape[0])

    def columns(self, lo: int, hi: int) -> Dict[str, np.ndarray]:
        return {k: v[lo:hi] for k, v in self.arrays.items()}


# ------------------------------------------------------------------------------ the stream
def continue_stream(saved: SavedStream, source: ChunkSource, num_nodes: int, num_parts: int, t_last: float,
                    event_part: np.ndarray, progress: Optional[bool] = None,
                    timer: Optional[StageTimer] = None) -> Tuple[np.ndarray, Dict]:
    """Run SEP on from ``saved`` over ``source``'s events (updating ``saved`` in place).

    Parameters
    ----------
    saved : SavedStream
    source : ChunkSource
        The new events in time order, ids in ``[0, num_nodes)``.
    num_nodes : int
        Nodes after the append (ids past ``saved.num_nodes`` are new).
    t_last : float
        Time of the last new event.
    event_part : int32 ndarray, shape (E,)
        Receives each new event's part (DROPPED for a cut event).

    Returns
    -------
    node_parts : int64 ndarray, shape (num_nodes,)
    stats : dict
        This append's ``new_hubs``, ``dropped_events``, ``cut_events`` and ``bucket_counts``.
    """
    timer = timer or StageTimer()
    stream = saved.stream
    old_nodes = saved.num_nodes
    stream.grow(num_nodes)
    present = np.zeros(num_nodes, dtype=bool)
    present[:old_nodes] = saved.present
    if saved.is_src is not None and saved.is_src.size < num_nodes:
        raise ValueError("is_src must cover the new nodes")
    with timer.stage("centrality"):
        beta, t_ref, span = stream.decay
        if beta and t_last > t_ref:
            stream.cent *= math.exp(beta * (t_ref - t_last) / span)
        for _, _, c in chunks(source):
            t = np.asarray(c["t"], dtype=np.float64)
            _kernels.centrality_add(c["src"], c["dst"], t, beta, max(t_last, t_ref), span, stream.cent)
            present[c["src"]] = True
            present[c["dst"]] = True
        stream.decay = (beta, max(t_last, t_ref), span)
        new_hubs, dropped_hubs = refresh_hubs(saved, present)
    with timer.stage("assign"):
        dropped_before = stream.dropped
        stream.floor = FLOOR * (saved.num_partitioned + source.num_events)
        for lo, hi, c in chunks(source, "SEP assign", progress):
            stream.feed(c["src"], c["dst"], event_part[lo:hi])
        node_parts = stream.finish(num_parts)
        if math.isfinite(stream.balance):
            spread_shared_chunks(lambda: ((c["src"], c["dst"], event_part[lo:hi]) for lo, hi, c in chunks(source)),
                                 node_parts, num_parts, loads=saved.assigned)
    with timer.stage("metrics"):
        nb = _kernels.num_buckets(num_parts)
        counts = np.zeros(nb, dtype=np.int64)
        for lo, hi, c in chunks(source):
            _, per_bucket = _kernels.bucket_counts(c["src"], c["dst"], node_parts, num_parts, 0)
            counts += per_bucket
            part = event_part[lo:hi]
            saved.assigned += np.bincount(part[part >= 0], minlength=num_parts)[:num_parts]
        saved.bucket_counts = saved.bucket_counts + counts
        saved.present = present
        saved.num_partitioned += source.num_events
        _, cut, _ = _kernels.part_event_counts(counts, num_parts)
    return node_parts, {"new_hubs": int(new_hubs.size), "dropped_hubs": int(dropped_hubs.size),
                        "dropped_events": int(stream.dropped - dropped_before), "cut_events": int(cut),
                        "bucket_counts": counts}


def refresh_hubs(saved: SavedStream, present: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Choose the static hubs again by today's centrality, within SEP's budget of
    ``floor(topk * |V|)`` of the nodes seen so far.  A hub already in several parts stays one
    (its events sit in several parts) and keeps its place; the other places go to the nodes of
    highest centrality, as a first pass over the whole stream would choose them; a hub left out,
    in one part at most, becomes an ordinary node of that part again (nothing moves).  So there
    are never more static hubs than the budget, and Theorem 1's bound holds as for one pass.
    Returns the new hubs and the dropped ones."""
    stream = saved.stream
    budget = num_hubs(saved.topk, int(np.count_nonzero(present)))
    old = saved.hubs
    replicated = old[stream.hub_parts(old) > 1] if old.size else old
    is_hub = stream.code <= _kernels.HUB_ROW0
    candidates = present & ~is_hub  # not a hub now: neither a static one nor one promoted for balance
    candidates[old] = True  # a static hub in one part at most competes for its place again
    candidates[replicated] = False
    chosen = top_nodes(stream.cent, candidates, budget - replicated.size)
    keep = np.union1d(replicated, chosen).astype(np.int64)
    dropped = np.setdiff1d(old, keep, assume_unique=True)
    added = np.setdiff1d(chosen, old, assume_unique=True)
    stream.drop_hubs(dropped)
    stream.add_hubs(added)
    saved.hubs = keep
    return added, dropped


# ------------------------------------------------------------------------------ ids and checks
def stored_node_index(shards: Shards, saved: SavedStream):
    from ..data.node_index import NodeIndex

    ids = shards.node_ids
    return NodeIndex(ids, shards.num_nodes, sides=saved.is_src)


def map_events(shards: Shards, saved: SavedStream, events: Events):
    """The new events' ``src, dst`` in shard ids (new ids appended, in sorted order per call),
    the node ids after the append and ``is_src`` (per-side numbering only)."""
    index = stored_node_index(shards, saved)
    labels = events.node_ids
    src_ids = events.src if labels is None else labels[events.src]
    dst_ids = events.dst if labels is None else labels[events.dst]
    try:
        src, _ = index.rows(src_ids, "src")
        dst, n = index.rows(dst_ids, "dst")
    except InputError as exc:
        raise InputError(f"{exc} (the shards' node ids)", events.meta.source) from None
    is_src = None if saved.is_src is None else (index.sides == "src")
    return src, dst, index.ids, n, is_src


def check_times(events: Events, t_last: float) -> None:
    """Refuse events older than the shards' last event, naming the first such line."""
    from ..data.readers import event_line

    t = events.t_float()
    old = np.flatnonzero(t < t_last)
    if old.size:
        order = events.meta.input_order
        k = int(old[np.argmin(order[old])]) if order is not None else int(old[0])  # first in the file
        raise InputError(f"time {full_time(t[k], events.meta.time_text)} is earlier than the shards' last "
                         f"event ({full_time(t_last)}): only later events can be appended (equal times are "
                         f"allowed)", events.meta.source, event_line(events, k))


def check_columns(shards: Shards, has_label: bool, msg_dim: int, where) -> None:
    """The new events' columns against what the shards store: one rule for the append in
    memory and out of core (a label where the shards keep one, as many edge features)."""
    base = shards.segments[0].arrays
    if "label" in base and not has_label:
        raise InputError("the shards store a label per event and these events have none", where)
    if "msg" in base and msg_dim != shards.msg_dim:
        raise InputError(f"the shards store {shards.msg_dim} edge features per event and these events have "
                         f"{msg_dim or 'none'}", where)
    if "msg" not in base and msg_dim:
        raise InputError(f"these events have {msg_dim} edge features and the shards store none", where)


def check_header(shards: Shards, columns: Optional[Dict[str, str]], where) -> None:
    """Refuse new events whose header gives a column of the shards another role
    (:func:`~speed.data.readers.read.check_same_columns`)."""
    check_same_columns(shards.manifest.get("input", {}).get("columns"), columns, where, "the shards")


def check_whole_times(shards: Shards, t: np.ndarray, where, line_of=None) -> None:
    """Shards that store whole times take whole times only (``line_of(k)``: the file line of
    event ``k``, when known)."""
    if shards.segments[0].arrays["t"].dtype.kind in "iu" and np.asarray(t).dtype.kind == "f":
        frac = np.flatnonzero(t != np.round(t))
        if frac.size:
            k = int(frac[0])
            raise InputError(f"time {t[k]!r} is not a whole number, and the shards store whole times", where,
                             None if line_of is None else line_of(k))


def stored_columns(shards: Shards, events: Events) -> Dict[str, np.ndarray]:
    """The new events' ``t``, ``label`` and ``msg`` in the shards' stored dtypes and shapes."""
    base = shards.segments[0].arrays
    where = events.meta.source
    check_columns(shards, events.label is not None, events.msg_dim, where)
    check_whole_times(shards, events.t, where)
    out = {"t": np.asarray(events.t).astype(base["t"].dtype, copy=False)}
    if "label" in base:
        out["label"] = np.asarray(events.label).astype(base["label"].dtype, copy=False)
    if "msg" in base:
        out["msg"] = np.asarray(events.msg).astype(base["msg"].dtype, copy=False).reshape(
            (len(events),) + base["msg"].shape[1:])
    return out


def check_appendable(shards: Shards) -> Path:
    """The saved stream state of ``shards`` (an InputError when there is none to go on from)."""
    m = shards.manifest
    if m.get("method") != "sep":
        raise InputError(f"only SEP shards can be appended to (these were partitioned with {m.get('method')!r}): "
                         "partition the whole log again", shards.path)
    if "sep_state" not in m:
        raise InputError("these shards keep no SEP stream state (written by an older version of speed): partition "
                         "the whole log again to append to it later", shards.path)
    return shards.path / m["sep_state"]


def last_time(shards: Shards) -> float:
    """Time of the shards' last stored event."""
    inp = shards.manifest.get("input", {})
    if "t_max" in inp:
        return float(inp["t_max"])
    seg = shards.segments[-1]
    t = seg.arrays["t"]
    return float(np.max(t)) if seg.num_events else -math.inf


def stored_at(shards: Shards, t: float) -> np.ndarray:
    """Keys ``src * num_nodes + dst`` (shard ids, int64) of the stored events at time ``t``.

    Each bucket keeps its events in time order, so those at ``t`` are one slice of it, found by
    a search: the cost is a few reads per bucket, not a scan of the log."""
    keys = []
    n = np.int64(max(shards.num_nodes, 1))
    for seg in shards.segments:
        tt, offsets = seg.arrays["t"], np.asarray(seg.offsets, dtype=np.int64)
        for a, b in zip(offsets[:-1], offsets[1:]):
            if b > a and tt[b - 1] >= t:
                bucket = tt[a:b]
                i, j = int(a) + int(np.searchsorted(bucket, t, "left")), int(a) + int(np.searchsorted(bucket, t, "right"))
                if j > i:
                    keys.append(np.asarray(seg.arrays["src"][i:j], np.int64) * n + np.asarray(seg.arrays["dst"][i:j]))
    return np.concatenate(keys) if keys else np.empty(0, np.int64)


def already_stored(shards: Shards, src: np.ndarray, dst: np.ndarray, t: np.ndarray, t_last: float) -> np.ndarray:
    """Which new events (shard ids ``src, dst``, times ``t``) repeat events the shards hold at
    their last time ``t_last``: a file that begins where the previous one ended may send them
    again.  Counted as a multiset: where the shards hold an event k times, the first k copies
    of it at ``t_last`` are recognised and any further ones are new.  bool, shape (n,)."""
    out = np.zeros(t.size, dtype=bool)
    at = np.flatnonzero(np.asarray(t, dtype=np.float64) == t_last)
    if at.size:
        n = np.int64(max(shards.num_nodes, 1))
        out[at] = first_copies(np.asarray(src[at], np.int64) * n + np.asarray(dst[at], np.int64),
                               stored_at(shards, t_last))
    return out


# ------------------------------------------------------------------------------ writing a version
def sweep_versions(root: Path, version: int) -> None:
    """Remove what a killed append left (its temporary folder), and the node and stream files
    of versions before ``version`` (the current one): they hold O(nodes) each, a reader of an
    older version has read them already, and event segments are never removed."""
    for leftover in root.glob(".append-*"):
        _remove(leftover)
    for pattern in ("nodes.v*.npz", "sep.v*.npz"):
        for f in root.glob(pattern):
            k = f.name.split(".")[1][1:]
            if k.isdigit() and int(k) < version:
                f.unlink(missing_ok=True)


def write_version(shards: Shards, saved: SavedStream, source: ChunkSource, node_parts: np.ndarray,
                  node_ids: np.ndarray, event_part: np.ndarray, stats: Dict, t_range: Tuple[float, float],
                  timer: StageTimer, progress: Optional[bool], tmp: Path, started: float,
                  already_stored: int = 0, origin: Optional[str] = None) -> Dict:
    """Write version N + 1 of ``shards`` from the appended stream; returns the new manifest
    (``already_stored``: the events of the file recognised as stored already, left out;
    ``origin``: where the events came from, the file's path)."""
    m = shards.manifest
    version = int(m.get("version", 1)) + 1
    P = shards.num_parts
    num_nodes = int(node_parts.size)
    seg_dir, nodes_file, state_file = f"events.v{version}", f"nodes.v{version}.npz", f"sep.v{version}.npz"
    base = shards.segments[0].arrays
    first_eid = shards.num_events
    n = source.num_events
    with timer.stage("write"):
        (tmp / seg_dir).mkdir()
        specs = {}
        for name in ("src", "dst", "eid"):
            bound = num_nodes if name != "eid" else first_eid + n
            specs[name] = (np.dtype(np.int32 if bound <= np.iinfo(np.int32).max else np.int64), ())
        specs["t"] = (base["t"].dtype, ())
        for name in ("label", "msg"):
            if name in base:
                specs[name] = (base[name].dtype, tuple(base[name].shape[1:]))
        specs["part"] = (np.dtype(np.int32), ())
        bid = np.empty(min(_CHUNK, max(n, 1)), dtype=_kernels.bucket_dtype(P))
        with BucketColumns(tmp / seg_dir, stats["bucket_counts"], specs) as cols:
            for lo, hi, c in chunks(source, "write shards", progress):
                _kernels.bucket_ids(c["src"], c["dst"], node_parts, P, bid[:hi - lo])
                chunk = {k: c[k] for k in specs if k in c}
                chunk["eid"] = np.arange(first_eid + lo, first_eid + hi, dtype=np.int64)
                chunk["part"] = event_part[lo:hi]
                cols.write(bid[:hi - lo], chunk)
        offsets = np.zeros(stats["bucket_counts"].size + 1, dtype=np.int64)
        np.cumsum(stats["bucket_counts"], out=offsets[1:])
        np.save(tmp / seg_dir / "offsets.npy", offsets)
        nodes = {"node_parts": node_parts, "centrality": saved.stream.cent, "hubs": saved.hubs}
        if node_ids is not None:
            nodes["node_ids"] = node_ids
        if shards.new_nodes is not None:
            nodes["new_nodes"] = np.concatenate([shards.new_nodes, np.zeros(num_nodes - shards.new_nodes.size, bool)])
        np.savez(tmp / nodes_file, **nodes)
        saved.save(tmp / state_file)
    metrics = metrics_from_counts(saved.present, node_parts, saved.bucket_counts, P, saved.num_partitioned)
    stream_stats = saved.stream.stats()
    manifest = dict(m)
    base_quality = m.get("base_quality") or {"replication_factor": m["replication_factor"], "edge_cut": m["edge_cut"],
                                             "num_partitioned_events": int(m.get("num_train_events", 0))}
    entry = {
        "version": version, "source": origin, "num_events": n, "first_eid": first_eid,
        "new_nodes": num_nodes - shards.num_nodes, "new_hubs": stats["new_hubs"], "dropped_hubs": stats["dropped_hubs"],
        "t_min": t_range[0], "t_max": t_range[1],
        "edge_cut": stats["cut_events"] / max(n, 1), "dropped_events": stats["dropped_events"],
        "already_stored": int(already_stored),
        "seconds": {**timer.rounded(), "total": round(time.perf_counter() - started, 4)},
    }
    manifest.update(metrics)
    manifest.update(balance_stats(saved.assigned))
    manifest.update({
        "format_version": APPENDED_VERSION, "version": version, "num_events": first_eid + n, "num_nodes": num_nodes,
        "num_partitioned_events": saved.num_partitioned, "stream_loads": stream_stats["stream_loads"],
        "dropped_events": stream_stats["dropped_events"], "num_hubs": stream_stats["num_hubs"],
        "dynamic_hubs": stream_stats["dynamic_hubs"], "nodes_file": nodes_file, "sep_state": state_file,
        "segments": [{"dir": s.folder.name, "first_eid": s.first_eid, "num_events": s.num_events}
                     for s in shards.segments] + [{"dir": seg_dir, "first_eid": first_eid, "num_events": n}],
        "appends": list(m.get("appends", [])) + [entry],
        "base_quality": base_quality,
    })
    manifest["input"] = {**m.get("input", {}), "t_max": t_range[1]}
    manifest["advice"] = advice(manifest)
    return jsonable(manifest)


def advice(manifest: Dict) -> Optional[str]:
    """Whether to partition the whole log again (None: the appended shards are fine)."""
    base = manifest["base_quality"]
    reasons = []
    if manifest["edge_cut"] > base["edge_cut"] * (1 + ADVICE["edge_cut_increase"]) + 1e-4:
        reasons.append(f"the edge cut grew from {base['edge_cut']:.2%} to {manifest['edge_cut']:.2%}")
    if manifest["replication_factor"] > base["replication_factor"] * (1 + ADVICE["replication_increase"]):
        reasons.append(f"the replication factor grew from {base['replication_factor']:.3f} to "
                       f"{manifest['replication_factor']:.3f}")
    grown = manifest["num_partitioned_events"] / max(1, base["num_partitioned_events"]) - 1
    if grown > ADVICE["appended_fraction"]:
        reasons.append(f"appends hold {grown:.0%} more events than the first partition, whose centrality and hubs "
                       "no longer describe the log")
    if not reasons:
        return None
    return "partition the whole log again: " + "; ".join(reasons)


def commit(shards: Shards, tmp: Path, manifest: Dict) -> None:
    """Move the new version's files into place, then the manifest (the one atomic step)."""
    root = shards.path
    for f in tmp.iterdir():
        target = root / f.name
        if target.exists() or target.is_symlink():  # a killed append's file of this version, never named by a manifest
            _remove(target)
        os.replace(f, target)
    for f in (root / manifest["segments"][-1]["dir"]).iterdir():
        _fsync(f)
    _fsync(root / manifest["nodes_file"])
    _fsync(root / manifest["sep_state"])
    fd, name = tempfile.mkstemp(prefix=".append-manifest-", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(name, 0o644)
    os.replace(name, root / "manifest.json")
    _fsync(root)


def _remove(path: Path) -> None:
    """Remove a file or folder; a symbolic link is removed itself, never followed."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ the entry point
@contextlib.contextmanager
def append_lock(path):
    """Hold the shards folder's append lock for the whole of an append (from reading its state
    to committing the new version): an advisory lock on the folder itself, so nothing is added
    to it.  A second append while one runs is refused at once: two
    appends once both read version 1, both wrote "version 2", and only the second's events
    remained; at other delays one removed the other's temporary folder."""
    root = Path(path)
    if not root.is_dir():  # not a shards folder: Shards says so
        yield
        return
    try:
        import fcntl
    except ImportError:  # no advisory locks here (not POSIX)
        yield
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError("another append to these shards is running; nothing was appended (append this file "
                             "after it has finished)", root) from None
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def append_events(path, events: Events, progress: Optional[bool] = None) -> Tuple[Dict, np.ndarray, tuple, np.ndarray]:
    """Append ``events`` (later than every stored event) to the shards at ``path``.

    Parameters
    ----------
    path : path-like
        A shards directory written by SEP (``speed partition``; any earlier append).
    events : Events
        The new events in time order, in any ids: they are matched to the shards' node ids by
        their original ids (``events.node_ids``), new ids becoming new nodes.

    Returns
    -------
    manifest : dict
        The new version's manifest.
    event_part : int32 ndarray, shape (E,)
        Each new event's part (-1: cut).
    src_dst : tuple of int64 ndarrays
        The new events' endpoints in shard ids.
    kept : int64 ndarray, shape (E,)
        The positions in ``events`` of the events stored: all of them but those the shards
        held already at their last time (:func:`already_stored`).
    """
    with append_lock(path):
        return _append_events(path, events, progress)


def _append_events(path, events: Events, progress: Optional[bool]) -> Tuple[Dict, np.ndarray, tuple, np.ndarray]:
    started = time.perf_counter()
    timer = StageTimer()
    shards = Shards(path)
    state_path = check_appendable(shards)
    if len(events) == 0:
        raise InputError("no events to append", events.meta.source)
    check_header(shards, events.meta.columns, events.meta.source)
    check_times(events, last_time(shards))
    saved = SavedStream.load(state_path, shards.manifest.get("num_partitioned_events", shards.num_train_events)
                             + len(events))
    if numbers_sides_apart(events.meta) != (saved.is_src is not None):
        raise InputError("these events number sources and destinations apart and the shards do not, or the other way "
                         "round (read them in the format the shards were partitioned from)", events.meta.source)
    with timer.stage("read"):
        src, dst, node_ids, num_nodes, is_src = map_events(shards, saved, events)
        # events the shards already hold at their last time, sent again: recognised, not stored twice
        again = already_stored(shards, src, dst, events.t_float(), last_time(shards))
        already = int(again.sum())
        keep = np.flatnonzero(~again)
        if already:
            if keep.size == 0:
                raise InputError(f"all {len(events):,} events are already stored (at the shards' last time, "
                                 f"{full_time(last_time(shards))}): nothing to append", events.meta.source)
            events, src, dst = events.select(keep), src[keep], dst[keep]
        cols = stored_columns(shards, events)
    saved.is_src = is_src
    source = ArraySource({"src": src, "dst": dst, **cols})
    root = Path(path)
    sweep_versions(root, int(shards.manifest.get("version", 1)))
    tmp = Path(tempfile.mkdtemp(prefix=".append-", dir=root))
    try:
        event_part = np.empty(len(events), dtype=np.int32)
        node_parts, stats = continue_stream(saved, source, num_nodes, shards.num_parts, float(events.t_float()[-1]),
                                            event_part, progress, timer)
        t = events.t_float()
        manifest = write_version(shards, saved, source, node_parts, node_ids, event_part, stats,
                                 (float(t[0]), float(t[-1])), timer, progress, tmp, started, already,
                                 origin=events.meta.source)
        commit(shards, tmp, manifest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest, event_part, (src, dst), keep


# ------------------------------------------------------------------------------ in memory
def saved_from_result(result) -> SavedStream:
    """The stream state after a :class:`PartitionResult` of SEP (what shards would save)."""
    from .saved_stream import saved_after_partition

    if result.stream is None:
        raise InputError(f"only SEP streams can be continued (this result is {result.method!r})")
    ev = result.events
    _, counts = _kernels.bucket_counts(ev.src, ev.dst, result.node_parts, result.num_parts, 0)
    is_src = np.arange(ev.num_nodes) <= int(ev.src.max()) if numbers_sides_apart(ev.meta) else None
    return saved_after_partition(result.stream, result.node_parts, ev.node_mask(), result.hubs,
                                 result.stats["assigned_events"], counts, len(ev), float(result.params["topk"]),
                                 is_src, pin=False)  # no stored events: a node no event placed is free


def continue_in_memory(saved: SavedStream, events: Events, num_parts: int, progress: Optional[bool] = None):
    """Go on with SEP from ``saved`` over ``events`` (same node ids, later times), in memory
    (``saved`` is updated in place).

    Returns
    -------
    node_parts : int64 ndarray, shape (num_nodes,)
    event_part : int32 ndarray, shape (E,)
    stats : dict
        The metrics of the whole stream so far, and this stretch's ``new_hubs`` and
        ``appended_edge_cut``.
    """
    if len(events) == 0:
        raise InputError("no events to partition", events.meta.source)
    if events.num_nodes < saved.num_nodes:
        raise InputError(f"these events have {events.num_nodes} nodes, fewer than the {saved.num_nodes} of the stream "
                         "so far: partial_fit needs the same node ids (or use into=SHARDS, which matches ids)")
    check_times(events, saved.stream.decay[1])
    timer = StageTimer()
    event_part = np.empty(len(events), dtype=np.int32)
    src = np.asarray(events.src, dtype=np.int64)
    dst = np.asarray(events.dst, dtype=np.int64)
    if saved.is_src is not None:
        saved.is_src = np.concatenate([saved.is_src, np.zeros(events.num_nodes - saved.num_nodes, dtype=bool)])
        saved.is_src[src] = True
    source = ArraySource({"src": src, "dst": dst, "t": events.t_float()})
    node_parts, st = continue_stream(saved, source, events.num_nodes, num_parts, float(events.t_float()[-1]),
                                     event_part, progress, timer)
    stats = metrics_from_counts(saved.present, node_parts, saved.bucket_counts, num_parts, saved.num_partitioned)
    stats.update(balance_stats(saved.assigned))
    stats.update(saved.stream.stats())
    stats.update({"new_hubs": st["new_hubs"], "appended_edge_cut": st["cut_events"] / len(events),
                  "num_partitioned_events": saved.num_partitioned, "seconds": timer.rounded()})
    return node_parts, event_part, stats
