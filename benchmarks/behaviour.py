"""Deterministic figures of every training path, to check that a refactor changes no behaviour.

Runs, on the shipped sample (``data/sample.csv``) with ``deterministic=True`` and 2 threads per
process:

* every recipe (jodie, dyrep, tgn, tige) single-process and under PAC with ``nproc=2`` (4 parts);
* ``speed update`` of a trained TGN run, single-process from a file, and with ``nproc=2`` from
  shards that had events appended (with replay and MRR in the single-process case).

and records every loss, every epoch's validation figures, the test figures and each update's
per-increment and per-window scores.  ``--compare OLD.json`` then says which figures differ
(exactly: no tolerance), and exits 1 if any does::

    python benchmarks/behaviour.py --out /tmp/before.json
    # ... refactor ...
    python benchmarks/behaviour.py --out /tmp/after.json --compare /tmp/before.json

``benchmarks/results/<machine>/behaviour.json`` is the stored record of a machine
(``<machine>`` as ``_trees.machine_name`` names it): ``tests/test_behaviour_record.py``
(``pytest -m slow``) compares a fresh run with this machine's.  It is updated on purpose, by a
commit that says why the figures moved (``--out benchmarks/results/<machine>/behaviour.json``);
a machine without one gets its record from a commit whose figures equal another machine's record
there, checked by running that commit beside it.

Results depend on the CPU, the torch build and the thread count (the same code gives other bits
on an Intel Xeon than on an AMD EPYC, every run's losses included), so compare runs of one machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample.csv"
COMMON = dict(epochs=2, batch_size=200, deterministic=True, num_threads=2, progress=False, seed=0,
              memory_dim=32, time_dim=32, embedding_dim=32)
PAC = {}  # what the parallel runs are given besides COMMON (--validation)


def _figures(metrics: dict) -> dict:
    """The figures a behaviour change would move (no timings)."""
    epochs = metrics.get("epochs", [])  # (an update's metrics have none)
    out = {"losses": [e["loss"] for e in epochs],
           "val": [e.get("val") for e in epochs],
           "best_epoch": metrics.get("best_epoch"),
           "test": metrics.get("test"), "val_final": metrics.get("val")}
    ups = metrics.get("updates")
    if ups:
        out["updates"] = [{k: v for k, v in u.items() if k not in ("seconds", "source")} for u in ups]
    return _strip(out)


def _strip(x):
    """Drop timing keys anywhere inside."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if "second" not in k and k not in ("events_per_s",)}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def run_all(work: Path, models) -> dict:
    import speed
    from speed.data.readers import read_events

    results = {}
    events = read_events(SAMPLE)
    split = speed.chronological_split(events)
    # the first 85% partitioned, the last 15% appended later (for the parallel update)
    cut = int(0.85 * len(events))
    base = work / "base.csv"
    more = work / "more.csv"
    lines = SAMPLE.read_text().splitlines()
    header, body = lines[0], lines[1:]
    base.write_text("\n".join([header] + body[:cut]) + "\n")
    more.write_text("\n".join([header] + body[cut:]) + "\n")
    shards = work / "shards"
    result = speed.partition(split.train(events), num_parts=4, topk=0.05)
    result.save(shards, events=events, split=split, overwrite=True)
    for model in models:
        t0 = time.perf_counter()
        m = speed.train(events, model=model, out=work / f"{model}-1", **COMMON)
        results[f"{model}/single"] = _figures(m)
        m = speed.train(str(shards), model=model, nproc=2, out=work / f"{model}-pac", **COMMON, **PAC)
        results[f"{model}/pac2"] = _figures(m)
        print(f"{model}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    # updates: a TGN run on the first 85%, updated with the rest
    base_events = read_events(base)
    base_split = speed.chronological_split(base_events)
    m = speed.train(base_events, model="tgn", out=work / "upd-run", **COMMON)
    for name, kwargs in (("update/single", {}), ("update/single-replay-mrr", {"replay": 0.5, "mrr": True,
                                                                               "mrr_negatives": 5}),
                         ("update/memory-only", {"train": False}), ("update/passes2", {"passes": 2})):
        m = speed.update(work / "upd-run", more, out=work / name.replace("/", "-"), progress=False, seed=0, **kwargs)
        results[name] = _figures(m)
    # a parallel update from appended shards
    ushards = work / "ushards"
    r = speed.partition(base_split.train(base_events), num_parts=4, topk=0.05)
    r.save(ushards, events=base_events, split=base_split, overwrite=True)
    m = speed.train(str(ushards), model="tgn", nproc=2, out=work / "upd-pac", **COMMON, **PAC)
    speed.partition(read_events(more), into=ushards)
    m = speed.update(work / "upd-pac", ushards, out=work / "upd-pac2", nproc=2, progress=False, seed=0)
    results["update/pac2"] = _figures(m)
    m = speed.update(work / "upd-pac", ushards, out=work / "upd-pac1", progress=False, seed=0)
    results["update/single-from-shards"] = _figures(m)
    return results


def compare(new: dict, old: dict) -> list:
    diffs = []

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if k not in a or k not in b:
                    diffs.append(f"{path}/{k}: only in {'old' if k in b else 'new'}")
                else:
                    walk(a[k], b[k], f"{path}/{k}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                diffs.append(f"{path}: length {len(a)} != {len(b)}")
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{path}[{i}]")
        elif isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
            return
        elif a != b:
            diffs.append(f"{path}: {b!r} -> {a!r}")

    walk(new, old, "")
    return diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True,
                   help="where the figures go (benchmarks/results/<machine>/behaviour.json is the stored record)")
    p.add_argument("--compare", type=Path, help="an earlier output: list every figure that differs, exit 1 if any")
    p.add_argument("--models", nargs="*", default=None, help="recipes (default: every registered one)")
    p.add_argument("--validation", choices=("full", "local"), default=None,
                   help="the parallel runs' per-epoch validation (default: the library's)")
    args = p.parse_args(argv)
    if args.validation:
        PAC["validation"] = args.validation
    from speed.train.recipes import RECIPES

    models = args.models or sorted(RECIPES)
    with tempfile.TemporaryDirectory(prefix="speed-behaviour-") as tmp:
        results = run_all(Path(tmp), models)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({len(results)} runs)")
    if args.compare:
        diffs = compare(results, json.loads(args.compare.read_text()))
        for d in diffs[:50]:
            print("differs:", d)
        print(f"{len(diffs)} figure(s) differ from {args.compare}" if diffs else f"identical to {args.compare}")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
