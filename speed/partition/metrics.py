"""Partition quality metrics (the shape of the SPEED paper's Tables VI and VIII)."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ..data.events import Events
from . import _kernels


def partition_metrics(events: Events, node_parts: np.ndarray, num_parts: int) -> Dict:
    """Replication factor, edge cut and per-part sizes of a node-to-part assignment.

    Computed over ``events`` (the partitioned, i.e. training, events) and the nodes that
    occur in them.

    Parameters
    ----------
    events : Events
    node_parts : int64 ndarray, shape (num_nodes,)
        Part id per node, -1 for shared nodes.
    num_parts : int

    Returns
    -------
    dict
        ``replication_factor = sum_p |V_p| / |V|``, ``edge_cut = cut / |E|``,
        ``cut_events``, ``part_events`` (node-induced: shared-shared events count in
        every part) with mean/std, ``part_nodes`` (own nodes + shared) with std,
        ``node_portion_mean``/``_std`` (``|V_p| / |V|``), ``shared_nodes``,
        ``num_train_nodes``.
    """
    _, per_bucket = _kernels.bucket_counts(events.src, events.dst, node_parts, num_parts, 0)
    return metrics_from_counts(events.node_mask(), node_parts, per_bucket, num_parts, len(events))


def metrics_from_counts(present: np.ndarray, node_parts: np.ndarray, per_bucket: np.ndarray, num_parts: int,
                        num_events: int) -> Dict:
    """:func:`partition_metrics` from the nodes present in the events (bool, shape (num_nodes,))
    and the events per bucket (int64, shape (num_buckets,)), for callers that stream."""
    nv = int(present.sum())
    parts_present = node_parts[present]
    shared = int(np.count_nonzero(parts_present == _kernels.SHARED))
    own = np.bincount(parts_present[parts_present >= 0], minlength=num_parts)[:num_parts]
    part_nodes = own + shared
    part_events, cut, both_shared = _kernels.part_event_counts(per_bucket, num_parts)
    ne = num_events
    portion = part_nodes / max(nv, 1)
    return {
        "num_train_nodes": nv,
        "replication_factor": float(part_nodes.sum() / max(nv, 1)),
        "edge_cut": float(cut / max(ne, 1)),
        "cut_events": int(cut),
        "shared_shared_events": int(both_shared),
        "shared_nodes": shared,
        "part_events": [int(x) for x in part_events],
        "part_events_mean": float(part_events.mean()),
        "part_events_std": float(part_events.std()),
        "part_nodes": [int(x) for x in part_nodes],
        "part_nodes_std": float(part_nodes.std()),
        "node_portion_mean": float(portion.mean()),
        "node_portion_std": float(portion.std()),
    }
