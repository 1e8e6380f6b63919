"""Moving a batch's rows between node memories in host memory and the device that computes.

With ``--state-device host`` the memories stay in host RAM and each step moves only its rows.
From pageable memory a copy to a GPU is staged by the driver through a pinned bounce buffer of
its own and cannot overlap anything; gathering the rows straight into a page-locked buffer
of ours lets the copy run by DMA and return at once (``non_blocking``).  The buffer is reused
every step, so each gather first waits for the previous copy out of it to finish.  Off by
default (:data:`PIN_STAGING`): at the batch sizes of these models it was measured slower.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

# Pinned staging for host memories read from a GPU: off.  Measured on an H200 (TGN, Wikipedia,
# batch 200, benchmarks/gpu_check.py's profile section) it made an epoch 12% slower than plain
# pageable copies (20,179 against 22,877 events/s): a step moves ~250 KB each way, where a
# copy's latency, not its bandwidth, counts, and the waits on the reused buffers cost more than
# the DMA saves.  Kept, tested and measured so that larger rows or batches can turn it on.
PIN_STAGING = False


class HostStaging:
    """Reusable host buffers, page-locked when ``pin``, for rows gathered from host tensors
    and sent to a device (and back).

    Parameters
    ----------
    width : int
        Columns of the row tensor (the memory's width).
    dtype, time_dtype : torch.dtype
        Of the rows (float32) and of their times (float64).
    pin : bool
        Page-lock the buffers (needs CUDA; False keeps the same logic in pageable memory,
        e.g. to test it on a CPU).
    """

    def __init__(self, width: int, dtype: torch.dtype, time_dtype: torch.dtype, pin: bool):
        self.width, self.dtype, self.time_dtype, self.pin = int(width), dtype, time_dtype, bool(pin)
        self.rows = torch.empty(0, self.width, dtype=dtype)
        self.times = torch.empty(0, dtype=time_dtype)
        self._copied: Optional[torch.cuda.Event] = None  # the last copy out of the buffers

    @property
    def capacity(self) -> int:
        return int(self.rows.shape[0])

    def _room(self, k: int) -> None:
        if self._copied is not None:  # the buffers are about to be overwritten
            self._copied.synchronize()
            self._copied = None
        if k > self.capacity:  # doubled, so a run reallocates O(log max batch) times
            n = max(k, 2 * self.capacity)
            self.rows = torch.empty(n, self.width, dtype=self.dtype, pin_memory=self.pin)
            self.times = torch.empty(n, dtype=self.time_dtype, pin_memory=self.pin)

    def gather(self, memory: torch.Tensor, last: torch.Tensor, index: torch.Tensor,
               device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(memory[index], last[index])`` on ``device``: gathered on the host into the buffers,
        then copied (without waiting, from pinned buffers to a GPU).

        Parameters
        ----------
        memory : float32 tensor, shape (num_nodes, width), on the host
        last : float64 tensor, shape (num_nodes,), on the host
        index : int64 tensor, shape (k,), on the host
        device : torch.device
        """
        k = int(index.numel())
        self._room(k)
        rows, times = self.rows[:k], self.times[:k]
        torch.index_select(memory, 0, index, out=rows)
        torch.index_select(last, 0, index, out=times)
        if device.type == "cpu":  # the buffers are reused: hand out copies
            return rows.clone(), times.clone()
        out = rows.to(device, non_blocking=self.pin), times.to(device, non_blocking=self.pin)
        if self.pin and device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record(torch.cuda.current_stream(device))
        return out

    def to_host(self, values: torch.Tensor, t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Device ``values`` (k, width) and ``t`` (k,) as host tensors in the buffers (valid until
        the next call): one DMA copy each, waited for."""
        k = int(values.shape[0])
        self._room(k)
        rows, times = self.rows[:k], self.times[:k]
        rows.copy_(values.detach(), non_blocking=self.pin)
        times.copy_(t, non_blocking=self.pin)
        if self.pin and values.device.type == "cuda":
            torch.cuda.current_stream(values.device).synchronize()  # the host reads them next
        return rows, times


def staging_for(memory: torch.Tensor, last: torch.Tensor, compute: torch.device) -> Optional[HostStaging]:
    """A :class:`HostStaging` for host ``memory`` read from ``compute`` when that is a GPU and
    :data:`PIN_STAGING` is on; None otherwise (plain indexing and ``.to``)."""
    if memory.device.type != "cpu" or compute.type != "cuda" or not PIN_STAGING:
        return None
    return HostStaging(memory.shape[1], memory.dtype, last.dtype, pin=True)
