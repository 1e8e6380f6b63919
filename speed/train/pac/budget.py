"""``speed plan``: what a parallel run would put on each rank, without training.

It runs the same grouping (:func:`~.groups.part_groups`) and sub-graph construction
(:func:`~.groups.rank_graph`) as :class:`~.rank.RankTraining`, so its figures are the ones a real
run records in ``metrics.json``.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from ...partition.shards import Shards
from ..config import TrainConfig
from ..model.network import build_model
from .groups import check_world, own_nodes, part_groups, part_loads, rank_graph
from .sharded import owners


def _event_bytes(shards: Shards, features: bool = True) -> int:
    """Bytes of one event of the log as a rank reads it (ids widened to int64; ``features``:
    with its edge features, else without)."""
    return sum(max(a.dtype.itemsize, 8 if name in ("src", "dst", "eid") else a.dtype.itemsize)
               * (a.shape[1] if a.ndim > 1 else 1) for name, a in shards.event_columns.items()
               if features or name != "msg")


def rank_peak_bytes(runtime: int, shards: Shards, rank_events: int, rank_state: int, eval_owned: int,
                    eval_whole: int, writer: bool, local_validation: bool = False, world: int = 1) -> Dict[str, int]:
    """What a rank holds at its peak, by part (bytes).

    Always: the interpreter with torch and speed loaded and a rank started (``runtime``).  The
    log is one time-ordered copy on disk that every rank maps (:mod:`.log`): it counts where a
    rank reads it, as the pages it has touched until it lets them go.  Then the largest of three
    phases:

    * the start (``writer``: the rank that writes the time-ordered log, rank 0): one window of
      it (:data:`speed.partition.ordered.WINDOW` events);
    * the end of a training epoch: the sub-graph's events and stream, the rank's node state
      :data:`RANK_STATE_COPIES` times over (one more with local validation's back-up), and the
      log's edge features (``features``: its steps read them in place, from every part of the
      log);
    * the evaluation: the memories and neighbour rings of the nodes the rank owns
      (``eval_owned``) and the pending events of every node (``eval_whole``),
      :data:`EVAL_COPIES` times over, on the rank that writes ``best.json`` (``writer``) one
      more copy of the pending events (the predictor's snapshot of the end of the log; each
      rank writes its own rows, a window at a time), what a pass holds per event of the
      period (``eval_period``: :data:`PERIOD_EVENT_BYTES` on every rank and
      :data:`PERIOD_OWNED_BYTES` divided among the ``world`` ranks, for each event of the
      longer of val and test), and the window of the log's events it streams (``log_streamed``: a pass lets
      their pages go as it goes) with the edge features.  The rank's own training state and
      sub-graph are freed before it.
    """
    from ...partition.ordered import WINDOW
    from ..eval.evaluator import RELEASE_EVERY

    split = shards.manifest.get("split") or {}
    num_log = shards.segments[0].num_events
    # a pass lets the mapped log's pages go every RELEASE_EVERY events (and at its end): it holds
    # at most that many, and the plan's loader reads a batch or two ahead
    period = max(int(split.get("num_val_events", 0)), int(split.get("num_test_events", 0)))
    streamed = min(period, 2 * RELEASE_EVERY)
    bare = _event_bytes(shards, features=False)
    features = (_event_bytes(shards) - bare) * num_log
    copies = RANK_STATE_COPIES + (1 if local_validation else 0)
    out = {"runtime": int(runtime), "log_window": _event_bytes(shards) * min(WINDOW, num_log) if writer else 0,
           "log_streamed": bare * streamed, "features": features, "rank_events": 2 * 32 * rank_events,
           "rank_state": copies * int(rank_state),
           "evaluation": EVAL_COPIES * (int(eval_owned) + int(eval_whole)) + (int(eval_whole) if writer else 0),
           "eval_period": (PERIOD_EVENT_BYTES + PERIOD_OWNED_BYTES // max(int(world), 1)) * period}
    phases = [out["log_window"], out["rank_events"] + out["rank_state"] + features,
              out["evaluation"] + out["eval_period"] + out["log_streamed"] + features]
    out["total"] = out["runtime"] + max(phases)
    return out


# Copies of a rank's evaluation state held at once: the evaluation model's, and no other.  The
# back-up of a period's start (the rows its events touch, kept for the new-node pass and, of the
# test period, for load_run(at="test")) and a cycling rank's back-up of its last pass are spilled
# to disk (speed.train.state.spill), so they take pages, not resident memory.
EVAL_COPIES = 1
# What a pass holds per event of its period, counted from what the census of a rank showed: on
# every rank the new-node pass's neighbour graph as given to the sampler (4 int64/float64 columns,
# 32 B), the period's positions and negatives (16 B) and the new-node mask and positions; and,
# divided among the ranks, the event halves whose nodes a rank owns, waiting for its rings (2
# halves of 32 B).  Checked against the bounded 10^8-event run (15M val and test events).
PERIOD_EVENT_BYTES = 56
PERIOD_OWNED_BYTES = 64

# A rank's state at the end of an epoch: its own, and its rows in global ids as they are brought to
# their owners (speed.train.pac.sharded.shard_state); local validation backs it up once more.
RANK_STATE_COPIES = 2
# What a started rank holds beyond the interpreter with torch and speed loaded (the process
# group and DDP, the numba kernels, thread pools), measured: a rank on the 1M-event log held
# 705 MiB before training, 60 MiB of it its data, against about 450 MiB for a process that only
# imported speed and built a model.
RANK_STARTUP_BYTES = 192 << 20


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
    model = build_model(config.model, 1, **config.architecture())
    from ..step.runtime import peak_rss_bytes

    # this process has loaded what a rank loads before its data, and none of the log
    runtime = peak_rss_bytes() + RANK_STARTUP_BYTES
    shards.require_trainable()
    sp = shards.manifest["split"]
    train_events = int(sp.get("num_train_events_masked", sp["num_train_events"]))
    new_nodes = shards.new_nodes
    per_node = model.state.nbytes(1)
    # every per-node structure (memories, neighbour rings, pending index), per node
    footprint = model.state.footprint(1)
    state_per_node = sum(footprint.values())
    # while evaluating a rank holds the memories and neighbour rings of the nodes it owns, and
    # every node's pending events (speed.train.state.sharded)
    owned_per_node = footprint["memories"] + footprint["neighbours"]
    # (and for every node, its owner and, per memory and for the rings, its row among the held ones)
    whole_per_node = footprint["pending"] + 2 + 4 * (len(model.state.memories()) + 1)
    # the static table has a row per node of the log on every rank (speed.train.model.static)
    static_bytes = 0 if model.net.static is None else model.net.static.state_bytes() * shards.num_nodes
    loads = part_loads(shards, config.subgraph) if config.grouping == "balanced" else None
    epochs: List[Dict] = []
    owner = {}
    for epoch in range(1, config.epochs + 1):
        ranks = []
        groups = part_groups(shards.num_parts, nproc, config.seed, epoch, config.shuffle, loads)
        # whose rows each rank holds while evaluating (speed.train.pac.sharded.owners)
        owner = {epoch: owners(shards.num_nodes, shards.shared, [own_nodes(shards, g) for g in groups], nproc)}
        for r, group in enumerate(groups):
            rg = rank_graph(shards, group, new_nodes, config.subgraph)
            owned = int(np.count_nonzero(owner[epoch] == r))
            peak = rank_peak_bytes(runtime, shards, len(rg.events), int(rg.nodes.size) * state_per_node,
                                   owned * owned_per_node, shards.num_nodes * whole_per_node, writer=r == 0,
                                   local_validation=config.validation == "local", world=nproc)
            ranks.append({"rank": r, "parts": group.tolist(), "events": len(rg.events), "nodes": int(rg.nodes.size),
                          "memory_bytes": int(rg.nodes.size) * per_node, "evaluation_nodes": owned,
                          "peak_bytes": peak["total"], "peak_parts": peak})
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
            "static_memory_bytes": static_bytes, "epochs": epochs,
            # appended shards: whether their quality has drifted from the first partition's
            "version": int(shards.manifest.get("version", 1)), "advice": shards.manifest.get("advice")}
