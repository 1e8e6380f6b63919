"""What a training process sets up: its device, its seeds, and its memory as reported (peak, now,
and the peak of one block)."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Dict, Optional

import numpy as np
import torch


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far, in bytes (Linux reports KiB, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def peak_device_bytes(device) -> Optional[int]:
    """The most GPU memory this process's tensors have held on ``device`` so far
    (``torch.cuda.max_memory_allocated``); None on a CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))


def rss_bytes() -> Optional[int]:
    """This process's resident memory now, in bytes (None where ``/proc`` is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class PeakWatch:
    """The largest resident memory this process reaches while a block runs, and what it held
    before: a thread reads ``/proc/self/statm`` every ``interval`` seconds (the whole run's
    high-water mark cannot say what one step added, and resetting it would lose the run's).
    On systems without ``/proc`` both figures are None.

    Examples
    --------
    >>> with PeakWatch() as watch:
    ...     block = bytearray(1 << 20)
    >>> watch.as_dict()["seconds"] >= 0
    True
    """

    def __init__(self, interval: float = 0.005):
        self.interval = float(interval)
        self.before = self.peak = None
        self.seconds = 0.0

    def __enter__(self) -> "PeakWatch":
        self.before = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = None
        if self.before is not None:
            self._thread = threading.Thread(target=self._poll, name="speed-peak-watch", daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            now = rss_bytes()
            if now is not None and now > self.peak:
                self.peak = now

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            now = rss_bytes()
            if now is not None and now > self.peak:
                self.peak = now
        self.seconds = time.perf_counter() - self._t0

    def as_dict(self) -> Dict[str, Optional[float]]:
        """``{"rss_before_bytes", "peak_rss_bytes", "seconds"}``."""
        return {"rss_before_bytes": self.before, "peak_rss_bytes": self.peak, "seconds": self.seconds}
