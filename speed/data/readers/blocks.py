"""The fast path of the text reader: plain numeric records parsed in blocks by numba.

Most large logs are plain ``src,dst,t`` numbers.  For them this module reads the file in
fixed-size blocks into one reused buffer and parses each block with
:func:`speed.data._kernels.parse_ranges` (one range per thread), so reading
costs one pass over the bytes, no per-block Python objects and no allocator churn.

Anything the kernel does not accept exactly (quotes, exponents, comments, blank lines,
ragged rows, non-integer ids, ...) raises :class:`GiveUp`; the caller then reads the file
with the general (pyarrow) reader, which handles every format and names bad lines.  Both
paths give identical arrays for the records the fast path accepts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Optional

import numba
import numpy as np

from .. import _kernels

_SEPS = (",", "\t", ";", " ")


class GiveUp(Exception):
    """The file is not plain numeric records; read it with the general reader."""


@dataclass(frozen=True)


class NumericLayout:
    """What the fast path needs to know of a text file.

    Attributes
    ----------
    path : Path
    data_offset : int
        Byte offset of the first data record.
    sep : str
        One-byte separator.
    roles : int64 ndarray, shape (ncols,)
        ``_kernels.ROLE_*`` of each column.
    """

    path: Path
    data_offset: int
    sep: str
    roles: np.ndarray

    @property
    def has_label(self) -> bool:
        return bool((self.roles == _kernels.ROLE_LABEL).any())


def numeric_layout(path: Path, gz: bool, first_data_line: int, sep: str, ncols: int, cols: dict,
                   msg_cols, text_time: bool) -> Optional[NumericLayout]:
    """The fast-path layout of a text file, or None when the fast path cannot apply."""
    if gz or text_time or msg_cols or sep not in _SEPS:
        return None
    roles = np.zeros(ncols, dtype=np.int64)
    for what, role in (("src", _kernels.ROLE_SRC), ("dst", _kernels.ROLE_DST), ("t", _kernels.ROLE_TIME),
                       ("label", _kernels.ROLE_LABEL)):
        if cols.get(what) is not None:
            roles[cols[what]] = role
    offset = _line_offset(path, first_data_line)
    if offset is None:
        return None
    return NumericLayout(path=path, data_offset=offset, sep=sep, roles=roles)


def _line_offset(path: Path, line: int) -> Optional[int]:
    """Byte offset where 1-based ``line`` starts (None past the end)."""
    if line <= 1:
        return 0
    with open(path, "rb") as f:
        seen, base = 0, 0
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                return None
            start = 0
            while True:
                k = chunk.find(b"\n", start)
                if k < 0:
                    break
                seen += 1
                if seen == line - 1:
                    return base + k + 1
                start = k + 1
            base += len(chunk)


def _range_cuts(buf: np.ndarray, end: int, pieces: int) -> np.ndarray:
    """Offsets that cut ``buf[:end]`` (whole lines) into about ``pieces`` ranges at line starts."""
    cuts = [0]
    for k in range(1, pieces):
        guess = max(cuts[-1], end * k // pieces)
        nl = np.flatnonzero(buf[guess:min(end, guess + (1 << 16))] == 10)
        if nl.size:
            cuts.append(guess + int(nl[0]) + 1)
    cuts.append(end)
    return np.unique(np.asarray(cuts, dtype=np.int64))


def _parse_blocks_gen(lay: NumericLayout, block_size: int, alloc, on_bytes=None) -> Iterator[None]:
    """Parse the file block by block into arrays from ``alloc(rows)``, yielding after each.

    ``alloc(rows)`` returns ``(src, dst, t, label, row0)``: arrays to write the block's
    ``rows`` records into from row ``row0`` (``label`` of length 0 without a label column).

    Raises
    ------
    GiveUp
    """
    sep = ord(lay.sep)
    pieces = 4 * numba.get_num_threads()
    buf = np.empty(block_size, dtype=np.uint8)
    view = memoryview(buf)
    filled = 0
    with open(lay.path, "rb", buffering=0) as f:
        f.seek(lay.data_offset)
        eof = False
        while not eof or filled:
            while not eof and filled < block_size:
                got = f.readinto(view[filled:])
                if not got:
                    eof = True
                else:
                    filled += got
            if eof:
                end = filled
            else:
                nl = _last_newline(buf, filled)
                if nl < 0:
                    raise GiveUp("a record longer than the block")
                end = nl + 1
            if end == 0:
                break
            cuts = _range_cuts(buf, end, pieces)
            rows = _kernels.count_ranges(buf, cuts)
            src, dst, t, label, row0 = alloc(int(rows.sum()))
            if not _kernels.parse_ranges(buf, cuts, rows, sep, lay.roles, src, dst, t, label, row0):
                raise GiveUp("not plain numeric records")
            yield
            if on_bytes is not None:
                on_bytes(end)
            rest = filled - end
            if rest:
                buf[:rest] = buf[end:filled]
            filled = rest


def iter_numeric_blocks(lay: NumericLayout, block_size: int = 1 << 26,
                        on_bytes=None) -> Iterator[Dict[str, np.ndarray]]:
    """Yield the records of the file block by block.

    Each yielded dict has ``src``, ``dst`` (int64), ``t`` and, with a label column,
    ``label`` (float64), all of the block's length, in fresh arrays.

    Parameters
    ----------
    lay : NumericLayout
    block_size : int
        Bytes read per block; a block holds whole records (a longer record raises GiveUp).
    on_bytes : callable, optional
        Called with the bytes consumed after each block (progress).

    Raises
    ------
    GiveUp
    """
    pending = []

    def alloc(rows):
        cols = {"src": np.empty(rows, dtype=np.int64), "dst": np.empty(rows, dtype=np.int64),
                "t": np.empty(rows, dtype=np.float64)}
        label = np.empty(rows if lay.has_label else 0, dtype=np.float64)
        if lay.has_label:
            cols["label"] = label
        pending.append(cols)
        return cols["src"], cols["dst"], cols["t"], label, 0

    for _ in _parse_blocks_gen(lay, block_size, alloc, on_bytes):
        yield pending.pop()


def _last_newline(buf: np.ndarray, filled: int) -> int:
    """Index of the last ``\\n`` in ``buf[:filled]``, or -1."""
    step = 1 << 16
    hi = filled
    while hi > 0:
        lo = max(0, hi - step)
        nl = np.flatnonzero(buf[lo:hi] == 10)
        if nl.size:
            return lo + int(nl[-1])
        hi = lo
    return -1


def read_numeric(lay: NumericLayout, block_size: int = 1 << 26, on_bytes=None) -> Dict[str, np.ndarray]:
    """All records of the file as whole columns, parsed straight into them.

    Columns grow in place (``ndarray.resize``, which the OS can do without copying) from an
    estimate taken from the file size, and are trimmed at the end, so the peak stays near
    the size of the result.
    """
    size = os.path.getsize(lay.path) - lay.data_offset
    names = ["src", "dst", "t"] + (["label"] if lay.has_label else [])
    dtypes = {"src": np.int64, "dst": np.int64, "t": np.float64, "label": np.float64}
    out = {k: np.empty(0, dtype=dtypes[k]) for k in names}
    n = [0]

    def alloc(rows):
        if n[0] == 0:  # first block: estimate the whole file from its bytes per record
            cap = int(size / max(min(block_size, size) / max(rows, 1), 1.0) * 1.02) + rows + 1024
            out.update({k: np.empty(cap, dtype=dtypes[k]) for k in names})
        elif n[0] + rows > out["t"].shape[0]:
            cap = int((n[0] + rows) * 1.25) + 1024
            for v in out.values():
                v.resize(cap, refcheck=False)  # realloc: no copy for large arrays, but zero-fills the growth
        row0 = n[0]
        n[0] += rows
        return out["src"], out["dst"], out["t"], out.get("label", np.empty(0)), row0

    for _ in _parse_blocks_gen(lay, block_size, alloc, on_bytes):
        pass
    if n[0] == 0:
        raise GiveUp("no records")
    for v in out.values():
        v.resize(n[0], refcheck=False)
    return out
