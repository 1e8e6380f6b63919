"""Functions run inside spawned test processes (they must be importable by the children),
and :func:`run_workers`, which starts them so that a failing or hung worker can never outlive
its test.

Why the care: a worker that blocks (e.g. in ``destroy_process_group``, which torch 2.2 can
leave hanging once the peer has gone) keeps pytest's interpreter from exiting, because
multiprocessing joins non-daemon children at exit; CI then runs into its wall-clock limit long
after the last test.  So workers are daemons, the rendezvous is a file (no free-port race), the
group has a short timeout, a worker leaves with ``os._exit`` once its result is flushed, and
whatever is still alive when the test ends is killed.
"""

import multiprocessing
import os
import queue as queue_module
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from speed.train.recipes import MODELS

WORKER_TIMEOUT = 120  # seconds a test waits for a worker's result, and a collective may wait


def run_workers(target, args, store_file, timeout=WORKER_TIMEOUT):
    """Run ``target(rank, world, store_file, *args, queue)`` in ``world = len(args)`` spawned
    daemon processes; returns ``{rank: result}`` from the ``(rank, result)`` pairs they put.

    Raises AssertionError if a worker fails or sends nothing within ``timeout`` seconds; every
    worker still alive at the end is terminated, then killed.
    """
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    world = len(args)
    procs = [ctx.Process(target=target, args=(r, world, str(store_file), *a, results), daemon=True)
             for r, a in enumerate(args)]
    try:
        for p in procs:
            p.start()
        out = {}
        deadline = time.monotonic() + timeout
        while len(out) < world:
            try:
                rank, value = results.get(timeout=1.0)
                out[rank] = value
                continue
            except queue_module.Empty:
                pass
            codes = [p.exitcode for p in procs]
            if any(c not in (None, 0) for c in codes):
                raise AssertionError(f"a worker failed (exit codes {codes})")
            if time.monotonic() > deadline:
                raise AssertionError(f"a worker sent nothing in {timeout} s (exit codes {codes})")
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0, f"worker exit codes {[q.exitcode for q in procs]}"
        return out
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def free_port():
    """A loopback port free at the time of the call, for torchrun's ``--master_port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank, world, store_file, planning=False):
    """Join a gloo group of ``world`` workers; returns this worker's World (strict: every
    collective checked as NCCL would; ``planning``: with a planning group, as a run's)."""
    from speed.train.world import World

    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=WORKER_TIMEOUT))
    plan = dist.new_group(backend="gloo") if planning else None
    return World(rank, world, "cpu", "gloo", strict=True, plan_group=plan)


def _leave(queue):
    """Flush the result and exit without tearing the group down (see the module docstring)."""
    queue.close()
    queue.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def sync_worker(rank, world, store_file, mode, clock, queue):
    w = _init(rank, world, store_file)
    from speed.train.model.network import build_model
    from speed.train.state.rows import StateRows
    from speed.train.pac import sync_shared

    model = build_model("tgn", 1, memory_dim=2, time_dim=2, embedding_dim=2, neighbors=2)
    model.state.resize(4)  # local nodes 0-2 shared, 3 the rank's own
    lu = [[5.0, 1.0, 3.0, 7.0], [2.0, 4.0, 3.0, 9.0]][rank]
    empty = torch.empty(0, dtype=torch.long)
    model.state.rows.load(torch.arange(4), StateRows(
        {"memory": (torch.full((4, 2), float(rank + 1)), torch.tensor(lu, dtype=torch.float64))},
        (empty, empty, torch.empty(0, dtype=torch.float64), empty)))
    sync_shared(model, 3, mode, w, before=clock)
    state, last = model.state.rows.read(torch.arange(4)).memories["memory"]
    queue.put((rank, (state[:, 0].tolist(), last.tolist())))
    _leave(queue)


def static_merge_worker(rank, world, store_file, queue):
    """Two ranks change overlapping rows of a static table; merge_static combines them."""
    w = _init(rank, world, store_file)
    from speed.train.model.static import StaticMemory, merge_static

    static = StaticMemory(4, 2, 3)
    opt = torch.optim.SparseAdam([static.table], lr=1.0)
    start = static.table.detach().clone()  # zeros on both ranks
    rows = [[0, 1], [1, 2]][rank]  # row 1 is changed by both ranks (a shared node)
    # one optimiser step on the rank's rows gives them moments ...
    static.table.grad = torch.sparse_coo_tensor(torch.tensor([rows]), torch.ones(2, 2) * (rank + 1), (4, 2))
    opt.step()
    # ... and the rows are then set to known values
    new = start.clone()
    new[rows] = float(rank + 1) * torch.tensor([[1.0, 2.0]])
    static.load_table(new)
    merge_static(static, start, w, optimizer=opt)
    m = opt.state[static.table]["exp_avg"][:, 0].tolist()
    queue.put((rank, (static.table.detach().tolist(), m)))
    _leave(queue)


def local_sgd_worker(rank, world, store_file, every, queue):
    """Local SGD on a linear model: each rank steps on its own gradient (the DDP hook keeps it
    local), and WeightAverager averages the weights on the steps it is due."""
    w = _init(rank, world, store_file)
    from speed.train.pac.averaging import WeightAverager, averaged_parameters, local_step_hook

    torch.manual_seed(0)  # the same start on both ranks
    model = torch.nn.Linear(3, 1)
    ddp = w.wrap(model)
    ddp.register_comm_hook(None, local_step_hook)
    averager = WeightAverager(averaged_parameters(ddp), every, w)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.tensor([[1.0, 2.0, 3.0]]) * (rank + 1)  # each rank its own data
    trace = []
    for step in (1, 2, 3):
        opt.zero_grad()
        ddp(x).sum().backward()
        grad = model.weight.grad.clone()
        opt.step()
        averager.after_step(step, 3)
        trace.append((grad.tolist(), model.weight.detach().clone().tolist(), averager.rounds))
    queue.put((rank, trace))
    _leave(queue)


# the combinations the sharded-evaluation test checks: (model, protocol, negatives)
SHARDED_CASES = [(m, p, s) for m in MODELS
                 for p, s in (("tgn", "random"), ("dyglib", "random"), ("dyglib", "historical"),
                              ("dyglib", "inductive"), ("tgb", "random"))]


def sharded_eval_worker(rank, world, store_file, cases, ahead, queue):
    """For each case: a model's full-graph state after the training period (random weights,
    seeded), evaluated through val and test by this process alone, then again with its memories
    sharded over ``world`` ranks (owners drawn at random); returns the largest difference of
    any score, the figures of both, and the rows this rank held and read from others.
    ``ahead``: the sharded passes plan ahead in a thread (the world gets a planning group, as
    :meth:`World.join` makes it, and the sampler's collectives go over it)."""
    w = _init(rank, world, store_file, planning=ahead)
    import numpy as np

    import speed
    from speed.train.eval.evaluator import Evaluator
    from speed.train.model.network import build_model
    from speed.train.eval.divided import DividedStep
    from speed.train.state.sharded import Exchange, ShardedMemory, ShardedSampler, ShardWriter

    torch.set_num_threads(1)
    ev = speed.generate_events(160, 1600, seed=7)
    ev.msg = np.random.default_rng(3).standard_normal((len(ev), 3)).astype(np.float32)
    out = []
    for name, protocol, strategy in cases:
        frac = 0.0 if protocol == "tgb" else 0.1
        split = speed.chronological_split(ev, new_node_fraction=frac, seed=0)
        kw = dict(memory_dim=6, time_dim=4, embedding_dim=6, neighbors=3, msg_dim=3)
        figures = []
        for sharded in (False, True):
            torch.manual_seed(0)
            model = build_model(name, ev.num_nodes, **kw)
            model.state.set_edge_features(ev.msg)
            model.eval()
            evaluator = Evaluator(ev, split, 50, 0, 0, node_classification=False, progress=False,
                                  strategy=strategy, protocol=protocol, keep_test_start=True,
                                  pipeline=int(ahead and sharded))
            evaluator.stream(model, evaluator.period("train"))  # the state at the end of training
            exchange = Exchange()
            divider = model.divide(DividedStep()).divider  # (the work of one process doing all of it)
            if sharded:
                full = model.state
                owner = np.random.default_rng(11).integers(0, world, ev.num_nodes).astype(np.int16)
                torch.manual_seed(0)
                model = build_model(name, 0, **kw)
                model.state.set_edge_features(ev.msg)
                model.eval()
                model.state.use_memories(lambda n, mem: ShardedMemory(owner, mem.memory_dim, w, exchange),
                                         lambda k: ShardedSampler(owner, k, w.planning(), exchange))
                divider = model.divide(DividedStep(w, owner)).divider
                for key, mem in model.state.memories().items():
                    mine = torch.from_numpy(mem.owned())
                    mem.write_owned(mem.owned(), *full.memories()[key].read(mine))
                model.state.rows.load_pending(full.rows.pending(), {
                    c.name: c.export(full.rows.pending()[3]) for c in full.components
                    if c.export(full.rows.pending()[3]) is not None})
            evaluator.prepare(model)
            val, val_res = evaluator.evaluate(model, "val", selection=True)
            test, test_res = evaluator.evaluate(model, "test")
            arrays = None
            if sharded:  # every row of the state after the log and at the test's start, as written to a file
                from pathlib import Path

                from speed.train.run.serial import load_tree, save_tree

                writer = ShardWriter(w)
                snaps = [model.state.snapshots.written_snapshot(writer),
                         model.state.snapshots.written_snapshot(writer, evaluator.test_start["state"])]
                if rank == 0:
                    where = Path(store_file).parent / f"{name}-{protocol}-{strategy}.json"
                    snaps = load_tree(save_tree({"snaps": snaps}, where))["snaps"]
                    writer.check()
                    arrays = []
                    for snap in snaps:
                        for key, mem in snap["memories"].items():
                            arrays += [(f"{key}.{f}", np.asarray(mem[f])) for f in ("memory", "last_update")]
                        arrays += [(f, np.asarray(snap["sampler"][f])) for f in ("nbr", "nbr_t", "nbr_e", "head",
                                                                                  "count")]
                        arrays.append(("hold", np.asarray(snap["sampler"]["hold"]["e"])))
                else:
                    writer.serve()
            else:
                whole = []
                for snap in (model.state.snapshots.backup(), model.state.snapshots.whole_backup(evaluator.test_start["state"])):
                    for key, mem in snap["memories"].items():
                        whole += [(f"{key}.{f}", np.asarray(mem[f])) for f in ("memory", "last_update")]
                    whole += [(f, np.asarray(snap["sampler"][f])) for f in ("nbr", "nbr_t", "nbr_e", "head", "count")]
                    whole.append(("hold", np.asarray(snap["sampler"]["hold"]["e"])))
            figures.append({"val": val, "test": test, "pos": np.concatenate([val_res.pos, test_res.pos]),
                            "neg": np.concatenate([val_res.neg, test_res.neg]),
                            "mrr": None if test_res.mrr_neg is None else test_res.mrr_neg,
                            "held": int(model.state.memory.memory.shape[0]), "read": exchange.as_dict(),
                            "work": divider.work.as_dict(),
                            "arrays": arrays if sharded else whole})
        ref, got = figures
        if rank == 0:  # the written state is the one process's, row for row
            assert [n for n, _ in got["arrays"]] == [n for n, _ in ref["arrays"]]
            for (key, a), (_, b) in zip(got["arrays"], ref["arrays"]):
                assert a.shape == b.shape, (key, a.shape, b.shape)
                a, b = a.astype(np.float64), b.astype(np.float64)
                diff = np.abs(a - b) / np.maximum(1.0, np.abs(b))
                assert diff.size == 0 or diff.max() <= 1e-6, (key, float(diff.max()))
        # scores are logits, some large (JODIE's reach 1e2): compared relative to their size
        def rel(a, b):
            return float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max()) if b.size else 0.0

        diff = max(rel(got["pos"], ref["pos"]), rel(got["neg"], ref["neg"]))
        if ref["mrr"] is not None:
            diff = max(diff, rel(got["mrr"], ref["mrr"]))
        out.append({"case": (name, protocol, strategy), "diff": diff, "ref": (ref["val"], ref["test"]),
                    "got": (got["val"], got["test"]), "held": got["held"], "read": got["read"], "work": got["work"],
                    "work_alone": ref["work"]})
    queue.put((rank, out))
    _leave(queue)


def shard_state_worker(rank, world, store_file, queue):
    """Two ranks' hand-built states brought into sharded memories: own nodes stay, shared nodes
    go to their owner by the sync rule, pending events of a shared node come from its winner."""
    w = _init(rank, world, store_file)
    import numpy as np

    from speed.train.model.network import build_model
    from speed.train.pac.sharded import owners, shard_state
    from speed.train.state.sharded import ShardedMemory
    from speed.train.state.rows import StateRows

    shared = np.array([1, 4])
    own = [np.array([0, 2]), np.array([3, 5])]
    nodes = np.concatenate([shared, own[rank]])
    trained = build_model("tgn", 1, memory_dim=2, time_dim=2, embedding_dim=2, neighbors=2)
    trained.state.resize(4)
    lu = [[5.0, 1.0, 2.0, 2.0], [3.0, 4.0, 7.0, 7.0]][rank]
    mem = torch.arange(8, dtype=torch.float32).reshape(4, 2) + 100 * rank
    # pending (local ids): rank 0 holds one for node 1 (local 0) and node 0 (local 2); rank 1 for
    # node 1 (local 0) and node 3 (local 2)
    node = torch.tensor([0, 2])
    other = torch.tensor([1, 3])
    trained.state.rows.load(torch.arange(4), StateRows(
        {"memory": (mem, torch.tensor(lu, dtype=torch.float64))},
        (node, other, torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([10 + rank, 20 + rank]))))
    owner = owners(6, shared, own, world)
    target = build_model("tgn", 0, memory_dim=2, time_dim=2, embedding_dim=2, neighbors=2)
    target.state.use_memories(lambda n, m: ShardedMemory(owner, m.memory_dim, w))
    shard_state(trained, target, nodes, 2, shared, owner, "last", w)
    # every node's rows, each written into one file by its owner (ShardWriter), read back by rank 0
    from pathlib import Path

    from speed.train.run.serial import load_tree, save_tree
    from speed.train.state.sharded import ShardWriter

    writer = ShardWriter(w)
    rows = writer.memory(target.state.memory)
    full = None
    if rank == 0:
        saved = load_tree(save_tree(rows, Path(store_file).parent / "rows.json"))
        writer.check()
        full = (saved["memory"].tolist(), saved["last_update"].tolist())
    else:
        writer.serve()
    pending = [x.tolist() for x in target.state.rows.pending()]
    held = target.state.memory.owned().tolist()
    queue.put((rank, (full, pending, held)))
    _leave(queue)


def shard_writer_failure_worker(rank, world, store_file, fail, queue):
    """Write a sharded memory's rows with ShardWriter while one rank fails: ``fail`` is
    ``"rows"`` (rank 1's rows cannot be written) or ``"file"`` (rank 0 fails before the file is
    placed).  Returns each rank's error and the files left in the folder."""
    w = _init(rank, world, store_file)
    from pathlib import Path

    import numpy as np

    from speed.train.run.serial import save_tree
    from speed.train.state.sharded import ShardedMemory, ShardWriter

    owner = np.array([0, 1, 1, 0, 1], dtype=np.int16)
    mem = ShardedMemory(owner, 3, w)
    if fail == "rows" and rank == 1:
        def broken(*args, **kwargs):
            raise OSError("disk full")
        mem.write_rows = broken
    writer = ShardWriter(w)
    rows = writer.memory(mem)
    folder = Path(store_file).parent / "run"
    folder.mkdir(exist_ok=True)
    error = None
    try:
        if rank == 0:
            value = {"rows": rows, "bad": object()} if fail == "file" else {"rows": rows}
            save_tree(value, folder / "best.json")
            writer.check()
        else:
            writer.serve()
    except (RuntimeError, TypeError) as e:
        error = f"{type(e).__name__}: {e}"
    w.barrier()
    queue.put((rank, (error, sorted(p.name for p in folder.iterdir()))))
    _leave(queue)


def strict_world_worker(rank, world, store_file, queue):
    """In strict mode a collective called around the World is refused; through it, it runs."""
    w = _init(rank, world, store_file)
    from speed.train.world import StrictError

    out = {}
    try:
        dist.all_reduce(torch.ones(1))
        out["raw"] = "ran"
    except StrictError as e:
        out["raw"] = str(e)
    t = torch.ones(2) * (rank + 1)
    w.host_all_reduce(t)
    out["through_world"] = t.tolist()
    out["objects"] = w.objects(rank)
    queue.put((rank, out))
    _leave(queue)


def host_gather_worker(rank, world, store_file, queue):
    """World.host_all_gather of tensors of several dtypes and shapes (each rank's made from its
    rank): every rank's, in rank order, bit for bit."""
    w = _init(rank, world, store_file, planning=True)
    cases = {"float32": torch.arange(6, dtype=torch.float32).view(2, 3) / 7 + rank,
             "float64": torch.tensor([1 / 3 + rank, -0.0, float("inf")], dtype=torch.float64),
             "int64": torch.arange(5 * 31, dtype=torch.int64).view(5, 31) * (rank + 1) - 2 ** 40,
             "bool": torch.tensor([rank % 2 == 0, True, False]),
             "empty": torch.empty(0, 4, dtype=torch.float32),
             "column": torch.arange(4, dtype=torch.int64)[::2] + rank}  # (not contiguous)
    out = {name: [x.tolist() for x in w.host_all_gather(t)] for name, t in cases.items()}
    out["shapes"] = [tuple(x.shape) for x in w.host_all_gather(cases["int64"])]
    # past World's all-to-all bound: all_gather, the same answer
    from speed.train.world import A2A_GATHER_BYTES
    big = torch.arange(A2A_GATHER_BYTES // 4 // world + 1, dtype=torch.int32) + rank
    out["big"] = [(x.shape[0], int(x[0]), int(x[-1])) for x in w.host_all_gather(big)]
    # begun on the planning group, the tensor sent let go, the step's collectives run on the
    # host group meanwhile (an evaluation's sampler gathers so), then waited for; both sizes
    planning = w.planning()
    begun = [planning.host_all_gather_start(torch.full((3, 4), rank, dtype=torch.int64)),
             None]
    reduced = w.host_all_reduce(torch.ones(2) * (rank + 1))
    first = begun[0].wait()
    begun[1] = planning.host_all_gather_start(big * 2)
    exchanged = w.host_all_gather(torch.tensor([rank]))
    second = begun[1].wait()
    out["begun"] = [x.tolist() for x in first]
    out["begun_big"] = [(x.shape[0], int(x[0]), int(x[-1])) for x in second]
    out["between"] = (reduced.tolist(), [int(x) for x in exchanged])
    queue.put((rank, out))
    _leave(queue)


def drift_worker(rank, world, store_file, values, queue):
    """``World.drift`` of a tensor each rank fills with its own ``values``."""
    w = _init(rank, world, store_file)
    queue.put((rank, w.drift(torch.tensor(values, dtype=torch.float32))))
    _leave(queue)
