"""What a training step costs besides its arithmetic: operators, host-device syncs, host planning.

On a GPU a step at the batch sizes the field uses (200-4000 events) is launch-bound: each
operator is a kernel launch or host work between launches, and each host-device
synchronisation (``.item()``, ``nonzero``, ``unique``, a copy to the host) drains the queue.
This script counts them, per training step, over a window of steps in the middle of an epoch:

* ``leaf_ops``: ``aten::`` operators with no ``aten::`` operator inside them (``torch.profiler``
  on the CPU activity), forward, backward and optimiser together;
* ``sync_calls``: the calls among them that force a synchronisation on a GPU
  (:data:`SYNC_OPS`; on the CPU they are counted all the same, since the same code runs there);
* ``plan_us``: host microseconds building the step's plan (negatives, distinct queries,
  neighbour sampling, pending events: :meth:`StatefulModel.plan`, its copies to the device
  included; built in stages by several threads, ``plan_threads``, the stages' sum);
* on a GPU: ``kernel_launches`` (device kernels the profiler saw), ``memcpy`` (host-device
  copies), ``runtime_syncs`` (``cudaStreamSynchronize``/``cudaDeviceSynchronize`` and blocking
  copies) and ``step_ms`` (wall time per step over the window, unprofiled, the device
  synchronised at both ends).

Given two batch sizes or more (``--batch 10 50 200``), it also fits ``step_ms = fixed_ms +
per_event_us * 1e-3 * batch`` per tree: the part of a step that no cut in operators can remove is the
part that grows with its rows (:func:`batch_fits`).

Each (device, batch) runs in its own process.  Prints a table, writes JSON::

    python benchmarks/step_cost.py --log data/sample.csv --batch 200 --device cpu \\
        --out benchmarks/results/step_cost.json

``--tree DIR`` measures another checkout (a ``git worktree`` of an earlier commit) with the
same script, side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trees import answered_as_worker, run_worker, save, tree_options, trees  # noqa: E402

#: operators that make the host wait for the device when their input is on a GPU; ``item()``,
#: ``float(t)``, ``int(t)`` and ``bool(t)`` all end in ``_local_scalar_dense``, which is counted
#: instead of them (the profiler's nesting of zero-length events is not reliable)
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::_unique", "aten::_unique2",
            "aten::unique_consecutive", "aten::unique_dim", "aten::masked_select")
#: CUDA runtime calls that block the host: the synchronisations, and the copies that are not
#: ``Async`` (``cudaMemcpyAsync`` from page-locked memory, a plan's one copy, does not wait)
RUNTIME_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def runtime_sync(name: str) -> bool:
    """Whether the CUDA runtime call ``name`` blocks the host."""
    return name.startswith(RUNTIME_SYNCS) or (name.startswith("cudaMemcpy") and not name.endswith("Async"))


def _leaves(events):
    """The ``aten::`` events with no ``aten::`` event below them."""
    def has_aten_below(e):
        stack = list(e.cpu_children)
        while stack:
            c = stack.pop()
            if c.name.startswith("aten::"):
                return True
            stack.extend(c.cpu_children)
        return False
    return [e for e in events if e.name.startswith("aten::") and not has_aten_below(e)]


def busy_us(intervals) -> float:
    """Microseconds covered by the union of ``(start, end)`` intervals: the time the device ran a
    kernel (kernels on several streams overlap; each microsecond counts once)."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def worker(a) -> dict:
    sys.path.insert(0, a.tree)
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(a.threads)
    import speed
    from speed.train import TrainConfig
    from _trees import local_trainer
    from speed.train.model import network

    cuda = a.device.startswith("cuda")
    events = speed.read_events(a.log, progress=False)
    split = speed.chronological_split(events, new_node_fraction=0.0)
    cfg = dict(model=a.model, seed=0, progress=False, num_threads=a.threads, new_node_fraction=0.0,
               device=a.device, batch_size=a.batch, deterministic=a.deterministic,
               max_steps=a.skip + 2 * a.steps + 2)
    if a.dim:  # a model too small to compute much: the step's time is then its host overhead
        cfg.update(memory_dim=a.dim, time_dim=a.dim, embedding_dim=a.dim)
    if a.pipeline is not None:  # plans built in a thread beside the steps (default: on with a GPU)
        cfg.update(pipeline=a.pipeline)
    if a.cuda_graph or a.compile:  # fixed-shape steps replayed from a CUDA graph (eagerly on a CPU)
        cfg.update(cuda_graph=True)
    cfg = {k: v for k, v in cfg.items() if k in TrainConfig.__dataclass_fields__}
    tr = local_trainer(events, split, TrainConfig(**cfg))
    if a.compile:
        # the padded step's forward pass and loss compiled whole (inductor; its backward with it),
        # one graph per plan shape: the experiment docs/training.md reports (not a library option)
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = 64  # a shape per growth of the fitted bounds
        tr.engine.captured.forward = torch.compile(tr.engine.captured.forward, fullgraph=True, dynamic=False)

    plan_s = [0.0]
    inner = network.StatefulModel.plan

    def timed_plan(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            plan_s[0] += time.perf_counter() - t0

    network.StatefulModel.plan = timed_plan
    try:  # a plan built in stages, each in a thread of its own (plan_threads > 1): their sum
        from speed.train.state import batch_plan

        def timed_stage(fn):
            def run(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    plan_s[0] += time.perf_counter() - t0
            return run

        for name in ("plan_neighbors", "plan_memory", "assemble_plan"):
            setattr(batch_plan, name, timed_stage(getattr(batch_plan, name)))
    except (ImportError, AttributeError):  # an earlier checkout (--tree): plans are not staged
        pass
    if a.cuda_graph or a.compile:  # a captured step's padding and packing is planning too
        from speed.train.step import captured

        inner_fix = captured.CapturedStep.fix

        def timed_fix(self, plan, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner_fix(self, plan, *args, **kwargs)
            finally:
                plan_s[0] += time.perf_counter() - t0

        captured.CapturedStep.fix = timed_fix
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    marks = {}
    window = (a.skip, a.skip + a.steps)  # profiled: steps skip+1 .. skip+steps
    timed = (a.skip + a.steps, a.skip + 2 * a.steps)  # then timed without the profiler
    prof = profile(activities=acts)

    def on_step(done: int) -> None:
        if done == window[0]:
            sync()
            prof.__enter__()
            marks["w0"] = time.perf_counter()
        elif done == window[1]:
            sync()
            marks["w1"] = time.perf_counter()
            prof.__exit__(None, None, None)
        if done == timed[0]:
            sync()
            marks["t0"], marks["plan0"] = time.perf_counter(), plan_s[0]
        elif done == timed[1]:
            sync()
            marks["t1"], marks["plan1"] = time.perf_counter(), plan_s[0]

    # the trainer's own epoch, with a hook after each step
    engine = tr.engine
    from speed.train.step.engine import Batches
    from speed.train.step.negatives import RandomNegatives, train_seed

    index = tr.training.train_index[:(a.skip + 2 * a.steps + 1) * a.batch]
    if index.size < (a.skip + 2 * a.steps + 1) * a.batch:
        raise SystemExit(f"{a.log}: {tr.training.train_index.size} training events, fewer than the "
                         f"{(a.skip + 2 * a.steps + 1) * a.batch} the window needs")
    engine.run_epoch(tr.training.stream, Batches(index, a.batch), RandomNegatives(tr.training.neg_pool, train_seed(0, 1)),
                     on_step=on_step)
    evs = prof.events()
    leaves = _leaves(evs)
    names = Counter(e.name for e in leaves)
    syncs = Counter(e.name for e in evs if e.name in SYNC_OPS)
    n = a.steps
    out = {"tree": a.tree, "log": Path(a.log).name, "model": a.model, "batch": a.batch, "device": a.device,
           "dim": a.dim, "pipeline": a.pipeline, "cuda_graph": bool(a.cuda_graph), "compile": bool(a.compile),
           "replays": getattr(engine.captured, "replays", None) if a.cuda_graph else None,
           "torch": torch.__version__, "threads": a.threads, "steps": n,
           "leaf_ops": len(leaves) / n,
           "sync_calls": sum(syncs.values()) / n,
           "sync_by_op": {k: v / n for k, v in syncs.items()},
           "top_ops": {k: v / n for k, v in names.most_common(25)},
           "plan_us": 1e6 * (marks["plan1"] - marks["plan0"]) / n,
           "step_ms": 1e3 * (marks["t1"] - marks["t0"]) / n,
           "events_per_s": n * a.batch / (marks["t1"] - marks["t0"])}
    if a.compile:
        from torch._dynamo.utils import counters

        out["compiled_graphs"] = int(counters["stats"]["unique_graphs"])
        out["graph_breaks"] = int(sum(counters["graph_break"].values()))
    if cuda:
        from torch.autograd import DeviceType

        kernels = [e for e in evs if e.device_type == DeviceType.CUDA]
        runtime = Counter(e.name for e in evs if e.device_type == DeviceType.CPU and e.name.startswith("cu"))
        out["kernel_launches"] = sum(1 for e in kernels if "memcpy" not in e.name.lower()
                                     and "memset" not in e.name.lower()) / n
        out["memcpy"] = sum(1 for e in kernels if "memcpy" in e.name.lower()) / n
        out["runtime_syncs"] = sum(v for k, v in runtime.items() if runtime_sync(k)) / n
        out["runtime_calls"] = {k: v / n for k, v in runtime.most_common(12)}
        out["device_name"] = torch.cuda.get_device_name(a.device)
        # the device's busy time: kernels' union over the profiled window (the profiler slows the
        # host, so this fraction is a floor), and their sum per step against the unprofiled step
        busy = busy_us((e.time_range.start, e.time_range.end) for e in kernels)
        out["kernel_ms"] = 1e-3 * busy / n
        out["device_busy_fraction"] = 1e-6 * busy / max(marks["w1"] - marks["w0"], 1e-9)
        out["kernel_over_step"] = out["kernel_ms"] / out["step_ms"]
    return out


def batch_fits(rows) -> list:
    """Per tree (and device, width, path) measured at two batch sizes or more: the least-squares
    line ``step_ms = fixed_ms + per_event_us * 1e-3 * batch``.  ``fixed_ms`` is what a step costs
    whatever its size (operators dispatched, autograd's graph, Python, a plan's fixed work);
    ``per_event_us`` what grows with its rows (kernels, a plan's per-event work).  A host-bound
    step is one whose ``fixed_share`` (``fixed_ms`` over the largest batch's step) is near 1:
    only then can cutting operators alone make it much faster."""
    groups = {}
    for r in rows:
        key = (r["tree"], r["device"], r["dim"], r["pipeline"], r["cuda_graph"], r["compile"], r["threads"])
        groups.setdefault(key, []).append(r)
    fits = []
    for key, rs in groups.items():
        batches = sorted({r["batch"] for r in rs})
        if len(batches) < 2:
            continue
        b = np.array([r["batch"] for r in rs], dtype=np.float64)
        ms = np.array([r["step_ms"] for r in rs], dtype=np.float64)
        slope, fixed = np.polyfit(b, ms, 1)
        top = float(np.mean(ms[b == batches[-1]]))
        fits.append({"tree": key[0], "device": key[1], "dim": key[2], "batches": batches,
                     "fixed_ms": float(fixed), "per_event_us": float(1e3 * slope), "fixed_share": float(fixed / top)})
    return fits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", required=True, help="event log")
    ap.add_argument("--model", default="tgn")
    ap.add_argument("--batch", type=int, nargs="+", default=[200])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--skip", type=int, default=10, help="steps before the window (warm-up)")
    ap.add_argument("--steps", type=int, default=25, help="steps profiled, then as many timed")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--dim", type=int, default=None,
                    help="memory, time and embedding width (default the config's; a small one, e.g. 4, leaves "
                         "the step's host overhead: what a launch-bound GPU step costs the host)")
    ap.add_argument("--pipeline", action=argparse.BooleanOptionalAction, default=None,
                    help="plan each batch in a thread beside the steps (default: the config's, on with a GPU)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="fixed-shape steps replayed from a CUDA graph (--cuda-graph; eagerly without a GPU)")
    ap.add_argument("--compile", action="store_true",
                    help="the fixed-shape step's forward pass compiled whole with torch.compile (an experiment: "
                         "minutes of compiling before the window; use a large --skip)")
    tree_options(ap, "step_cost.json")
    a = ap.parse_args()
    if answered_as_worker(a, worker, ("tree", "batch")):
        return 0
    rows = []
    for tree in trees(a.tree):
        for batch in a.batch:
            r = run_worker(__file__, "--log", a.log, "--tree", tree, "--model", a.model, "--batch", batch,
                           "--threads", a.threads, "--device", a.device, "--skip", a.skip, "--steps", a.steps,
                           *(["--deterministic"] if a.deterministic else []), *(["--dim", a.dim] if a.dim else []),
                           *([f"--{'' if a.pipeline else 'no-'}pipeline"] if a.pipeline is not None else []),
                           *(["--cuda-graph"] if a.cuda_graph else []), *(["--compile"] if a.compile else []))
            rows.append(r)
            gpu = (f"  {r['kernel_launches']:6.0f} kernels {r['memcpy']:4.0f} copies {r['runtime_syncs']:4.0f} syncs"
                   if "kernel_launches" in r else "")
            print(f"{Path(tree).name:<10} {r['model']} batch {batch:>5} {r['device']:<6} {r['leaf_ops']:7.0f} ops "
                  f"{r['sync_calls']:5.1f} sync calls  plan {r['plan_us']:8.0f} us  step {r['step_ms']:7.2f} ms"
                  f"{gpu}", flush=True)
    fits = batch_fits(rows)
    for f in fits:
        print(f"{Path(f['tree']).name:<10} step ms = {f['fixed_ms']:.2f} + {f['per_event_us']:.2f} us x batch "
              f"(batches {f['batches']}): at batch {f['batches'][-1]}, {100 * f['fixed_share']:.0f}% of the "
              f"step does not grow with the batch", flush=True)
    save(a.out, runs=rows, fits=fits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
