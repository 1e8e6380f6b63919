"""Where a PAC rank's time goes: per-step timings of 2 gloo ranks under DDP communication hooks.

The log is split and partitioned at the defaults (P=4, top-0% hubs, balance 0.1); one process
with 1 thread trains on the merged shards for the reference rate; then two 1-thread ranks
(``assigned``, the defaults otherwise) train the same shards, once per variant:

* ``allreduce`` -- DDP's gradient averaging (the default);
* ``latency``   -- every gradient bucket does a 1-element all-reduce instead: the ranks still
  meet in lock-step at every step, but move no bytes;
* ``none``      -- no communication in backward: each rank steps on its own gradients
  (the ranks meet only at the 20-step shared-node syncs);
* ``average4``  -- ``--average-every 4`` (local SGD: the hook of ``none``, and one weight
  all-reduce every 4 steps).

Per variant, after the first epoch: the mean wall time of a step on each rank (forward, memory
update, backward with its all-reduce, optimiser), each rank's rate relative to the one process,
and, from the step times, ``lockstep``: sum_i max(rank 0 step i, rank 1 step i) over the ranks'
mean sum -- what meeting at every step would cost from unequal step times alone.  The
differences between variants are the cost of meeting (latency) and of the bytes (allreduce).
Writes ``benchmarks/results/rank_breakdown.json``::

    python benchmarks/rank_breakdown.py --log mail.csv --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
VARIANTS = ("allreduce", "latency", "none", "average4")


def _latency_hook(state, bucket):  # not annotated: DDP checks a hook's annotations
    import torch
    import torch.distributed as dist

    buf = bucket.buffer()
    return dist.all_reduce(torch.zeros(1), async_op=True).get_future().then(lambda fut: buf)


def _rank(rank, world, store, shards, variant, epochs, queue):
    import torch.distributed as dist

    from speed.partition.shards import Shards
    from speed.train.config import TrainConfig
    from speed.train.pac.averaging import local_step_hook
    from speed.train.pac.rank import rank_trainer
    from speed.train.world import World

    cfg = TrainConfig(model="tgn", epochs=epochs, seed=0, progress=False, nproc=world, num_threads=1,
                      average_every=4 if variant == "average4" else 1).validate()
    w, cfg, _ = World.start(rank, world, rank, cfg, f"file://{store}")
    r = rank_trainer(Shards(shards), cfg, w).training  # the rank's training part, timed step by step
    if variant == "latency":
        r.ddp.register_comm_hook(None, _latency_hook)
    elif variant == "none":
        r.ddp.register_comm_hook(None, local_step_hook)
    times, step = [], r.engine.step

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = step(*args, **kwargs)
        times.append(time.perf_counter() - t0)
        return out

    r.engine.step = timed
    logs = []
    for epoch in range(1, epochs + 1):
        times.clear()
        own = r.train_epoch(epoch).ranks[rank]
        logs.append({"step_seconds": list(times), "rate": own["events"] * own["passes"] / own["train_seconds"]})
    queue.put((rank, logs))
    queue.close()
    queue.join_thread()  # the result must leave before os._exit
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def _run_variant(shards, variant, epochs, timeout=900):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = os.path.join(tempfile.mkdtemp(prefix="rank-breakdown-"), "store")
    procs = [ctx.Process(target=_rank, args=(r, 2, store, shards, variant, epochs, queue), daemon=True)
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = dict(queue.get(timeout=timeout) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return got


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", action="append", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2, help="rounds over the variants (they alternate)")
    p.add_argument("--out", default=str(HERE / "results" / "rank_breakdown.json"))
    a = p.parse_args(argv)

    import speed

    results = []
    for log in a.log:
        events = speed.read_events(log, progress=False)
        split = speed.chronological_split(events, seed=0)
        with tempfile.TemporaryDirectory() as tmp:
            shards = str(speed.partition(split.train(events), 4, topk=0.0, progress=False)
                         .save(Path(tmp) / "s", events=events, split=split))
            single = speed.train(speed.load_shards(shards), num_threads=1, model="tgn", epochs=a.epochs, seed=0,
                                 patience=a.epochs, progress=False)
            base = float(np.mean([e["train_events_per_s"] for e in single["epochs"][1:]]))
            rows = []
            for rep in range(a.repeats):
                for variant in VARIANTS:
                    got = _run_variant(shards, variant, a.epochs)
                    for e in range(1, a.epochs):
                        c = [np.asarray(got[r][e]["step_seconds"]) for r in (0, 1)]
                        rows.append({"variant": variant, "repeat": rep, "epoch": e + 1,
                                     "step_ms": [1e3 * float(x.mean()) for x in c],
                                     "rate_vs_one_process": [got[r][e]["rate"] / base for r in (0, 1)],
                                     "lockstep": float(np.maximum(*c).sum() / ((c[0].sum() + c[1].sum()) / 2))})
                    print(f"{Path(log).name:<16} {variant:<10} round {rep}: step "
                          f"{np.mean([r['step_ms'] for r in rows[-a.epochs + 1:]]):.1f} ms  rank rate "
                          f"{np.mean([r['rate_vs_one_process'] for r in rows[-a.epochs + 1:]]):.2f}", flush=True)
            summary = {v: {"step_ms": float(np.mean([r["step_ms"] for r in rows if r["variant"] == v])),
                           "rate_vs_one_process": float(np.mean([r["rate_vs_one_process"] for r in rows
                                                                 if r["variant"] == v])),
                           "lockstep": float(np.mean([r["lockstep"] for r in rows if r["variant"] == v]))}
                       for v in VARIANTS}
            for v, s in summary.items():
                print(f"MEAN {Path(log).name:<16} {v:<10} step {s['step_ms']:.1f} ms  rank rate "
                      f"{s['rate_vs_one_process']:.2f}  lockstep {s['lockstep']:.3f}")
            results.append({"log": Path(log).name, "one_process_events_per_s": base, "rows": rows,
                            "summary": summary})
    out = {"args": vars(a), "results": results}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
