"""The :class:`Events` container: a time-ordered interaction log with compact node ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .._util import release_arrays
from ..errors import InputError
from . import _kernels
from .meta import EventsMeta


def _as_1d(name: str, a, dtype=None) -> np.ndarray:
    arr = np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)
    if arr.ndim != 1:
        raise InputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def compact_ids(src: np.ndarray, dst: np.ndarray, bipartite: bool = False):
    """Map arbitrary node ids (ints or strings) to compact ids ``0..N-1``.

    Parameters
    ----------
    src, dst : ndarray, shape (E,)
        Original ids, any sortable dtype.
    bipartite : bool
        Number sources and destinations separately, destinations after sources
        (the JODIE convention: items get ids after users).

    Returns
    -------
    src, dst : int64 ndarray, shape (E,)
    node_ids : ndarray, shape (N,)
        ``node_ids[k]`` is the original id of compact node ``k``.
    """
    if bipartite:
        us, s = np.unique(src, return_inverse=True)
        vs, d = np.unique(dst, return_inverse=True)
        node_ids = np.concatenate([us, vs]) if us.dtype == vs.dtype else np.concatenate(
            [us.astype(object), vs.astype(object)]).astype(str)
        return s.astype(np.int64), (d + len(us)).astype(np.int64), node_ids
    both = np.concatenate([src, dst])
    ids, inv = np.unique(both, return_inverse=True)
    n = src.shape[0]
    return inv[:n].astype(np.int64), inv[n:].astype(np.int64), ids


# events Events.node_mask marks at a time
MASK_WINDOW = 1 << 20


@dataclass
class Events:
    """A temporal interaction log: events ``(src, dst, t)`` sorted by time.

    Attributes
    ----------
    src, dst : int64 ndarray, shape (E,)
        Compact node ids in ``[0, num_nodes)``.
    t : float64 or int64 ndarray, shape (E,)
        Non-decreasing timestamps.
    eid : int64 ndarray, shape (E,)
        Event ids: the position of each event in the full, sorted log.  Slices and
        sub-graphs keep the ids of the log they came from.
    msg : float32 ndarray, shape (E, d), optional
        Edge features.
    label : ndarray, shape (E,), optional
        Per-event label (e.g. JODIE's state label).
    num_nodes : int
        Size of the node id space (may exceed the nodes seen in a slice).
    node_ids : ndarray, shape (num_nodes,), optional
        Original id of each compact node (ints or strings).
    bipartite : bool
        Sources and destinations are disjoint node sets.
    meta : EventsMeta
        Provenance and facts (:class:`speed.data.meta.EventsMeta`): ``source``, ``format``,
        ``sorted_input``, counts of self-loops and duplicate events; for unsorted input
        ``input_order`` (int64 (E,), the input row of each sorted event); for a text file
        ``first_data_line`` (see :func:`speed.data.readers.event_line`); a data set's own
        ``split_times``.
    """

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    eid: np.ndarray
    num_nodes: int
    msg: Optional[np.ndarray] = None
    label: Optional[np.ndarray] = None
    node_ids: Optional[np.ndarray] = None
    bipartite: bool = False
    meta: EventsMeta = field(default_factory=EventsMeta)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_arrays(
        cls,
        src,
        dst,
        t,
        msg=None,
        label=None,
        *,
        num_nodes: Optional[int] = None,
        node_ids=None,
        bipartite: Optional[bool] = None,
        remap: Optional[bool] = None,
        sort: bool = True,
    ) -> "Events":
        """Build an :class:`Events` from arrays, validating them once.

        Parameters
        ----------
        src, dst : array-like, shape (E,)
            Node ids.  Non-negative integers are used as they are (``num_nodes``
            defaults to ``max + 1``); strings, or any ids when ``remap=True``, are
            mapped to compact ids and the mapping is kept in ``node_ids``.
        t : array-like of float or int, shape (E,)
            Timestamps; must be finite.
        msg : array-like, shape (E, d), optional
            Edge features, stored as float32.
        label : array-like, shape (E,), optional
        num_nodes : int, optional
        node_ids : array-like, shape (num_nodes,), optional
        bipartite : bool, optional
            Default: detected (no node is both a source and a destination).
        remap : bool, optional
            Force (True) or forbid (False) remapping ids to compact ids.
        sort : bool
            Stable-sort unsorted input by time (default).  With ``sort=False`` an
            unsorted log raises :class:`~speed.InputError`.
        """
        src = _as_1d("src", src)
        dst = _as_1d("dst", dst)
        t = _as_1d("t", t)
        n = src.shape[0]
        if dst.shape[0] != n or t.shape[0] != n:
            raise InputError(f"src, dst and t must have the same length, got {n}, {dst.shape[0]}, {t.shape[0]}")
        if n == 0:
            raise InputError("no events")
        if t.dtype.kind not in "iuf":
            try:
                t = t.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise InputError(f"t must be numeric: {exc}") from None
        t = t.astype(np.int64, copy=False) if t.dtype.kind in "iu" else t.astype(np.float64, copy=False)
        if t.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(t))
            if bad.size:
                raise InputError(f"event {bad[0]}: time is {t[bad[0]]}")
        ints = src.dtype.kind in "iu" and dst.dtype.kind in "iu"
        if remap is None:
            remap = not ints
        if remap:
            src, dst, node_ids = compact_ids(src, dst, bipartite=bool(bipartite))
        else:
            if not ints:
                raise InputError("node ids must be integers unless remap=True")
            src = src.astype(np.int64, copy=False)
            dst = dst.astype(np.int64, copy=False)
            if src.min() < 0 or dst.min() < 0:
                raise InputError("node ids must be non-negative")
        max_id = int(max(src.max(), dst.max()))
        if num_nodes is None:
            num_nodes = len(node_ids) if node_ids is not None else max_id + 1
        if max_id >= num_nodes:
            raise InputError(f"node id {max_id} out of range for num_nodes={num_nodes}")
        if node_ids is not None:
            node_ids = np.asarray(node_ids)
            if node_ids.shape[0] != num_nodes:
                raise InputError(f"node_ids has {node_ids.shape[0]} entries, expected {num_nodes}")
        if msg is not None:
            msg = np.asarray(msg, dtype=np.float32)
            if msg.ndim == 1:
                msg = msg[:, None]
            if msg.shape[0] != n:
                raise InputError(f"msg has {msg.shape[0]} rows, expected {n}")
        if label is not None:
            label = _as_1d("label", label)
            if label.shape[0] != n:
                raise InputError(f"label has {label.shape[0]} entries, expected {n}")

        meta = EventsMeta(sorted_input=True)
        k = int(_kernels.first_unsorted(t))
        if k >= 0:
            if not sort:
                raise InputError(f"event {k}: time {t[k]} is earlier than the previous event's {t[k - 1]}")
            order = np.argsort(t, kind="stable")
            src, dst, t = src[order], dst[order], t[order]
            msg = None if msg is None else msg[order]
            label = None if label is None else label[order]
            meta.sorted_input = False
            meta.input_order = order  # sorted event k was input row order[k] (to name its line)
        if bipartite is None:
            seen_src = np.zeros(num_nodes, dtype=bool)
            seen_src[src] = True
            bipartite = not bool(seen_src[dst].any())
        ev = cls(
            src=np.ascontiguousarray(src),
            dst=np.ascontiguousarray(dst),
            t=np.ascontiguousarray(t),
            eid=np.arange(n, dtype=np.int64),
            num_nodes=int(num_nodes),
            msg=msg,
            label=label,
            node_ids=node_ids,
            bipartite=bool(bipartite),
            meta=meta,
        )
        ev.meta.self_loops = int(np.count_nonzero(ev.src == ev.dst))
        ev.meta.duplicate_events = int(_kernels.count_duplicate_events(ev.src, ev.dst, ev.t, ev.num_nodes))
        return ev

    # ------------------------------------------------------------- accessors
    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_events(self) -> int:
        return len(self)

    @property
    def msg_dim(self) -> int:
        return 0 if self.msg is None else int(self.msg.shape[1])

    def t_float(self) -> np.ndarray:
        """Timestamps as float64 (a view when they already are)."""
        return self.t if self.t.dtype == np.float64 else self.t.astype(np.float64)

    def node_mask(self, columns=("src", "dst")) -> np.ndarray:
        """bool ndarray, shape (num_nodes,): nodes that occur in these events (as ``columns``).

        Marked a window of events at a time, a mapped log's pages let go as it goes: O(nodes)
        memory, where reading a mapped 10^8-event column whole kept its 0.8 GB resident (and
        ``np.unique`` of it, as the evaluation's pools were made, sorted a copy: 2.5 GB)."""
        mask = np.zeros(self.num_nodes, dtype=bool)
        for name in columns:
            col = getattr(self, name)
            for lo in range(0, len(col), MASK_WINDOW):
                mask[col[lo:lo + MASK_WINDOW]] = True
                release_arrays([col])
        return mask

    def select(self, index) -> "Events":
        """Events at ``index`` (a slice, a bool mask or sorted integer positions).

        Node ids, ``num_nodes`` and event ids are kept, so a selection stays in
        the coordinates of the full log.
        """
        if isinstance(index, np.ndarray) and index.dtype == bool and index.shape[0] != len(self):
            raise ValueError("boolean index has the wrong length")
        return Events(
            src=self.src[index],
            dst=self.dst[index],
            t=self.t[index],
            eid=self.eid[index],
            num_nodes=self.num_nodes,
            msg=None if self.msg is None else self.msg[index],
            label=None if self.label is None else self.label[index],
            node_ids=self.node_ids,
            bipartite=self.bipartite,
            meta=self.meta.copy(),
        )

    def __getitem__(self, index) -> "Events":
        return self.select(index)

    def __repr__(self) -> str:
        span = f"t=[{self.t[0]}, {self.t[-1]}]" if len(self) else "empty"
        extra = f", msg_dim={self.msg_dim}" if self.msg is not None else ""
        extra += ", labels" if self.label is not None else ""
        kind = ", bipartite" if self.bipartite else ""
        return f"Events(num_events={len(self)}, num_nodes={self.num_nodes}{kind}{extra}, {span})"

