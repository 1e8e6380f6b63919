"""The planning pipeline on CPU: throughput and test AP without it, and with staleness K = 0, 1, 2.

Every configuration trains TGN (defaults, transductive, ``--deterministic``) for ``--epochs``
epochs on each log, for each seed, one run after the other in this process.  Throughput is the
mean training events/s of the epochs after the first (the first pays numba compilation and
warm-up).  Prints a table and writes ``benchmarks/results/pipeline.json``::

    python benchmarks/pipeline.py --log ../shared/data/CollegeMsg.txt --log dense.csv --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETTINGS = {"off": dict(pipeline=False), "K=0": dict(pipeline=True, staleness=0),
            "K=1": dict(pipeline=True, staleness=1), "K=2": dict(pipeline=True, staleness=2)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", action="append", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "pipeline.json"))
    a = p.parse_args(argv)

    import speed

    rows = []
    for log in a.log:
        events = speed.read_events(log, progress=False)
        for name, extra in SETTINGS.items():
            speeds, aps = [], []
            for seed in a.seeds:
                m = speed.train(events, model="tgn", epochs=a.epochs, seed=seed, deterministic=True,
                                num_threads=a.threads, new_node_fraction=0.0, progress=False, **extra)
                speeds.append(float(np.mean([e["train_events_per_s"] for e in m["epochs"][1:]])))
                aps.append(m["test"]["transductive"]["ap"])
            row = {"log": Path(log).name, "setting": name, "events_per_s": speeds, "test_ap": aps,
                   "mean_events_per_s": float(np.mean(speeds)), "mean_test_ap": float(np.mean(aps))}
            rows.append(row)
            print(f"{row['log']:<20} {name:<4} {row['mean_events_per_s']:>9,.0f} ev/s  "
                  f"test AP {row['mean_test_ap']:.4f}  ({', '.join(f'{x:.4f}' for x in aps)})", flush=True)
    out = {"threads": a.threads, "epochs": a.epochs, "seeds": a.seeds, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
