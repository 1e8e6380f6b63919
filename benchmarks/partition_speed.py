"""SEP speed and memory on a synthetic power-law log (issue: foundation + SEP).

Measures, side by side in one run:

* numba compile time (fresh cache) vs. cache load (second process, same cache);
* the assignment pass alone (``sep_assign`` over all events), events/s;
* the whole ``speed.partition`` on in-memory events, events/s;
* CSV -> shards (``speed partition``: read + split + partition + write) vs. merely
  reading the same CSV with ``speed.read_events``, alternating three times in one
  process and keeping the best of each (this machine is noisy);
* peak memory of each stage over the process before the events existed, as a multiple
  of the raw event arrays (src, dst int64 + t: 24 bytes per event).

* ``speed.partition`` on a log with many nodes: 10M bipartite events over 2.5M ids, about
  1.5M of them present (centrality, hub selection and node state scale with the nodes);
* with ``--big``: ``speed partition`` on a 10^8-event CSV (generated once if absent, 2.5 GB),
  in memory and out of core (``--max-memory``), each in a fresh process: wall time, per-stage
  seconds, CPU user/system time and peak RSS (the child's own ``ru_maxrss``).  ``--old-tree
  DIR`` runs the same commands on another checkout too, side by side, so a comparison with
  an earlier version is made on the same machine on the same day.

Each measurement runs in a fresh subprocess, and the peak-RSS counter (VmHWM) is reset
before each timed operation, so every peak is its own.  Prints a
table and writes ``benchmarks/results/partition_speed.json``.

Usage::

    python benchmarks/partition_speed.py                 # 10M events, P=8, topk 5%
    python benchmarks/partition_speed.py --events 1000000 --nodes 50000   # quick
    python benchmarks/partition_speed.py --big --big-csv /data/big.csv  # + 10^8 events, both modes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAW_BYTES_PER_EVENT = 24


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _rss_now() -> int:
    return _status_bytes("VmRSS")


def _hwm() -> int:
    return _status_bytes("VmHWM")


def _reset_hwm() -> None:
    # Linux: writing 5 to clear_refs resets the peak-RSS counter (VmHWM) to the current RSS.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


# ------------------------------------------------------------------------------ workers
def worker_compile(a):
    t0 = time.perf_counter()
    import speed  # noqa: F401  (import cost is not compile cost)

    t_import = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "tiny.csv"
        csv.write_text("src,dst,t\n0,1,0\n1,2,1\n2,3,2\n3,0,3\n")

        def every_kernel(k):  # read (compaction, checks), partition, shards (bucketing)
            ev = speed.read_events(csv, progress=False)
            speed.partition(ev, 2, topk=0.5).save(Path(tmp) / f"s{k}")

        t0 = time.perf_counter()
        every_kernel(0)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        every_kernel(1)
        second = time.perf_counter() - t0
    return {"import_s": t_import, "first_call_s": first, "warm_call_s": second}


def _events(a):
    import speed

    return speed.generate_events(num_nodes=a["nodes"], num_events=a["events"], seed=a["seed"],
                                 bipartite=a.get("bipartite", False), num_items=a.get("items"))


def worker_memory_partition(a):
    import numpy as np

    import speed
    from speed.partition import _kernels

    base = _rss_now()
    ev = _events(a)
    # warm the kernels on a tiny stream so compilation/cache loading is not timed
    speed.partition(speed.Events.from_arrays([0, 1], [1, 2], [0, 1]), a["parts"], topk=a["topk"])
    with_events = _rss_now()
    _reset_hwm()

    t0 = time.perf_counter()
    res = speed.partition(ev, a["parts"], topk=a["topk"])
    whole = time.perf_counter() - t0
    peak = _hwm()

    # the assignment pass alone, on fresh state, same events and hubs
    n = ev.num_nodes
    hubs = res.hubs
    best = float("inf")
    for _ in range(3):
        code = _kernels.initial_codes(n, hubs)
        hub_mask = np.zeros((hubs.size, (a["parts"] + 63) // 64), dtype=np.uint64)
        load = np.zeros(a["parts"], dtype=np.int64)
        t0 = time.perf_counter()
        _kernels.sep_assign(ev.src, ev.dst, 0, len(ev), res.centrality, code, hub_mask, load, 1.0, 1.0,
                            np.empty(len(ev), dtype=np.int32))
        best = min(best, time.perf_counter() - t0)
    raw = len(ev) * RAW_BYTES_PER_EVENT
    return {
        "events": len(ev),
        "nodes_present": int(ev.node_mask().sum()),
        "partition_s": whole,
        "partition_events_per_s": len(ev) / whole,
        "stage_seconds": res.stats["seconds"],
        "assign_s": best,
        "assign_events_per_s": len(ev) / best,
        "edge_cut": res.edge_cut,
        "replication_factor": res.replication_factor,
        "part_events_std_over_mean": res.stats["part_events_std"] / res.stats["part_events_mean"],
        "raw_bytes": raw,
        "events_bytes": with_events - base,
        "partition_peak_extra_bytes": peak - with_events,
        "partition_peak_over_raw": (peak - base) / raw,
    }


def worker_csv(a):
    """Read alone vs. CSV -> shards, alternating in one process (best of each)."""
    import speed
    from speed.cli import main

    out = Path(a["out"])
    raw = a["events"] * RAW_BYTES_PER_EVENT
    args = ["--parts", str(a["parts"]), "--topk", str(100 * a["topk"]), "--no-progress", "--overwrite"]
    main(["partition", a["csv"], "-o", str(out / "warm"), *args])  # page cache, kernels
    reads, pipes, read_peak, pipe_peak = [], [], 0, 0
    manifest = None
    for k in range(a.get("rounds", 3)):
        base = _rss_now()
        _reset_hwm()
        t0 = time.perf_counter()
        ev = speed.read_events(a["csv"], progress=False)
        reads.append(time.perf_counter() - t0)
        read_peak = max(read_peak, _hwm() - base)
        del ev
        base = _rss_now()
        _reset_hwm()
        t0 = time.perf_counter()
        code = main(["partition", a["csv"], "-o", str(out / "shards"), *args])
        pipes.append(time.perf_counter() - t0)
        pipe_peak = max(pipe_peak, _hwm() - base)
        assert code == 0
        manifest = json.loads((out / "shards" / "manifest.json").read_text())
    return {"read_s": min(reads), "read_runs_s": reads, "pipeline_s": min(pipes), "pipeline_runs_s": pipes,
            "pipeline_seconds": manifest["seconds"], "read_peak_over_raw": read_peak / raw,
            "pipeline_peak_over_raw": pipe_peak / raw}


WORKERS = {f.__name__[len("worker_"):]: f for f in
           (worker_compile, worker_memory_partition, worker_csv)}


def run_cli(argv, tree=None) -> dict:
    """``speed`` with ``argv`` in a fresh process (from checkout ``tree`` if given): wall time,
    the child's CPU times and peak RSS, and the manifest's stage seconds."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    code = "import sys; from speed.cli import main; sys.exit(main(sys.argv[1:]))"
    t0 = time.perf_counter()
    # run from the tree itself: `python -c` puts the working directory first on sys.path
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=str(tree) if tree is not None else None)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if status != 0:
        raise RuntimeError(f"speed {' '.join(argv)} failed:\n{err}")
    out = Path(argv[argv.index("-o") + 1])
    manifest = json.loads((out / "manifest.json").read_text())
    return {"wall_s": wall, "user_s": ru.ru_utime, "system_s": ru.ru_stime, "peak_rss_bytes": ru.ru_maxrss * 1024,
            "stage_seconds": manifest["seconds"], "tree": str(tree) if tree else "this checkout"}


def big_runs(a, csv: Path, out: Path) -> dict:
    """The 10^8-event log through ``speed partition``, in memory and out of core."""
    import speed

    if not csv.exists():
        print(f"generating {csv} (10^8 events, once) ...", file=sys.stderr)
        csv.parent.mkdir(parents=True, exist_ok=True)
        speed.write_generated(csv, a.big_nodes, a.big_events, bipartite=True, num_items=a.big_items, seed=a.seed,
                              progress=False)
    common = ["partition", str(csv), "--parts", str(a.parts), "--topk", str(100 * a.topk), "--no-progress", "--overwrite"]
    modes = {"in_memory": [], "out_of_core": ["--max-memory", a.max_memory]}
    trees = [None] + ([Path(a.old_tree)] if a.old_tree else [])
    runs = {}
    run_cli([*common, "-o", str(out / "warm")])  # page cache and numba caches, not timed
    for round_ in range(a.big_rounds):
        for tree in trees:
            for mode, extra in modes.items():
                if tree is not None and mode == "out_of_core":
                    continue  # older trees have no out-of-core mode
                key = mode if tree is None else f"{mode}@old"
                print(f"10^8 events: {key}, round {round_ + 1} ...", file=sys.stderr)
                res = run_cli([*common, "-o", str(out / key), *extra], tree)
                if key not in runs or res["wall_s"] < runs[key]["wall_s"]:
                    runs[key] = res  # best of the rounds: the machine is noisy
    raw = a.big_events * RAW_BYTES_PER_EVENT
    for r in runs.values():
        r["peak_rss_over_raw"] = r["peak_rss_bytes"] / raw
    same = all((out / "in_memory" / "events" / f).read_bytes() == (out / "out_of_core" / "events" / f).read_bytes()
               for f in ("src.npy", "dst.npy", "t.npy", "eid.npy", "part.npy", "offsets.npy"))
    return {"events": a.big_events, "nodes": a.big_nodes, "items": a.big_items, "csv_bytes": csv.stat().st_size,
            "raw_bytes": raw, "max_memory": a.max_memory, "runs": runs, "identical_shards": same,
            "out_of_core_over_in_memory": runs["out_of_core"]["wall_s"] / runs["in_memory"]["wall_s"]}


def run_worker(name: str, args: dict, env=None) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--worker-args", json.dumps(args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {name} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # the CLI may have printed first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--nodes", type=int, default=500_000, help="default: Taobao's ratio of 1 node per 20 events")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--topk", type=float, default=0.05, help="fraction")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--many-nodes", type=int, default=2_500_000,
                    help="id space of the many-node case (bipartite, 1/5 items; 0 skips it)")
    ap.add_argument("--big", action="store_true", help="also the 10^8-event CSV, in memory and out of core")
    ap.add_argument("--big-csv", default=str(Path(tempfile.gettempdir()) / "speed_big_1e8.csv"),
                    help="where the 10^8-event CSV is kept (generated if absent)")
    ap.add_argument("--big-events", type=int, default=100_000_000)
    ap.add_argument("--big-nodes", type=int, default=5_000_000)
    ap.add_argument("--big-items", type=int, default=1_000_000)
    ap.add_argument("--big-rounds", type=int, default=2, help="rounds of the 10^8 runs (best kept)")
    ap.add_argument("--max-memory", default="3G", help="budget of the out-of-core run")
    ap.add_argument("--old-tree", default=None, help="another checkout to run the 10^8 in-memory case on too")
    ap.add_argument("--out", default=str(HERE / "results" / "partition_speed.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-args", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        result = WORKERS[a.worker](json.loads(a.worker_args))
        print(json.dumps(result))
        return 0

    import speed

    cfg = {"events": a.events, "nodes": a.nodes, "parts": a.parts, "topk": a.topk, "seed": a.seed}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "numba_cache"
        env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
        print("compile (fresh numba cache) ...", file=sys.stderr)
        cold = run_worker("compile", cfg, env)
        print("cache load (second process) ...", file=sys.stderr)
        warm = run_worker("compile", cfg, env)
        print(f"partition {a.events:,} in-memory events ...", file=sys.stderr)
        mem = run_worker("memory_partition", cfg)
        csv = Path(tmp) / "log.csv"
        t0 = time.perf_counter()
        speed.write_generated(csv, a.nodes, a.events, seed=a.seed, progress=False)
        gen_s = time.perf_counter() - t0
        print("read CSV vs CSV -> shards, alternating ...", file=sys.stderr)
        csv_res = run_worker("csv", dict(cfg, csv=str(csv), out=str(Path(tmp) / "shards")))
        csv_mb = csv.stat().st_size / 1e6
        many = None
        if a.many_nodes:
            print(f"partition {a.events:,} events over {a.many_nodes:,} ids ...", file=sys.stderr)
            many = run_worker("memory_partition", dict(cfg, nodes=a.many_nodes, bipartite=True,
                                                       items=a.many_nodes // 5))
        big = big_runs(a, Path(a.big_csv), Path(tmp) / "big") if a.big else None

    result = {
        "config": cfg,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "numba_compile_s": cold["first_call_s"] - cold["warm_call_s"],
        "numba_cache_load_s": warm["first_call_s"] - warm["warm_call_s"],
        "import_s": warm["import_s"],
        "csv_mb": csv_mb,
        "generate_csv_s": gen_s,
        **mem,
        **csv_res,
        "pipeline_over_read": csv_res["pipeline_s"] / csv_res["read_s"],
        "many_nodes": many,
        "big": big,
    }
    result["targets"] = {
        "assign >= 8M ev/s": result["assign_events_per_s"] >= 8e6,
        "partition >= 5M ev/s": result["partition_events_per_s"] >= 5e6,
        "csv->shards <= 2x read": result["pipeline_over_read"] <= 2.0,
        "partition peak <= 3x raw": result["partition_peak_over_raw"] <= 3.0,
    }
    if many:
        result["targets"][">= 8M ev/s with >= 1.5M nodes"] = many["partition_events_per_s"] >= 8e6
    if big:
        mem, ooc = big["runs"]["in_memory"], big["runs"]["out_of_core"]
        result["targets"].update({
            "10^8 CSV -> shards <= 35 s": mem["wall_s"] <= 35.0,
            "10^8 in-memory peak RSS <= 2x raw": mem["peak_rss_over_raw"] <= 2.0,
            "10^8 out-of-core peak RSS <= 3 GB": ooc["peak_rss_bytes"] <= 3 * 2**30,
            "10^8 out-of-core <= 1.5x in-memory": big["out_of_core_over_in_memory"] <= 1.5,
            "10^8 out-of-core shards identical": big["identical_shards"],
        })
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    rows = [
        ("events", f"{a.events:,} ({a.nodes:,} nodes, P={a.parts}, topk {100 * a.topk:g}%)"),
        ("numba compile (fresh cache)", f"{result['numba_compile_s']:.2f} s"),
        ("numba cache load (2nd process)", f"{result['numba_cache_load_s']:.2f} s"),
        ("assignment pass alone", f"{result['assign_s']:.3f} s = {result['assign_events_per_s'] / 1e6:.1f} M ev/s"),
        ("speed.partition (in memory)", f"{result['partition_s']:.3f} s = "
                                        f"{result['partition_events_per_s'] / 1e6:.1f} M ev/s"),
        ("  stages", ", ".join(f"{k} {v:.3f}" for k, v in result["stage_seconds"].items())),
        ("read CSV only (speed.read_events)", f"{result['read_s']:.2f} s ({csv_mb:.0f} MB)"),
        ("CSV -> shards (speed partition)", f"{result['pipeline_s']:.2f} s = {result['pipeline_over_read']:.2f}x read"),
        ("  stages", ", ".join(f"{k} {v:.2f}" for k, v in result["pipeline_seconds"].items())),
        ("peak memory / raw arrays", f"partition {result['partition_peak_over_raw']:.2f}x, "
                                     f"read {result['read_peak_over_raw']:.2f}x, "
                                     f"CSV->shards {result['pipeline_peak_over_raw']:.2f}x"),
        ("edge cut / RF", f"{100 * result['edge_cut']:.2f}% / {result['replication_factor']:.3f}"),
    ]
    if many:
        rows.append((f"speed.partition, {many['nodes_present']:,} nodes", f"{many['partition_s']:.3f} s = "
                     f"{many['partition_events_per_s'] / 1e6:.1f} M ev/s ("
                     + ", ".join(f"{k} {v:.2f}" for k, v in many["stage_seconds"].items()) + ")"))
    if big:
        for key, r in big["runs"].items():
            rows.append((f"10^8 CSV -> shards, {key}",
                         f"{r['wall_s']:.1f} s, user {r['user_s']:.1f} s, sys {r['system_s']:.1f} s, "
                         f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB ({r['peak_rss_over_raw']:.2f}x raw)"))
            rows.append(("  stages", ", ".join(f"{k} {v:.1f}" for k, v in r["stage_seconds"].items())))
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    for k, ok in result["targets"].items():
        print(f"target {k}: {'met' if ok else 'MISSED'}")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
