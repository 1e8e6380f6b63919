"""Time-decayed node centrality and hub selection (SEP step 1)."""

from __future__ import annotations

import math

import numpy as np

from ..data.events import Events
from . import _kernels


def node_centrality(events: Events, beta: float = 0.1) -> np.ndarray:
    """``Cent(i) = sum over events of i of exp(beta * (t - t_max) / (t_max - t_min))``.

    Time is normalised by the span of the stream, so ``beta`` has no unit; ``beta=0``
    gives the plain degree (a self-loop counts twice).

    Parameters
    ----------
    events : Events
    beta : float
        Non-negative decay.

    Returns
    -------
    float64 ndarray, shape (num_nodes,)
    """
    t = events.t_float()
    cent = np.zeros(events.num_nodes, dtype=np.float64)
    t_max, span = decay_span(float(t[0]), float(t[-1]))
    _kernels.centrality_add(events.src, events.dst, t, float(beta), t_max, span, cent)
    return cent


def decay_span(t_min: float, t_max: float):
    """``(t_max, span)`` of the decay; a zero span counts as 1, so every weight is 1."""
    span = t_max - t_min
    return t_max, (span if span > 0.0 else 1.0)


def num_hubs(topk: float, num_present: int) -> int:
    """``floor(topk * |V|)`` for the nodes present in the stream.

    A tolerance of 1e-9 keeps float noise (0.29 * 100 = 28.999...) from losing a hub.
    """
    return int(math.floor(topk * num_present + 1e-9))


def select_hubs(cent: np.ndarray, present: np.ndarray, topk: float) -> np.ndarray:
    """The ``floor(topk * |V|)`` present nodes of largest centrality, ties to smaller id.

    Parameters
    ----------
    cent : float64 ndarray, shape (num_nodes,)
    present : bool ndarray, shape (num_nodes,)
        Nodes that occur in the stream; only they count in ``|V|`` and may be hubs.
    topk : float
        Fraction in [0, 1].

    Returns
    -------
    int64 ndarray, shape (H,)
        Hub ids, sorted ascending.
    """
    return top_nodes(cent, present, num_hubs(topk, int(np.count_nonzero(present))))


def top_nodes(cent: np.ndarray, candidates: np.ndarray, h: int) -> np.ndarray:
    """The ``h`` nodes of ``candidates`` (bool, shape (num_nodes,)) of largest centrality, ties
    to smaller id; int64, sorted ascending."""
    candidates = np.flatnonzero(candidates)
    if h <= 0:
        return np.empty(0, dtype=np.int64)
    values = cent[candidates]
    if h >= candidates.size:
        return candidates.astype(np.int64)
    # The h-th largest value by selection (O(|V|)), not a full sort: every node above it is a
    # hub, and nodes equal to it fill the remaining places in id order (candidates ascend).
    threshold = np.partition(values, values.size - h)[values.size - h]
    above = candidates[values > threshold]
    tied = candidates[values == threshold][: h - above.size]
    return np.sort(np.concatenate([above, tied])).astype(np.int64)
