"""Baseline partitioners behind the same interface as SEP (paper Tables VI and VIII).

Vertex-cut streaming methods (``hdrf``, ``greedy``) assign *events* to parts and may
replicate any node; every replicated node becomes shared, so their edge cut is 0 and their
node portion high.  Edge-cut methods (``random``, ``kl``, ``metis``) assign *nodes* to
parts with no replicas: a part is the node-induced sub-graph of its nodes, and an event
whose endpoints sit in different parts is cut.  Both kinds end as the same ``node_parts``
array (-1 = shared), so shards and metrics are computed by the same code for every method.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from .._util import captured_fds, places, progress_bar
from ..data.events import Events
from . import _kernels

_CHUNK = 1 << 21


def _stream(kernel, events: Events, state: tuple, desc: str, progress: Optional[bool]) -> None:
    ne = len(events)
    with progress_bar(ne, desc, progress=progress) as bar:
        for start in range(0, ne, _CHUNK):
            end = min(ne, start + _CHUNK)
            kernel(events.src, events.dst, start, end, *state)
            bar.update(end - start)


def _empty_mask(num_nodes: int, num_parts: int) -> np.ndarray:
    return np.zeros((num_nodes, (num_parts + 63) // 64), dtype=np.uint64)


def hdrf(events: Events, num_parts: int, lam: float = 1.0, eps: float = 1.0,
         progress: Optional[bool] = None) -> Tuple[np.ndarray, Dict]:
    """HDRF streaming vertex-cut: SEP's score with partial degrees and no hub limit.

    Returns
    -------
    node_parts : int64 ndarray, shape (num_nodes,)
    extra : dict
        ``stream_loads``, ``event_part``.
    """
    mask = _empty_mask(events.num_nodes, num_parts)
    degree = np.zeros(events.num_nodes, dtype=np.int64)
    load = np.zeros(num_parts, dtype=np.int64)
    event_part = np.empty(len(events), dtype=np.int32)
    _stream(_kernels.hdrf_assign, events, (degree, mask, load, float(lam), float(eps), event_part), "HDRF assign",
            progress)
    parts = _kernels.fill_unplaced(_kernels.mask_to_parts(mask, num_parts, np.empty(mask.shape[0], dtype=np.int64)), num_parts)
    return parts, {"stream_loads": [int(x) for x in load], "dropped_events": 0, "event_part": event_part}


def greedy(events: Events, num_parts: int, progress: Optional[bool] = None) -> Tuple[np.ndarray, Dict]:
    """PowerGraph greedy streaming vertex-cut (needs each node's degree: one extra pass)."""
    mask = _empty_mask(events.num_nodes, num_parts)
    remaining = (np.bincount(events.src, minlength=events.num_nodes)
                 + np.bincount(events.dst, minlength=events.num_nodes)).astype(np.int64)
    load = np.zeros(num_parts, dtype=np.int64)
    event_part = np.empty(len(events), dtype=np.int32)
    _stream(_kernels.greedy_assign, events, (remaining, mask, load, event_part), "greedy assign", progress)
    parts = _kernels.fill_unplaced(_kernels.mask_to_parts(mask, num_parts, np.empty(mask.shape[0], dtype=np.int64)), num_parts)
    return parts, {"stream_loads": [int(x) for x in load], "dropped_events": 0, "event_part": event_part}


def random_parts(events: Events, num_parts: int, seed: int = 0) -> Tuple[np.ndarray, Dict]:
    """Each node to a seeded, uniformly random part; no replicas (the paper's "Random")."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_parts, size=events.num_nodes).astype(np.int64), {}


def static_projection(events: Events):
    """Undirected, weighted, self-loop-free pairs of the event graph.

    Returns
    -------
    u, v : int64 ndarray, shape (M,)
        ``u < v``, each pair once.
    weight : int64 ndarray, shape (M,)
        Number of events between the pair (either direction).
    """
    a = np.minimum(events.src, events.dst)
    b = np.maximum(events.src, events.dst)
    keep = a != b
    key = a[keep] * np.int64(events.num_nodes) + b[keep]
    uniq, weight = np.unique(key, return_counts=True)
    return uniq // events.num_nodes, uniq % events.num_nodes, weight.astype(np.int64)


def kl(events: Events, num_parts: int, seed: int = 0, max_iter: int = 10) -> Tuple[np.ndarray, Dict]:
    """Recursive Kernighan-Lin bisection (networkx) on the static weighted projection.

    KL swaps pairs of nodes, so each bisection keeps the sizes it starts from: a group
    meant for ``k`` parts is split into halves of ``floor(k/2)`` and ``ceil(k/2)`` parts'
    worth of nodes, from a seeded random start.  Any ``num_parts`` works.
    """
    import networkx as nx

    u, v, w = static_projection(events)
    graph = nx.Graph()
    present = np.flatnonzero(events.node_mask())
    graph.add_nodes_from(present.tolist())
    graph.add_weighted_edges_from(zip(u.tolist(), v.tolist(), w.tolist()))
    parts = np.full(events.num_nodes, _kernels.NO_PART, dtype=np.int64)
    rng = np.random.default_rng(seed)

    def split(nodes: list, first: int, count: int) -> None:
        if count == 1 or len(nodes) < 2:
            parts[nodes] = first
            return
        left = count // 2
        order = rng.permutation(len(nodes))
        cut = int(round(len(nodes) * left / count))
        a = [nodes[k] for k in order[:cut]]
        b = [nodes[k] for k in order[cut:]]
        if a and b:
            x, y = nx.algorithms.community.kernighan_lin_bisection(
                graph.subgraph(nodes), partition=(set(a), set(b)), max_iter=max_iter, weight="weight",
                seed=int(rng.integers(2**31)))
            # Swaps keep the sizes; networkx 3.x returns the sides in reverse order, so
            # match them by size rather than position.
            a, b = (x, y) if len(x) == len(a) else (y, x)
        split(sorted(a), first, left)
        split(sorted(b), first + left, count - left)

    split(present.tolist(), 0, num_parts)
    return _kernels.fill_unplaced(parts, num_parts), {}


def metis(events: Events, num_parts: int, seed: int = 0) -> Tuple[np.ndarray, Dict]:
    """METIS k-way (through DGL's ``metis_partition_assignment``) on the static projection.

    Needs the ``dgl`` extra.  Nodes are relabelled to the ones present, the projection is
    made symmetric, and nodes absent from the events fill the smallest parts.
    """
    from ..optional import require_dgl

    dgl, torch = require_dgl("method='metis'")

    present = np.flatnonzero(events.node_mask())
    local = places(present, events.num_nodes)
    u, v, _ = static_projection(events)
    lu, lv = local[u], local[v]
    g = dgl.graph((torch.from_numpy(np.concatenate([lu, lv])), torch.from_numpy(np.concatenate([lv, lu]))),
                  num_nodes=int(present.size))
    parts = np.full(events.num_nodes, _kernels.NO_PART, dtype=np.int64)
    if num_parts == 1:
        parts[present] = 0
    else:
        torch.manual_seed(seed)
        with captured_fds():  # METIS logs to the process's stdout
            assign = dgl.metis_partition_assignment(g, num_parts)
        parts[present] = assign.numpy().astype(np.int64)
    return _kernels.fill_unplaced(parts, num_parts), {}
