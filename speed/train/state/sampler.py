"""Temporal neighbour sampling: the k most recent neighbours strictly before a time.

The rule is TGN's and DyGLib's neighbour finder: a query ``(node, t)`` sees the node's ``k``
most recent interactions with a time strictly earlier than ``t`` -- earlier events of its own
batch included, events at ``t`` itself never (they are simultaneous, not past).
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Callable, Optional

import numpy as np
import torch

from . import _kernels
from .spill import Keep, put_rows, windows


@dataclass
class Neighbors:
    """Sampled neighbourhoods of B query nodes, most recent first.

    Attributes
    ----------
    nodes : int64 tensor, shape (B, k)
    times : float64 tensor, shape (B, k)
    eids : int64 tensor, shape (B, k)
        -1 in empty slots.
    mask : bool tensor, shape (B, k)
        True for real neighbours.
    """

    nodes: torch.Tensor
    times: torch.Tensor
    eids: torch.Tensor
    mask: torch.Tensor


_HOLD_FIELDS = (("src", np.int64), ("dst", np.int64), ("t", np.float64), ("e", np.int64))


class RecentNeighborSampler:
    """The ``k`` most recent neighbours of each node, as events stream in.

    Events are :meth:`push`-ed in time order into a *held* buffer.  A query at time ``t`` first
    moves the held events strictly earlier than ``t`` into the per-node rings (numba), then
    reads the ring: so the rings never hold an event at or after a query's time, and the ``k``
    neighbours returned are exactly the ``k`` most recent strictly earlier ones, however many
    events share a timestamp.

    Parameters
    ----------
    num_nodes : int
    k : int
        Neighbours kept per node.
    undirected : bool
        Record each event at both endpoints (default), as TGN does.
    """

    #: seconds spent in collectives answering queries (a sampler sharded among processes
    #: gathers its answers from their owners, :class:`~speed.train.state.sharded.ShardedSampler`;
    #: a whole one holds every answer)
    seconds_gathering = 0.0

    def __init__(self, num_nodes: int, k: int = 10, undirected: bool = True):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.num_nodes = int(num_nodes)
        self.k = int(k)
        self.undirected = undirected
        self.reset()

    def reset(self) -> None:
        """Forget every stored interaction."""
        self.nbr = np.zeros((self.num_nodes, self.k), dtype=np.int64)
        self.nbr_t = np.zeros((self.num_nodes, self.k), dtype=np.float64)
        self.nbr_e = np.full((self.num_nodes, self.k), -1, dtype=np.int64)
        self.head = np.zeros(self.num_nodes, dtype=np.int64)
        self.count = np.zeros(self.num_nodes, dtype=np.int64)
        self.hold = {name: np.empty(0, dtype=dt) for name, dt in _HOLD_FIELDS}
        self.hold_lo = 0

    def grow(self, num_nodes: int) -> None:
        """Append empty rings up to ``num_nodes`` nodes."""
        extra = int(num_nodes) - self.num_nodes
        if extra > 0:
            k = self.k
            self.nbr = np.concatenate([self.nbr, np.zeros((extra, k), dtype=np.int64)])
            self.nbr_t = np.concatenate([self.nbr_t, np.zeros((extra, k), dtype=np.float64)])
            self.nbr_e = np.concatenate([self.nbr_e, np.full((extra, k), -1, dtype=np.int64)])
            self.head = np.concatenate([self.head, np.zeros(extra, dtype=np.int64)])
            self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
            self.num_nodes = int(num_nodes)

    def bytes_per_node(self) -> int:
        """Bytes of one node's ring (neighbour, time and event of k slots) and its head and count."""
        return self.k * (self.nbr.itemsize + self.nbr_t.itemsize + self.nbr_e.itemsize) + \
            self.head.itemsize + self.count.itemsize

    @property
    def held(self) -> int:
        """Events pushed but not yet in the rings."""
        return int(self.hold["t"].shape[0] - self.hold_lo)

    def push(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """Add events (time-sorted, none earlier than those already pushed)."""
        lo = self.hold_lo
        new = {"src": src, "dst": dst, "t": t, "e": eid}
        self.hold = {name: np.concatenate([self.hold[name][lo:], np.asarray(new[name], dtype=dt)])
                     for name, dt in _HOLD_FIELDS}
        self.hold_lo = 0

    def insert(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """Push events and move every held event before the last of them into the rings (those
        at the last time stay held: a later query at that time must not see them)."""
        self.push(src, dst, t, eid)
        if len(t):
            self.flush(float(np.asarray(t)[-1]))

    def flush(self, before: float) -> None:
        """Move the held events strictly earlier than ``before`` into the rings."""
        h = self.hold
        self.hold_lo = int(_kernels.ring_flush(h["src"], h["dst"], h["t"], h["e"], self.hold_lo, h["t"].shape[0],
                                               float(before), self.nbr, self.nbr_t, self.nbr_e, self.head, self.count,
                                               self.undirected))
        if self.hold_lo and self.hold_lo == h["t"].shape[0]:  # all in the rings: let the arrays go
            self.hold = {name: np.empty(0, dtype=dt) for name, dt in _HOLD_FIELDS}
            self.hold_lo = 0

    def sample_arrays(self, nodes: np.ndarray, times: np.ndarray):
        """The neighbours of ``nodes[b]`` strictly before ``times[b]``, as numpy arrays
        ``(nodes, times, eids, mask)`` of shape (B, k) (see :meth:`sample`)."""
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        times = np.ascontiguousarray(times, dtype=np.float64)
        b = nodes.shape[0]
        out_n = np.empty((b, self.k), dtype=np.int64)
        out_t = np.empty((b, self.k), dtype=np.float64)
        out_e = np.empty((b, self.k), dtype=np.int64)
        out_m = np.empty((b, self.k), dtype=np.bool_)
        h = self.hold
        self.hold_lo = int(_kernels.ring_sample(nodes, times, h["src"], h["dst"], h["t"], h["e"], self.hold_lo,
                                                h["t"].shape[0], self.nbr, self.nbr_t, self.nbr_e, self.head,
                                                self.count, self.undirected, out_n, out_t, out_e, out_m))
        return out_n, out_t, out_e, out_m

    def sample_later(self, nodes: np.ndarray, times: np.ndarray) -> Callable[[], tuple]:
        """:meth:`sample_arrays` read now (the rings as they are) and handed over by the callable
        returned: a sampler sharded among processes starts gathering its answers from their
        owners and waits for them only when called
        (:meth:`~speed.train.state.sharded.ShardedSampler.sample_later`); this one has them all."""
        out = self.sample_arrays(nodes, times)
        return lambda: out

    def sample(self, nodes: np.ndarray, times: np.ndarray) -> Neighbors:
        """Most recent neighbours of ``nodes[b]`` with time ``< times[b]``.

        Parameters
        ----------
        nodes : int64 ndarray, shape (B,)
        times : float64 ndarray, shape (B,)
        """
        return Neighbors(*(torch.from_numpy(x) for x in self.sample_arrays(nodes, times)))

    def recent_pairs(self):
        """``(node, neighbour)`` of every interaction the rings hold (each node's latest ``k``),
        node by node, in ring order: two int64 arrays."""
        k = self.k
        valid = np.arange(k)[None, :] < np.minimum(self.count, k)[:, None]
        i, j = np.nonzero(valid)
        return i.astype(np.int64), self.nbr[i, j].astype(np.int64)

    def held_at(self, t: float):
        """``(src, dst)`` rows of the held events at time ``t`` (waiting for the rings: a query
        moves only earlier ones in), in the order pushed: two int64 arrays."""
        lo = self.hold_lo
        at = self.hold["t"][lo:] == t
        return self.hold["src"][lo:][at].astype(np.int64), self.hold["dst"][lo:][at].astype(np.int64)

    def held_nodes(self) -> np.ndarray:
        """The rows the held events will enter (int64, distinct)."""
        lo = self.hold_lo
        rows = [self.hold["src"][lo:]] + ([self.hold["dst"][lo:]] if self.undirected else [])
        return np.unique(np.concatenate(rows)).astype(np.int64)

    def backup_rows(self, rows: np.ndarray, keep: Optional[Keep] = None) -> dict:
        """The rings of ``rows`` (int64, distinct) and the held events, copied: a back-up of what a
        pass may change when it touches few rings (:meth:`restore_rows`; ``keep``: in memory or
        spilled to disk, :mod:`~speed.train.state.spill`)."""
        keep = keep or Keep()
        rows = np.asarray(rows, dtype=np.int64)
        lo = self.hold_lo
        return {"rows": rows, **{name: keep.take(getattr(self, name), rows)
                                 for name in ("nbr", "nbr_t", "nbr_e", "head", "count")},
                "hold": {name: a[lo:].copy() for name, a in self.hold.items()}}

    def restore_rows(self, saved: dict) -> None:
        """Put back a :meth:`backup_rows`: those rings, and the held events as they were."""
        rows = saved["rows"]
        for name in ("nbr", "nbr_t", "nbr_e", "head", "count"):
            put_rows(getattr(self, name), rows, saved[name])
        self.hold = {name: np.asarray(saved["hold"][name], dtype=dt).copy() for name, dt in _HOLD_FIELDS}
        self.hold_lo = 0

    def state_dict(self, keep: Optional[Keep] = None) -> dict:
        """The rings and held events, copied (``keep``: in memory or spilled to disk)."""
        keep = keep or Keep()
        lo = self.hold_lo
        return {**{name: keep.copy(getattr(self, name)) for name in ("nbr", "nbr_t", "nbr_e", "head", "count")},
                "hold": {name: a[lo:].copy() for name, a in self.hold.items()}}

    def load_state_dict(self, state: dict, adopt: bool = False) -> None:
        """Take :meth:`state_dict`'s arrays (copies; ``adopt``: the arrays themselves, e.g. mapped
        copy-on-write from a checkpoint, so a reader pays for the rows it touches)."""
        for name in ("nbr", "nbr_t", "nbr_e", "head", "count"):
            have, value = getattr(self, name, None), state[name]
            if adopt:
                setattr(self, name, value)
                continue
            if have is None or have.shape != value.shape or have.dtype != value.dtype:
                have = None
                setattr(self, name, None)  # the rings held go first: never two sets at once
                have = np.empty(value.shape, dtype=value.dtype)
                setattr(self, name, have)
            # a window at a time: a spilled back-up's pages go as they are read
            for lo, hi in windows(value):
                have[lo:hi] = value[lo:hi]
        self.hold = {name: np.asarray(state.get("hold", {}).get(name, np.empty(0)), dtype=dt).copy()
                     for name, dt in _HOLD_FIELDS}
        self.hold_lo = 0
        self.num_nodes = int(self.nbr.shape[0])
