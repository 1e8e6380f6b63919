"""How fast TGN converges on CollegeMsg (UCI), against the published ~0.92 test AP.

DyGLib (Yu et al., NeurIPS 2023) reports TGN at about 92 AP on UCI (the same network as
CollegeMsg) with random negatives, training up to 100 epochs with patience 20 at lr 1e-4.
This script trains ``speed``'s TGN for ``--epochs`` epochs without early stopping for each
learning rate given and records the validation AP of every epoch and the test AP of the best
one, so the curve shows whether the gap to the paper is epochs or something else.

Writes ``benchmarks/results/tgn_convergence.{json,png}``.

Usage::

    python benchmarks/tgn_convergence.py [--epochs 30] [--lrs 1e-4,1e-3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "CollegeMsg.txt"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--lrs", default="1e-4,1e-3")
    ap.add_argument("--model", default="tgn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results" / "tgn_convergence"))
    a = ap.parse_args()

    import speed

    events = speed.read_events(DATA, progress=False)
    runs = []
    for lr in (float(x) for x in a.lrs.split(",")):
        print(f"{a.model} lr={lr:g} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        m = speed.train(events, model=a.model, epochs=a.epochs, lr=lr, patience=a.epochs, seed=a.seed,
                        num_threads=a.threads, progress=False)
        val = [e["val"]["transductive"]["ap"] for e in m["epochs"]]
        runs.append({"lr": lr, "val_ap": val, "loss": [e["loss"] for e in m["epochs"]], "best_epoch": m["best_epoch"],
                     "test": m["test"], "seconds": time.perf_counter() - t0})
        print(f"  best epoch {m['best_epoch']}: val AP {max(val):.4f}, test AP {m['test']['transductive']['ap']:.4f}; "
              f"val AP at epochs 1/5/10/20/last: "
              + ", ".join(f"{val[k - 1]:.3f}" for k in (1, 5, 10, 20, len(val)) if k <= len(val)),
              file=sys.stderr, flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"model": a.model, "epochs": a.epochs, "seed": a.seed,
                                                    "runs": runs}, indent=2) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in runs:
        ax.plot(range(1, len(r["val_ap"]) + 1), r["val_ap"], "o-", ms=3, label=f"lr {r['lr']:g}")
    ax.axhline(0.92, color="grey", ls="--", lw=1, label="DyGLib TGN, UCI (test)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation AP (random negatives)")
    ax.set_title(f"{a.model} on CollegeMsg")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(f"saved {out}.json, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
