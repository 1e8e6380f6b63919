"""Thread pools sized to the cores that are free, and sized together (speed._threads)."""

import subprocess
import sys
import time

import numba
import pytest
import torch

from speed._threads import apply_threads, default_threads, idle_cores, usable_cores


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
