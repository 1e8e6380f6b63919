"""Per-distinct-query work (deduplicated plans) against per-event work, for every model.

For each log and model, one process trains epoch 1 (numba compilation, warm caches), then
alternates epochs with ``model.state.dedup`` off and on (``--rounds`` of each, same trainer, same
weights path: the results are equal either way, see tests/test_train_core.py), and reports the
mean events/s of each and the ratio, with the machine-independent figure beside it: the
queries and memory keys a step computes per event, with and without deduplication.

Usage::

    python benchmarks/dedup.py --log dense.csv --log ../shared/data/CollegeMsg.txt \\
        --models jodie,dyrep,tgn,tige --rounds 2

Writes ``benchmarks/results/dedup.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # (_trees: what the side-by-side scripts share)


def run(log: str, model: str, rounds: int, threads: int) -> dict:
    import torch

    import speed
    from speed.train import TrainConfig
    from _trees import local_trainer
    from speed.train.state import batch_plan as plan_mod

    torch.set_num_threads(threads)
    events = speed.read_events(log, progress=False)
    split = speed.chronological_split(events, new_node_fraction=0.0)
    tr = local_trainer(events, split, TrainConfig(model=model, seed=0, progress=False, num_threads=threads,
                                            new_node_fraction=0.0))
    counts = {True: [0, 0, 0], False: [0, 0, 0]}  # queries computed, keys, planned events
    build = plan_mod.build_plan

    def counting(m, nodes, times, events=None, dedup=True, **kw):
        p = build(m, nodes, times, events=events, dedup=dedup, **kw)
        if events is not None:
            c = counts[bool(dedup)]
            c[0] += int(p.uq_t.shape[0])
            c[1] += int(p.key_row.shape[0])
            c[2] += int(len(events[0]))
        return p

    models_mod = sys.modules["speed.train.state.nodes"]  # where NodeStates.plan calls it

    models_mod.build_plan = counting
    tr.training.train_epoch(1)
    for v in counts.values():
        v[:] = [0, 0, 0]
    rates = {True: [], False: []}
    for r in range(rounds):
        for dedup in (False, True):
            tr.model.state.dedup = dedup
            t0 = time.perf_counter()
            log_ = tr.training.train_epoch(2 + 2 * r + int(dedup))
            rates[dedup].append(log_.train_events / (time.perf_counter() - t0))
    models_mod.build_plan = build
    per = {k: {"queries_per_event": v[0] / max(v[2], 1), "keys_per_event": v[1] / max(v[2], 1)}
           for k, v in counts.items()}
    on, off = float(np.mean(rates[True])), float(np.mean(rates[False]))
    return {"log": Path(log).name, "model": model, "threads": threads, "rounds": rounds,
            "events_per_s_dedup": on, "events_per_s_per_event": off, "speedup": on / off,
            "per_event_work": {"dedup": per[True], "per_event": per[False]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", action="append", required=True)
    ap.add_argument("--models", default="jodie,dyrep,tgn,tige")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "dedup.json"))
    a = ap.parse_args()
    rows = []
    for log in a.log:
        for model in a.models.split(","):
            r = run(log, model, a.rounds, a.threads)
            rows.append(r)
            w = r["per_event_work"]
            print(f"{r['log']:<20} {model:<6} per event {r['events_per_s_per_event']:>8,.0f}/s  dedup "
                  f"{r['events_per_s_dedup']:>8,.0f}/s  x{r['speedup']:.2f}   queries/event "
                  f"{w['per_event']['queries_per_event']:.2f} -> {w['dedup']['queries_per_event']:.2f}, keys/event "
                  f"{w['per_event']['keys_per_event']:.2f} -> {w['dedup']['keys_per_event']:.2f}", flush=True)
    Path(a.out).write_text(json.dumps(rows, indent=2) + "\n")
    print(f"saved {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
