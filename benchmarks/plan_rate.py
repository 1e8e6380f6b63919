"""How often the pipeline hands out plans, by planning threads: the rate a step can go no faster than.

A captured GPU step (``--cuda-graph``) replays in about 2.5 ms at batch 200 and 4.2 ms at batch
1000 on an H100, and most of that is the host building the next plan.  With ``plan_threads``
(``TrainConfig.plan_threads``) the plan's three stages -- neighbours, memory keys and pending
events, assembly and padding -- each run in a thread of their own, on consecutive batches at
once.  This script runs the library's :class:`~speed.train.step.loader.PlanLoader` on a real
log with a consumer that does nothing, so the figure is the planning rate alone:

* ``plan_us``: wall microseconds between plans handed out (the steady rate, after ``--skip``);
* ``stage_us``: each thread's seconds a plan (the slowest one sets the rate);
* ``same_plans``: every plan of the run equals the one-thread run's, tensor for tensor.

::

    python benchmarks/plan_rate.py --log g2m.csv --batch 200 1000 --threads 1 2 3 --pad
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import speed  # noqa: E402
from _trees import default_out, local_trainer, save  # noqa: E402
from speed._threads import apply_threads, usable_cores  # noqa: E402
from speed.train.step.loader import concurrent_kernels  # noqa: E402


def _tensors(plan) -> list:
    from speed.train.state.batch_plan import TENSOR_FIELDS

    return [getattr(plan, name).clone() for name in TENSOR_FIELDS]


def measure(tr, batch: int, threads: int, skip: int, steps: int, pad: bool, reference=None) -> dict:
    from speed.train.step.engine import Batches
    from speed.train.step.loader import PlanLoader
    from speed.train.step.negatives import RandomNegatives, train_seed

    from speed.train.step.fixed import FittedBounds

    model = tr.model
    model.state.reset()
    if pad:  # the padded sizes fitted afresh: each run's plans as the first run's
        tr.engine.captured.bounds = FittedBounds()
    index = tr.training.train_index[:(skip + steps) * batch]
    fix = tr.engine.captured.fix if pad else None
    loader = PlanLoader(model, tr.training.stream, Batches(index, batch),
                        RandomNegatives(tr.training.neg_pool, train_seed(0, 1)).next_edges, pipeline=threads, fix=fix,
                        on_device=False)
    plans, t0, seconds0 = [], None, None
    for step in loader:
        if step.index == skip:
            t0, seconds0 = time.perf_counter(), list(loader._seconds)
        if step.index >= skip:
            plans.append(_tensors(step.plan))
    wall = time.perf_counter() - t0
    got = len(plans)
    stage = [1e6 * (b - a) / max(got, 1) for a, b in zip(seconds0, loader._seconds)]
    same = None
    if reference is not None:
        same = len(reference) == got and all(len(x) == len(y) and all(torch.equal(a, b) for a, b in zip(x, y))
                                             for x, y in zip(reference, plans))
    return {"batch": batch, "threads": threads, "padded": pad, "steps": got, "plan_us": 1e6 * wall / max(got, 1),
            "stage_us": stage, "same_plans": same}, plans


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", required=True, help="event log")
    ap.add_argument("--batch", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 3], help="planning threads (plan_threads)")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="this process's threads (numba's pool; default: the usable cores)")
    ap.add_argument("--skip", type=int, default=100, help="plans before the timed ones (rings filling, kernels loading)")
    ap.add_argument("--steps", type=int, default=200, help="plans timed")
    ap.add_argument("--pad", action=argparse.BooleanOptionalAction, default=True,
                    help="pad and pack each plan as a captured step's (--cuda-graph), in the last thread")
    ap.add_argument("--repeat", type=int, default=2, help="rounds, the thread counts interleaved in each")
    ap.add_argument("--switch-intervals", type=float, nargs="+", default=None,
                    help="the interpreter's switch intervals (seconds) to try while stages run in threads "
                         "(0: Python's own; default: the library's, speed.train.step.loader.SWITCH_INTERVAL)")
    ap.add_argument("--out", default=default_out("plan_rate.json"))
    a = ap.parse_args()
    cores = a.torch_threads or usable_cores()
    apply_threads(cores)
    try:
        ev = speed.read_events(a.log, progress=False)
    except speed.errors.InputError as exc:  # a missing or unreadable log: its one-line reason
        raise SystemExit(str(exc)) from None
    from speed.train import TrainConfig
    from speed.train.step import loader

    split = speed.chronological_split(ev, new_node_fraction=0.0)
    rows = []
    intervals = a.switch_intervals or [loader.SWITCH_INTERVAL]  # (the library's, before any is tried)
    for batch in a.batch:
        cfg = TrainConfig(model="tgn", seed=0, progress=False, num_threads=cores, new_node_fraction=0.0,
                          batch_size=batch, cuda_graph=a.pad)
        tr = local_trainer(ev, split, cfg)
        if tr.training.train_index.size < (a.skip + a.steps) * batch:
            raise SystemExit(f"{a.log}: {tr.training.train_index.size} training events, fewer than the "
                             f"{(a.skip + a.steps) * batch} the plans need")
        for r in range(a.repeat):
            reference = None
            for threads in a.threads:
                for si in intervals if threads > 1 else [None]:
                    loader.SWITCH_INTERVAL = si or None
                    row, plans = measure(tr, batch, threads, a.skip, a.steps, a.pad, reference)
                    if reference is None:
                        reference = plans
                    row.update(round=r, log=Path(a.log).name, switch_interval=si)
                    rows.append(row)
                    stages = " / ".join(f"{s:.0f}" for s in row["stage_us"])
                    print(f"batch {batch:>5} threads {threads} switch {si or 0:g}: a plan every "
                          f"{row['plan_us']:7.0f} us (threads' us a plan: {stages}); same plans: {row['same_plans']}",
                          flush=True)
    save(a.out, host_cores=usable_cores(), process_threads=cores, concurrent_kernels=concurrent_kernels(),
         numba=numba.__version__, numba_layer=numba.threading_layer(), torch=torch.__version__, runs=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
