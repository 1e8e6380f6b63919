"""Column files of a shards directory, filled bucket by bucket from chunks of events.

Each column (``src.npy``, ``t.npy``, ...) holds every event grouped by bucket, each
bucket in time order.  Once the bucket sizes are known, every bucket's region of every file
is known too, so events can be written chunk by chunk in stream order: a chunk is grouped
by bucket in memory (a stable counting sort of the chunk only) and each bucket's slice is
written at that bucket's cursor with ``pwrite``.  Memory is one chunk, whatever the size
of the log; the in-memory writer and the out-of-core writer both use this.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from . import _kernels


class BucketColumns:
    """``.npy`` files in ``folder``, one per column, written bucket by bucket.

    Parameters
    ----------
    folder : Path
    counts : int64 ndarray, shape (num_buckets,)
        Events per bucket in the whole log.
    specs : dict
        ``name -> (dtype, row_shape)``; ``row_shape`` is ``()`` for a 1-D column.
    """

    def __init__(self, folder: Path, counts: np.ndarray, specs: Dict[str, Tuple[np.dtype, tuple]]):
        self.counts = np.asarray(counts, dtype=np.int64)
        total = int(self.counts.sum())
        start = np.zeros(self.counts.size, dtype=np.int64)
        np.cumsum(self.counts[:-1], out=start[1:])
        self.cursor = start  # next row to write, per bucket
        self.end = start + self.counts
        self.files = {}
        self._order = np.empty(0, dtype=np.int64)
        self._pool = ThreadPoolExecutor(max_workers=2)
        for name, (dtype, row_shape) in specs.items():
            dtype = np.dtype(dtype)
            path = folder / f"{name}.npy"
            with open(path, "wb") as f:
                header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                          "shape": (total, *row_shape)}
                np.lib.format.write_array_header_1_0(f, header) if total < 2**31 else \
                    np.lib.format.write_array_header_2_0(f, header)
                data_at = f.tell()
                row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
                f.truncate(data_at + total * row_bytes)
            fd = os.open(path, os.O_WRONLY)
            self.files[name] = (fd, dtype, data_at, row_bytes)

    def write(self, bid: np.ndarray, columns: Dict[str, np.ndarray]) -> None:
        """Write the next chunk of events (in stream order).

        Parameters
        ----------
        bid : integer ndarray, shape (m,)
            Bucket of each event of the chunk (:func:`speed.partition._kernels.bucket_ids`).
        columns : dict
            ``name -> array`` of ``m`` rows for every column of the writer.
        """
        m = bid.shape[0]
        if self._order.shape[0] < m:
            self._order = np.empty(m, dtype=np.int64)
        order = self._order[:m]
        counts = _kernels.bucket_order(bid, self.counts.size, order)
        ends = np.cumsum(counts)
        nonempty = np.flatnonzero(counts)
        cursor = self.cursor.copy()

        def put(name: str, arr: np.ndarray) -> None:
            fd, dtype, data_at, row_bytes = self.files[name]
            grouped = np.ascontiguousarray(arr[order], dtype=dtype)
            raw = memoryview(grouped.reshape(-1).view(np.uint8))
            for k in nonempty:
                a, b = int(ends[k] - counts[k]), int(ends[k])
                offset = data_at + int(cursor[k]) * row_bytes
                view = raw[a * row_bytes:b * row_bytes]
                while view.nbytes:  # pwrite may write less than asked
                    done = os.pwrite(fd, view, offset)
                    view, offset = view[done:], offset + done

        # columns are independent; numpy's gathers and pwrite release the GIL
        for job in [self._pool.submit(put, name, arr) for name, arr in columns.items()]:
            job.result()
        self.cursor += counts

    def close(self) -> None:
        self._pool.shutdown()
        for fd, *_ in self.files.values():
            os.close(fd)
        self.files = {}

    def __enter__(self) -> "BucketColumns":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close()
        if exc_type is None and not np.array_equal(self.cursor, self.end):
            raise RuntimeError("shard columns are incomplete: fewer events were written than counted")
