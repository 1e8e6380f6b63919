"""Process launch for PAC: N spawned ranks here, or one rank under torchrun.

* Spawned (no ``RANK`` in the environment): N processes on this machine, rendezvous through a
  file in a fresh temporary directory (a free port found first could be taken by another
  process before the ranks bind it).  If any rank raises or dies, the others are terminated
  and the launcher raises :class:`RankFailedError` naming it; Ctrl-C stops every rank.
* Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` set): this process is one rank
  and torchrun's rendezvous connects the job, e.g. two nodes of eight GPUs::

      torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 \\
          -m speed train SHARDS --model tgn --epochs 10 --out RUN

Each rank joins the run as a :class:`~speed.train.world.World` (its backend, groups, device and threads:
NCCL on its own GPU when every rank of a host has one, gloo otherwise; CPU ranks get
``max(1, cores // ranks_on_this_machine)`` threads).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional

import torch.multiprocessing as mp

from ..._signals import Stopped, die_with_parent, stop_on_signals, under_torchrun
from ..._threads import choose_threads
from ...errors import InputError
from ...partition.shards import Shards
from ..config import TrainConfig
from ..run.folder import RunFolder, kept_threads
from ..world import World, ranks_use_cuda


class RankFailedError(RuntimeError):
    """A rank of a parallel run raised or died; the message names it."""


def _rank_main(rank: int, world: int, local_rank: int, shards_path: str, config: TrainConfig,
               out: Optional[str], teardown: bool = True, init_method: Optional[str] = None,
               threads_why: Optional[str] = None):
    from .rank import rank_trainer

    w, config, why = World.start(rank, world, local_rank, config, init_method, kept_threads(config, out))
    threads_why = threads_why or why  # a spawned rank's launcher chose, and said why; under torchrun, the rank
    _maybe_fault(rank)
    result = rank_trainer(Shards(shards_path), config, w, None if out is None else Path(out), threads_why).run()
    if teardown:
        w.leave()
    return result


def _maybe_fault(rank: int) -> None:
    """Test hook: ``SPEED_TEST_FAULT=RANK:raise|kill`` makes that rank fail at start-up."""
    spec = os.environ.get("SPEED_TEST_FAULT")
    if not spec:
        return
    who, how = spec.split(":")
    if int(who) == rank:
        if how == "kill":
            os.kill(os.getpid(), 9)
        raise RuntimeError(f"injected fault on rank {rank}")


def _pac_rank(index: int, world: int, init_method: str, shards_path: str, config: TrainConfig,
              out: Optional[str], threads_why: str = "") -> None:
    """A spawned PAC rank (see :func:`spawn`)."""
    _rank_main(index, world, index, shards_path, config, out, teardown=False, init_method=init_method,
               threads_why=threads_why)


def _spawned(index: int, world: int, init_method: str, main, args: tuple, launcher_pid: int):
    # A rank never outlives its launcher (kill -9 of the launcher included), and leaves
    # Ctrl-C and SIGTERM to it: the launcher stops every rank, so a rank blocked in a
    # collective cannot keep a half-stopped job alive.
    die_with_parent(launcher_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    main(index, world, init_method, *args)
    # The job is complete and rank 0 has written its files.  Leave without tearing the gloo
    # group down: destroy_process_group() occasionally blocked forever on rank 0 once its peer
    # had exited (torch 2.2), and interpreter shutdown runs the same destructor.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _sweep_rendezvous(parent: Path) -> None:
    """Remove the rendezvous folders of launchers that are gone (a ``kill -9`` skips the clean-up):
    each folder's name carries its launcher's process id, and a live launcher's is kept."""
    for entry in parent.glob("speed-rdzv-*-*"):
        pid = entry.name[len("speed-rdzv-"):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:  # alive, another user's
            pass


def spawn(main, args: tuple, nproc: int) -> None:
    """Run ``main(rank, world, init_method, *args)`` in ``nproc`` spawned processes on this
    machine and wait for them (:func:`join_ranks`): the one launcher of PAC training and of a
    parallel update.  ``main`` is a module-level function (spawn imports it by name); the ranks
    rendezvous through ``init_method``, a file in a fresh temporary directory (a free port found
    first could be taken by another process before the ranks bind it)."""
    # quiet torch's C++ warnings in the ranks (children inherit this)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # Ranks leave with os._exit (see _spawned), so multiprocessing's resource tracker finds a
    # queue semaphore they never released and warns at shutdown; it cleans it up regardless.
    os.environ.setdefault("PYTHONWARNINGS", "ignore:::multiprocessing.resource_tracker")
    _sweep_rendezvous(Path(tempfile.gettempdir()))
    rendezvous = tempfile.mkdtemp(prefix=f"speed-rdzv-{os.getpid()}-")
    store = os.path.join(rendezvous, "store")  # must not exist yet: the ranks create it
    try:
        ctx = mp.start_processes(_spawned, args=(nproc, f"file://{store}", main, tuple(args), os.getpid()),
                                 nprocs=nproc, join=False, start_method="spawn")
        join_ranks(ctx)
    finally:
        shutil.rmtree(rendezvous, ignore_errors=True)


def _stop(procs, grace_s: float = 5.0) -> None:
    """SIGTERM every live rank, then SIGKILL whichever is still there after ``grace_s``."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=grace_s)


def torchrun_world() -> int:
    return int(os.environ["WORLD_SIZE"])


def torchrun_rank() -> int:
    return int(os.environ["RANK"])


def refuse_in_a_starting_rank() -> None:
    """Leave at once when this process is a rank being started and importing the user's script
    ran ``speed.train(nproc=...)`` again: the script has no ``if __name__ == "__main__":`` guard.
    Said once, on stderr, before anything else (the run folder is the launcher's)."""
    if getattr(mp.current_process(), "_inheriting", False):
        print("speed.train(nproc=...) ran again while a rank was importing your script: put the code that "
              "calls it under `if __name__ == \"__main__\":` (ranks are spawned processes that import the "
              "main script)", file=sys.stderr, flush=True)
        raise SystemExit(2)


def run_parallel(shards: Shards, config: TrainConfig, out=None) -> Optional[Dict]:
    """Run PAC with ``config.nproc`` spawned ranks, or as one rank under torchrun.

    ``config`` is validated by the caller (:func:`speed.train`), and so are the shards'
    part count against the world size.  Returns rank 0's metrics (read back from
    ``out/metrics.json`` when spawned; ``out`` is required then), or None on the other ranks
    of a torchrun job.
    """
    if under_torchrun():
        # torchrun's agent forwards SIGTERM to its workers, but a SIGKILLed agent cannot: then
        # a worker would train on alone.  It ends with the agent instead (Linux).
        die_with_parent(os.getppid())
        world = torchrun_world()
        return _rank_main(torchrun_rank(), world, int(os.environ.get("LOCAL_RANK", 0)),
                          str(shards.path), config, None if out is None else str(out))
    if out is None:
        raise InputError("a spawned parallel run needs an output directory (out=...)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    nproc = config.nproc
    # measured here, before the ranks start and load the machine themselves; a resumed run
    # trains on with the count it began with (the figures follow it; recorded in the config)
    threads, why = choose_threads(nproc, config.num_threads, kept_threads(config, out), config.deterministic,
                                  gpu=ranks_use_cuda(config))
    if threads:
        config = replace(config, num_threads=threads)
    spawn(_pac_rank, (str(shards.path), config, str(out), why), nproc)
    return RunFolder(out).metrics()


# what a rank says when another rank of its collective has gone (gloo)
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def _first_cause(ctx, index: int, last: str):
    """``(rank, last line)`` of a rank that failed for a reason of its own, when the reported
    one (``index``) failed only because a peer had gone; else the reported one."""
    for i, queue in enumerate(getattr(ctx, "error_queues", [])):
        if i == index or queue.empty():
            continue
        line = str(queue.get()).strip().splitlines()[-1]
        if not any(m in line for m in _PEER_LOST):
            return i, line
    return index, last


def join_ranks(ctx) -> None:
    """Wait for spawned ranks (``mp.start_processes(..., join=False)``): a signal here stops them
    all; a rank's bad input is an InputError here, any other failure a RankFailedError."""
    try:
        with stop_on_signals():
            while not ctx.join():  # join() raises as soon as any rank fails, after stopping the rest
                pass
    except (KeyboardInterrupt, Stopped):
        # Ctrl-C, SIGTERM or SIGHUP to this process: stop every rank, then say so
        _stop(ctx.processes)
        raise
    except mp.ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1]
        index = exc.error_index
        if any(m in last for m in _PEER_LOST):
            # this rank only saw a peer go: name the rank that failed first, when it said why
            index, last = _first_cause(ctx, index, last)
        if last.startswith(f"{InputError.__module__}.{InputError.__name__}: "):
            # bad input (or a full disk) found inside a rank is still the user's to fix: exit 2
            raise InputError(last.split(": ", 1)[1]) from None
        raise RankFailedError(f"rank {index} failed: {last}") from None
    except mp.ProcessExitedException as exc:
        said = "; its message is above" if exc.exit_code == 2 else ""
        raise RankFailedError(f"rank {exc.error_index} died (exit code {exc.exit_code}){said}; "
                              f"the other ranks were stopped") from None
