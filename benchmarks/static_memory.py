"""Static node memory (DistTGL) against none, single-process and PAC, several seeds.

For each log, model, setting, static-memory kind and seed: one run of a fixed number of
epochs (no early stopping, so every curve has the same length), full-graph validation after
every epoch, and the test AP of the best epoch.  Settings: ``single`` (one process, the
merged graph of the P=4 shards, so every setting shares one split), ``pac4`` and ``pac8``
(N=2 ranks, ``assigned`` sub-graphs, P=4 or P=8 parts of SEP with top-5% hubs); ``single-b400``
is one process with batches of 400.

Each finished run is appended to ``benchmarks/results/static_memory.json`` at once (a long
sweep can be stopped and continued: runs already there are skipped).  ``--plot`` draws the
mean validation curves per log and model to ``static_memory.png`` and writes the table
``static_memory.md``.

Usage::

    python benchmarks/static_memory.py --log collegemsg --models tgn,jodie --settings single,pac4,pac8 \\
        --kinds none,learned,pretrained --seeds 0,1,2 --epochs 5
    python benchmarks/static_memory.py --plot
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
LOGS = {"wikipedia": DATA / "wikipedia.csv", "collegemsg": DATA / "CollegeMsg.txt"}
# an e-mail-like log: 184 nodes, a few heavy senders, runs of mail with one sender and time
DENSE = dict(num_nodes=184, num_events=125_000, alpha=1.5, communities=4, fanout=4, seed=3)


def log_path(log: str, work: Path) -> Path:
    if log != "dense":
        return LOGS[log]
    import speed

    path = work / "dense_mail.csv"
    if not path.exists():
        kw = dict(DENSE)
        speed.write_generated(path, kw.pop("num_nodes"), kw.pop("num_events"), progress=False, **kw)
    return path
RESULTS = HERE / "results" / "static_memory.json"


def shards_for(log: str, parts: int, work: Path, topk: float = 0.05, balance=None):
    import speed

    path = work / (f"{log}_p{parts}" + ("" if topk == 0.05 else f"_top{topk:g}")
                   + ("" if balance is None else f"_bal{balance:g}"))
    if not (path / "manifest.json").exists():
        ev = speed.read_events(log_path(log, work), progress=False)
        split = speed.chronological_split(ev, seed=0)
        speed.partition(split.train(ev), parts, topk=topk, balance=balance, progress=False).save(
            path, events=ev, split=split)
    return speed.load_shards(path)


# the PAC variants that try to close the partitioned gap (on P=4): periodic sync, more hubs, mean sync.
# Plain PAC syncs at the end of the epoch only, as the stored results were run (the library's
# default is now every 20 steps: the "pac4-sync20" variant)
_END = {"sync_every": 0}
VARIANTS = {"pac4": _END, "pac8": _END, "pac4-sync20": {"sync_every": 20}, "pac4-top10": _END,
            "pac4-mean": {**_END, "sync": "mean"}, "pac4-bal": _END}


def convergence_epoch(curve, frac: float = 0.95):
    """The first epoch whose validation AP reaches ``frac`` of the run's best."""
    best = max(curve)
    return next(i + 1 for i, v in enumerate(curve) if v >= frac * best)


def run_one(log, model, setting, kind, seed, epochs, work, threads):
    import speed

    parts = 8 if setting == "pac8" else 4
    shards = shards_for(log, parts, work, topk=0.10 if setting == "pac4-top10" else 0.05,
                        balance=0.1 if setting == "pac4-bal" else None)
    common = dict(model=model, epochs=epochs, patience=epochs, seed=seed, static_memory=kind, progress=False)
    out = work / f"run_{log}_{model}_{setting}_{kind}_{seed}"
    t0 = time.perf_counter()
    if setting.startswith("single"):
        # single-b400: batches of 400, the weights' step count of PAC N=2 (one averaged step per
        # pair of rank batches of 200)
        batch = {"batch_size": 400} if setting == "single-b400" else {}  # else the config's default
        m = speed.train(shards, num_threads=threads, out=out, **common, **batch)
    else:
        m = speed.train(shards, nproc=2, validation="full", out=out, **common, **VARIANTS[setting])
    curve = [e["val"]["transductive"]["ap"] for e in m["epochs"]]
    return {"log": log, "model": model, "setting": setting, "static_memory": kind, "seed": seed, "epochs": epochs,
            "test_ap": m["test"]["transductive"]["ap"], "test_ap_inductive": m["test"].get("inductive", {}).get("ap"),
            "best_epoch": m["best_epoch"], "val_curve": curve, "convergence_epoch": convergence_epoch(curve),
            "train_seconds": [e["train_seconds"] for e in m["epochs"]],
            "sync_seconds": [e["seconds"].get("sync", 0.0) for e in m["epochs"]],
            "wall_seconds": time.perf_counter() - t0}


def load():
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else []


def sweep(a) -> None:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = load()
    done = {(r["log"], r["model"], r["setting"], r["static_memory"], r["seed"], r["epochs"]) for r in rows}
    for log in a.log.split(","):
        for model in a.models.split(","):
            for setting in a.settings.split(","):
                for seed in map(int, a.seeds.split(",")):
                    for kind in a.kinds.split(","):  # kinds side by side within a seed
                        key = (log, model, setting, kind, seed, a.epochs)
                        if key in done:
                            continue
                        r = run_one(log, model, setting, kind, seed, a.epochs, work, a.threads)
                        print(json.dumps({k: v for k, v in r.items() if k != "train_seconds"}), file=sys.stderr,
                              flush=True)
                        rows = load() + [r]
                        RESULTS.write_text(json.dumps(rows, indent=1) + "\n")


def table(rows) -> str:
    groups = {}
    for r in rows:
        groups.setdefault((r["log"], r["model"], r["setting"], r["static_memory"], r["epochs"]), []).append(r)
    lines = ["| log | model | setting | static memory | seeds | test AP (mean ± sd) | per seed | epochs to 95% of best val "
             "| val AP after epoch 1 | best val AP | train s/epoch |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {"single": 0, "single-b400": 0.5, "pac4": 1, "pac8": 2, "pac4-sync20": 3, "pac4-top10": 4,
             "pac4-mean": 5, "pac4-bal": 6}
    kinds = {"none": 0, "learned": 1, "pretrained": 2}
    for key in sorted(groups, key=lambda k: (k[0], k[1], order[k[2]], kinds[k[3]])):
        g = sorted(groups[key], key=lambda r: r["seed"])
        ap = np.array([r["test_ap"] for r in g])
        conv = np.mean([r["convergence_epoch"] for r in g])
        sec = np.mean([np.mean(r["train_seconds"]) for r in g])
        first = np.mean([r["val_curve"][0] for r in g])
        best = np.mean([max(r["val_curve"]) for r in g])
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(g)} | {ap.mean():.4f} ± {ap.std():.4f} | "
                     f"{' / '.join(f'{x:.3f}' for x in ap)} | {conv:.1f} | {first:.4f} | {best:.4f} | {sec:.1f} |")
    return "\n".join(lines)


def plot(rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["log"], r["model"]) for r in rows})
    cols = min(2, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.6 * nrows), squeeze=False)
    axes = [list(axes.ravel())]
    styles = {"none": "-", "learned": "--", "pretrained": ":"}
    colours = {"single": "C0", "pac4": "C1", "pac8": "C2", "pac4-sync20": "C3", "pac4-top10": "C4", "pac4-mean": "C5"}
    for ax, (log, model) in zip(axes[0], panels):
        keys = sorted({(r["setting"], r["static_memory"]) for r in rows if r["log"] == log and r["model"] == model
                       and r["setting"] in ("single", "pac4", "pac8")})
        for setting, kind in keys:
            curves = [r["val_curve"] for r in rows if (r["log"], r["model"], r["setting"], r["static_memory"])
                      == (log, model, setting, kind)]
            n = min(len(c) for c in curves)
            mean = np.mean([c[:n] for c in curves], axis=0)
            ax.plot(np.arange(1, n + 1), mean, styles[kind], color=colours[setting], label=f"{setting}, {kind}")
        ax.set_title(f"{model}, {log}")
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("validation AP (mean of seeds)")
        ax.grid(alpha=0.3)
    axes[0][len(panels) - 1].legend(fontsize=7)
    for ax in axes[0][len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(RESULTS.with_suffix(".png"), dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", default="collegemsg", help="comma-separated: collegemsg, wikipedia, dense (generated)")
    ap.add_argument("--models", default="tgn")
    ap.add_argument("--settings", default="single,pac4,pac8")
    ap.add_argument("--kinds", default="none,learned,pretrained")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="threads of the single process (PAC: cores / ranks)")
    ap.add_argument("--work", default="/tmp/speed_static_memory")
    ap.add_argument("--plot", action="store_true", help="only draw the plot and the table from the results")
    a = ap.parse_args()
    if not a.plot:
        sweep(a)
    rows = load()
    if rows:
        plot(rows)
        RESULTS.with_suffix(".md").write_text(table(rows) + "\n")
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
