"""Thread pools sized to the cores that are free, and sized together (speed._threads)."""

import subprocess
import sys
import threading
import time
import types

import numba
import pytest
import torch

from speed._threads import apply_threads, default_threads, for_new_thread, idle_cores, usable_cores


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_a_busy_core_is_left_to_its_owner():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        free = idle_cores(0.3)
        assert free is not None and free <= usable_cores() - 0.5
        assert default_threads(1) <= max(1, usable_cores() - 1)
    finally:
        busy.kill()
        busy.wait()
    assert default_threads(1, measure=False) == usable_cores()
    assert default_threads(2, measure=False) == max(1, usable_cores() // 2)


def test_torch_and_numba_pools_are_sized_together():
    before = torch.get_num_threads()
    try:
        apply_threads(1)
        assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
    finally:
        apply_threads(before)


def test_the_thread_count_is_recorded_and_a_resumed_run_keeps_it(tmp_path, monkeypatch):
    """The figures follow the thread count, and the default follows the machine's load: the count
    a run used is in its config (metrics.json, last.json), and --resume trains on with it whatever
    the load is then (once a resume under load went on with 1 thread where the run began with 2)."""
    import importlib
    from pathlib import Path

    import speed

    threads = importlib.import_module("speed._threads")
    ev = speed.read_events(Path(__file__).resolve().parents[1] / "data" / "sample.csv", progress=False)
    kw = dict(model="jodie", memory_dim=8, time_dim=8, embedding_dim=8, progress=False, out=tmp_path / "run")
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(threads, "usable_cores", lambda: 2)
        monkeypatch.setattr(threads, "idle_cores", lambda window_s=0.1: 1.0)  # one core busy
        first = speed.train(ev, epochs=1, **kw)
        assert first["config"]["num_threads"] == 1
        assert first["threads"] == {"processes": 1, "per_process": 1, "why": "1 of 2 cores busy at start; --threads "
                                    "or --deterministic fixes the count, and with it the figures"}
        monkeypatch.setattr(threads, "idle_cores", lambda window_s=0.1: 2.0)  # the load changed
        resumed = speed.train(ev, epochs=2, resume=True, **kw)
        assert resumed["config"]["num_threads"] == 1 and torch.get_num_threads() == 1
        assert resumed["threads"]["why"] == "the count the resumed run began with"
    finally:
        apply_threads(before)


def test_a_new_thread_takes_its_parents_numba_pool_size():
    """numba's count is per thread: a plan-loader thread would run its parallel kernels on every
    core unless given its parent's count."""
    before = numba.get_num_threads()
    seen = {}
    try:
        numba.set_num_threads(1)
        same = for_new_thread()

        def child(name, apply):
            if apply:
                same()
            seen[name] = numba.get_num_threads()

        for name, apply in (("bare", False), ("given", True)):
            t = threading.Thread(target=child, args=(name, apply))
            t.start()
            t.join()
    finally:
        numba.set_num_threads(before)
    assert seen["given"] == 1
    assert seen["bare"] == numba.config.NUMBA_NUM_THREADS  # what the loader thread had before


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of two threads")
def test_the_planning_thread_leaves_the_step_a_core():
    """Beside a step that dispatches without pause, a planning pool as large as the process's
    share oversubscribes the cores (OpenMP's workers spin and wait at barriers): the loader's
    thread takes one thread fewer, never none."""
    from speed.train.step.loader import PlanLoader

    class Recording:  # iterated in the planning thread: records the pool there, yields nothing
        def __iter__(self):
            seen.append(numba.get_num_threads())
            return iter(())

    before = numba.get_num_threads()
    seen = []
    model = types.SimpleNamespace(device=torch.device("cpu"),
                                  state=types.SimpleNamespace(takes_unscored_events=True))
    try:
        for n in (2, 1):
            numba.set_num_threads(n)
            assert list(PlanLoader(model, None, Recording(), pipeline=True)) == []
    finally:
        numba.set_num_threads(before)
    assert seen == [1, 1]



def test_one_decision_for_every_kind_of_process(monkeypatch):
    """choose_threads decides for one process, a launcher's ranks, a torchrun rank and an
    update's rank: given, then recorded, then a GPU's default, then the share of the cores
    (measured or not)."""
    import importlib

    threads = importlib.import_module("speed._threads")
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setattr(threads, "idle_cores", lambda window_s=0.1: 4.0)  # half the machine busy
    choose = threads.choose_threads
    assert choose(4, given=3, recorded=2, gpu=True) == (3, "--threads")
    assert choose(4, recorded=2, gpu=True) == (2, "the count the resumed run began with")
    assert choose(4, gpu=True) == (None, "a GPU per rank")
    assert choose(4, measure=False) == (2, "8 cores / 4 processes")
    assert choose(4)[0] == 1 and choose(4)[1].startswith("4 of 8 cores busy at start / 4 processes")
    assert choose(1, deterministic=True) == (8, "8 cores; --deterministic takes no account of the machine's load")
    monkeypatch.setattr(threads, "idle_cores", lambda window_s=0.1: None)  # not Linux
    assert choose(3) == (2, "8 cores / 3 processes")
