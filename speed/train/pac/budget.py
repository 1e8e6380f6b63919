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


def _event_bytes(shards: Shards) -> int:
    """Bytes of one event of the log as a rank holds it in memory (ids widened to int64)."""
    return sum(max(a.dtype.itemsize, 8 if name in ("src", "dst", "eid") else a.dtype.itemsize)
               * (a.shape[1] if a.ndim > 1 else 1) for name, a in shards._arrays.items())


def rank_peak_bytes(runtime: int, shards: Shards, rank_events: int, rank_state: int,
                    full_state: int, main: bool, whole_log: bool = False) -> Dict[str, int]:
    """What a rank holds at its peak, by part (bytes): the interpreter with torch and speed
    loaded (``runtime``, measured in this process), the log (rank 0, and every rank of a run
    with a static memory, reads the whole log, twice over while the stored buckets are gathered
    into time order; the other ranks read their sub-graphs from the shards' memory maps and keep
    only each event's stored position for the edge features), its training sub-graph (the
    events and their stream), its node state, and on rank 0 the full-graph evaluation state
    with the copies the evaluation holds at once (:data:`RANK_STATE_COPIES` and
    :data:`EVAL_STATE_COPIES` count them)."""
    per_event = _event_bytes(shards)
    log = 2 * per_event * shards.num_events if main or whole_log else \
        (4 * shards.num_events if shards.msg_dim else 0)
    # the rank's state three times over at the end of an epoch: local validation backs it up,
    # and the gather for evaluation sends a copy of its rows
    out = {"runtime": int(runtime), "log": log, "rank_events": 2 * 32 * rank_events,
           "rank_state": RANK_STATE_COPIES * int(rank_state)}
    if main:
        out["evaluation"] = EVAL_STATE_COPIES * int(full_state)
    out["total"] = sum(out.values())
    return out


# full-graph states rank 0 holds at once during evaluation: while a best epoch's state is
# gathered, the ranks' rows, the assembled state and the evaluation model's; later the
# evaluation model's and a period's start (kept for the new-node pass; for the test period also
# for load_run(at="test")), with the neighbour rings copied once more while checkpoint.pt is
# written.  (The evaluation model holds the best epoch's state itself: no back-up of it.)
EVAL_STATE_COPIES = 3
RANK_STATE_COPIES = 3


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
        memory_bytes, and ``peak_bytes``: the rank's expected peak resident memory, with its
        parts in ``peak_parts``, see :func:`rank_peak_bytes`), ``work_inflation`` (Σ rank events / training events) and
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
    # every per-node structure (memories, neighbour rings, pending index), per node
    state_per_node = sum(model.state.footprint(1).values())
    from ..trainer import peak_rss_bytes

    runtime = peak_rss_bytes()  # this process has loaded what a rank loads before its data
    # the static table has a row per node of the log on every rank (speed.train.static)
    static_bytes = 0 if model.net.static is None else model.net.static.state_bytes() * shards.num_nodes
    loads = part_loads(shards, config.subgraph) if config.grouping == "balanced" else None
    epochs: List[Dict] = []
    for epoch in range(1, config.epochs + 1):
        ranks = []
        for r, group in enumerate(part_groups(shards.num_parts, nproc, config.seed, epoch, config.shuffle, loads)):
            rg = rank_graph(shards, group, split.new_nodes, config.subgraph)
            peak = rank_peak_bytes(runtime, shards, len(rg.events), int(rg.nodes.size) * state_per_node,
                                   shards.num_nodes * state_per_node, main=r == 0,
                                   whole_log=config.static_memory != "none")
            ranks.append({"rank": r, "parts": group.tolist(), "events": len(rg.events), "nodes": int(rg.nodes.size),
                          "memory_bytes": int(rg.nodes.size) * per_node, "peak_bytes": peak["total"],
                          "peak_parts": peak})
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
