"""A parallel update from shards: ``speed update RUN SHARDS --out RUN2 --nproc N``.

N spawned ranks (gloo) take the events appended to the shards since the run, each the events
of its parts: an event goes to the part of its source (of its destination when the source is
shared; by event id between two shared nodes), and part ``p`` to rank ``p mod N``.  Every rank
loads the run and maps every new event (so new nodes get the same rows everywhere), then takes
its own events in test then train (:class:`~speed.train.online.update.OnlineUpdater`), averaging the
gradients of every step across the ranks, as DDP does: the weights stay identical, and every
rank takes as many steps as the busiest one (idle steps add zero gradients).  As in PAC
training, a rank's memory holds its own events only, so an event between two groups is scored
without the other groups' latest events.

Rank 0 then builds the run's node state after the increment exactly: from the state the run
ended with, it takes every new event in, memory only, with the trained weights (a forward pass,
about a third of a training step), so ``RUN2`` holds the memory, neighbour rings and pending
events one process would have for those weights.  The reported scores are the ranks'
test-then-train scores, put back in event order.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Dict

import numpy as np

from ...errors import InputError
from ..config import UpdateConfig


def owner_parts(shards, src: np.ndarray, dst: np.ndarray, eid: np.ndarray) -> np.ndarray:
    """The part whose rank takes each event: its source's, else its destination's, else (two
    shared nodes) ``eid mod P``."""
    parts = shards.node_parts
    a, b = parts[src], parts[dst]
    return np.where(a >= 0, a, np.where(b >= 0, b, eid % shards.num_parts))


def _update_rank(rank: int, world: int, init_method: str, run: str, shards_path: str, out: str, config: Dict,
               overwrite: bool) -> None:
    """One rank of a parallel update (spawned by :func:`speed.train.pac.launch.spawn`)."""
    from ..._threads import apply_threads, choose_threads
    from ...partition.shards import Shards
    from ..world import World
    from . import update as online
    from ..run.folder import RunFolder
    from ..run.predictor import open_checkpoint, predictor_from

    started = time.perf_counter()
    apply_threads(choose_threads(world, measure=False)[0])  # the ranks share this machine's cores
    # gloo on host tensors: the update's ranks share this machine's cores (and its GPU, if any)
    w = World.join(rank, world, "cpu", "gloo", init_method)
    # (the group is never destroyed: see speed.train.pac.launch._spawned)
    cfg = UpdateConfig(**config)
    if rank:
        cfg = replace(cfg, progress=False)
    run_p = Path(run)
    saved, payload = open_checkpoint(run_p)
    metrics = RunFolder(run_p).metrics()
    events = online.new_events(shards_path, metrics, None, False, float(payload["t_end"]))
    shards = Shards(shards_path)
    pred = predictor_from(saved, payload, "end", cfg.device, run_p)
    again = pred.intake.already_held(events)  # the run's last events, stored again in the shards: not taken twice
    if again.all():
        raise InputError("the shards hold nothing the run has not taken in already", shards_path)
    events = events.select(np.flatnonzero(~again))
    mine = (owner_parts(shards, events.src, events.dst, events.eid) % world) == rank
    net = pred.net
    # DDP averages every step's gradients, as in PAC training (a learned static table's rows stay
    # each rank's own, sparse gradients); a rank's idle steps (after its own events) run their
    # forward pass on a batch whose loss counts zero, and a rank may see no event at all, so the
    # parameters a step uses are searched for (find_unused_parameters)
    ddp = w.wrap(net, ignore=net.local_parameters(), find_unused=True, bucket_mb=25,
                 bucket_view=False) if cfg.train else None
    up = online.OnlineUpdater(pred, saved, payload, cfg, forward=ddp)
    own = -(-int(mine.sum()) // pred.batch_size)
    result = up.run(events, mine=mine, steps=w.all_max(own))
    eid = up.taken[3]
    pos, neg = up.last_scores
    share = {"eid": eid, "pos": pos, "neg": neg, "cand": up.last_candidates, "events": int(eid.size),
             "loss": result.get("loss")}
    shares = w.objects(share)
    if rank != 0:
        return
    # the exact state after the increment, for the trained weights: the run's end state, then
    # every new event taken in, memory only
    weights = {k: v.detach().clone() for k, v in up.model.params_state_dict().items()}
    saved, payload = open_checkpoint(run_p)  # the first predictor holds the arrays it opened
    final_pred = predictor_from(saved, payload, "end", cfg.device, run_p)
    final_pred.load_weights(weights)
    memory = online.OnlineUpdater(final_pred, saved, payload, replace(cfg, train=False, passes=1, replay=0.0,
                                                                      mrr=False))
    new_nodes = memory.run(events)["new_nodes"]
    memory.optimizer = up.optimizer
    eids = np.concatenate([x["eid"] for x in shares])
    order = np.argsort(eids, kind="stable")
    pos = np.concatenate([x["pos"] for x in shares])[order]
    neg = np.concatenate([x["neg"] for x in shares])[order]
    cand = None
    if cfg.mrr:
        cand = np.concatenate([x["cand"] for x in shares if x["cand"] is not None])[order]
    t_all = events.t_float()
    entry = {"new_nodes": new_nodes, "mode": "train", "passes": cfg.passes, "replay": cfg.replay, "nproc": world,
             "rank_events": [x["events"] for x in shares],
             "loss": float(np.mean([x["loss"] for x in shares if x["loss"] is not None] or [np.nan])),
             **online.score_entry(pos, neg, cand, t_all, pred.batch_size, cfg.windows)}
    entry["seconds"] = time.perf_counter() - started
    online.write_updated(run_p, Path(out), metrics, events, entry, memory, saved, payload, overwrite)


def update_parallel(run, shards, out, nproc: int, overwrite: bool, config: UpdateConfig) -> Dict:
    """Spawn ``nproc`` ranks for a parallel update (see the module docstring); returns the new
    run's metrics."""
    from ...partition.shards import Shards

    if not Path(shards).is_dir():
        raise InputError("a parallel update (nproc) reads its new events from a shards folder "
                         "(speed partition ... --append)", shards)
    from ..pac.groups import check_world

    sh = Shards(shards)
    check_world(sh.num_parts, nproc)
    if config.replay:
        raise InputError("replay is not taken by a parallel update (nproc): update in one process")
    # what a rank would find wrong, said here in one line (a rank's error ends the whole job)
    from ..run.folder import RunFolder

    folder = RunFolder(run)
    folder.require_finished()
    done = int(folder.metrics().get("data", {}).get("num_events", 0))
    if sh.num_events <= done:
        raise InputError(f"the shards hold {sh.num_events:,} events and the run has taken in {done:,}: nothing new "
                         "to update with (append to them first: speed partition MORE -o SHARDS --append)", shards)
    from ..pac.launch import spawn

    spawn(_update_rank, (str(run), str(shards), str(out), asdict(config), overwrite), nproc)
    return RunFolder(out).metrics()


