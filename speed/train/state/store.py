"""Pending messages: for each node, the events not yet applied to its stored memory.

The rule for events that share a timestamp: a memory read at time ``t`` applies only the
pending events strictly earlier than ``t``.  So a node's events at the time of its latest batch
stay pending past that batch (see :meth:`MessageStore.merge`): a later batch may still query
that time, and simultaneous events must not see each other, whatever the batching.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import _kernels
from ._plan_kernels import plan_keys, plan_reads
from .spill import Keep

_FIELDS = (("other", np.int64), ("t", np.float64), ("eid", np.int64))


class MessageStore:
    """Events not yet applied to each node's memory, kept in host memory.

    A node's pending events are one segment of flat arrays (``start``/``count`` per node), in
    time order (ties in event order), so "the latest event" is the segment's last and "the
    events before ``t``" are a prefix of it.  A write appends new segments to the arrays, which
    grow by doubling; superseded segments are dropped by a compaction once the arrays hold four
    times the live events.  So a step costs O(its nodes' events), amortised, whatever the number
    of nodes or of events before it.

    Parameters
    ----------
    num_nodes : int
    """

    def __init__(self, num_nodes: int):
        self.num_nodes = int(num_nodes)
        self.reset()

    def reset(self) -> None:
        self._set_arrays(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64))
        self.start = np.zeros(self.num_nodes, dtype=np.int64)
        self.count = np.zeros(self.num_nodes, dtype=np.int64)
        self._alive = 0

    @property
    def alive(self) -> int:
        """Pending events (kept as a running count: summing ``count`` costs O(nodes))."""
        return self._alive

    def bytes_per_node(self) -> int:
        """Bytes of the per-node index (``start`` and ``count``)."""
        return self.start.itemsize + self.count.itemsize

    @property
    def used(self) -> int:
        """Entries of the flat arrays in use (live and superseded)."""
        return self.end

    def event_ids(self) -> np.ndarray:
        """Ids of the entries in use: a superset of the pending events' (a view)."""
        return self.eid[:self.end]

    def _set_arrays(self, other: np.ndarray, t: np.ndarray, eid: np.ndarray, spare: int = 1024) -> None:
        """Hold exactly these entries, with room for ``spare`` more."""
        n = int(t.shape[0])
        cap = max(n + spare, 1024)
        self.other, self.t, self.eid = (np.empty(cap, dtype=dt) for _, dt in _FIELDS)
        self.other[:n], self.t[:n], self.eid[:n] = other, t, eid
        self.end = n

    def _append(self, other: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """Append entries, doubling the arrays when full (amortised O(1) per entry)."""
        n = int(t.shape[0])
        need = self.end + n
        if need > self.t.shape[0]:
            cap = max(need, 2 * self.t.shape[0])
            for name, dt in _FIELDS:
                old = getattr(self, name)
                new = np.empty(cap, dtype=dt)
                new[:self.end] = old[:self.end]
                setattr(self, name, new)
        self.other[self.end:need], self.t[self.end:need], self.eid[self.end:need] = other, t, eid
        self.end = need

    def grow(self, num_nodes: int) -> None:
        """Room for ``num_nodes`` nodes; the new ones have no pending events."""
        extra = int(num_nodes) - self.num_nodes
        if extra > 0:
            self.start = np.concatenate([self.start, np.zeros(extra, dtype=np.int64)])
            self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
            self.num_nodes = int(num_nodes)

    # ------------------------------------------------------------------ reading
    def gather(self, n_id: np.ndarray):
        """Pending events of the nodes ``n_id``, node by node, each node's in time order.

        Returns
        -------
        row : int64 ndarray, shape (M,)
            Position in ``n_id`` of each event's node (ascending).
        other : int64 ndarray, shape (M,)
        t : float64 ndarray, shape (M,)
        eid : int64 ndarray, shape (M,)
        """
        n_id = np.asarray(n_id, dtype=np.int64)
        count = self.count[n_id]
        total = int(count.sum())
        if total == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0, dtype=np.float64), empty
        row = np.repeat(np.arange(n_id.size, dtype=np.int64), count)
        first = np.cumsum(count) - count
        idx = np.repeat(self.start[n_id] - first, count) + np.arange(total, dtype=np.int64)
        return row, self.other[idx], self.t[idx], self.eid[idx]

    def counts_before(self, n_id: np.ndarray, t: np.ndarray) -> np.ndarray:
        """For each ``(n_id[b], t[b])``: the number of the node's pending events strictly
        earlier than ``t[b]`` (those a read at ``t[b]`` applies)."""
        return _kernels.pending_counts(np.ascontiguousarray(n_id, dtype=np.int64),
                                       np.ascontiguousarray(t, dtype=np.float64), self.start, self.count, self.t)

    def plan_keys(self, uq_node: np.ndarray, uq_t: np.ndarray, nb_node: np.ndarray, nb_mask: np.ndarray, k: int,
                  ob_node: np.ndarray, ob_t: float, dedup: bool, mean: bool):
        """A step's memory keys and the pending events they apply, in kernels that leave the
        interpreter lock to the step (:mod:`._plan_kernels`: ``plan_reads``' arguments, and the
        arrays ``plan_keys`` returns)."""
        m = int(np.asarray(uq_node).shape[0])
        slot, read_node, read_t = plan_reads(
            np.ascontiguousarray(uq_node, dtype=np.int64), np.ascontiguousarray(uq_t, dtype=np.float64),
            np.ascontiguousarray(nb_node, dtype=np.int64), np.ascontiguousarray(nb_mask, dtype=np.bool_),
            np.ascontiguousarray(ob_node, dtype=np.int64), float(ob_t))
        read_c = _kernels.pending_counts(read_node, read_t, self.start, self.count, self.t)
        return plan_keys(m, int(k), slot, read_node, read_c, bool(dedup), bool(mean), self.start, self.count,
                         self.other, self.t, self.eid)

    # ------------------------------------------------------------------ writing
    def merge(self, node: np.ndarray, other: np.ndarray, t: np.ndarray, eid: np.ndarray, before: float) -> None:
        """A batch has been applied: for each node in ``node``, its pending events earlier than
        ``before`` were folded into its stored memory and leave; those at ``before`` or later
        stay, and the batch's events (one row per node and event) join them."""
        node = np.ascontiguousarray(node, dtype=np.int64)
        if node.size == 0:
            return
        # one kernel, off the interpreter lock (a planning thread's stage shares it with others)
        uniq, counts, o_other, o_t, o_eid = _kernels.merge_pending(
            node, np.ascontiguousarray(other, dtype=np.int64), np.ascontiguousarray(t, dtype=np.float64),
            np.ascontiguousarray(eid, dtype=np.int64), float(before), self.start, self.count, self.other, self.t,
            self.eid)
        self._store(uniq, counts, o_other, o_t, o_eid)

    def replace(self, node: np.ndarray, other: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """The pending events of every node in ``node`` become exactly these."""
        node = np.asarray(node, dtype=np.int64)
        if node.size:
            self._write(np.unique(node), node, np.asarray(other, dtype=np.int64), np.asarray(t, dtype=np.float64),
                        np.asarray(eid, dtype=np.int64))

    def _write(self, uniq, node, other, t, eid) -> None:
        order = np.lexsort((eid, t, node))  # by node, then time, then event order
        node, other, t, eid = node[order], other[order], t[order], eid[order]
        self._store(uniq, np.bincount(np.searchsorted(uniq, node), minlength=uniq.size), other, t, eid)

    def _store(self, uniq, counts, other, t, eid) -> None:
        """The distinct nodes ``uniq`` now have ``counts`` pending events each: ``other``, ``t``,
        ``eid``, node after node, each node's in time order (ties in event order)."""
        base = self.end
        self._alive += int(counts.sum()) - int(self.count[uniq].sum())
        self.start[uniq] = base + np.cumsum(counts) - counts
        self.count[uniq] = counts
        self._append(other, t, eid)
        if self.end > max(4 * self._alive, 1 << 15):
            self._compact()

    def clear(self, n_id: np.ndarray, before: float = np.inf) -> None:
        """Forget the pending events of the distinct nodes ``n_id`` earlier than ``before`` (all
        by default), e.g. once they are applied."""
        n_id = np.unique(np.asarray(n_id, dtype=np.int64))
        if np.isinf(before):
            self._alive -= int(self.count[n_id].sum())
            self.count[n_id] = 0
            return
        row, other, t, eid = self.gather(n_id)
        keep = t >= before
        self._alive -= int(self.count[n_id].sum())
        self.count[n_id] = 0
        if keep.any():
            self._write(np.unique(n_id[row[keep]]), n_id[row[keep]], other[keep], t[keep], eid[keep])

    def _compact(self) -> None:
        """Drop superseded entries: O(nodes + live events), once per 3x live events appended."""
        nodes = np.flatnonzero(self.count > 0)
        row, other, t, eid = self.gather(nodes)
        counts = self.count[nodes]
        self.start[nodes] = np.cumsum(counts) - counts
        self._set_arrays(other, t, eid, spare=max(1024, t.shape[0]))

    # ------------------------------------------------------------------ state
    def state_dict(self, keep: Optional[Keep] = None) -> dict:
        """The pending events, copied (``keep``: in memory or spilled to disk,
        :mod:`~speed.train.state.spill`)."""
        keep = keep or Keep()
        self._compact()
        e = self.end
        return {"other": keep.copy(self.other[:e]), "t": keep.copy(self.t[:e]), "eid": keep.copy(self.eid[:e]),
                "start": keep.copy(self.start), "count": keep.copy(self.count)}

    def load_state_dict(self, state: dict, adopt: bool = False) -> None:
        """Take :meth:`state_dict`'s arrays (copies; ``adopt``: the arrays themselves where their
        dtypes are the store's, e.g. mapped copy-on-write from a checkpoint)."""
        arrays = {}
        for name in ("other", "t", "eid", "start", "count"):
            value = state[name]
            value = value.cpu().numpy() if hasattr(value, "cpu") else value
            arrays[name] = np.asarray(value).astype(np.float64 if name == "t" else np.int64, copy=not adopt)
        if adopt:  # exactly full: the first append reallocates (doubling), as a full store does
            self.other, self.t, self.eid = arrays["other"], arrays["t"], arrays["eid"]
            self.end = int(self.t.shape[0])
        else:
            self._set_arrays(arrays["other"], arrays["t"], arrays["eid"])
        self.start, self.count = arrays["start"], arrays["count"]
        self._alive = int(self.count.sum())
        self.num_nodes = int(self.count.shape[0])
