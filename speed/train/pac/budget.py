"""``speed plan``: what a parallel run would put on each rank, without training.

It runs the same grouping (:func:`~.groups.part_groups`) and sub-graph construction
(:func:`~.groups.rank_graph`) as :class:`~.rank.PacRank`, so its figures are the ones a real
run records in ``metrics.json``.
"""

from __future__ import annotations

from typing import Dict, List

from ...partition.shards import Shards
from ..config import TrainConfig
from ..models import build_model
from .groups import check_world, part_groups, part_loads, rank_graph


def plan(shards: Shards, config: TrainConfig, nproc: int) -> Dict:
    """Per epoch and rank: parts, events, nodes and node-state bytes; and the work inflation.

    Parameters
    ----------
    shards : Shards
    config : TrainConfig
        Validated; ``epochs``, ``seed``, ``shuffle``, ``subgraph``, the model and its widths
        are read.
    nproc : int
        Number of ranks.

    Returns
    -------
    dict
        ``epochs``: one entry per epoch with ``ranks`` (rank, parts, events, nodes,
        memory_bytes), ``work_inflation`` (Σ rank events / training events) and
        ``largest_share`` (the largest rank's events / training events); plus the run's
        constants (training events, node-state bytes per node, unpartitioned bytes, and
        ``static_memory_bytes``: the static table every rank holds, with a learned table's
        Adam moments, 0 without static memory).
    """
    check_world(shards.num_parts, nproc)
    split = shards.split()
    train_events = int(split.train_mask.sum())
    model = build_model(config.model, 1, **config.architecture())
    per_node = model.state.nbytes(1)
    # the static table has a row per node of the log on every rank (speed.train.static)
    static_bytes = 0 if model.net.static is None else model.net.static.state_bytes() * shards.num_nodes
    loads = part_loads(shards, config.subgraph) if config.grouping == "balanced" else None
    epochs: List[Dict] = []
    for epoch in range(1, config.epochs + 1):
        ranks = []
        for r, group in enumerate(part_groups(shards.num_parts, nproc, config.seed, epoch, config.shuffle, loads)):
            rg = rank_graph(shards, group, split.new_nodes, config.subgraph)
            ranks.append({"rank": r, "parts": group.tolist(), "events": len(rg.events), "nodes": int(rg.nodes.size),
                          "memory_bytes": int(rg.nodes.size) * per_node})
        total = sum(x["events"] for x in ranks)
        for x in ranks:
            x["share"] = x["events"] / max(train_events, 1)
        largest = max(x["events"] for x in ranks)
        # equal steps: every rank runs as many batches as the largest, so at one process's speed
        # per rank the epoch takes (largest rank's events / training events) of one process's
        epochs.append({"epoch": epoch, "ranks": ranks, "work_inflation": total / max(train_events, 1),
                       "largest_share": largest / max(train_events, 1),
                       "expected_epoch_time": largest / max(train_events, 1)})
        if not config.shuffle:  # the same groups every epoch
            epochs += [dict(epochs[0], epoch=e) for e in range(2, config.epochs + 1)]
            break
    return {"shards": str(shards.path), "nproc": nproc, "subgraph": config.subgraph, "model": config.model,
            "num_parts": shards.num_parts, "num_nodes": shards.num_nodes, "num_shared": int(shards.shared.size),
            "train_events": train_events, "memory_bytes_per_node": per_node,
            "memory_bytes_unpartitioned": per_node * shards.num_nodes, "static_memory": config.static_memory,
            "static_memory_bytes": static_bytes, "epochs": epochs}
