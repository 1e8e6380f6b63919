"""glibc's mmap threshold and a training epoch: the same epoch with and without
``speed._util.tune_allocator`` (``SPEED_MALLOC_TUNING=0`` turns it off), alternating, each run
in its own process.

Usage::

    python benchmarks/allocator.py --log LOG [--rounds 2] [--threads 2]

A log of 60,000 events over 20,000 nodes (``speed generate --events 60000 --nodes 20000 --seed
5``) shows it: the second epoch of TGN took 30-33 s with the default and 22-23 s with the setting
on this 2-core machine.  Prints the seconds and writes ``benchmarks/results/allocator.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(log: str, threads: int) -> float:
    import time

    import torch

    import speed
    from speed.train import TrainConfig, Trainer

    torch.set_num_threads(threads)
    ev = speed.read_events(log, progress=False)
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.0)
    tr = Trainer.local(ev, split, TrainConfig(model="tgn", progress=False, num_threads=threads, new_node_fraction=0.0))
    tr.training.train_epoch(1)  # warm-up (numba, first allocations)
    t0 = time.perf_counter()
    tr.training.train_epoch(2)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE / "results" / "allocator.json"))
    a = ap.parse_args()
    if a.worker:
        print(worker(a.log, a.threads))
        return 0
    runs = {"default": [], "tuned": []}
    for _ in range(a.rounds):
        for name, flag in (("default", "0"), ("tuned", "1")):
            proc = subprocess.run([sys.executable, __file__, "--worker", "--log", a.log, "--threads", str(a.threads)],
                                  capture_output=True, text=True, env={**os.environ, "SPEED_MALLOC_TUNING": flag})
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-2000:])
            runs[name].append(float(proc.stdout.strip().splitlines()[-1]))
            print(f"{name:<8} epoch {runs[name][-1]:.2f} s", flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(a), "seconds": runs}, indent=2) + "\n")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
