"""PAC scaling: parallel training on SEP shards against unpartitioned training.

For each dataset and model: one unpartitioned single-process run (``speed.train`` on the
event log, all cores), then 2 ranks (``--nproc 2``, gloo on CPU, each rank gets half the
cores) on SEP shards of P = 4 and P = 8 parts (2 and 4 parts per rank, reshuffled every
epoch) at topk 0, 5 and 10%.  Measures epoch time, test AP (transductive and inductive),
per-rank node memory and the partition's edge cut; plots AP and speed-up against topk.

Writes ``benchmarks/results/pac_scaling.{json,md,png}``.

Usage::

    python benchmarks/pac_scaling.py [--epochs 2] [--datasets wikipedia,synthetic]
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


def load(name: str, a):
    import speed

    if name == "wikipedia":
        return speed.read_events(SHARED / "wikipedia.csv", progress=False)
    return speed.generate_events(num_nodes=a.synthetic_nodes, num_events=a.synthetic_events, seed=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="wikipedia,synthetic")
    ap.add_argument("--models", default="tgn,jodie")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--topks", default="0,5,10", help="percent")
    ap.add_argument("--parts", default="4,8")
    ap.add_argument("--synthetic-events", type=int, default=200_000)
    ap.add_argument("--synthetic-nodes", type=int, default=20_000)
    ap.add_argument("--out", default=str(HERE / "results" / "pac_scaling"))
    a = ap.parse_args()

    import speed

    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for ds in a.datasets.split(","):
            events = load(ds, a)
            split = speed.chronological_split(events, seed=0)
            shards = {}
            for parts in map(int, a.parts.split(",")):
                for topk in map(float, a.topks.split(",")):
                    res = speed.partition(split.train(events), parts, topk=topk / 100, progress=False)
                    path = res.save(tmp / f"{ds}-p{parts}-k{topk:g}", events=events, split=split)
                    shards[(parts, topk)] = (path, res.stats)
            for model in a.models.split(","):
                print(f"{ds} {model}: unpartitioned", file=sys.stderr)
                base = speed.train(events, model=model, epochs=a.epochs, seed=0, num_threads=cores, progress=False,
                                   patience=a.epochs)
                base_epoch = float(np.mean([e["train_seconds"] for e in base["epochs"]]))
                rows.append({"dataset": ds, "model": model, "nproc": 1, "parts": 1, "topk": None,
                             "edge_cut": 0.0, "epoch_seconds": base_epoch,
                             "test": base["test"], "rank_memory_bytes": None})
                for (parts, topk), (path, stats) in shards.items():
                    print(f"{ds} {model}: 2 ranks, P={parts}, topk {topk:g}%", file=sys.stderr)
                    out = tmp / f"run-{ds}-{model}-{parts}-{topk:g}"
                    t0 = time.perf_counter()
                    m = speed.train(path, model=model, epochs=a.epochs, seed=0, progress=False, patience=a.epochs,
                                    nproc=2, out=out)
                    ranks = [r for e in m["epochs"] for r in e["ranks"]]
                    rows.append({
                        "dataset": ds, "model": model, "nproc": 2, "parts": parts, "topk": topk,
                        "edge_cut": stats["edge_cut"], "shared_nodes": stats["shared_nodes"],
                        "epoch_seconds": float(np.mean([e["train_seconds"] for e in m["epochs"]])),
                        "sync_seconds": float(np.mean([e["seconds"]["sync"] for e in m["epochs"]])),
                        "test": m["test"], "rank_memory_bytes": max(r["memory_bytes"] for r in ranks),
                        "rank_nodes": max(r["nodes"] for r in ranks), "num_nodes": m["data"]["num_nodes"],
                        "unpartitioned_memory_bytes": m["memory_bytes_unpartitioned"], "wall_seconds": time.perf_counter() - t0,
                    })
                for r in rows:
                    if r["dataset"] == ds and r["model"] == model:
                        r["speedup"] = base_epoch / r["epoch_seconds"]
                        r["ap_gap_points"] = 100 * (r["test"]["transductive"]["ap"]
                                                    - base["test"]["transductive"]["ap"])
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    targets = {
        "2 ranks: epoch time <= 0.6x unpartitioned": {
            "ratios": {_label(r): 1.0 / r["speedup"] for r in rows if r["nproc"] == 2}},
        "TGN test AP within 1.5 points of unpartitioned": {
            "gaps": {_label(r): r["ap_gap_points"] for r in rows if r["nproc"] == 2 and r["model"] == "tgn"}},
        "per-rank memory about 1/N of unpartitioned plus the shared nodes": {
            "fractions": {_label(r): r["rank_memory_bytes"] / r["unpartitioned_memory_bytes"]
                          for r in rows if r["nproc"] == 2}},
    }
    targets["2 ranks: epoch time <= 0.6x unpartitioned"]["met"] = all(
        v <= 0.6 for v in targets["2 ranks: epoch time <= 0.6x unpartitioned"]["ratios"].values())
    targets["TGN test AP within 1.5 points of unpartitioned"]["met"] = all(
        v >= -1.5 for v in targets["TGN test AP within 1.5 points of unpartitioned"]["gaps"].values())
    out.with_suffix(".json").write_text(json.dumps({"epochs": a.epochs, "rows": rows, "targets": targets},
                                                   indent=2) + "\n")
    md = _markdown(rows)
    out.with_suffix(".md").write_text(md)
    _plot(rows, out.with_suffix(".png"))
    print(md)
    print(json.dumps(targets, indent=2))
    return 0


def _label(r) -> str:
    return f"{r['dataset']} {r['model']} P={r['parts']} topk {r['topk']:g}%"


def _markdown(rows) -> str:
    lines = ["| dataset | model | ranks | P | topk | edge cut | epoch s | speed-up | test AP | inductive AP | "
             "rank memory |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mem = "—" if r["rank_memory_bytes"] is None else \
            f"{r['rank_memory_bytes'] / 1e6:.2f} MB ({100 * r['rank_memory_bytes'] / r['unpartitioned_memory_bytes']:.0f}%)"
        lines.append(f"| {r['dataset']} | {r['model']} | {r['nproc']} | {r['parts']} | "
                     f"{'—' if r['topk'] is None else format(r['topk'], 'g') + '%'} | {100 * r['edge_cut']:.1f}% | "
                     f"{r['epoch_seconds']:.1f} | {r['speedup']:.2f}× | {r['test']['transductive']['ap']:.4f} | "
                     f"{r['test']['inductive']['ap']:.4f} | {mem} |")
    return "\n".join(lines) + "\n"


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((r["dataset"], r["model"]) for r in rows))
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 6.4), squeeze=False)
    for col, (ds, model) in enumerate(keys):
        sub = [r for r in rows if r["dataset"] == ds and r["model"] == model]
        base = next(r for r in sub if r["nproc"] == 1)
        for parts, marker in ((4, "o-"), (8, "s--")):
            pts = sorted((r for r in sub if r["nproc"] == 2 and r["parts"] == parts), key=lambda r: r["topk"])
            if not pts:
                continue
            x = [r["topk"] for r in pts]
            axes[0][col].plot(x, [r["test"]["transductive"]["ap"] for r in pts], marker, label=f"2 ranks, P={parts}")
            axes[1][col].plot(x, [r["speedup"] for r in pts], marker, label=f"2 ranks, P={parts}")
        axes[0][col].axhline(base["test"]["transductive"]["ap"], color="k", lw=1, label="unpartitioned")
        axes[1][col].axhline(1.0, color="k", lw=1)
        axes[0][col].set_title(f"{model} on {ds}")
        axes[0][col].set_ylabel("test AP")
        axes[1][col].set_ylabel("epoch speed-up vs unpartitioned")
        axes[1][col].set_xlabel("topk (%)")
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
