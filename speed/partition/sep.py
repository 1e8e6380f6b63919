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
from .centrality import node_centrality, select_hubs

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
        ``stream_loads``, ``dropped_events``, ``num_hubs``, ``dynamic_hubs``, and ``event_part``
        (int32 (E,): each event's part, DROPPED for a cut event).
    """
    n = events.num_nodes
    with timer.stage("centrality"):
        cent = node_centrality(events, beta)
        present = events.node_mask()
        hubs = select_hubs(cent, present, topk)
    with timer.stage("assign"):
        ne = len(events)
        stream = SepStream(n, num_parts, cent, hubs, lam, eps, balance, ne)
        event_part = np.empty(ne, dtype=np.int32)
        with progress_bar(ne, "SEP assign", progress=progress) as bar:
            for start in range(0, ne, _CHUNK):
                end = min(ne, start + _CHUNK)
                stream.feed(events.src[start:end], events.dst[start:end], event_part[start:end])
                bar.update(end - start)
        node_parts = stream.finish(num_parts)
    extra = dict(stream.stats(), event_part=event_part)
    return node_parts, cent, hubs, extra
