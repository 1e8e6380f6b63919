"""Parquet logs: columns by name or index, read in record batches."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import pyarrow as pa

from ..._util import progress_bar
from ...errors import InputError
from .columns import WHAT, check_distinct, resolve_column
from .text import arrow_reason


@contextlib.contextmanager
def parquet_errors(path: Path, what: str = "damaged Parquet data"):
    """Arrow's errors on a damaged Parquet file as one-line :class:`InputError`s."""
    try:
        yield
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{what} ({arrow_reason(exc)})", path) from None


def open_parquet(path: Path):
    """``pyarrow.parquet.ParquetFile`` of ``path``; a damaged file is an :class:`InputError`."""
    import pyarrow.parquet as pq

    with parquet_errors(path, "not a readable Parquet file"):
        return pq.ParquetFile(str(path))


def read_parquet(path: Path, cols_in: dict, progress: Optional[bool]):
    pf = open_parquet(path)
    names = pf.schema_arrow.names
    cols = {k: resolve_column(v, names, len(names), WHAT[k], path, 1) for k, v in cols_in.items()}
    check_distinct(cols, path)
    with parquet_errors(path):
        with progress_bar(pf.metadata.num_rows, f"read {path.name}", unit="ev", progress=progress) as bar:
            batches = []
            for batch in pf.iter_batches(columns=[names[v] for v in set(c for c in cols.values() if c is not None)]):
                batches.append(batch)
                bar.update(batch.num_rows)
        table = pa.Table.from_batches(batches) if batches else pf.read(columns=[])
    columns = {k: table.column(names[k]) for k in set(c for c in cols.values() if c is not None)}
    return columns.pop, table.num_rows, cols, names

