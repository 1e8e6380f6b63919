"""Online updates against retraining from scratch and against memory-only updates.

For each log and seed: a model is trained on the first ``--base`` of the log (its own
chronological split for early stopping, transductive); then the rest arrives in
``--increments`` equal increments, and each increment is scored prequentially (each batch
scored before anything learns from it, AP against one random negative per event) by:

* **online** -- ``speed update`` chained over the increments: test then train, ``--passes``
  over each increment;
* **memory** -- the same chain with the weights fixed (``--memory-only``);
* **retrain** -- a model trained from scratch on every event before the increment (the same
  settings and epochs as the first one), then scoring the increment with its memory only.

The cost of an approach at an increment is its wall time to get there from the previous
increment: the update itself for online and memory, the whole training plus the scoring for
retrain.

Usage::

    python benchmarks/online.py [--logs collegemsg wikipedia generated] [--seeds 0 1 2]
                                [--epochs 3] [--increments 10] [--base 0.5]

Prints a table per log and writes ``benchmarks/results/online.json`` and
``benchmarks/results/online.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
APPROACHES = ("online", "memory", "retrain")


def load(name: str):
    import speed

    if name == "wikipedia":
        return speed.read_events(DATA / "wikipedia.csv", progress=False)
    if name == "collegemsg":
        return speed.read_events(DATA / "CollegeMsg.txt", progress=False)
    # a generated log of the same order as the real ones: 150k events over 5k nodes
    return speed.generate_events(5000, 150_000, alpha=1.1, seed=3)


def run_seed(ev, seed: int, args, work: Path) -> dict:
    import speed
    from speed.train.online.update import update

    n = len(ev)
    n0 = int(args.base * n)
    cuts = np.linspace(n0, n, args.increments + 1).astype(int)
    train = dict(model=args.model, epochs=args.epochs, seed=seed, progress=False, new_node_fraction=0.0,
                 batch_size=args.batch_size)
    root = work / f"seed{seed}"
    t0 = time.perf_counter()
    speed.train(ev.select(slice(0, n0)), out=root / "base", **train)
    base_seconds = time.perf_counter() - t0
    runs = {"online": root / "base", "memory": root / "base"}
    rows = []
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]), 1):
        inc = ev.select(slice(a, b))
        row = {"increment": k, "events": int(b - a), "t_end": float(ev.t_float()[b - 1])}
        for name, extra in (("online", dict(passes=args.passes, lr=args.lr, replay=args.replay)),
                            ("memory", dict(train=False))):
            t0 = time.perf_counter()
            m = update(runs[name], inc, root / f"{name}{k}", seed=seed, **extra)
            row[name] = {"ap": m["updates"][-1]["ap"], "auc": m["updates"][-1]["auc"],
                         "seconds": time.perf_counter() - t0}
            runs[name] = root / f"{name}{k}"
        t0 = time.perf_counter()
        speed.train(ev.select(slice(0, a)), out=root / f"retrain{k}", **train)
        trained = time.perf_counter() - t0
        m = update(root / f"retrain{k}", inc, root / f"retrain{k}u", seed=seed, train=False)
        row["retrain"] = {"ap": m["updates"][-1]["ap"], "auc": m["updates"][-1]["auc"],
                          "seconds": time.perf_counter() - t0, "train_seconds": trained}
        shutil.rmtree(root / f"retrain{k}", ignore_errors=True)
        shutil.rmtree(root / f"retrain{k}u", ignore_errors=True)
        rows.append(row)
        print(f"  seed {seed} increment {k:>2}: AP online {row['online']['ap']:.4f} ({row['online']['seconds']:.1f} s)  "
              f"memory {row['memory']['ap']:.4f} ({row['memory']['seconds']:.1f} s)  retrain {row['retrain']['ap']:.4f} "
              f"({row['retrain']['seconds']:.1f} s)", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return {"seed": seed, "base_events": n0, "base_seconds": base_seconds, "increments": rows}


def summarise(seeds) -> dict:
    k = len(seeds[0]["increments"])
    per_inc = []
    for i in range(k):
        row = {"increment": i + 1}
        for a in APPROACHES:
            aps = [s["increments"][i][a]["ap"] for s in seeds]
            secs = [s["increments"][i][a]["seconds"] for s in seeds]
            row[a] = {"ap_mean": float(np.mean(aps)), "ap_std": float(np.std(aps)), "seconds_mean": float(np.mean(secs))}
        per_inc.append(row)
    out = {"per_increment": per_inc}
    for a in APPROACHES:
        out[a] = {"ap_mean": float(np.mean([r[a]["ap_mean"] for r in per_inc])),
                  "seconds_total": float(np.sum([r[a]["seconds_mean"] for r in per_inc]))}
    out["online_minus_retrain_ap_points"] = 100 * (out["online"]["ap_mean"] - out["retrain"]["ap_mean"])
    out["online_minus_memory_ap_points"] = 100 * (out["online"]["ap_mean"] - out["memory"]["ap_mean"])
    out["online_time_fraction_of_retrain"] = out["online"]["seconds_total"] / out["retrain"]["seconds_total"]
    out["worst_increment_gap_points"] = float(min(100 * (r["online"]["ap_mean"] - r["retrain"]["ap_mean"])
                                                  for r in per_inc))
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = list(results["logs"])
    fig, axes = plt.subplots(1, len(logs), figsize=(4.2 * len(logs), 3.4), squeeze=False)
    for ax, name in zip(axes[0], logs):
        s = results["logs"][name]["summary"]["per_increment"]
        x = [r["increment"] for r in s]
        for a, style in zip(APPROACHES, ("o-", "s--", "^:")):
            y = np.array([r[a]["ap_mean"] for r in s])
            e = np.array([r[a]["ap_std"] for r in s])
            ax.plot(x, y, style, ms=4, label=a)
            ax.fill_between(x, y - e, y + e, alpha=0.15)
        ax.set_title(name)
        ax.set_xlabel("increment")
        ax.set_ylabel("test-then-train AP")
    axes[0][0].legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", nargs="+", default=["collegemsg", "wikipedia", "generated"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--model", default="tgn")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--lr", type=float, default=None, help="learning rate of the online updates (default: the run's)")
    ap.add_argument("--replay", type=float, default=0.0)
    ap.add_argument("--base", type=float, default=0.5)
    ap.add_argument("--increments", type=int, default=10)
    ap.add_argument("--out", default=str(HERE / "results" / "online.json"))
    args = ap.parse_args()
    results = {"command": "python benchmarks/online.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if k != "out"), "logs": {}}
    work = Path(tempfile.mkdtemp(prefix="speed-online-"))
    try:
        for name in args.logs:
            ev = load(name)
            print(f"{name}: {len(ev):,} events, {ev.num_nodes:,} nodes", flush=True)
            seeds = [run_seed(ev, s, args, work) for s in args.seeds]
            summary = summarise(seeds)
            results["logs"][name] = {"events": len(ev), "nodes": int(ev.num_nodes), "seeds": seeds,
                                     "summary": summary}
            print(f"{name}: mean AP online {summary['online']['ap_mean']:.4f}, memory {summary['memory']['ap_mean']:.4f}, "
                  f"retrain {summary['retrain']['ap_mean']:.4f}; online - retrain "
                  f"{summary['online_minus_retrain_ap_points']:+.2f} points at "
                  f"{100 * summary['online_time_fraction_of_retrain']:.1f}% of its time", flush=True)
            Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    plot(results, Path(args.out).with_suffix(".png"))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
