"""What opening a run costs as the graph grows: `speed score RUN pairs.csv` of 10 pairs.

Two generated logs of the same length (800,000 events by default), one over 10^4 node ids and one
over 10^6, each trained for one JODIE epoch; then `speed score` of 10 pairs of known nodes, each
command a process of its own, side by side, ``--repeats`` times.  Reported per log: the run
folder's bytes, the score command's peak RSS (``ru_maxrss`` of the process) and wall time, and
their ratios large/small (issue 40's targets: RSS <= 1.2x, time <= 1.5x)::

    python benchmarks/run_open.py --out benchmarks/results/run_open.json

Peak RSS is the machine-independent figure; times move with the load of this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def run_measured(argv):
    """Run ``argv``; (seconds, peak RSS bytes of that process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed: {err[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=800_000)
    p.add_argument("--nodes", type=int, nargs=2, default=[10_000, 1_000_000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "run_open.json")
    p.add_argument("--work", type=Path, default=None, help="keep the logs and runs here (default: a temp folder)")
    args = p.parse_args(argv)
    speed_cli = [sys.executable, "-m", "speed"]
    work = args.work or Path(tempfile.mkdtemp(prefix="speed-run-open-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = {}
    for n in args.nodes:
        log, run = work / f"log-{n}.csv", work / f"run-{n}"
        if not log.exists():
            subprocess.run(speed_cli + ["generate", str(log), "--nodes", str(n), "--events", str(args.events),
                                        "--seed", "1", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        if not (run / "best.json").exists():
            t0 = time.perf_counter()
            subprocess.run(speed_cli + ["train", str(log), "--model", "jodie", "--epochs", "1", "--out", str(run),
                                        "--overwrite", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
            print(f"trained {run} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        ids = np.loadtxt(log, delimiter=",", skiprows=1, max_rows=20, usecols=(0, 1), dtype=np.int64)
        t = json.loads((run / "metrics.json").read_text())["data"]["t_max"] + 1
        pairs = work / f"pairs-{n}.csv"
        pairs.write_text("src,dst,t\n" + "".join(f"{a},{b},{t:.0f}\n" for a, b in ids[:10]))
        logs[n] = (run, pairs)
    rows = {n: {"run_bytes": folder_bytes(run), "seconds": [], "peak_rss_bytes": []} for n, (run, _) in logs.items()}
    for k in range(args.repeats):  # side by side: small, large, small, large, ...
        for n, (run, pairs) in logs.items():
            s, rss = run_measured(speed_cli + ["score", str(run), str(pairs), "-o", str(work / f"scores-{n}.csv"),
                                               "--overwrite", "--no-progress"])
            rows[n]["seconds"].append(s)
            rows[n]["peak_rss_bytes"].append(rss)
    small, large = (rows[n] for n in args.nodes)
    result = {"command": "python benchmarks/run_open.py " + " ".join(argv or sys.argv[1:]),
              "events": args.events, "nodes": args.nodes, "logs": {str(n): r for n, r in rows.items()},
              "rss_ratio": min(large["peak_rss_bytes"]) / min(small["peak_rss_bytes"]),
              "time_ratio": min(large["seconds"]) / min(small["seconds"])}
    for n, r in rows.items():
        print(f"{n:>9,} node ids: run folder {r['run_bytes'] / 1e6:8.1f} MB, speed score of 10 pairs: peak RSS "
              f"{min(r['peak_rss_bytes']) / 1e6:7.1f} MB, {min(r['seconds']):5.2f} s (best of {args.repeats})")
    print(f"large / small: peak RSS {result['rss_ratio']:.2f}x, time {result['time_ratio']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
