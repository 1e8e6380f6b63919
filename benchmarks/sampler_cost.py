"""Neighbour sampling's host time per training step, by thread count.

A step samples the ``k`` most recent neighbours of each of its queries (the batch's sources,
destinations and one negative each) after pushing the batch's events: on a GPU this is the
largest part of the plan a pipeline thread builds beside the step, so it bounds events/s when
the plan is the step (batch 1000 and up).  This script replays a log into a
:class:`~speed.train.state.sampler.RecentNeighborSampler` (``--warm`` events first), then times
``sample_arrays`` over ``--steps`` batches, for each thread count of numba's pool::

    python benchmarks/sampler_cost.py --log g2m.csv --batch 200 1000 --threads 1 2 \\
        --out benchmarks/results/sampler_cost.json

``--tree DIR`` measures another checkout (a ``git worktree`` of an earlier commit) the same way,
side by side.  Each (tree, batch) runs in its own process; every thread count replays the same
batches from the same state (after a first, unrecorded round), and the answers are checked
equal across thread counts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trees import answered_as_worker, run_worker, save, tree_options, trees  # noqa: E402


def worker(a) -> list:
    sys.path.insert(0, a.tree)
    import numba
    import numpy as np

    import speed
    from speed.train.state.sampler import RecentNeighborSampler

    ev = speed.read_events(a.log, progress=False)
    src, dst, t = (np.asarray(x) for x in (ev.src, ev.dst, ev.t))
    n = int(max(src.max(), dst.max())) + 1
    warm = min(a.warm, src.size - (a.steps + 2) * a.batch)
    if warm < 0:
        raise SystemExit(f"{a.log}: {src.size} events, fewer than the {(a.steps + 2) * a.batch} the steps need")
    rows, answers = [], None
    # a first round only warms the machine (page cache, allocator, CPU clocks): measured alone,
    # whichever thread count ran first was the slower on this 2-core machine, whatever the kernel
    for threads in [a.threads[0]] + list(a.threads):
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        sampler = RecentNeighborSampler(n, a.neighbors)
        sampler.insert(src[:warm], dst[:warm], t[:warm], np.arange(warm))
        rng = np.random.default_rng(0)
        took, got = [], []
        for step in range(a.steps + 2):
            lo = warm + step * a.batch
            sl = slice(lo, lo + a.batch)
            sampler.push(src[sl], dst[sl], t[sl], np.arange(lo, lo + a.batch))
            nodes = np.concatenate([src[sl], dst[sl], rng.integers(0, n, a.batch)])
            times = np.tile(t[sl], 3)
            t0 = time.perf_counter()
            out = sampler.sample_arrays(nodes, times)
            took.append(time.perf_counter() - t0)
            got.append(out)
        took = took[2:]  # the first calls compile or load the kernel
        if answers is None:
            answers = got
            continue
        same = all(np.array_equal(x, y) for g, w in zip(got, answers) for x, y in zip(g, w))
        rows.append({"tree": a.tree, "log": Path(a.log).name, "batch": a.batch, "queries": 3 * a.batch,
                     "neighbors": a.neighbors, "warm_events": int(warm), "threads": threads,
                     "numba_threads": numba.get_num_threads(), "steps": a.steps,
                     "median_us": 1e6 * float(np.median(took)), "mean_us": 1e6 * float(np.mean(took)),
                     "ns_per_query": 1e9 * float(np.median(took)) / (3 * a.batch),
                     "same_answers_as_first_thread_count": bool(same)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", required=True, help="event log")
    ap.add_argument("--batch", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--neighbors", type=int, default=10)
    ap.add_argument("--warm", type=int, default=1_500_000, help="events in the rings before the steps")
    ap.add_argument("--steps", type=int, default=40)
    tree_options(ap, "sampler_cost.json")
    a = ap.parse_args()
    if answered_as_worker(a, worker, ("tree", "batch")):
        return 0
    rows = []
    for tree in trees(a.tree):
        for batch in a.batch:
            for r in run_worker(__file__, "--log", a.log, "--tree", tree, "--batch", batch, "--threads", *a.threads,
                                "--neighbors", a.neighbors, "--warm", a.warm, "--steps", a.steps):
                rows.append(r)
                print(f"{Path(tree).name:<10} batch {batch:>5} ({r['queries']} queries) threads {r['threads']:>2}: "
                      f"{r['median_us']:8.0f} us a step, {r['ns_per_query']:6.0f} ns a query"
                      f"{'' if r['same_answers_as_first_thread_count'] else '  ANSWERS DIFFER'}", flush=True)
    save(a.out, runs=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
