"""Columns: resolving names or indices, and turning raw Arrow columns into checked arrays (ids,
times, labels).  ``where(row)`` gives the error location of a 0-based data row: (kwargs of
:class:`~speed.InputError`, prefix)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InputError
from .textio import Column
from .times import epoch_seconds

WHAT = {"src": "src", "dst": "dst", "t": "time", "label": "label"}

def resolve_column(col: Column, names: Optional[Sequence[str]], ncols: int, what: str, path: Path,
                   line: int) -> Optional[int]:
    """Turn a column given by name or 0-based index into an index."""
    if col is None:
        return None
    if isinstance(col, (int, np.integer)) and not isinstance(col, bool):
        if not 0 <= int(col) < ncols:
            raise InputError(f"{what} column index {col} out of range (the file has {ncols} columns)", path, line)
        return int(col)
    if isinstance(col, str):
        if names is None:
            raise InputError(f"{what} column '{col}' given by name, but the file has no header", path, line)
        stripped = [n.strip() for n in names]
        if col not in stripped:
            raise InputError(f"unknown {what} column '{col}' (columns: {', '.join(stripped)})", path,
                             line if names is None else max(1, line - 1))
        k = stripped.index(col)
        if k >= ncols:
            raise InputError(f"{what} column '{col}' is missing from the records", path, line)
        return k
    raise InputError(f"{what} column must be a name or an index, got {col!r}", path, line)


def check_distinct(cols: dict, path: Path) -> None:
    used = [(k, v) for k, v in cols.items() if v is not None]
    for a in range(len(used)):
        for b in range(a + 1, len(used)):
            if used[a][1] == used[b][1]:
                raise InputError(f"{WHAT[used[a][0]]} and {WHAT[used[b][0]]} are the same column "
                                 f"({used[a][1]})", path)


def id_column(c, what: str, where):
    """An id column (int64 ndarray, or an Arrow string column to compact); missing ids are errors."""
    if c.null_count:
        loc, prefix = where(int(np.flatnonzero(c.is_null().to_numpy(zero_copy_only=False))[0]))
        raise InputError(f"{prefix}missing {what} id", **loc)
    if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
        empty = np.flatnonzero(pc.equal(pc.utf8_trim_whitespace(c), "").to_numpy(zero_copy_only=False))
        if empty.size:
            loc, prefix = where(int(empty[0]))
            raise InputError(f"{prefix}missing {what} id", **loc)
    return c.to_numpy() if pa.types.is_integer(c.type) else c


def time_column(t_col, time_format: Optional[str], path: Path, where) -> np.ndarray:
    """Times as float64: numbers as they are, date-times in epoch seconds; all finite."""
    if pa.types.is_string(t_col.type) or pa.types.is_large_string(t_col.type) or pa.types.is_timestamp(t_col.type):
        t_col = epoch_seconds(t_col, time_format, path, where)
    if not (pa.types.is_floating(t_col.type) or pa.types.is_integer(t_col.type)):
        raise InputError(f"time column has type {t_col.type}, expected numbers or date-times", path)
    t = t_col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    bad = np.flatnonzero(~np.isfinite(t))
    if bad.size:
        loc, prefix = where(int(bad[0]))
        what = "missing" if t_col.null_count and t_col.is_null()[int(bad[0])].as_py() else f"{t[bad[0]]}, not finite"
        raise InputError(f"{prefix}time is {what}", **loc)
    return t


def label_column(c, where) -> np.ndarray:
    """Labels as int64 when they are whole numbers, else float64; missing labels are errors."""
    lab = c.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if np.isnan(lab).any():
        loc, prefix = where(int(np.flatnonzero(np.isnan(lab))[0]))
        raise InputError(f"{prefix}missing label", **loc)
    return whole_labels(lab)


def whole_labels(lab: np.ndarray) -> np.ndarray:
    return lab.astype(np.int64) if np.all(lab == np.round(lab)) else lab

