"""Balanced parallel work: N=2 ``assigned`` PAC against one process, with SEP's balance off and on.

For each log and seed, in one run, one job at a time:

* the log is split and partitioned (P parts, topk, ``--balance off`` and ``--balance B``);
* one process with 1 thread trains on the shards' merged graph (the same split and protocol);
* N=2 ranks (gloo, 1 thread each, ``--subgraph assigned``, balanced grouping, ``--sync-every``
  20 unless given) train on each partitioning.

Reported per configuration (means over the seeds): training seconds per epoch (epochs after the
first; the slowest rank for PAC), the epoch time relative to the 1-thread process, each rank's
throughput (its events x passes / its training seconds) relative to the 1-thread process's,
the largest rank's share of the training events, and test AP.  Writes
``benchmarks/results/pac_balance.json``::

    python benchmarks/pac_balance.py --log mail.csv --log ../shared/data/CollegeMsg.txt --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _epoch_seconds(m):
    return float(np.mean([e["train_seconds"] for e in m["epochs"][1:]]))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", action="append", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--topk", type=float, default=0.05)
    p.add_argument("--balance", type=float, default=0.1)
    p.add_argument("--model", default="tgn")
    p.add_argument("--sync-every", type=int, default=20, help="PAC's --sync-every (the measured runs used 20)")
    p.add_argument("--average-every", type=int, nargs="+", default=[1],
                   help="PAC's --average-every values to run on the balanced shards (1: gradient averaging)")
    p.add_argument("--skip-off", action="store_true", help="do not train the --balance off shards")
    p.add_argument("--out", default=str(HERE / "results" / "pac_balance.json"))
    a = p.parse_args(argv)

    import speed

    rows = []
    for log in a.log:
        events = speed.read_events(log, progress=False)
        name = Path(log).name
        for seed in a.seeds:
            split = speed.chronological_split(events, seed=seed)
            with tempfile.TemporaryDirectory() as tmp:
                shards = {}
                for label, balance in (("off", None), (f"{a.balance:g}", a.balance)):
                    res = speed.partition(split.train(events), a.parts, topk=a.topk, balance=balance, progress=False)
                    shards[label] = res.save(Path(tmp) / f"s_{label}", events=events, split=split)
                    shards[label + "_stats"] = res.stats
                kw = dict(model=a.model, epochs=a.epochs, seed=seed, patience=a.epochs, progress=False)
                single = speed.train(speed.load_shards(shards["off"]), num_threads=1, **kw)
                base_s = _epoch_seconds(single)
                base_rate = float(np.mean([e["train_events_per_s"] for e in single["epochs"][1:]]))
                rows.append({"log": name, "seed": seed, "setting": "1 process, 1 thread", "epoch_seconds": base_s,
                             "relative_epoch": 1.0, "rank_throughput": 1.0, "largest_share": 1.0,
                             "test_ap": single["test"]["transductive"]["ap"]})
                runs = [] if a.skip_off else [("off", 1)]
                runs += [(f"{a.balance:g}", k) for k in a.average_every]
                for label, every in runs:
                    m = speed.train(shards[label], nproc=2, subgraph="assigned", sync_every=a.sync_every,
                                    average_every=every, out=Path(tmp) / f"run_{label}_{every}", **kw)
                    ranks = [r for e in m["epochs"][1:] for r in e["ranks"]]
                    rate = np.mean([r["events"] * r["passes"] / r["train_seconds"] for r in ranks])
                    share = max(r["events"] for r in m["epochs"][0]["ranks"]) / m["data"]["num_train_events"]
                    st = shards[label + "_stats"]
                    setting = f"N=2 assigned, balance {label}" + (f", average every {every}" if every > 1 else "")
                    rows.append({"log": name, "seed": seed, "setting": setting,
                                 "epoch_seconds": _epoch_seconds(m), "relative_epoch": _epoch_seconds(m) / base_s,
                                 "rank_throughput": float(rate / base_rate), "largest_share": share,
                                 "test_ap": m["test"]["transductive"]["ap"],
                                 "replication_factor": st["replication_factor"],
                                 "largest_part_ratio": st["largest_part_ratio"]})
                for r in rows[-1 - len(runs):]:
                    print(f"{name:<18} seed {seed}  {r['setting']:<42} {r['epoch_seconds']:6.2f} s/epoch "
                          f"({r['relative_epoch']:.2f}x)  rank rate {r['rank_throughput']:.2f}  "
                          f"share {r['largest_share']:.3f}  test AP {r['test_ap']:.4f}", flush=True)
    summary = []
    for key in sorted({(r["log"], r["setting"]) for r in rows}):
        sel = [r for r in rows if (r["log"], r["setting"]) == key]
        summary.append({"log": key[0], "setting": key[1], **{k: float(np.mean([r[k] for r in sel])) for k in
                        ("epoch_seconds", "relative_epoch", "rank_throughput", "largest_share", "test_ap")}})
        s = summary[-1]
        print(f"MEAN {s['log']:<18} {s['setting']:<42} {s['epoch_seconds']:6.2f} s ({s['relative_epoch']:.2f}x)  "
              f"rank rate {s['rank_throughput']:.2f}  share {s['largest_share']:.3f}  test AP {s['test_ap']:.4f}")
    out = {"args": vars(a), "rows": rows, "summary": summary}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
