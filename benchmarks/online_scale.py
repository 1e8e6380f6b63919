"""An online update's cost against the graph's size: the same 150k-event generated log over 10^4
and over 10^6 node ids (TGN, 32-dim, one epoch on the first 120k events), then updates of 10k
and 20k events.  A step must cost O(its batch): the updates' events per second should not fall
with the graph; the call's load and save of the whole node state do grow with it.

Usage::

    python benchmarks/online_scale.py

Prints one line per size and writes ``benchmarks/results/online_scale.json``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    import speed
    from speed.train.online.update import update

    root = Path(tempfile.mkdtemp(prefix="speed-online-scale-"))
    out = {"command": "python benchmarks/online_scale.py", "sizes": {}}
    try:
        for nodes in (10_000, 1_000_000):
            ev = speed.generate_events(nodes, 150_000, seed=5)
            n0 = 120_000
            t0 = time.perf_counter()
            speed.train(ev.select(slice(0, n0)), out=root / f"r{nodes}", epochs=1, progress=False,
                        new_node_fraction=0.0, batch_size=200, memory_dim=32, time_dim=32, embedding_dim=32)
            trained = time.perf_counter() - t0
            res = []
            for k, (a, b) in enumerate(((n0, n0 + 10_000), (n0 + 10_000, n0 + 30_000))):
                t1 = time.perf_counter()
                m = update(root / f"r{nodes}", ev.select(slice(a, b)), root / f"u{nodes}_{k}", progress=False,
                           windows=2)
                u = m["updates"][-1]
                res.append({"events": u["events"], "update_seconds": round(u["seconds"], 3),
                            "events_per_s": round(u["events"] / u["seconds"]), "ap": round(u["ap"], 4),
                            "call_seconds": round(time.perf_counter() - t1, 3)})
            out["sizes"][nodes] = {"train_seconds": round(trained, 1), "updates": res}
            print(nodes, out["sizes"][nodes], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    path = HERE / "results" / "online_scale.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
