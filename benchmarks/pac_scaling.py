"""PAC scaling: 2 ranks on SEP shards against unpartitioned single-process training.

For each dataset and model, in one run:

* two unpartitioned baselines (``speed.train`` on the event log): with one torch thread
  (equal resources per worker, as when each rank has a GPU of its own) and with every core
  (what a user of this machine compares with);
* 2 ranks (gloo, one thread each) on SEP shards for each P, topk and sub-graph mode
  (``assigned``: each training event once per epoch; ``induced``: the paper's node-induced
  sub-graphs), reshuffled every epoch.

Reports per configuration: training seconds per epoch (the slowest rank), the overhead per
epoch (shared-node sync, state exchange, validation), work inflation (Σ rank events /
training events), test AP (transductive and inductive) and per-rank node memory.  With
``--plan-events N`` it also partitions an N-event synthetic log and records ``speed plan``
figures (inflation, largest rank share) for N = 2, 4, 8, 16 ranks.

Writes ``benchmarks/results/pac_scaling.{json,md,png}``.

Usage::

    python benchmarks/pac_scaling.py [--epochs 2] [--datasets wikipedia,collegemsg,synthetic1m]
        [--models tgn,jodie] [--parts 4,8] [--topks 0,5,10] [--modes assigned,induced]
        [--validation full] [--plan-events 10000000]
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
SHARED = HERE.parent.parent / "shared" / "data"


def load(name: str):
    import speed

    if name == "wikipedia":
        return speed.read_events(SHARED / "wikipedia.csv", progress=False)
    if name == "collegemsg":
        return speed.read_events(SHARED / "CollegeMsg.txt", progress=False)
    if name == "synthetic1m":  # speed generate --nodes 100000 --events 1000000 --bipartite
        return speed.generate_events(num_nodes=100_000, num_events=1_000_000, bipartite=True, seed=0)
    raise SystemExit(f"unknown dataset {name}")


def _epoch_stats(m: dict) -> dict:
    """Mean per-epoch seconds of each stage, over the epochs of a run."""
    stages = ("train", "sync", "exchange", "validate")
    out = {s: float(np.mean([e["seconds"].get(s, 0.0) for e in m["epochs"]])) for s in stages}
    out["wall"] = sum(out.values())
    return out


def run_config(a, events, shards, ds, model, tmp) -> list:
    import speed

    cores = os.cpu_count() or 1
    common = dict(model=model, epochs=a.epochs, seed=0, progress=False, patience=a.epochs)
    rows = []
    for threads in sorted({1, cores}):
        print(f"{ds} {model}: unpartitioned, {threads} thread(s)", file=sys.stderr)
        base = speed.train(events, num_threads=threads, **common)
        n_train = base["data"]["num_train_events"]
        rows.append({"dataset": ds, "model": model, "nproc": 1, "threads": threads, "parts": 1, "topk": None,
                     "mode": None, "edge_cut": 0.0, "seconds": _epoch_stats(base), "inflation": 1.0,
                     "test": base["test"], "rank_memory_bytes": None, "train_events": n_train})
    for (parts, topk), (path, stats) in shards.items():
        for mode in a.modes.split(","):
            print(f"{ds} {model}: 2 ranks, P={parts}, topk {topk:g}%, {mode}", file=sys.stderr)
            m = speed.train(path, nproc=2, subgraph=mode, validation=a.validation, sync_every=a.sync_every,
                            out=tmp / f"run-{ds}-{model}-{parts}-{topk:g}-{mode}", **common)
            ranks = [r for e in m["epochs"] for r in e["ranks"]]
            inflation = float(np.mean([sum(r["events"] for r in e["ranks"]) for e in m["epochs"]])) \
                / m["data"]["num_train_events"]
            rows.append({
                "dataset": ds, "model": model, "nproc": 2, "threads": 1, "parts": parts, "topk": topk, "mode": mode,
                "edge_cut": stats["edge_cut"], "shared_nodes": stats["shared_nodes"], "seconds": _epoch_stats(m),
                "inflation": inflation, "largest_share": max(r["events"] for r in ranks) / m["data"]["num_train_events"],
                "test": m["test"], "rank_memory_bytes": max(r["memory_bytes"] for r in ranks),
                "unpartitioned_memory_bytes": m["memory_bytes_unpartitioned"],
                "final_evaluation_seconds": m["seconds"]["final_evaluation"],
            })
    base1 = next(r for r in rows if r["nproc"] == 1 and r["threads"] == 1)
    base_all = next(r for r in rows if r["nproc"] == 1 and r["threads"] == max(1, cores))
    for r in rows:
        r["vs_one_thread"] = r["seconds"]["train"] / base1["seconds"]["train"]
        r["vs_all_threads"] = r["seconds"]["train"] / base_all["seconds"]["train"]
        r["overhead_share"] = (r["seconds"]["wall"] - r["seconds"]["train"]) / r["seconds"]["wall"]
        r["ap_gap_points"] = 100 * (r["test"]["transductive"]["ap"] - base_all["test"]["transductive"]["ap"])
    return rows


def plan_figures(a, tmp) -> list:
    """``speed plan`` on a large synthetic log: work inflation per N and mode."""
    import speed
    from speed.train.config import TrainConfig
    from speed.train.pac.budget import plan

    print(f"plan: {a.plan_events:,}-event synthetic log", file=sys.stderr)
    ev = speed.generate_events(num_nodes=a.plan_events // 10, num_events=a.plan_events, bipartite=True, seed=0)
    split = speed.chronological_split(ev, seed=0)
    path = speed.partition(split.train(ev), 16, topk=0.05, progress=False).save(tmp / "plan", events=ev, split=split)
    del ev
    sh = speed.load_shards(path)
    out = []
    for mode in ("assigned", "induced"):
        for n in (2, 4, 8, 16):
            p = plan(sh, TrainConfig(epochs=1, subgraph=mode).validate(), n)
            e = p["epochs"][0]
            out.append({"events": a.plan_events, "parts": 16, "topk": 5, "nproc": n, "mode": mode,
                        "work_inflation": e["work_inflation"], "largest_share": e["largest_share"],
                        "max_rank_memory_bytes": max(r["memory_bytes"] for r in e["ranks"]),
                        "unpartitioned_memory_bytes": p["memory_bytes_unpartitioned"]})
            print(f"  N={n} {mode}: inflation {e['work_inflation']:.3f}, largest {e['largest_share']:.3f}",
                  file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="wikipedia,collegemsg,synthetic1m")
    ap.add_argument("--models", default="tgn,jodie")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--topks", default="0,5,10", help="percent")
    ap.add_argument("--parts", default="4,8")
    ap.add_argument("--modes", default="assigned,induced")
    ap.add_argument("--validation", default="full", choices=("full", "local"))
    ap.add_argument("--sync-every", type=int, default=0)
    ap.add_argument("--plan-events", type=int, default=0, help="also record speed plan figures on such a log")
    ap.add_argument("--out", default=str(HERE / "results" / "pac_scaling"))
    a = ap.parse_args()

    import speed

    rows, plans = [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for ds in [d for d in a.datasets.split(",") if d]:
            events = load(ds)
            split = speed.chronological_split(events, seed=0)
            shards = {}
            for parts in map(int, a.parts.split(",")):
                for topk in map(float, a.topks.split(",")):
                    res = speed.partition(split.train(events), parts, topk=topk / 100, progress=False)
                    path = res.save(tmp / f"{ds}-p{parts}-k{topk:g}", events=events, split=split)
                    shards[(parts, topk)] = (path, res.stats)
            for model in a.models.split(","):
                rows += run_config(a, events, shards, ds, model, tmp)
        if a.plan_events:
            plans = plan_figures(a, tmp)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    setup = {k: getattr(a, k) for k in ("epochs", "validation", "sync_every")} | {
        "cores": os.cpu_count(), "seconds": time.perf_counter() - started}
    prev = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    if not rows:  # a plan-only run keeps the measured rows
        rows, setup = prev.get("rows", []), prev.get("setup", setup)
    if not plans:
        plans = prev.get("plans", [])
    out.with_suffix(".json").write_text(json.dumps({"setup": setup, "rows": rows, "plans": plans}, indent=2) + "\n")
    md = _markdown(rows, plans)
    out.with_suffix(".md").write_text(md)
    if rows:
        _plot(rows, out.with_suffix(".png"))
    print(md)
    return 0


def _markdown(rows, plans) -> str:
    lines = ["| dataset | model | ranks × threads | P | topk | mode | edge cut | train s/epoch | vs 1 thread | "
             "vs all threads | overhead s (sync/exchange/val) | inflation | test AP | inductive AP | rank memory |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["seconds"]
        mem = "—" if r["rank_memory_bytes"] is None else \
            f"{100 * r['rank_memory_bytes'] / r['unpartitioned_memory_bytes']:.0f}%"
        lines.append(
            f"| {r['dataset']} | {r['model']} | {r['nproc']} × {r['threads']} | {r['parts']} | "
            f"{'—' if r['topk'] is None else format(r['topk'], 'g') + '%'} | {r['mode'] or '—'} | "
            f"{100 * r['edge_cut']:.1f}% | {s['train']:.1f} | {r['vs_one_thread']:.2f}× | {r['vs_all_threads']:.2f}× | "
            f"{s['sync']:.2f} / {s['exchange']:.2f} / {s['validate']:.1f} ({100 * r['overhead_share']:.0f}%) | "
            f"{r['inflation']:.3f} | {r['test']['transductive']['ap']:.4f} | {r['test']['inductive']['ap']:.4f} | "
            f"{mem} |")
    if plans:
        lines += ["", "`speed plan` on a synthetic log (P=16, topk 5%):", "",
                  "| events | ranks | mode | work inflation | largest rank share | largest rank memory |",
                  "|---|---|---|---|---|---|"]
        for p in plans:
            lines.append(f"| {p['events']:,} | {p['nproc']} | {p['mode']} | {p['work_inflation']:.3f} | "
                         f"{100 * p['largest_share']:.1f}% | "
                         f"{100 * p['max_rank_memory_bytes'] / p['unpartitioned_memory_bytes']:.0f}% |")
    return "\n".join(lines) + "\n"


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((r["dataset"], r["model"]) for r in rows))
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 6.4), squeeze=False)
    styles = {("assigned", 4): "o-", ("assigned", 8): "s-", ("induced", 4): "o--", ("induced", 8): "s--"}
    for col, (ds, model) in enumerate(keys):
        sub = [r for r in rows if r["dataset"] == ds and r["model"] == model]
        base = max((r for r in sub if r["nproc"] == 1), key=lambda r: r["threads"])
        for (mode, parts), style in styles.items():
            pts = sorted((r for r in sub if r["nproc"] == 2 and r["mode"] == mode and r["parts"] == parts),
                         key=lambda r: r["topk"])
            if not pts:
                continue
            x = [r["topk"] for r in pts]
            label = f"{mode}, P={parts}"
            axes[0][col].plot(x, [r["test"]["transductive"]["ap"] for r in pts], style, label=label)
            axes[1][col].plot(x, [r["vs_one_thread"] for r in pts], style, label=label)
        axes[0][col].axhline(base["test"]["transductive"]["ap"], color="k", lw=1, label="unpartitioned")
        axes[1][col].axhline(0.5, color="g", lw=1, ls=":", label="ideal (0.5×)")
        axes[1][col].axhline(1.0, color="k", lw=1)
        axes[0][col].set_title(f"{model} on {ds}")
        axes[0][col].set_ylabel("test AP")
        axes[1][col].set_ylabel("2-rank epoch / 1-thread epoch")
        axes[1][col].set_xlabel("topk (%)")
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
