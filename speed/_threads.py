"""How many threads a training process takes: its share of the cores that are free now.

torch's CPU operators run parallel regions whose threads meet at barriers after every small
operation.  When another job holds a core, a thread of ours waits for its descheduled partner
at each barrier, and a step takes several times as long as with one thread (measured on the
2-core CI machine, TGN on the sample log with a busy-loop beside it: 803 events/s with 2
threads against 1,545 with 1; idle, 2 threads give 2,406 and 1 thread 1,649).  So the default
is this process's share of the cores that are idle when training starts, never more than its
share of all cores; ``--threads`` (``num_threads``) overrides it.  numba's pool is sized with
torch's, so the two never oversubscribe the cores between them.
"""

from __future__ import annotations

import os
import time
from typing import Optional


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]), idle


def idle_cores(window_s: float = 0.1) -> Optional[float]:
    """Cores the machine left idle over the last ``window_s`` seconds (Linux ``/proc/stat``;
    None elsewhere).  Measured while this process sleeps, so it counts the others' load."""
    try:
        total0, idle0 = _cpu_times()
        time.sleep(window_s)
        total1, idle1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (idle1 - idle0) / (total1 - total0) * (os.cpu_count() or 1)


def default_threads(share: int = 1, measure: bool = True) -> int:
    """Threads for one of ``share`` processes started together on this machine: its share of
    the usable cores, lowered to its share of the idle ones when other jobs hold some.

    Parameters
    ----------
    share : int
        Processes of this run on this machine (PAC ranks), which divide the cores.
    measure : bool
        Look at the current load (False: the static share, e.g. for ``--deterministic``
        runs, whose figures depend on the thread count).
    """
    share = max(1, int(share))
    static = max(1, usable_cores() // share)
    if not measure:
        return static
    free = idle_cores()
    if free is None:
        return static
    return max(1, min(static, int(free / share + 0.5)))


def choose_threads(share: int = 1, given: Optional[int] = None, recorded: Optional[int] = None,
                   deterministic: bool = False, gpu: bool = False, measure: bool = True):
    """The one decision of a process's thread count, and why, in words (a run's summary says
    it: a run's figures follow its thread count).  Every process of speed decides here: one
    training process, a PAC launcher for its ranks, a rank under torchrun, a parallel update's
    rank.

    ``given`` (``--threads``) wins, then a resumed run's ``recorded`` count.  Ranks with a GPU
    each (``gpu``) keep torch's default (None).  Otherwise the process's share of the usable
    cores (``share`` processes of the run on this machine), lowered to its share of the idle
    ones when other jobs hold some -- unless ``deterministic`` (whose figures must not depend on
    the machine's load) or ``measure`` is False (a rank, whose launcher measured, or that starts
    beside its peers and would count them as load).

    Returns
    -------
    (int or None, str)
    """
    if given:
        return int(given), "--threads"
    if recorded:
        return int(recorded), "the count the resumed run began with"
    if gpu:
        return None, "a GPU per rank"
    cores = usable_cores()
    share = max(1, int(share))
    each = "" if share == 1 else f" / {share} processes"
    static = max(1, cores // share)
    if deterministic:
        return static, f"{cores} cores{each}; --deterministic takes no account of the machine's load"
    free = idle_cores() if measure else None
    if free is None:
        return static, f"{cores} cores{each}"
    n = max(1, min(static, int(free / share + 0.5)))
    if n < static:
        busy = max(0, round(cores - free))
        return n, (f"{busy} of {cores} cores busy at start{each}; --threads or --deterministic fixes the count, "
                   "and with it the figures")
    return n, f"{cores} cores{each}, idle at start"


def apply_threads(n: int) -> None:
    """Size numba's pool and torch's intra-op pool to ``n`` threads.

    numba first: starting numba's OpenMP layer (which shares torch's libgomp) resets the
    OpenMP thread count, so torch's must be set after it.
    """
    import torch

    try:
        import numba

        numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    except (ImportError, ValueError):
        pass
    torch.set_num_threads(int(n))


def for_new_thread(leave: int = 0, among: int = 1):
    """A function that gives the thread calling it this thread's numba pool size, less ``leave``
    threads, divided ``among`` threads that run parallel kernels at once (at least one).

    numba's count is per thread: a thread it was never set in runs its parallel kernels
    (neighbour sampling) on every core, beside the cores this process's share already uses.
    Call this in the parent, and what it returns first thing in the child.

    ``leave``: threads of the parent's share that stay busy beside the child's kernels.  A
    planning thread works beside the training step's thread, which dispatches operators without
    pause on a GPU; a pool as large as the share then has one thread more than the cores, and
    OpenMP's workers, which spin at the end of each parallel kernel and meet at barriers, are
    descheduled in turn (measured on 2 cores, TGN at ``--dim 4 --threads 2 --pipeline``: a
    batch-200 step took 7.9-8.3 ms with a planning pool of 2, 4.8-5.0 ms with 1;
    docs/benchmarks.md)."""
    try:
        import numba

        n = max(1, (numba.get_num_threads() - int(leave)) // max(1, int(among)))
    except ImportError:
        return lambda: None

    def apply() -> None:
        numba.set_num_threads(n)

    return apply
