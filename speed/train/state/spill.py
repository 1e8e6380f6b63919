"""Where a back-up of the node state keeps its arrays: in memory, or spilled to disk.

A rank backs its state up twice in an epoch: a rank whose group has fewer events than the
others ends a pass early and keeps that pass's state while it cycles on (SPEED's Alg. 2), and an
evaluation period keeps the rows it will change for the new-node pass.  Held in RAM, each is one
more copy of the largest thing a rank holds, at the moment it holds the most.  :class:`Spill`
writes each large array straight from the live state to a temporary file, a window at a time
(never a whole copy in memory), unlinks the file and maps it back copy-on-write: the back-up
then costs disk and page cache, which the kernel may drop, not resident memory.  Reading it
back is done a window at a time too, letting the mapped pages go after each
(:func:`put_rows`, :func:`windows`), or by adopting the mapped arrays as the state.

:class:`Keep` is the in-memory default, with the same verbs.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from typing import Optional, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]

# arrays smaller than this stay in memory (a file per small array costs more than it saves);
# SPEED_SPILL_MIN_BYTES=0 spills every array (the tests run the spilled path so on small logs)
SPILL_MIN_BYTES = int(os.environ.get("SPEED_SPILL_MIN_BYTES", 16 << 20))
# bytes of rows copied at a time into or out of a spilled array
SPILL_WINDOW_BYTES = max(1, int(os.environ.get("SPEED_SPILL_WINDOW_BYTES", 32 << 20)))
# the mapping of each spilled array, by the address of its data (a tensor made from it shares it)
_MAPPED: "weakref.WeakValueDictionary[int, np.memmap]" = weakref.WeakValueDictionary()


def _window_rows(a) -> int:
    row = int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize if a.ndim > 1 else a.dtype.itemsize
    return max(1, SPILL_WINDOW_BYTES // max(row, 1))


class Keep:
    """Back-up arrays as plain in-memory copies."""

    spills = False

    def copy(self, a: Array) -> Array:
        """A copy of ``a`` (numpy array or tensor, detached)."""
        return a.detach().clone() if isinstance(a, torch.Tensor) else np.array(a, copy=True)

    def take(self, a: Array, rows) -> Array:
        """``a[rows]`` (``rows``: int64 array or tensor of row indices)."""
        if isinstance(a, torch.Tensor):
            return a.detach()[torch.as_tensor(rows, device=a.device)]
        return a[np.asarray(rows)]


class View(Keep):
    """"Back-up" arrays as the live ones themselves, no copy: for a reader done with them before
    the state changes next (a checkpoint written from the state at once).  Such a snapshot's
    readers replace entries, never edit them (:meth:`~speed.train.state.snapshots.Snapshots.compact_event_ids`)."""

    def copy(self, a: Array) -> Array:
        return a.detach() if isinstance(a, torch.Tensor) else a


class Spill(Keep):
    """Back-up arrays in unlinked temporary files, mapped back copy-on-write.

    Parameters
    ----------
    directory : str, optional
        Where the files go (default: the system's temporary folder, ``TMPDIR``).
    min_bytes : int, optional
        Arrays smaller than this are copied in memory (default :data:`SPILL_MIN_BYTES`).
    """

    spills = True

    def __init__(self, directory: Optional[str] = None, min_bytes: Optional[int] = None):
        self.directory = directory
        self.min_bytes = min_bytes
        self.bytes_spilled = 0

    def _spillable(self, a: Array, nbytes: int) -> bool:
        on_host = not isinstance(a, torch.Tensor) or a.device.type == "cpu"
        least = SPILL_MIN_BYTES if self.min_bytes is None else int(self.min_bytes)
        return on_host and nbytes >= least and nbytes > 0

    def _write(self, shape, dtype, windows) -> np.ndarray:
        """A file filled by ``windows`` (contiguous arrays, in order), mapped back and unlinked."""
        fd, path = tempfile.mkstemp(prefix="speed-spill-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                for w in windows:
                    f.write(memoryview(np.ascontiguousarray(w)).cast("B"))
            mapped = np.memmap(path, dtype=dtype, mode="c", shape=tuple(shape))
        finally:
            try:
                os.unlink(path)  # the mapping keeps the data; nothing is left behind on exit
            except OSError:
                pass
        self.bytes_spilled += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        _MAPPED[_address(mapped)] = mapped
        return mapped

    def copy(self, a: Array) -> Array:
        if not self._spillable(a, a.numel() * a.element_size() if isinstance(a, torch.Tensor) else a.nbytes):
            return super().copy(a)
        src = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        step = _window_rows(src)
        mapped = self._write(src.shape, src.dtype, (src[i:i + step] for i in range(0, src.shape[0], step)))
        return torch.from_numpy(mapped) if isinstance(a, torch.Tensor) else mapped

    def take(self, a: Array, rows) -> Array:
        rows = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64)
        itemsize = a.element_size() if isinstance(a, torch.Tensor) else a.dtype.itemsize
        row = int(np.prod(a.shape[1:], dtype=np.int64)) * itemsize
        if not self._spillable(a, rows.size * row):
            return super().take(a, rows)
        src = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        step = _window_rows(src)
        mapped = self._write((rows.size,) + tuple(src.shape[1:]), src.dtype,
                             (src[rows[i:i + step]] for i in range(0, rows.size, step)))
        return torch.from_numpy(mapped) if isinstance(a, torch.Tensor) else mapped


def _address(a) -> int:
    return a.data_ptr() if isinstance(a, torch.Tensor) else a.__array_interface__["data"][0]


def is_spilled(a: Array) -> bool:
    """Whether ``a`` is a :class:`Spill` copy (an array mapped from its file)."""
    return a is not None and a.shape[0] > 0 and _MAPPED.get(_address(a)) is not None


def release(a: Array) -> None:
    """Let the pages of a spilled array read so far go (they are read again from its file if
    touched again); an array in memory is left alone."""
    m = _MAPPED.get(_address(a)) if a is not None and a.shape[0] else None
    if m is not None and hasattr(mmap, "MADV_DONTNEED"):
        m._mmap.madvise(mmap.MADV_DONTNEED)


def windows(src: Array):
    """``(lo, hi)`` row ranges to read ``src`` by: one range for an array in memory; for a
    spilled one windows of :data:`SPILL_WINDOW_BYTES`, each window's mapped pages let go once
    the caller has moved on (so a back-up read back never resides whole beside the state it
    restores)."""
    n = int(src.shape[0])
    mapped = _MAPPED.get(_address(src)) if n else None
    if mapped is None:
        yield 0, n
        return
    step = _window_rows(mapped)
    row = mapped.nbytes // max(n, 1)
    page = mmap.PAGESIZE
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        yield lo, hi
        start = (lo * row) // page * page
        if hasattr(mmap, "MADV_DONTNEED") and hi * row > start:
            mapped._mmap.madvise(mmap.MADV_DONTNEED, start, hi * row - start)


class Streamed:
    """A spilled back-up's array that a file writer reads a window at a time, letting each
    window's mapped pages go (:func:`windows`), so writing it never makes it resident whole.
    Only for an array nothing has written to since it was spilled: letting go of a written
    (copy-on-write) page would lose the write.

    Parameters
    ----------
    array : ndarray or tensor
        A :class:`Spill` copy (an array in memory is written as it is).
    """

    def __init__(self, array: Array):
        self.array = array
        self.torch = isinstance(array, torch.Tensor)
        a = array.detach().cpu().numpy() if self.torch else np.asarray(array)
        self.shape, self.dtype, self.nbytes = tuple(a.shape), a.dtype, int(a.nbytes)

    def chunks(self):
        """The array's bytes in row order, a window at a time (C-contiguous uint8 views)."""
        a = self.array.detach().cpu().numpy() if self.torch else np.asarray(self.array)
        for lo, hi in windows(self.array):
            yield np.ascontiguousarray(a[lo:hi]).reshape(-1).view(np.uint8)


def put_rows(dst: Array, rows, src: Array) -> None:
    """``dst[rows] = src`` (numpy arrays, or tensors: ``index_copy_``), a window at a time for a
    spilled ``src`` (:func:`windows`)."""
    for lo, hi in windows(src):
        if isinstance(dst, torch.Tensor):
            idx = torch.as_tensor(rows[lo:hi], device=dst.device)
            dst.index_copy_(0, idx, src[lo:hi].to(dst.device, dst.dtype))
        else:
            dst[rows[lo:hi]] = src[lo:hi]
