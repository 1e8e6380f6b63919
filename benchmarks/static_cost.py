"""What static node memory costs per epoch, side by side: TGN on Wikipedia, one process (2
threads) and PAC (N=2, P=4, ``assigned``), each kind run ``--rounds`` times in turn; the figure
is the mean training seconds of epoch 2 (epoch 1 compiles and warms caches), and for PAC the
epoch's sync seconds too (the learned table's merge counts there).

``--optimizer`` times only the table's optimiser step, torch's ``SparseAdam`` against
``speed``'s ``RowAdam`` (the same update), on random sparse gradients of ``--rows`` distinct rows
of a 9,228 x 100 table (Wikipedia's), one thread, median of 300 steps.

Usage::

    python benchmarks/static_cost.py [--rounds 2]
    python benchmarks/static_cost.py --optimizer [--rows 2500]

Writes ``benchmarks/results/static_cost.json`` (``static_cost_optimizer.json``).  Run it alone:
it is a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def optimizer_step_ms(rows: int, steps: int = 300, num_nodes: int = 9228, dim: int = 100) -> dict:
    """Median milliseconds of one optimiser step over ``rows`` distinct rows, per optimiser."""
    import time

    import torch
    from speed.train.model.static import RowAdam

    torch.set_num_threads(1)
    out = {}
    for name, make in (("SparseAdam", torch.optim.SparseAdam), ("RowAdam", RowAdam)):
        gen = torch.Generator().manual_seed(0)
        table = torch.nn.Parameter(torch.zeros(num_nodes, dim))
        opt = make([table], lr=1e-3)
        times = []
        for _ in range(steps):
            idx = torch.randperm(num_nodes, generator=gen)[:rows]
            table.grad = torch.sparse_coo_tensor(idx.unsqueeze(0), torch.randn(rows, dim, generator=gen),
                                                 (num_nodes, dim))
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        out[name] = 1000 * float(np.median(times))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--log", default="wikipedia")
    ap.add_argument("--work", default="/tmp/speed_static_memory")
    ap.add_argument("--optimizer", action="store_true", help="time only the table's optimiser step")
    ap.add_argument("--rows", type=int, default=2500, help="distinct rows a step updates (--optimizer)")
    a = ap.parse_args()
    if a.optimizer:
        ms = optimizer_step_ms(a.rows)
        for name, v in ms.items():
            print(f"{name:<10} {v:6.3f} ms a step ({a.rows} rows)")
        result = {"rows": a.rows, "dim": 100, "num_nodes": 9228, "threads": 1, "ms_per_step": ms}
        (HERE / "results" / "static_cost_optimizer.json").write_text(json.dumps(result, indent=2) + "\n")
        return 0
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
