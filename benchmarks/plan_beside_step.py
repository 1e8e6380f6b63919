"""A pipelined plan beside a step that dispatches without pause: what each costs the other.

With ``--pipeline`` (the default on a GPU) a thread builds the next batch's plan while the step's
thread dispatches the current step's operators.  On a GPU that thread is busy all the time in
Python and the dispatcher, so the two meet in the interpreter lock and on the cores: a planning
pool as large as the process's share of cores leaves the step's thread no core of its own.  This
script measures both sides on the library's real plans (TGN's node state, ``--warm`` events in
the rings), by planning pool size:

* ``plan_us_alone``: a plan built in a thread with nothing beside it;
* ``plan_us_beside``: the same, while the main thread dispatches tiny CPU operators without
  pause (``add_``/``mul_`` on 16 floats: each releases and retakes the lock, as a launch-bound
  GPU step's operators do);
* ``dispatch_kops_alone`` / ``dispatch_kops_beside``: the main thread's operators a second,
  alone and while planning runs; ``dispatch_lost_us`` the dispatcher time a plan costs.

The library gives its planning thread the share less one thread (``speed._threads.for_new_thread``);
``--pools`` defaults to that and to the whole share::

    python benchmarks/plan_beside_step.py --log g2m.csv --batch 200 1000 \\
        --out benchmarks/results/plan_beside_step.json
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numba
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import speed  # noqa: E402
from _trees import default_out, save  # noqa: E402
from speed._threads import usable_cores  # noqa: E402
from speed.train.model.network import build_model  # noqa: E402


def _dispatch(seconds: float = None, stop=None) -> float:
    """Tiny operators without pause for ``seconds`` or until ``stop[0]``; operators a second."""
    x = torch.zeros(16)
    count, t0 = 0, time.perf_counter()
    while not (stop[0] if stop is not None else time.perf_counter() - t0 >= seconds):
        x.add_(1.0)
        x.mul_(0.5)
        count += 2
    return count / (time.perf_counter() - t0)


def measure(src, dst, t, n, batch: int, pool: int, steps: int, warm: int) -> dict:
    state = build_model("tgn", n).state
    state.sampler.insert(src[:warm], dst[:warm], t[:warm], np.arange(warm))
    rng = np.random.default_rng(0)
    cursor = [0]

    def plans(count: int) -> float:
        numba.set_num_threads(pool)
        t0 = time.perf_counter()
        for _ in range(count):
            lo = warm + cursor[0] * batch
            cursor[0] += 1
            sl = slice(lo, lo + batch)
            nodes = np.concatenate([src[sl], dst[sl], rng.integers(0, n, batch)])
            state.plan(nodes, np.tile(t[sl], 3), events=(src[sl], dst[sl], t[sl], np.arange(lo, lo + batch)))
        return (time.perf_counter() - t0) / count

    def in_thread(fn):
        out = []
        th = threading.Thread(target=lambda: out.append(fn()))
        th.start()
        return th, out

    th, _ = in_thread(lambda: plans(5))  # compile or load the kernels
    th.join()
    th, alone = in_thread(lambda: plans(steps))
    th.join()
    dispatch_alone = _dispatch(seconds=1.0)
    stop = [False]
    th, beside = in_thread(lambda: (plans(steps), stop.__setitem__(0, True))[0])
    dispatch_beside = _dispatch(stop=stop)
    th.join()
    return {"batch": batch, "pool": pool, "steps": steps, "warm_events": warm,
            "plan_us_alone": 1e6 * alone[0], "plan_us_beside": 1e6 * beside[0],
            "dispatch_kops_alone": dispatch_alone / 1e3, "dispatch_kops_beside": dispatch_beside / 1e3,
            "dispatch_lost_us": 1e6 * (1 - dispatch_beside / dispatch_alone) * beside[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", required=True, help="event log")
    ap.add_argument("--batch", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--pools", type=int, nargs="+", default=None,
                    help="planning pool sizes (default: this host's cores, and one fewer)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warm", type=int, default=1_000_000, help="events in the rings before the plans")
    ap.add_argument("--out", default=default_out("plan_beside_step.json"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    cores = usable_cores()
    pools = a.pools or sorted({cores, max(1, cores - 1)}, reverse=True)
    pools = [min(p, numba.config.NUMBA_NUM_THREADS) for p in pools]
    try:
        ev = speed.read_events(a.log, progress=False)
    except speed.errors.InputError as exc:  # a missing or unreadable log: its one-line reason
        raise SystemExit(str(exc)) from None
    src, dst, t = (np.asarray(x) for x in (ev.src, ev.dst, ev.t))
    n = int(max(src.max(), dst.max())) + 1
    rows = []
    for batch in a.batch:
        warm = min(a.warm, src.size - (a.steps * 2 + 5) * batch)
        if warm < 0:
            raise SystemExit(f"{a.log}: {src.size} events, fewer than the {(a.steps * 2 + 5) * batch} the plans need")
        for pool in pools:
            r = measure(src, dst, t, n, batch, pool, a.steps, warm)
            r.update(log=Path(a.log).name, cores=cores)
            rows.append(r)
            print(f"batch {batch:>5} pool {pool:>3}: plan {r['plan_us_alone']:7.0f} us alone, "
                  f"{r['plan_us_beside']:7.0f} us beside dispatch; dispatch {r['dispatch_kops_alone']:5.0f}k ops/s "
                  f"alone, {r['dispatch_kops_beside']:5.0f}k beside ({r['dispatch_lost_us']:.0f} us lost a plan)",
                  flush=True)
    save(a.out, host_cores=cores, torch=torch.__version__, numba=numba.__version__, runs=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
