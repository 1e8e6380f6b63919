"""Where a training step's time goes: TGN (or another model) for one epoch, stage by stage.

Stages are timed by wrapping the functions that do them (the outermost active stage gets the
time, so nested calls are not counted twice):

* planning and sampling -- building a batch plan (this version) / the neighbour sampler (before);
* memory update -- applying pending messages (message -> aggregator -> updater);
* embedding -- the embedding module (graph attention for TGN);
* decoder -- the link predictor;
* observe -- storing the batch's memory;
* backward, optimiser -- ``loss.backward()`` and ``Adam.step``;
* Python and the rest -- everything else of the epoch (negatives, loss, bookkeeping).

``--tree DIR`` profiles another checkout (e.g. a ``git worktree`` of an earlier commit) with the
same script, so before and after are measured side by side in one run::

    python benchmarks/profile_step.py --log ../shared/data/wikipedia.csv --log dense.csv \\
        --tree /tmp/old --out benchmarks/results/profile_step.json

``--device cuda`` profiles on a GPU (each stage then waits for its kernels, so the stages add up
to the epoch, at the price of the overlap a step would otherwise have); ``--state-device host``
keeps the memories in host RAM, moved through a pinned staging buffer with ``--pin`` and by plain
pageable copies with ``--no-pin`` (default: the library's, ``speed.train.state.staging.PIN_STAGING``).

Each (tree, log) runs in its own process, one after the other.  Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trees import answered_as_worker, run_worker, save, tree_options, trees  # noqa: E402


def _wrap(owner, name, stage, clock):
    fn = getattr(owner, name)
    sync = clock.get("sync") or (lambda: None)

    def timed(*args, **kwargs):
        if clock["active"]:  # inside another stage: that one gets the time
            return fn(*args, **kwargs)
        clock["active"] = stage
        sync()  # on a GPU: what was queued before belongs to the stage before
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sync()
            clock["stages"][stage] = clock["stages"].get(stage, 0.0) + time.perf_counter() - t0
            clock["active"] = None

    setattr(owner, name, timed)


def worker(a) -> dict:
    sys.path.insert(0, a.tree)
    import torch

    torch.set_num_threads(a.threads)
    import speed
    from speed.train import TrainConfig
    from _trees import local_trainer

    from speed.train.state import staging

    if a.pin or a.no_pin:
        staging.PIN_STAGING = bool(a.pin)
    try:  # this layout: the training package in rooms
        from speed.train.model import modules, network as models
        from speed.train.step import loader
    except ImportError:  # earlier versions
        from speed.train import models, modules
        loader = None

    # on a GPU each stage waits for its kernels (else it gets only their launches)
    clock = {"active": None, "stages": {},
             "sync": torch.cuda.synchronize if a.device.startswith("cuda") else None}
    if hasattr(models, "StatefulModel"):  # plans on the host, memory from keys
        if loader is None:
            from speed.train import loader

        _wrap(loader.PlanLoader, "_make", "planning and sampling", clock)
        _wrap(models.TemporalGNN, "key_states", "memory update", clock)
        from speed.train.state.nodes import NodeStates

        _wrap(NodeStates, "absorb", "observe", clock)
    else:  # earlier versions: a ring sampler called inside the step, memory_of per node
        from speed.train import sampler

        _wrap(models.TemporalGNN, "observe", "observe", clock)
        _wrap(sampler.RecentNeighborSampler, "sample", "planning and sampling", clock)
        _wrap(sampler.RecentNeighborSampler, "insert", "planning and sampling", clock)
        _wrap(models.TemporalGNN, "memory_of", "memory update", clock)
    for cls in (modules.GraphAttentionEmbedding, modules.TimeProjectionEmbedding, modules.IdentityEmbedding):
        _wrap(cls, "forward", "embedding", clock)
    _wrap(modules.LinkPredictor, "forward", "decoder", clock)
    _wrap(torch.Tensor, "backward", "backward", clock)
    _wrap(torch.optim.Adam, "step", "optimiser", clock)

    events = speed.read_events(a.log, progress=False)
    split = speed.chronological_split(events, new_node_fraction=0.0)
    cfg = dict(model=a.model, seed=0, progress=False, num_threads=a.threads, new_node_fraction=0.0,
               device=a.device, state_device=a.state_device)
    cfg = {k: v for k, v in cfg.items() if k in TrainConfig.__dataclass_fields__}
    tr = local_trainer(events, split, TrainConfig(**cfg))
    tr.training.train_epoch(1)  # numba compilation and warm caches
    clock["stages"].clear()
    t0 = time.perf_counter()
    log = tr.training.train_epoch(2)
    total = time.perf_counter() - t0
    stages = dict(clock["stages"])
    stages["Python and the rest"] = total - sum(stages.values())
    return {"tree": a.tree, "log": Path(a.log).name, "model": a.model, "device": a.device,
            "state_device": getattr(tr, "state_on", a.state_device), "pinned_staging": staging.PIN_STAGING,
            "events": log.train_events,
            "seconds": total, "events_per_s": log.train_events / total, "stages": stages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", action="append", required=True, help="event log (repeatable)")
    ap.add_argument("--model", default="tgn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (stages then wait for their kernels)")
    ap.add_argument("--state-device", default="auto", help="auto, device or host (memories in host RAM)")
    pin = ap.add_mutually_exclusive_group()
    pin.add_argument("--pin", action="store_true", help="host memories: through a pinned staging buffer")
    pin.add_argument("--no-pin", action="store_true", help="host memories: plain pageable copies")
    tree_options(ap, "profile_step.json", "profile")
    a = ap.parse_args()
    if answered_as_worker(a, worker, ("log", "tree")):
        return 0
    rows = []
    for log in a.log:
        for tree in trees(a.tree):
            r = run_worker(__file__, "--log", log, "--tree", tree, "--model", a.model, "--threads", a.threads,
                           "--device", a.device, "--state-device", a.state_device,
                           *(["--pin"] if a.pin else ["--no-pin"] if a.no_pin else []))
            rows.append(r)
            share = ", ".join(f"{k} {100 * v / r['seconds']:.0f}%" for k, v in r["stages"].items())
            print(f"{r['log']:<24} {Path(r['tree']).name:<8} {r['device']} (state {r['state_device']}) "
                  f"{r['events_per_s']:>8,.0f} events/s  {share}")
    save(a.out, model=a.model, threads=a.threads, device=a.device, runs=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
