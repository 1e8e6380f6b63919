"""--validation local on the 1M-event log: overhead and distance from full-graph validation."""
import json
import tempfile
from pathlib import Path
import numpy as np
import speed

HERE = Path(__file__).resolve().parent


def main():
    """The 1M-event log (speed generate --nodes 100000 --events 1000000 --bipartite), P=4, topk 5%,
    2 ranks, one epoch with --validation local.  Usage: python benchmarks/pac_local_validation.py"""
    ev = speed.generate_events(num_nodes=100_000, num_events=1_000_000, bipartite=True, seed=0)
    split = speed.chronological_split(ev, seed=0)
    tmp = Path(tempfile.mkdtemp())
    p = speed.partition(split.train(ev), 4, topk=0.05, progress=False).save(tmp / "p", events=ev, split=split)
    m = speed.train(p, model="tgn", epochs=1, seed=0, progress=False, patience=1, nproc=2, validation="local", out=tmp / "r")
    e = m["epochs"][0]
    out = {"seconds": e["seconds"], "val_local": m["val_local"], "val_full": m["val"], "test": m["test"],
           "final_evaluation_seconds": m["seconds"]["final_evaluation"], "inflation": sum(r["events"] for r in e["ranks"]) / m["data"]["num_train_events"]}
    (HERE / "results" / "pac_local_validation_1m.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))

if __name__ == "__main__":
    main()
