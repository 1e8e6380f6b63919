"""Training at scale: does a step's cost stay flat as the graph grows?

Two parts, one heavy job at a time (run nothing else beside it):

1. **Events/s against distinct nodes** (``--events`` events each, one process, ``--threads``
   threads): logs from ``speed generate`` with the same number of events and more and more
   nodes; TGN trained one epoch by speed and by PyTorch Geometric's TGN example loop
   (``benchmarks/train_vs_pyg.py``'s workers, ``--train-only``), side by side, each in its own
   subprocess.  A cost per step that grows with the nodes shows as falling events/s.
2. **PAC on larger generated logs** (``--pac-events``, e.g. 1e6 and 1e7; ``--nproc``, default
   2): SEP into ``--parts`` parts, then ``speed train --nproc N`` for one epoch with full
   evaluation; the epoch split into train, sync and evaluation (from ``metrics.json``), each
   rank's peak RSS over the whole run (``rank_peak_rss_bytes``: the evaluation and the writing
   of ``best.json`` included), what each rank held before writing its rows of ``best.json`` and
   its peak while writing (``best_write``), the rows the evaluation read from other ranks, and what
   ``speed plan`` predicted.

Prints tables and writes ``benchmarks/results/<machine>/scale.json`` and ``scale.png``; the logs
and runs go to ``benchmarks/.cache/scale`` (``--work``).  ``python -m benchmarks cpu`` (the full
suite) runs it as its ``scale`` section.

Usage::

    python benchmarks/scale.py [--nodes 10000 100000 1000000 3000000] [--events 300000]
                               [--pac-events 1000000 10000000] [--pac-nodes ...] [--pac-items N]
                               [--nproc 2] [--skip-pyg]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
SPEED = [sys.executable, "-m", "speed"]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def generate(path: Path, events: int, nodes: int, seed: int, items: int = 0) -> Path:
    if not path.exists():
        _run(SPEED + ["generate", path, "--events", events, "--nodes", nodes, "--seed", seed, "--no-progress"]
             + (["--bipartite", "--items", items] if items else []))
    return path


def events_per_s(log: Path, framework: str, threads: int, device: str = "cpu") -> dict:
    """One training epoch of TGN by ``framework`` ("speed" or "pyg") on ``device``, in a subprocess."""
    proc = _run([sys.executable, HERE / "train_vs_pyg.py", "--worker", framework, "--epochs", "1", "--threads",
                 threads, "--seed", "0", "--log", log, "--train-only", "--device", device])
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"events_per_s": r["epochs"][0]["events_per_s"], "seconds": r["epochs"][0]["seconds"],
            "num_nodes": r["num_nodes"]}


def node_sweep(a, work: Path) -> list:
    rows = []
    for n in a.nodes:
        log = generate(work / f"sweep-{a.events}-{n}.csv", a.events, n, a.seed)
        row = {"nodes_requested": n}
        for fw in (("speed",) if a.skip_pyg else ("speed", "pyg")):
            print(f"nodes {n:,}: {fw} ...", file=sys.stderr, flush=True)
            r = events_per_s(log, fw, a.threads, a.device)
            row["distinct_nodes"] = r["num_nodes"]
            row[f"{fw}_events_per_s"] = r["events_per_s"]
        if "pyg_events_per_s" in row:
            row["speed_over_pyg"] = row["speed_events_per_s"] / row["pyg_events_per_s"]
        rows.append(row)
        print(f"{row['distinct_nodes']:>10,} nodes  speed {row['speed_events_per_s']:>8,.0f} ev/s"
              + (f"  PyG {row['pyg_events_per_s']:>8,.0f} ev/s  {row['speed_over_pyg']:.2f}x"
                 if "pyg_events_per_s" in row else ""), flush=True)
    base = rows[0]["speed_events_per_s"]
    for r in rows:
        r["speed_vs_smallest"] = r["speed_events_per_s"] / base
    return rows


def pac_run(a, work: Path, events: int, nodes: int) -> dict:
    tag = f"pac-{events}-{nodes}" + (f"-bi{a.pac_items}" if a.pac_items else "")
    log = generate(work / f"{tag}.csv", events, nodes, a.seed, a.pac_items)
    shards = work / f"{tag}-shards-p{a.parts}"
    t0 = time.perf_counter()
    if not (shards / "manifest.json").exists():
        _run(SPEED + ["partition", log, "-o", shards, "--parts", a.parts, "--topk", a.topk, "--overwrite",
                      "--no-progress"])
    partition_s = time.perf_counter() - t0
    plan = json.loads(_run(SPEED + ["plan", shards, "--nproc", a.nproc, "--json"]).stdout)
    run = work / f"{tag}-run"
    t0 = time.perf_counter()
    _run(SPEED + ["train", shards, "--nproc", a.nproc, "--model", "tgn", "--epochs", 1, "--out", run, "--overwrite",
                  "--no-progress"] + (["--max-steps", a.max_steps] if a.max_steps else []))
    wall = time.perf_counter() - t0
    m = json.loads((run / "metrics.json").read_text())
    ep = m["epochs"][0]
    ranks = ep.get("ranks", [])
    planned = {r["rank"]: r.get("peak_bytes") for r in plan["epochs"][0]["ranks"]}
    whole = m.get("rank_peak_rss_bytes") or []  # each rank's peak over the whole run
    out = {"events": events, "num_nodes": m["data"]["num_nodes"], "nproc": a.nproc, "parts": a.parts,
           "partition_seconds": partition_s, "wall_seconds": wall, "epoch_seconds": ep.get("seconds", {}),
           "final_evaluation_seconds": m["seconds"].get("final_evaluation"),
           "train_events_per_s": ep["train_events_per_s"],
           "evaluation_exchange": m.get("evaluation_exchange"),
           # each rank's evaluation passes, in order (seconds, planning, collectives): evaluation_work
           "evaluation_work": m.get("evaluation_work"),
           "best_write": m.get("best_write"),
           "ranks": [{"rank": r["rank"], "events": r["events"], "nodes": r["nodes"],
                      "training_peak_rss_bytes": r.get("peak_rss_bytes"),
                      "run_peak_rss_bytes": whole[r["rank"]] if r["rank"] < len(whole) else None,
                      "planned_peak_bytes": planned.get(r["rank"])} for r in ranks],
           "test_ap": (m.get("test") or {}).get("transductive", {}).get("ap")}
    s = out["epoch_seconds"]
    evaluation = (s.get("validate", 0.0) + s.get("exchange", 0.0) + (out["final_evaluation_seconds"] or 0.0))
    out["evaluation_share"] = evaluation / max(wall, 1e-9)
    print(f"{events:>12,} events  wall {wall:7.1f} s  train {s.get('train', 0):7.1f}  sync {s.get('sync', 0):6.1f}  "
          f"evaluation {evaluation:7.1f} ({100 * out['evaluation_share']:.0f}%)", flush=True)
    gib = (lambda b: b / 2**30 if b else float("nan"))
    for r in out["ranks"]:
        print(f"    rank {r['rank']}: {r['events']:,} events, {r['nodes']:,} nodes, peak RSS over the run "
              f"{gib(r['run_peak_rss_bytes']):.2f} GiB (in training {gib(r['training_peak_rss_bytes']):.2f}), "
              f"planned {gib(r['planned_peak_bytes']):.2f} GiB", flush=True)
    for r, w in enumerate(out["best_write"] or []):
        if w.get("rss_before_bytes"):
            print(f"    rank {r} writing best.json: held {gib(w['rss_before_bytes']):.2f} GiB before, peak "
                  f"{gib(w['peak_rss_bytes']):.2f} GiB (+{(w['peak_rss_bytes'] - w['rss_before_bytes']) / 2**20:.0f} "
                  f"MiB), its rows {w['rows_bytes'] / 2**20:.0f} MiB, {w['seconds']:.1f} s", flush=True)
    peaks = [r["run_peak_rss_bytes"] for r in out["ranks"] if r["run_peak_rss_bytes"]]
    if len(peaks) > 1:
        out["rank0_over_largest_other"] = peaks[0] / max(peaks[1:])
        print(f"    rank 0's peak / the largest other rank's: {out['rank0_over_largest_other']:.2f}", flush=True)
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["node_sweep"]
    fig, ax = plt.subplots(figsize=(6, 4))
    x = [r["distinct_nodes"] for r in rows]
    ax.plot(x, [r["speed_events_per_s"] for r in rows], "o-", label="speed")
    if rows and "pyg_events_per_s" in rows[0]:
        ax.plot(x, [r["pyg_events_per_s"] for r in rows], "s--", label="PyG TGN example")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("distinct nodes (same number of events)")
    ax.set_ylabel("training events / s")
    where = result["args"].get("device", "cpu")
    where = f"{result['args']['threads']} threads" if where == "cpu" else where
    ax.set_title(f"TGN, one process, {where}, {result['args']['events']:,} events")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000, 3_000_000])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--pac-events", type=int, nargs="*", default=[1_000_000])
    ap.add_argument("--pac-nodes", type=int, nargs="*", default=None,
                    help="nodes to generate each PAC log with (default events / 6; the 10M log of "
                         "docs/benchmarks.md used 5,000,000)")
    ap.add_argument("--pac-items", type=int, default=0,
                    help="generate the PAC logs bipartite with this many items (0: unipartite)")
    ap.add_argument("--nproc", type=int, default=2, help="ranks of the PAC runs")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--topk", type=float, default=5)
    ap.add_argument("--max-steps", type=int, default=None, help="cut each PAC epoch after N steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="where the node sweep trains (cpu, cuda, cuda:N)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--skip-pyg", action="store_true")
    ap.add_argument("--work", default=str(HERE / ".cache" / "scale"), help="where the generated logs and runs go")
    ap.add_argument("--out", default=None, help="result file (default: benchmarks/results/<machine>/scale.json)")
    a = ap.parse_args()
    if a.out is None:
        from _trees import results_dir

        a.out = str(results_dir() / "scale.json")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from _trees import stamp

    result = {"stamp": stamp(threads=a.threads), "args": vars(a), "node_sweep": node_sweep(a, work) if a.nodes else [],
              "pac": [pac_run(a, work, e, n) for e, n in
                      zip(a.pac_events, a.pac_nodes or [max(e // 6, 1000) for e in a.pac_events])]}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if result["node_sweep"]:
        plot(result, out.with_suffix(".png"))
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
