"""All four models on Wikipedia and CollegeMsg: test AP/AUC (transductive and inductive).

Each (dataset, model) runs ``speed.train`` with the defaults of ``speed train`` (batch 200,
memory/time/embedding 100, 10 neighbours, lr 1e-4) for ``--epochs`` epochs with early
stopping on validation AP, then the best weights are evaluated by replaying the stream.
Wikipedia here has no edge features (the paper's figures use 172), so expect lower AP.

Writes ``benchmarks/results/train_models.{json,md}``.

Usage::

    python benchmarks/train_models.py [--epochs 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data"
DATASETS = {"wikipedia": SHARED / "wikipedia.csv", "collegemsg": SHARED / "CollegeMsg.txt"}
MODELS = ("jodie", "dyrep", "tgn", "tige")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--datasets", default="wikipedia,collegemsg")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default=str(HERE / "results" / "train_models"))
    a = ap.parse_args()

    import speed

    rows = []
    for ds in a.datasets.split(","):
        events = speed.read_events(DATASETS[ds], progress=False)
        for model in a.models.split(","):
            print(f"{ds} {model} ...", file=sys.stderr)
            t0 = time.perf_counter()
            m = speed.train(events, model=model, epochs=a.epochs, seed=a.seed, num_threads=a.threads,
                            progress=False)
            rows.append({
                "dataset": ds, "model": model, "epochs_run": len(m["epochs"]), "best_epoch": m["best_epoch"],
                "test": m["test"], "node_classification": m.get("node_classification"),
                "train_events_per_s": sum(e["train_events_per_s"] for e in m["epochs"]) / len(m["epochs"]),
                "seconds": time.perf_counter() - t0,
            })
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"epochs": a.epochs, "rows": rows}, indent=2) + "\n")
    lines = ["| dataset | model | test AP | test AUC | inductive AP | inductive AUC | node cls. AUROC | "
             "train events/s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tt, ti = r["test"]["transductive"], r["test"]["inductive"]
        nc = r["node_classification"]
        lines.append(f"| {r['dataset']} | {r['model']} | {tt['ap']:.4f} | {tt['auc']:.4f} | {ti['ap']:.4f} | "
                     f"{ti['auc']:.4f} | {'—' if not nc else format(nc['auroc'], '.4f')} | "
                     f"{r['train_events_per_s']:,.0f} |")
    table = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"saved {out}.json, .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
