"""Run the reference projects' own evaluation code on the conformance logs and compare with speed.

``tests/test_conformance.py`` checks speed against plain-Python restatements of DyGLib, TGN
and TGB.  This script checks those restatements once against the real code: it imports the
functions from checkouts you give it (nothing of theirs is copied here), runs them on the same
hand-built logs, and compares what speed produces with what they produce.

    python tests/reference_check.py --dyglib DyGLib/ --tgn tgn/ --tgb TGB/

What is compared (the references draw with their own RNGs, so draws are compared as sets and
counts, never element by element):

* DyGLib ``utils/DataLoader.py:get_link_prediction_data`` and TGN
  ``utils/data_processing.py:get_data``: the five event sets, given speed's held-out nodes
  (their ``random.sample`` returns speed's choice); DyGLib's ``last_observed_time`` per period.
* DyGLib ``utils/utils.py:NegativeEdgeSampler`` (historical, inductive), built as
  ``evaluate_link_prediction.py`` builds it: for each evaluation batch, the edges it may draw
  from (its own ``get_unique_edges_between_start_end_time``) against speed's negatives, and the
  number of random fills.
* TGB ``tgb/linkproppred/negative_generator.py`` (``rnd``, ``hist_rnd``): for each event, the
  number of candidates and, for ``hist_rnd``, how many come from the source's history;
  speed's candidates lie in the set TGB draws from.
* TGB ``tgb/linkproppred/evaluate.py:Evaluator``: MRR and Hits@10 on the same scores.

TGB's generator imports ``torch_geometric.data.TemporalData`` for a type; where PyG is not
installed a stand-in holding ``src``, ``dst`` and ``t`` tensors is registered.  The result is
printed and written to ``tests/reference_check.json`` (beside this script).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

import numpy as np
import torch

import speed
from speed.train.eval.evaluator import Evaluator
from speed.train.eval.metrics import ranking_metrics
from speed.train.eval.negatives import random_candidates

RESULTS = Path(__file__).parent
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_conformance as conformance  # noqa: E402  (the hand-built logs the tests use, one copy)


# ----------------------------------------------------------------------------- logs
# yearly timestamps (many events share one), and a training period whose last time touches
# only a held-out node: the conformance tests' own logs
def yearly_log(seed=0, nodes=60):
    return conformance.yearly_log(seed, nodes)


def held_out_tail_log():
    return conformance.held_out_tail_log()[0]


def few_items_log(seed=0, users=30, items=40, times=25, n=1500):
    """Bipartite, few distinct destinations and times: TGB's generator gives fewer than K."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, times, n)).astype(np.float64)
    return speed.Events.from_arrays(rng.integers(0, users, n), rng.integers(0, items, n) + 1000, t)


def met_every_item_log():
    """As in tests/test_conformance.py: users 0-2 meet every item in training."""
    rng = np.random.default_rng(0)
    n = 3000
    users = np.where(np.arange(n) < 600, np.arange(n) % 3, rng.integers(0, 150, n))
    items = np.where(np.arange(n) < 600, np.arange(n) // 3 % 60, rng.integers(0, 60, n)) + 1000
    return speed.Events.from_arrays(users, items, np.arange(n, dtype=np.float64))


# ------------------------------------------------------------------------- imports
@contextlib.contextmanager
def reference(path: Path, *modules: str):
    """Import ``modules`` from the checkout at ``path`` (removed from sys.modules afterwards)."""
    sys.path.insert(0, str(path))
    try:
        yield [importlib.import_module(m) for m in modules]
    finally:
        sys.path.remove(str(path))
        for name in list(sys.modules):
            if name.split(".")[0] in {m.split(".")[0] for m in modules}:
                del sys.modules[name]


def commit(path: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_processed(ev: speed.Events, folder: Path, name: str) -> None:
    """The CSV and feature files TGN's and DyGLib's loaders read (ids shifted by 1: 0 is their padding)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(ev)
    lines = [",u,i,ts,label,idx"] + [f"{k},{s + 1},{d + 1},{t!r},0,{k + 1}"
                                      for k, (s, d, t) in enumerate(zip(ev.src, ev.dst, ev.t_float()))]
    (folder / f"ml_{name}.csv").write_text("\n".join(lines) + "\n")
    np.save(folder / f"ml_{name}.npy", np.zeros((n + 1, 4)))
    np.save(folder / f"ml_{name}_node.npy", np.zeros((ev.num_nodes + 2, 4)))


def speed_split(ev, held_ids):
    split = speed.chronological_split(ev, new_node_fraction=0.0)
    held = np.zeros(ev.num_nodes, dtype=bool)
    held[list(held_ids)] = True
    return dataclasses.replace(split, new_nodes=held, new_node_fraction=0.1)


def held_out_choice(ev, seed=2020):
    """speed's TGN rule: int(0.1 x |nodes|) of the nodes seen after the validation time."""
    sp = speed.chronological_split(ev, new_node_fraction=0.1, seed=seed)
    return sorted(np.flatnonzero(sp.new_nodes).tolist())


# ----------------------------------------------------------------------- splits
def check_split(module, loader, ev, name, held, is_dyglib):
    """The reference's five event sets against speed's, with speed's held-out nodes."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / ("processed_data/" + name if is_dyglib else "data")
        write_processed(ev, folder, name)
        fake_sample = lambda population, k: [h + 1 for h in held][:k]  # noqa: E731 (ids shifted by 1)
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            with mock.patch.object(module.random, "sample", fake_sample), contextlib.redirect_stdout(None):
                out = loader(name, 0.15, 0.15) if is_dyglib else loader(name)
        finally:
            os.chdir(cwd)
    full, train, val, test, nn_val, nn_test = out[2:8] if is_dyglib else out[2:8]
    eid = (lambda d: d.edge_ids - 1) if is_dyglib else (lambda d: d.edge_idxs - 1)
    sp = speed_split(ev, held)
    ours = {
        "train": np.flatnonzero(sp.train_mask),
        "val": np.arange(sp.num_train, sp.num_train + sp.num_val),
        "test": np.arange(sp.num_train + sp.num_val, len(ev)),
        "new_node_val": sp.num_train + np.flatnonzero(sp.val_inductive),
        "new_node_test": sp.num_train + sp.num_val + np.flatnonzero(sp.test_inductive),
    }
    theirs = dict(zip(ours, (eid(d) for d in (train, val, test, nn_val, nn_test))))
    same = {k: bool(np.array_equal(ours[k], theirs[k])) for k in ours}
    result = {"sizes": {k: int(v.size) for k, v in theirs.items()}, "identical": same}
    if is_dyglib:
        times = (lambda d: d.node_interact_times)
        ev_ = Evaluator(ev, sp, 200, seed=0, strategy="inductive", protocol="dyglib")
        result["last_observed"] = {"val": [float(times(train)[-1]), ev_._last_observed("val")],
                                   "test": [float(times(val)[-1]), ev_._last_observed("test")]}
        result["identical"]["last_observed"] = all(a == b for a, b in result["last_observed"].values())
    return result, (full, train, val, test, nn_val, nn_test)


# --------------------------------------------------------------- DyGLib's negatives
def check_dyglib_negatives(utils, ev, data, held, strategy, batch_size=200):
    """For each evaluation batch of val and test (and their new-node sets): DyGLib's sampler,
    built as ``evaluate_link_prediction.py`` builds it, against speed's negatives."""
    full, train, val, test, nn_val, nn_test = data
    sp = speed_split(ev, held)
    evaluator = Evaluator(ev, sp, batch_size, seed=0, strategy=strategy, protocol="dyglib")
    samplers = {  # (period, new-node pass): (sampler data, last_observed_time), as in DyGLib
        ("val", False): (full, train.node_interact_times[-1]),
        ("val", True): (nn_val, train.node_interact_times[-1]),
        ("test", False): (full, val.node_interact_times[-1]),
        ("test", True): (nn_test, val.node_interact_times[-1]),
    }
    report = {}
    for (period, new), (d, last) in samplers.items():
        sampler = utils.NegativeEdgeSampler(d.src_node_ids, d.dst_node_ids, d.node_interact_times, last, strategy,
                                            seed=0)
        idx = evaluator.period(period)
        if new:
            idx = idx[evaluator.inductive(period)]
        ns, nd = evaluator.negative_edges(period, new)
        src, dst, t = ev.src[idx] + 1, ev.dst[idx] + 1, ev.t_float()[idx]
        ns, nd = ns + 1, nd + 1
        batches = mismatched = fills = crashed = 0
        for a in range(0, idx.size, batch_size):
            b = min(idx.size, a + batch_size)
            start, end = t[a], t[b - 1]
            hist = sampler.get_unique_edges_between_start_end_time(sampler.earliest_time, start)
            current = sampler.get_unique_edges_between_start_end_time(start, end)
            allowed = hist - current - (sampler.observed_edges if strategy == "inductive" else set())
            their_fill = max(0, (b - a) - len(allowed))
            try:
                their = sampler.sample(b - a, src[a:b], dst[a:b], start, end)  # runs their draw too
            except AssertionError:  # every possible pair is a pair of the batch: DyGLib stops
                their, crashed = (np.empty(0), np.empty(0)), crashed + 1
            got = list(zip(ns[a:b].tolist(), nd[a:b].tolist()))
            outside = sum(e not in allowed for e in got)  # speed's random fills
            # no fill: every negative from DyGLib's set; with fills: all of the set, and at most
            # DyGLib's number of fills outside it
            ok = outside == 0 if their_fill == 0 else (set(allowed) <= set(got) and outside <= their_fill)
            their_ok = sum((int(s), int(d_)) in allowed for s, d_ in zip(*their)) >= (b - a) - their_fill
            batches += 1
            mismatched += int(not (ok and their_ok))
            fills += their_fill
        report[f"{period}{' new nodes' if new else ''}"] = {"batches": batches, "mismatched": mismatched,
                                                           "random_fills": fills,
                                                           "reference_assertion_failed": crashed}
    return report


# ------------------------------------------------------------------ TGB
class _TemporalData:  # stand-in for torch_geometric.data.TemporalData (only src, dst, t are read)
    def __init__(self, src, dst, t):
        self.src, self.dst, self.t = (torch.as_tensor(np.asarray(x)) for x in (src, dst, t))


def tgb_modules(path: Path):
    try:
        import torch_geometric.data  # noqa: F401
    except ImportError:
        pyg = types.ModuleType("torch_geometric")
        pyg.data = types.ModuleType("torch_geometric.data")
        pyg.data.TemporalData = _TemporalData
        sys.modules["torch_geometric"], sys.modules["torch_geometric.data"] = pyg, pyg.data
    return reference(path, "tgb.linkproppred.negative_generator", "tgb.linkproppred.evaluate")


def check_tgb(gen_mod, ev, strategy, k=100):
    """TGB's generator on the test period of ``ev`` against speed's candidates."""
    sp = speed.chronological_split(ev, new_node_fraction=0.0)
    evaluator = Evaluator(ev, sp, 200, seed=0, protocol="tgb", mrr_negatives=k)
    idx = evaluator.period("test")
    tr = slice(0, sp.num_train)
    if strategy == "hist_rnd":  # what --protocol tgb ranks against
        cand, valid = evaluator.ranking_candidates("test")
    else:  # TGB's rnd strategy, on the same pool
        cand, valid = random_candidates(ev.src[idx], ev.dst[idx], ev.t_float()[idx], evaluator.ranking_pool, k, 0)
    first, last = int(ev.dst.min()), int(ev.dst.max())
    hist = _TemporalData(ev.src[tr], ev.dst[tr], ev.t[tr]) if strategy == "hist_rnd" else None
    gen = gen_mod.NegativeEdgeGenerator("check", first, last, num_neg_e=k, strategy=strategy, rnd_seed=0,
                                        historical_data=hist)
    with tempfile.TemporaryDirectory() as tmp:
        gen.generate_negative_samples(_TemporalData(ev.src[idx], ev.dst[idx], ev.t[idx]), "test", tmp)
        with open(Path(tmp) / "check_test_ns.pkl", "rb") as f:
            theirs = pickle.load(f)
    seen = {}
    for s, d in zip(ev.src[tr].tolist(), ev.dst[tr].tolist()):
        seen.setdefault(s, set()).add(d)
    all_dst = set(range(first, last + 1))
    count_equal = hist_equal = inside = 0
    for row, i in enumerate(idx):
        s, d, t = int(ev.src[i]), int(ev.dst[i]), ev.t[i]
        neg = theirs[(s, d, t)]
        mine = cand[row][valid[row]]
        same_time = set(ev.dst[idx][(ev.src[idx] == s) & (ev.t[idx] == t)].tolist())
        count_equal += int(mine.size == len(neg))
        allowed = all_dst - same_time
        inside += int(set(mine.tolist()) <= allowed)
        if strategy == "hist_rnd":
            h = seen.get(s, set()) - same_time
            hist_equal += int(sum(x in h for x in mine.tolist()) == sum(int(x) in h for x in neg))
    out = {"events": int(idx.size), "count_equal": count_equal, "inside_tgb_pool": inside,
           "candidates_mean": float(valid.sum(1).mean())}
    if strategy == "hist_rnd":
        out["historical_count_equal"] = hist_equal
    return out


def check_tgb_evaluator(eval_mod, seed=0):
    rng = np.random.default_rng(seed)
    report = []
    for case in range(6):
        pos = rng.integers(0, 5, 300).astype(np.float64) if case % 2 else rng.normal(size=300)  # ties on odd cases
        neg = rng.integers(0, 5, (300, 20)).astype(np.float64) if case % 2 else rng.normal(size=(300, 20))
        ev = eval_mod.Evaluator.__new__(eval_mod.Evaluator)  # skip the dataset-name check
        ev.k_value, ev.valid_metric_list = 10, ["hits@", "mrr"]
        theirs = ev._eval_hits_and_mrr(pos, neg, "numpy", 10)
        ours = ranking_metrics(pos, neg)
        report.append(abs(float(theirs["mrr"]) - ours["mrr"]) < 1e-6
                      and abs(float(theirs["hits@10"]) - ours["hits@10"]) < 1e-6)
    return {"score_sets": len(report), "equal": int(sum(report))}


# ------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dyglib", type=Path, required=True, help="a checkout of yule-BUAA/DyGLib")
    ap.add_argument("--tgn", type=Path, required=True, help="a checkout of twitter-research/tgn")
    ap.add_argument("--tgb", type=Path, required=True, help="a checkout of shenyangHuang/TGB")
    ap.add_argument("--out", type=Path, default=RESULTS / "reference_check.json")
    args = ap.parse_args(argv)
    random.seed(0)
    logs = {"yearly": yearly_log(), "held-out tail": held_out_tail_log(), "yearly, 200 nodes": yearly_log(3, 200)}
    result = {"commits": {"dyglib": commit(args.dyglib), "tgn": commit(args.tgn), "tgb": commit(args.tgb)}}

    with reference(args.dyglib, "utils.DataLoader", "utils.utils") as (loader, utils):
        for name, ev in logs.items():
            held = held_out_choice(ev) if name != "held-out tail" else [20]
            split, data = check_split(loader, loader.get_link_prediction_data, ev, "check", held, True)
            result[f"dyglib split: {name}"] = split
            for strategy in ("historical", "inductive"):
                result[f"dyglib {strategy}: {name}"] = check_dyglib_negatives(utils, ev, data, held, strategy)
    with reference(args.tgn, "utils.data_processing") as (dp,):
        for name, ev in logs.items():
            held = held_out_choice(ev) if name != "held-out tail" else [20]
            split, _ = check_split(dp, dp.get_data, ev, "check", held, False)
            result[f"tgn split: {name}"] = split
    with tgb_modules(args.tgb) as (gen, evaluate):
        for name, ev in {"few items": few_items_log(), "met every item": met_every_item_log()}.items():
            for strategy in ("rnd", "hist_rnd"):
                result[f"tgb {strategy}: {name}"] = check_tgb(gen, ev, strategy)
        result["tgb evaluator"] = check_tgb_evaluator(evaluate)

    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
