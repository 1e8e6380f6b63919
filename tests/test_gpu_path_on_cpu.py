"""What of the GPU path runs without a GPU: the host staging buffers' logic (unpinned), the
choice of a rank's backend and device, and the GPU check's answer where there is no GPU."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from speed.train.world import rank_backend
from speed.train.state.memory import NodeMemory
from speed.train.state.staging import HostStaging, staging_for

ROOT = Path(__file__).resolve().parents[1]


def test_staging_gathers_the_rows_and_reuses_its_buffers():
    g = torch.Generator().manual_seed(0)
    memory = torch.randn(1000, 8, generator=g)
    last = torch.rand(1000, generator=g, dtype=torch.float64)
    stage = HostStaging(8, memory.dtype, last.dtype, pin=False)
    held = []
    for k in (3, 50, 20, 400, 400, 1):
        index = torch.randint(0, 1000, (k,), generator=g)
        rows, times = stage.gather(memory, last, index, torch.device("cpu"))
        assert torch.equal(rows, memory[index]) and torch.equal(times, last[index])
        held.append((index, rows))
    # capacity doubles, so a run reallocates O(log largest batch) times
    assert 400 <= stage.capacity <= 800
    # what was handed out is not overwritten by later gathers through the same buffers
    for index, rows in held:
        assert torch.equal(rows, memory[index])


def test_staging_to_host_returns_the_values():
    stage = HostStaging(4, torch.float32, torch.float64, pin=False)
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4).requires_grad_()
    rows, times = stage.to_host(values, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert torch.equal(rows, values.detach()) and times.tolist() == [1.0, 2.0, 3.0]
    assert not rows.requires_grad


def test_no_staging_without_a_gpu():
    mem = NodeMemory(10, 4, device="cpu")
    assert staging_for(mem.memory, mem.last_update, torch.device("cpu")) is None
    rows, _ = mem.read(torch.tensor([1, 2]))
    assert rows.shape == (2, 4) and mem._staging == {}


@pytest.mark.parametrize("cuda, local_rank, local_world, gpus, want", [
    (False, 1, 2, 0, ("gloo", None)),
    (True, 0, 1, 1, ("nccl", 0)),
    (True, 3, 4, 4, ("nccl", 3)),
    (True, 1, 2, 1, ("gloo", 0)),    # two ranks on one GPU: NCCL refuses a device twice
    (True, 5, 8, 4, ("gloo", 1)),
])
def test_rank_backend(cuda, local_rank, local_world, gpus, want):
    assert rank_backend(cuda, local_rank, local_world, gpus) == want


def test_rank_backend_without_a_gpu_fails_clearly():
    with pytest.raises(RuntimeError, match="no GPU"):
        rank_backend(True, 0, 1, 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the check would run")
def test_gpu_check_says_on_one_line_that_nothing_was_verified(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: nothing verified: no CUDA device")
    assert not (tmp_path / "out").exists()
