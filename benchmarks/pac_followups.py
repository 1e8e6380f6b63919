"""Follow-ups to pac_scaling.py on Wikipedia, TGN, P=4, topk 5%, 2 epochs: seed spread of unpartitioned and
assigned runs, periodic sync, local validation, and DDP overhead (1 rank on 1 part vs 1 thread)."""
import json
import sys
import tempfile
from pathlib import Path
import numpy as np
import speed

HERE = Path(__file__).resolve().parent


def main():
    """Usage: python benchmarks/pac_followups.py (writes benchmarks/results/pac_followups_wikipedia.json)."""
    ev = speed.read_events(HERE.parent.parent / "shared" / "data" / "wikipedia.csv", progress=False)
    split = speed.chronological_split(ev, seed=0)
    tmp = Path(tempfile.mkdtemp())
    p4 = speed.partition(split.train(ev), 4, topk=0.05, progress=False).save(tmp / "p4", events=ev, split=split)
    p1 = speed.partition(split.train(ev), 1, progress=False).save(tmp / "p1", events=ev, split=split)
    common = dict(model="tgn", epochs=2, progress=False, patience=2)
    rows = []
    def rec(name, m):
        s = {k: float(np.mean([e["seconds"].get(k, 0.0) for e in m["epochs"]])) for k in ("train", "sync", "exchange", "validate")}
        r = {"name": name, "test_ap": m["test"]["transductive"]["ap"], "test_ap_inductive": m["test"]["inductive"]["ap"], "seconds": s}
        rows.append(r); print(json.dumps(r), file=sys.stderr, flush=True)
    for seed in (1, 2):
        rec(f"unpartitioned 2 threads seed {seed}", speed.train(ev, seed=seed, num_threads=2, **common))
        rec(f"assigned seed {seed}", speed.train(p4, seed=seed, nproc=2, out=tmp / f"a{seed}", **common))
    rec("assigned seed 0 sync-every 20", speed.train(p4, seed=0, nproc=2, sync_every=20, out=tmp / "se", **common))
    rec("assigned seed 0 validation local", speed.train(p4, seed=0, nproc=2, validation="local", out=tmp / "vl", **common))
    rec("unpartitioned 1 thread seed 0", speed.train(ev, seed=0, num_threads=1, **common))
    rec("1 rank on 1 part (DDP), 1 thread, seed 0", speed.train(p1, seed=0, nproc=1, num_threads=1, out=tmp / "n1", **common))
    (HERE / "results" / "pac_followups_wikipedia.json").write_text(json.dumps(rows, indent=2) + "\n")

if __name__ == "__main__":
    main()
