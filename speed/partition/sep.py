"""SEP, the streaming edge partitioner (paper §II-B, Alg. 1): orchestration.

The per-event loop is :func:`speed.partition._kernels.sep_assign`; this module picks the
hubs, runs the kernel over chunks with a progress bar and finishes the node assignment.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._util import StageTimer, progress_bar
from ..data.events import Events
from . import _kernels
from .centrality import node_centrality, select_hubs

_CHUNK = 1 << 21  # events per kernel call: small enough for a lively progress bar


def sep(events: Events, num_parts: int, topk: float, beta: float, lam: float, eps: float,
        timer: StageTimer, progress: Optional[bool]):
    """Run SEP on ``events``.

    Returns
    -------
    node_parts : int64 ndarray, shape (num_nodes,)
        -1 for shared nodes.
    centrality : float64 ndarray, shape (num_nodes,)
    hubs : int64 ndarray, shape (H,)
    extra : dict
        ``stream_loads``, ``dropped_events``, ``num_hubs``, and ``event_part`` (int32 (E,):
        each event's part, DROPPED for a cut event).
    """
    n = events.num_nodes
    with timer.stage("centrality"):
        cent = node_centrality(events, beta)
        present = events.node_mask()
        hubs = select_hubs(cent, present, topk)
    with timer.stage("assign"):
        code = _kernels.initial_codes(n, hubs)
        hub_mask = np.zeros((hubs.size, (num_parts + 63) // 64), dtype=np.uint64)
        load = np.zeros(num_parts, dtype=np.int64)
        dropped = 0
        ne = len(events)
        event_part = np.empty(ne, dtype=np.int32)
        with progress_bar(ne, "SEP assign", progress=progress) as bar:
            for start in range(0, ne, _CHUNK):
                end = min(ne, start + _CHUNK)
                dropped += _kernels.sep_assign(events.src, events.dst, start, end, cent, code, hub_mask, load,
                                               float(lam), float(eps), event_part)
                bar.update(end - start)
        node_parts = _kernels.finalize_parts(code, hub_mask, np.empty(n, dtype=np.int64))
        node_parts = _kernels.fill_unplaced(node_parts, num_parts)
    extra = {"stream_loads": [int(x) for x in load], "dropped_events": int(dropped), "num_hubs": int(hubs.size),
             "event_part": event_part}
    return node_parts, cent, hubs, extra
