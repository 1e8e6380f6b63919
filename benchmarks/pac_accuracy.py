"""Test AP of PAC at the defaults, several seeds: the accuracy check of the distributed evaluation.

Partitions the log's training period once (SEP at its defaults, ``--parts`` parts), then trains TGN
(or ``--model``) with ``--nproc`` ranks for each seed, everything else at the library's defaults
(10 epochs, early stopping, full-graph validation spread over the ranks), and records each seed's
test figures, best epoch and seconds, and their mean.

Usage::

    python benchmarks/pac_accuracy.py --log ../shared/data/wikipedia.csv --parts 4 --nproc 2 \
        --seeds 0 1 2 --out benchmarks/results/pac_accuracy_wikipedia.json
"""
import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import speed

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", type=Path, default=HERE.parent.parent / "shared" / "data" / "wikipedia.csv")
    p.add_argument("--model", default="tgn")
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=None, help="default: the library's")
    p.add_argument("--out", type=Path, default=HERE / "results" / "pac_accuracy_wikipedia.json")
    args = p.parse_args()

    ev = speed.read_events(args.log, progress=False)
    split = speed.chronological_split(ev, seed=0)
    tmp = Path(tempfile.mkdtemp(prefix="speed-pac-accuracy-"))
    shards = speed.partition(split.train(ev), args.parts, progress=False).save(tmp / "shards", events=ev, split=split)
    extra = {} if args.epochs is None else {"epochs": args.epochs}
    runs = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        m = speed.train(shards, model=args.model, nproc=args.nproc, seed=seed, out=tmp / f"run{seed}",
                        progress=False, **extra)
        row = {"seed": seed, "seconds": time.perf_counter() - t0, "best_epoch": m.get("best_epoch"),
               "epochs_run": len(m["epochs"]), "val_ap": m.get("val", {}).get("transductive", {}).get("ap"),
               "test_ap": m["test"]["transductive"]["ap"], "test_ap_inductive": m["test"]["inductive"]["ap"]}
        runs.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    out = {"command": "python " + " ".join(sys.argv), "log": args.log.name, "events": int(len(ev)),
           "model": args.model, "parts": args.parts, "nproc": args.nproc, "runs": runs,
           "test_ap_mean": float(np.mean([r["test_ap"] for r in runs])),
           "test_ap_inductive_mean": float(np.mean([r["test_ap_inductive"] for r in runs]))}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("test_ap_mean", "test_ap_inductive_mean")}))


if __name__ == "__main__":
    main()
