"""Appending to shards against partitioning the whole log again (issue: a log that keeps growing).

For each log: SEP partitions its first half (``--base``) into shards; then the rest arrives in
``--appends`` increments of ``--step`` of the log each, appended with
:func:`speed.partition.append.append_events`.  After each append it also partitions, from
scratch, the same events (the base and every increment so far) and writes their shards, and
compares:

* cost: ``speed partition MORE --append`` against ``speed partition WHOLE`` on the log so far
  (both from their text files, run in this process so the interpreter's start-up is out of both);
* quality: replication factor, edge cut and the largest part's load over the mean, appended vs
  from scratch; and whether the shards' advice asked for a re-partition.

Every increment carries only its own nodes' ids (the ids of the original file), so new nodes
arrive as they would in a new file.

Usage::

    python benchmarks/append.py [--logs wikipedia collegemsg generated] [--parts 4] [--topk 5]

Prints a table per log and writes ``benchmarks/results/append.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"


def own_ids(ev, lo: int, hi: int):
    """Events ``[lo, hi)`` of ``ev`` as a log of their own: original ids, compact over its nodes."""
    import speed

    ids = ev.node_ids if ev.node_ids is not None else np.arange(ev.num_nodes)
    s, d = ev.src[lo:hi], ev.dst[lo:hi]
    msg = None if ev.msg is None else ev.msg[lo:hi]
    return speed.Events.from_arrays(ids[s], ids[d], ev.t[lo:hi], msg=msg, remap=True)


def load(name: str, generated_events: int, work: Path):
    """The log's file and its events."""
    import speed

    if name == "wikipedia":
        path = DATA / "wikipedia.csv"
    elif name == "collegemsg":
        path = DATA / "CollegeMsg.txt"
    else:
        path = work / "generated.csv"
        speed.write_generated(path, max(2, generated_events // 20), generated_events, alpha=1.2, seed=7,
                              progress=False)
    return path, speed.read_events(path, progress=False)


class Lines:
    """A text log cut into files of line ranges (header kept), without parsing it."""

    def __init__(self, path: Path):
        self.data = path.read_bytes()
        ends = np.flatnonzero(np.frombuffer(self.data, dtype=np.uint8) == ord("\n"))
        self.header = b""
        first = self.data[:ends[0] + 1]
        if not first[:1].isdigit():
            self.header, ends = first, ends[1:]
        self.starts = np.concatenate([[len(self.header)], ends[:-1] + 1])
        self.ends = ends + 1

    def write(self, path: Path, lo: int, hi: int) -> Path:
        path.write_bytes(self.header + self.data[self.starts[lo]:self.ends[hi - 1]])
        return path


def cli_seconds(argv) -> float:
    from speed.cli import main

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0, argv
    return time.perf_counter() - t0


def run_log(name: str, path: Path, ev, parts: int, topk: float, base: float, step: float, appends: int,
            work: Path) -> dict:
    import speed
    from speed.partition.append import append_events

    n = len(ev)
    lines = Lines(path)
    assert lines.starts.size == n, (lines.starts.size, n)
    n0 = int(base * n)
    inc = max(1, int(step * n))
    root = work / name
    shards = root / "appended"
    t0 = time.perf_counter()
    speed.partition(own_ids(ev, 0, n0), parts, topk=topk).save(shards)
    first_seconds = time.perf_counter() - t0
    flags = ["--parts", str(parts), "--topk", str(100 * topk), "--no-progress"]
    cli_shards = root / "cli"
    cli_seconds(["partition", str(lines.write(root / "base.txt", 0, n0)), "-o", str(cli_shards), *flags])
    rows = []
    for k in range(appends):
        lo, hi = n0 + k * inc, min(n, n0 + (k + 1) * inc)
        if lo >= hi:
            break
        new = own_ids(ev, lo, hi)
        t0 = time.perf_counter()
        m, _, _ = append_events(shards, new, progress=False)
        append_s = time.perf_counter() - t0
        # the same events from scratch: the base and every increment so far
        whole = own_ids(ev, 0, hi)
        t0 = time.perf_counter()
        scratch = speed.partition(whole, parts, topk=topk)
        scratch.save(root / "scratch", overwrite=True)
        scratch_s = time.perf_counter() - t0
        st = scratch.stats
        # the same through the command line, from text: append the increment, or partition it all
        more = lines.write(root / "more.txt", lo, hi)
        cli_append = cli_seconds(["partition", str(more), "-o", str(cli_shards), "--append", "--no-progress"])
        so_far = lines.write(root / "whole.txt", 0, hi)
        cli_whole = cli_seconds(["partition", str(so_far), "-o", str(root / "cli_whole"), "--overwrite", *flags])
        rows.append({
            "cli_append_seconds": round(cli_append, 4), "cli_whole_seconds": round(cli_whole, 4),
            "cli_cost_ratio": round(cli_append / cli_whole, 4),
            "append": k + 1, "events": hi - lo, "partitioned": m["num_partitioned_events"],
            "append_seconds": round(append_s, 4), "scratch_seconds": round(scratch_s, 4),
            "cost_ratio": round(append_s / scratch_s, 4),
            "rf_appended": m["replication_factor"], "rf_scratch": st["replication_factor"],
            "cut_appended": m["edge_cut"], "cut_scratch": st["edge_cut"],
            "balance_appended": m["largest_part_ratio"], "balance_scratch": st["largest_part_ratio"],
            "segment_cut": m["appends"][-1]["edge_cut"], "new_nodes": m["appends"][-1]["new_nodes"],
            "new_hubs": m["appends"][-1]["new_hubs"], "advice": m["advice"],
        })
        r = rows[-1]
        print(f"{name:>10} {r['append']:>2}  {r['events']:>8,}  CLI: append {cli_append:6.3f} s, whole log {cli_whole:6.3f} s "
              f"({100 * r['cli_cost_ratio']:5.1f}%)  API: {append_s:6.3f} s vs {scratch_s:6.3f} s  RF {r['rf_appended']:.4f} vs {r['rf_scratch']:.4f}  "
              f"cut {100 * r['cut_appended']:6.2f}% vs {100 * r['cut_scratch']:6.2f}%  "
              f"balance {r['balance_appended']:.3f} vs {r['balance_scratch']:.3f}"
              + ("  advice" if r["advice"] else ""), flush=True)
    last = rows[-1]
    return {"events": n, "nodes": int(ev.num_nodes), "base_events": n0, "first_partition_seconds": first_seconds,
            "appends": rows,
            "final": {"rf_ratio": last["rf_appended"] / last["rf_scratch"],
                      "cut_ratio": last["cut_appended"] / max(last["cut_scratch"], 1e-12),
                      "mean_cost_ratio": float(np.mean([r["cost_ratio"] for r in rows])),
                      "mean_cli_cost_ratio": float(np.mean([r["cli_cost_ratio"] for r in rows]))}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", nargs="+", default=["wikipedia", "collegemsg", "generated"])
    ap.add_argument("--generated-events", type=int, default=2_000_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--topk", type=float, default=5.0, help="percent")
    ap.add_argument("--base", type=float, default=0.5)
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--appends", type=int, default=10)
    ap.add_argument("--out", default=str(HERE / "results" / "append.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="speed-append-"))
    results = {"command": "python benchmarks/append.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                                                                    vars(args).items() if k != "out"),
               "logs": {}}
    try:
        for name in args.logs:
            path, ev = load(name, args.generated_events, work)
            results["logs"][name] = run_log(name, path, ev, args.parts, args.topk / 100.0, args.base, args.step,
                                            args.appends, work)
            f = results["logs"][name]["final"]
            print(f"{name}: after the last append RF {f['rf_ratio']:.3f} x and edge cut {f['cut_ratio']:.3f} x "
                  f"from scratch; an append cost {100 * f['mean_cli_cost_ratio']:.1f}% of partitioning the whole log again "
                  f"(command line, from text; {100 * f['mean_cost_ratio']:.1f}% in memory) on average")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
