"""What static node memory costs per epoch, side by side: TGN on Wikipedia, one process (2
threads) and PAC (N=2, P=4, ``assigned``), each kind run ``--rounds`` times in turn; the figure
is the mean training seconds of epoch 2 (epoch 1 compiles and warms caches), and for PAC the
epoch's sync seconds too (the learned table's merge counts there).

Usage::

    python benchmarks/static_cost.py [--rounds 2]

Writes ``benchmarks/results/static_cost.json``.  Run it alone: it is a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--log", default="wikipedia")
    ap.add_argument("--work", default="/tmp/speed_static_memory")
    a = ap.parse_args()
    import speed
    from static_memory import shards_for

    shards = shards_for(a.log, 4, Path(a.work))
    kinds = ("none", "learned", "pretrained")
    rows = {(s, k): [] for s in ("single", "pac4") for k in kinds}
    for _ in range(a.rounds):
        for setting in ("single", "pac4"):
            for kind in kinds:
                common = dict(model="tgn", epochs=2, patience=2, seed=0, static_memory=kind, progress=False,
                              val_every=2)
                if setting == "single":
                    m = speed.train(shards, num_threads=2, **common)
                else:
                    m = speed.train(shards, nproc=2, out=Path(a.work) / f"cost_{kind}", **common)
                e = m["epochs"][1]
                rows[setting, kind].append({"train": e["train_seconds"], "sync": e["seconds"].get("sync", 0.0)})
                print(setting, kind, rows[setting, kind][-1], file=sys.stderr, flush=True)
    out = []
    for (setting, kind), rs in rows.items():
        train, sync = float(np.mean([r["train"] for r in rs])), float(np.mean([r["sync"] for r in rs]))
        base = float(np.mean([r["train"] + r["sync"] for r in rows[setting, "none"]]))
        out.append({"log": a.log, "setting": setting, "static_memory": kind, "train_seconds": train,
                    "sync_seconds": sync, "relative_to_none": (train + sync) / base, "runs": rs})
        print(f"{setting:<7} {kind:<10} train {train:6.2f} s  sync {sync:6.3f} s  x{(train + sync) / base:.3f}")
    (HERE / "results" / "static_cost.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
