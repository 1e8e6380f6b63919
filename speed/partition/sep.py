"""SEP, the streaming edge partitioner (paper §II-B, Alg. 1): orchestration.

The per-event loop is :func:`speed.partition._kernels.sep_assign`; this module picks the
hubs, runs the kernel over chunks with a progress bar and finishes the node assignment.
:class:`SepStream` holds the stream's state, so the in-memory and the out-of-core
partitioners feed it the same way.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .._util import StageTimer, progress_bar
from ..data.events import Events
from . import _kernels
from .centrality import decay_span, node_centrality, select_hubs

_CHUNK = 1 << 21  # events per kernel call: small enough for a lively progress bar
# The capacity's floor, as a fraction of the stream: no part is full before it holds (1 + b) x
# FLOOR x E / P events.  0.1 against 0.5 and 0.25: better balance and fewer dynamic hubs on every
# log measured (at 0.5 a log whose paper-rule cut is over 50% kept parts up to 1.31x the mean;
# early capacity keeps parts even, so fewer events later meet a full part).  The bound holds
# whenever at least FLOOR of the events are placed.
FLOOR = 0.1


class SepStream:
    """The state of one SEP stream over ``total`` events (see :mod:`speed.partition._kernels`).

    Parameters
    ----------
    num_nodes, num_parts : int
    cent : float64 ndarray, shape (num_nodes,)
    hubs : int64 ndarray, shape (H,)
        The selected hubs (top-k centrality).
    lam, eps : float
        The balance term's weight and smoothing.
    balance : float or None
        Capacity slack b: no part takes more than ``(1 + b) * max(placed, FLOOR * total) / P``
        events while it is not the lightest (None: no capacity, the paper's rule alone).  The
        floor keeps the first events from promoting nodes while every part is still nearly
        empty; the final bound is ``(1 + b)`` times the mean load whenever at least ``FLOOR`` of
        the events are placed (an edge cut under 90%).
    total : int
        Events the stream will see.
    """

    def __init__(self, num_nodes: int, num_parts: int, cent: np.ndarray, hubs: np.ndarray, lam: float, eps: float,
                 balance: Optional[float], total: int):
        self.cent = cent
        self.num_hubs = int(hubs.size)
        self.code = _kernels.initial_codes(num_nodes, hubs)
        words = (num_parts + 63) // 64
        self.hub_mask = np.zeros((max(16, 2 * hubs.size), words), dtype=np.uint64)
        self.rows = np.array([hubs.size], dtype=np.int64)
        self.load = np.zeros(num_parts, dtype=np.int64)
        self.lam, self.eps = float(lam), float(eps)
        self.balance = math.inf if balance is None else float(balance)
        self.floor = total * FLOOR
        self.dropped = 0
        # the centrality's decay (beta, reference time, span): an append rescales ``cent`` to its
        # own last event and adds its events with the same span (see speed.partition.append)
        self.decay = (0.0, 0.0, 1.0)

    # ------------------------------------------------------------------ saved state
    STATE_ARRAYS = ("cent", "code", "hub_mask", "rows", "load")

    def state(self) -> dict:
        """The stream's state as arrays (what :meth:`from_state` takes back); only the used
        rows of ``hub_mask``."""
        used = int(self.rows[0])
        beta, t_ref, span = self.decay
        return {"cent": self.cent, "code": self.code, "hub_mask": self.hub_mask[:used], "rows": self.rows,
                "load": self.load, "num_hubs": np.int64(self.num_hubs), "dropped": np.int64(self.dropped),
                "lam": np.float64(self.lam), "eps": np.float64(self.eps), "balance": np.float64(self.balance),
                "beta": np.float64(beta), "t_ref": np.float64(t_ref), "span": np.float64(span)}

    @classmethod
    def from_state(cls, state: dict, total: int) -> "SepStream":
        """A stream that goes on from :meth:`state`, for ``total`` events in all (those already
        placed and those to come: the capacity's floor is a fraction of the whole stream)."""
        self = cls.__new__(cls)
        self.cent = np.array(state["cent"], dtype=np.float64)
        self.code = np.array(state["code"], dtype=np.int64)
        used = np.asarray(state["hub_mask"], dtype=np.uint64)
        self.hub_mask = np.zeros((max(16, 2 * used.shape[0]), used.shape[1]), dtype=np.uint64)
        self.hub_mask[:used.shape[0]] = used
        self.rows = np.array(state["rows"], dtype=np.int64).reshape(1)
        self.load = np.array(state["load"], dtype=np.int64)
        self.num_hubs = int(state["num_hubs"])
        self.dropped = int(state["dropped"])
        self.lam, self.eps, self.balance = float(state["lam"]), float(state["eps"]), float(state["balance"])
        self.floor = total * FLOOR
        self.decay = (float(state["beta"]), float(state["t_ref"]), float(state["span"]))
        return self

    def grow(self, num_nodes: int) -> None:
        """Room for node ids up to ``num_nodes`` (new nodes: unplaced, no centrality)."""
        n = self.code.size
        if num_nodes > n:
            self.code = np.concatenate([self.code, np.full(num_nodes - n, _kernels.UNPLACED, dtype=np.int64)])
            self.cent = np.concatenate([self.cent, np.zeros(num_nodes - n, dtype=np.float64)])

    def add_hubs(self, nodes: np.ndarray) -> None:
        """Make ``nodes`` (non-hubs) hubs: a placed one keeps its part as its partition set, an
        unplaced one starts with none.  Their earlier events stay where they are."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if nodes.size == 0:
            return
        r0 = int(self.rows[0])
        need = r0 + nodes.size + 2
        if need > self.hub_mask.shape[0]:
            grown = np.zeros((max(need, 2 * self.hub_mask.shape[0]), self.hub_mask.shape[1]), dtype=np.uint64)
            grown[:self.hub_mask.shape[0]] = self.hub_mask
            self.hub_mask = grown
        rows = r0 + np.arange(nodes.size, dtype=np.int64)
        self.hub_mask[rows] = 0
        part = self.code[nodes]
        placed = part >= 0
        bits = np.left_shift(np.uint64(1), (part[placed] & 63).astype(np.uint64))
        self.hub_mask[rows[placed], part[placed] >> 6] = bits
        self.code[nodes] = _kernels.HUB_ROW0 - rows
        self.rows[0] = r0 + nodes.size
        self.num_hubs += int(nodes.size)

    def hub_parts(self, nodes: np.ndarray) -> np.ndarray:
        """How many parts each hub of ``nodes`` is in (int64, shape (n,))."""
        rows = _kernels.HUB_ROW0 - self.code[nodes]
        bits = np.unpackbits(np.ascontiguousarray(self.hub_mask[rows]).view(np.uint8), axis=1)
        return bits.sum(axis=1).astype(np.int64)

    def drop_hubs(self, nodes: np.ndarray) -> None:
        """Make hubs that are in at most one part (``nodes``) ordinary nodes again: pinned to
        that part, or unplaced.  None of their events moves."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if nodes.size == 0:
            return
        if np.any(self.hub_parts(nodes) > 1):
            raise ValueError("a hub in several parts stays a hub")
        rows = _kernels.HUB_ROW0 - self.code[nodes]
        part = np.full(nodes.size, _kernels.UNPLACED, dtype=np.int64)
        for w in range(self.hub_mask.shape[1]):
            x = self.hub_mask[rows, w]
            has = x != 0
            # the one set bit's index: log2 of a power of two (exact in float64 up to 2**63)
            part[has] = 64 * w + np.log2(x[has].astype(np.float64)).astype(np.int64)
        self.code[nodes] = part
        self.num_hubs -= int(nodes.size)

    def pin(self, node_parts: np.ndarray) -> None:
        """Pin the nodes no event placed to the part the partitioner gave them
        (:func:`~speed.partition._kernels.fill_unplaced`): their stored events are in that
        part, so later events must find them there."""
        filled = (self.code == _kernels.UNPLACED) & (node_parts[:self.code.size] >= 0)
        self.code[filled] = node_parts[:self.code.size][filled]

    def feed(self, src: np.ndarray, dst: np.ndarray, event_part: np.ndarray) -> None:
        """Stream ``src[k], dst[k]`` (the next events in time order); their parts go to ``event_part``."""
        pos, n = 0, src.shape[0]
        while pos < n:
            dropped, pos = _kernels.sep_assign(src, dst, pos, n, self.cent, self.code, self.hub_mask, self.rows,
                                               self.load, self.lam, self.eps, self.balance, self.floor, event_part)
            self.dropped += int(dropped)
            if pos < n:  # out of hub rows: double them and go on from the event it stopped at
                grown = np.zeros((2 * self.hub_mask.shape[0], self.hub_mask.shape[1]), dtype=np.uint64)
                grown[:self.hub_mask.shape[0]] = self.hub_mask
                self.hub_mask = grown

    def finish(self, num_parts: int) -> np.ndarray:
        """node_parts (int64, shape (num_nodes,), -1 for shared) after the stream."""
        node_parts = _kernels.finalize_parts(self.code, self.hub_mask, np.empty(self.code.size, dtype=np.int64))
        return _kernels.fill_unplaced(node_parts, num_parts)

    def stats(self) -> dict:
        return {"stream_loads": [int(x) for x in self.load], "dropped_events": int(self.dropped),
                "num_hubs": self.num_hubs, "dynamic_hubs": int(self.rows[0]) - self.num_hubs}


def sep(events: Events, num_parts: int, topk: float, beta: float, lam: float, eps: float,
        timer: StageTimer, progress: Optional[bool], balance: Optional[float] = None):
    """Run SEP on ``events``.

    Returns
    -------
    node_parts : int64 ndarray, shape (num_nodes,)
        -1 for shared nodes.
    centrality : float64 ndarray, shape (num_nodes,)
    hubs : int64 ndarray, shape (H,)
    extra : dict
        ``stream_loads``, ``dropped_events``, ``num_hubs``, ``dynamic_hubs``, ``event_part``
        (int32 (E,): each event's part, DROPPED for a cut event) and ``stream`` (the
        :class:`SepStream` after the events, which shards keep so appends can go on from it).
    """
    n = events.num_nodes
    with timer.stage("centrality"):
        cent = node_centrality(events, beta)
        present = events.node_mask()
        hubs = select_hubs(cent, present, topk)
    with timer.stage("assign"):
        ne = len(events)
        stream = SepStream(n, num_parts, cent, hubs, lam, eps, balance, ne)
        t = events.t_float()
        stream.decay = (float(beta),) + decay_span(float(t[0]), float(t[-1]))
        event_part = np.empty(ne, dtype=np.int32)
        with progress_bar(ne, "SEP assign", progress=progress) as bar:
            for start in range(0, ne, _CHUNK):
                end = min(ne, start + _CHUNK)
                stream.feed(events.src[start:end], events.dst[start:end], event_part[start:end])
                bar.update(end - start)
        node_parts = stream.finish(num_parts)
    extra = dict(stream.stats(), event_part=event_part, stream=stream)
    return node_parts, cent, hubs, extra
