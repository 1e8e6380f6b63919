"""The sections of ``python -m benchmarks cpu``: one question each, its inputs from a recipe.

A section runs in its own interpreter with its checkout first on ``sys.path`` (``--tree``), so
an earlier commit's ``git worktree`` is measured by today's suite, and prints its answer as the
last line (JSON).  Inputs: ``../shared/data`` when it is there, else logs ``speed generate``
makes from the recipes below (seeds named), cached in ``benchmarks/.cache``.

==============  ===========================================================================
``partition``   SEP on a generated 10^7-event log: reading it, partitioning it (events/s)
``train_pyg``   TGN training events/s, speed against PyG's TGN (benchmarks/train_vs_pyg.py),
                on Wikipedia and on a generated log of 10^6 node ids, and on the generated
                log at batches of 200, 1000 and 4000
``pac``         PAC N=1 (2 threads) against N=2 (1 thread each) on SEP shards: training
                events/s, seconds per phase, whole-run seconds, rank peaks against
                ``speed plan``
``eval_pass``   val-pass events/s against training's, one process (benchmarks/eval_pass.py)
``step_ops``    operators, sync-forcing calls and planning microseconds per training step
                (benchmarks/step_cost.py)
``scale``       full suite only (benchmarks/scale.py): events/s against the graph's node
                count (10^4 to 10^6, speed and PyG), and one PAC epoch on a generated
                10^7-event log with full evaluation: seconds per phase, rank peaks, plan
==============  ===========================================================================
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache"
SHARED = ROOT.parent / "shared" / "data"

# the generated inputs: name -> speed generate's arguments (seeds named here)
RECIPES = {
    "g2m_seed7.csv": ["--events", "2000000", "--nodes", "1000000", "--seed", "7"],  # also eval_pass.py's
    "sep_1e7_seed0.csv": ["--events", "10000000", "--nodes", "500000", "--seed", "0"],
    # quality.py's: unipartite, heavy-tailed, 2,000 node ids
    "quality_g100k_seed11.csv": ["--events", "100000", "--nodes", "2000", "--seed", "11"],
}
SHARDS = ("g2m_seed7.csv", "g2m_seed7-p8", ["--parts", "8", "--topk", "5"])  # the PAC section's shards


def cached(name: str) -> Path:
    """A generated log of :data:`RECIPES`, made once into ``benchmarks/.cache``."""
    path = CACHE / name
    if not path.exists():
        CACHE.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp.csv")
        subprocess.run([sys.executable, "-m", "speed", "generate", str(tmp), *RECIPES[name], "--no-progress"],
                       check=True, cwd=ROOT)
        tmp.rename(path)
    return path


LOG: Optional[Path] = None  # ``--log``: a log of the user's in place of the generated ones


def main_log() -> Path:
    """The log the training sections read: ``--log``, else the generated 2M-event recipe."""
    return LOG if LOG is not None else cached(SHARDS[0])


def shards() -> Path:
    """SEP shards of :func:`main_log` (P=8, top-5%), made once into the cache."""
    log, name, args = SHARDS
    if LOG is not None:  # named by the file and its size and time, so an edited log is partitioned again
        st = LOG.stat()
        key = hashlib.sha1(f"{LOG.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:10]
        name = f"{LOG.stem}-{key}-p8"
    path = CACHE / name
    if not path.exists():
        CACHE.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "speed", "partition", str(main_log()), "-o", str(path), *args,
                        "--no-progress"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def prepare_inputs(quick: bool) -> None:
    """Make every cached input before any section is timed (generation is not a measurement)."""
    for name in RECIPES:
        if LOG is None:
            cached(name)
    shards()


def wikipedia() -> Path:
    """JODIE's Wikipedia log from ``../shared/data`` (None-safe: the section says when it is missing)."""
    return SHARED / "wikipedia.csv"


def _script(name: str, tree: str, *args: str, timeout: int = 1800, out: Optional[Path] = None) -> dict:
    """Run ``benchmarks/NAME`` (today's) on checkout ``tree``; its JSON result file, read back
    (``out``: where the script writes it, with what it draws beside it; default a temporary file)."""
    with tempfile.TemporaryDirectory(prefix="speed-bench-") as tmp:
        out = Path(out) if out is not None else Path(tmp) / "out.json"
        env = {**os.environ, "PYTHONPATH": tree + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = subprocess.run([sys.executable, str(HERE / name), *args, "--out", str(out)], capture_output=True,
                              text=True, env=env, timeout=timeout, cwd=ROOT)
        if proc.returncode:
            raise RuntimeError(f"{name}: " + (proc.stderr.strip().splitlines() or ["failed"])[-1])
        return json.loads(out.read_text())


# ----------------------------------------------------------------------------- sections
def partition(tree: str, quick: bool) -> dict:
    import speed

    log = LOG or cached("sep_1e7_seed0.csv")
    t0 = time.perf_counter()
    ev = speed.read_events(log, progress=False)
    read_s = time.perf_counter() - t0
    speed.partition(speed.Events.from_arrays(ev.src[:1000], ev.dst[:1000], ev.t_float()[:1000]), 2, progress=False)
    t0 = time.perf_counter()  # (kernels compiled or loaded from the cache above)
    res = speed.partition(ev, 8, topk=0.05, progress=False)
    part_s = time.perf_counter() - t0
    return {"log": log.name, "events": len(ev), "nodes": int(ev.num_nodes), "parts": 8, "topk": 0.05,
            "read_seconds": read_s, "partition_seconds": part_s, "events_per_s": len(ev) / part_s,
            "replication_factor": res.stats.get("replication_factor")}


BATCHES = (200, 1000, 4000)  # the batch sweep of train_pyg (on the generated log)


def train_pyg(tree: str, quick: bool) -> dict:
    gen = str(main_log())
    logs = [gen] + ([str(wikipedia())] if wikipedia().exists() else [])
    args = ["--epochs", "2", "--threads", "2", "--eval-max-steps", "20", "--max-events", "60000" if quick else "300000"]
    keep = ("log", "speed_events_per_s", "pyg_events_per_s", "speedup")
    got = _script("train_vs_pyg.py", tree, *args, *[x for log in logs for x in ("--log", log)])
    out = {"epochs": 2, "note": "events/s of the epochs after the first", "threads": 2,
           "logs": [{k: r[k] for k in keep} for r in got["summary"]], "batches": []}
    for b in BATCHES:
        r = got["summary"][0] if b == 200 else _script("train_vs_pyg.py", tree, *args, "--log", gen,
                                                        "--batch-size", str(b))["summary"][0]
        out["batches"].append({"batch": b, **{k: r[k] for k in keep}})
    return out


def pac(tree: str, quick: bool) -> dict:
    import speed
    from speed.partition.shards import Shards
    from speed.train.config import TrainConfig
    from speed.train.pac.budget import plan

    path = shards()
    steps, batches = (600, 150) if quick else (3000, 500)
    out = {"shards": path.name, "training_steps": steps, "eval_batches": batches}
    with tempfile.TemporaryDirectory(prefix="speed-bench-pac-") as tmp:
        for n, threads in ((1, 2), (2, 1)):
            t0 = time.perf_counter()
            m = speed.train(str(path), model="tgn", nproc=n, num_threads=threads, epochs=1, max_steps=steps // n,
                            eval_max_steps=batches, out=f"{tmp}/n{n}", progress=False, seed=0)
            run_s = time.perf_counter() - t0
            e = m["epochs"][0]
            phases = {k: float(v) for k, v in e["seconds"].items() if k in ("train", "sync", "exchange", "validate")}
            phases["test"] = float(m["seconds"]["final_evaluation"])
            phases["other"] = max(0.0, run_s - sum(phases.values()))  # start, spawn, loading, writing
            planned = plan(Shards(path), TrainConfig(model="tgn", nproc=n).validate(), n)
            out[f"n{n}"] = {"threads": threads, "train_seconds": e["seconds"]["train"],
                            "train_events_per_s": e["train_events_per_s"],
                            "validate_seconds": e["seconds"].get("validate"), "run_seconds": run_s,
                            "phases": phases, "rank_peak_rss_bytes": m["rank_peak_rss_bytes"],
                            "planned_peak_bytes": [r["peak_bytes"] for r in planned["epochs"][0]["ranks"]]}
    out["ratios"] = {k: out["n2"][f"{k}_seconds"] / out["n1"][f"{k}_seconds"] for k in ("train", "validate", "run")}
    return out


def eval_pass(tree: str, quick: bool) -> dict:
    got = _script("eval_pass.py", tree, "--tree", tree, "--steps", "600", "--eval-steps", "300",
                  "--log", str(main_log()))
    return {"steps": 600, "eval_steps": 300, "widths": [
        {"width": r["width"], "train_events_per_s": r["train_events_per_s"],
         "passes": {p["pass"]: round(p["ratio_to_training"], 3) for p in r["passes"]},
         # the same ratios per memory key computed (eval_pass.py: the passes run denser parts of the log)
         "train_keys_per_event": r.get("train_keys_per_event"),
         "passes_per_key": {p["pass"]: round(p["ratio_per_key"], 3) for p in r["passes"] if p.get("ratio_per_key")}}
        for r in got["rows"]]}


def step_ops(tree: str, quick: bool) -> dict:
    got = _script("step_cost.py", tree, "--tree", tree, "--log", str(main_log()), "--batch", "200",
                  "--threads", "1")
    keep = ("model", "batch", "leaf_ops", "sync_calls", "plan_us")
    return {"runs": [{k: r.get(k) for k in keep} for r in got["runs"]]}


def scale(tree: str, quick: bool) -> dict:
    """The full suite's scaling curve and 10M-event run (benchmarks/scale.py; minutes to an hour)."""
    from _trees import results_dir

    # kept with its chart in the results (the other checkout's under its own name)
    out = results_dir() / ("scale.json" if Path(tree) == ROOT else f"scale-{Path(tree).name}.json")
    return _script("scale.py", tree, "--nodes", "10000", "100000", "1000000", "--events", "300000",
                   "--pac-events", "10000000", "--pac-nodes", "1500000", "--nproc", "2", "--parts", "8",
                   timeout=3 * 3600, out=out)


SECTIONS = {"partition": partition, "train_pyg": train_pyg, "pac": pac, "eval_pass": eval_pass, "step_ops": step_ops,
            "scale": scale}
FULL_ONLY = ("scale",)  # not in --quick


# ----------------------------------------------------------------------------- reading them
def headline(name: str, r: dict) -> dict:
    """The figures a section is read by (name -> value), for the table and the ratios (none for a
    section that failed or did not run)."""
    if not r or "error" in r:
        return {}
    if name == "partition":
        return {"SEP events/s": r["events_per_s"], "read seconds": r["read_seconds"]}
    if name == "train_pyg":
        return {f"{x['log']}: speed / PyG": x["speedup"] for x in r["logs"]} | \
            {f"{x['log']}: speed events/s": x["speed_events_per_s"] for x in r["logs"]} | \
            {f"batch {x['batch']}: speed / PyG": x["speedup"] for x in r.get("batches", [])}
    if name == "pac":
        return {"N=2/N=1 training seconds": r["ratios"]["train"], "N=2/N=1 validation seconds": r["ratios"]["validate"],
                "N=2/N=1 whole run": r["ratios"]["run"],
                "N=2 rank peak / planned": max(a / b for a, b in zip(r["n2"]["rank_peak_rss_bytes"],
                                                                     r["n2"]["planned_peak_bytes"]))}
    if name == "eval_pass":
        h = {f"width {w['width']}: val pass / training": w["passes"].get("val") for w in r["widths"]}
        h |= {f"width {w['width']}: val pass / training, per memory key": w["passes_per_key"]["val"]
              for w in r["widths"] if w.get("passes_per_key", {}).get("val")}
        return h
    if name == "scale":
        h = {f"{x['distinct_nodes']:,} nodes: speed events/s": x["speed_events_per_s"] for x in r["node_sweep"]}
        h |= {f"{x['distinct_nodes']:,} nodes: speed / PyG": x["speed_over_pyg"] for x in r["node_sweep"]
              if "speed_over_pyg" in x}
        for p in r.get("pac", []):
            s_ = p["epoch_seconds"]
            h[f"PAC {p['events']:,} events: training events/s"] = p["train_events_per_s"]
            h[f"PAC {p['events']:,} events: validation and test / training seconds"] = (
                (s_.get("validate", 0.0) + (p["final_evaluation_seconds"] or 0.0)) / max(s_.get("train", 0.0), 1e-9))
            if p.get("evaluation_work"):  # the passes alone, the slower rank's (issue 59's measure)
                h[f"PAC {p['events']:,} events: evaluation passes / training seconds"] = max(
                    sum(x["seconds_total"] for x in w) for w in p["evaluation_work"]) / max(s_.get("train", 0.0), 1e-9)
            h[f"PAC {p['events']:,} events: largest rank peak, GB"] = max(
                (q["run_peak_rss_bytes"] or 0) for q in p["ranks"]) / 1e9
        return h
    if name == "step_ops":
        return {f"batch {x['batch']}: {k}": x[k] for x in r["runs"] for k in ("leaf_ops", "sync_calls", "plan_us")}
    return {}


def describe(name: str, r: dict) -> str:
    if "error" in r:
        return f"{name:<10} failed: {r['error']}"
    return f"{name:<10} " + "; ".join(f"{k} {v:,.3g}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in headline(name, r).items()) + f"   ({r['seconds']:.0f} s)"


def ratios(mine: dict, other: dict) -> dict:
    """This checkout's headline figures over the other's, section by section."""
    out = {}
    for name in mine:
        a, b = headline(name, mine[name]), headline(name, other.get(name, {}))
        out[name] = {k: a[k] / b[k] for k in a if isinstance(a[k], (int, float)) and b.get(k)}
    return out


def table(result: dict, path: Path) -> str:
    """Today's figures as Markdown: one table per section, each figure with its result file."""
    st = next(iter(result["stamps"].values()))
    lines = [f"# {result['suite']}: {st['cpu']}, {st['cores']} cores" + (f", {st['gpu']}" if st["gpu"] else ""),
             "", f"Commit {st['commit'][:10] if st['commit'] else '?'}{' (with changes)' if st['dirty'] else ''}, "
             f"{st['date']}; Python {st['python']}, torch {st['torch']}, numpy {st['numpy']}, numba {st['numba']}.",
             f"Command: `python -m benchmarks {result['suite'].replace('-quick', ' --quick')}`; result: `{path.name}`.", ""]
    for name, r in result["sections"].items():
        lines += [f"## {name}", ""]
        if "error" in r:
            lines += [f"failed: {r['error']}", ""]
            continue
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {k} | {v:,.3f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in headline(name, r).items()]
        lines.append("")
    for tree, by_section in result.get("ratios", {}).items():
        lines += [f"## this checkout over {tree}", "", "| section | figure | ratio |", "|---|---|---|"]
        lines += [f"| {s} | {k} | {v:.3f} |" for s, figs in by_section.items() for k, v in figs.items()]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description="one section of the suite, as `python -m benchmarks` runs it")
    ap.add_argument("--section", required=True, choices=list(SECTIONS))
    ap.add_argument("--tree", default=str(ROOT))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--log", help="a log in place of the generated ones")
    a = ap.parse_args()
    global LOG
    LOG = Path(a.log).resolve() if a.log else None
    sys.path.insert(0, a.tree)
    got = SECTIONS[a.section](a.tree, a.quick)
    print(json.dumps({"section": a.section, "tree": a.tree, **got}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
