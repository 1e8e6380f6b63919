"""Parquet logs: columns by name or index, read in record batches."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pyarrow as pa

from ..._util import progress_bar
from ...errors import InputError
from .columns import WHAT, check_distinct, resolve_column


def open_parquet(path: Path):
    """``pyarrow.parquet.ParquetFile`` of ``path``; a damaged file is an :class:`InputError`."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(str(path))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable Parquet file ({str(exc).splitlines()[0]})", path) from None


def read_parquet(path: Path, cols_in: dict, progress: Optional[bool]):
    pf = open_parquet(path)
    names = pf.schema_arrow.names
    cols = {k: resolve_column(v, names, len(names), WHAT[k], path, 1) for k, v in cols_in.items()}
    check_distinct(cols, path)
    try:
        with progress_bar(pf.metadata.num_rows, f"read {path.name}", unit="ev", progress=progress) as bar:
            batches = []
            for batch in pf.iter_batches(columns=[names[v] for v in set(c for c in cols.values() if c is not None)]):
                batches.append(batch)
                bar.update(batch.num_rows)
        table = pa.Table.from_batches(batches) if batches else pf.read(columns=[])
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"damaged Parquet data ({str(exc).splitlines()[0]})", path) from None
    columns = {k: table.column(names[k]) for k in set(c for c in cols.values() if c is not None)}
    return columns.pop, table.num_rows, cols, names

