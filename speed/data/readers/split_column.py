"""A user's split column: ``train``/``val``/``test`` (or 0/1/2) per event, as split times."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ...errors import InputError
from .columns import resolve_column
from .parquet import open_parquet, parquet_errors
from .text import CleanStream, clean_tables, damaged_gzip, row_to_line
from .textio import Column, Layout

_PERIOD_NAMES = {"0": 0, "train": 0, "1": 1, "val": 1, "valid": 1, "validation": 1, "2": 2, "test": 2}


def split_column_times(path: Path, gz: bool, lay: Optional[Layout], split_col: Column, t: np.ndarray,
                       cols: dict) -> tuple:
    """A user's split column (train/val/test or 0/1/2 per event, in file order) as split
    times ``(last train time, last val time)``; periods must follow each other in time."""
    if lay is None:  # parquet
        pf = open_parquet(path)
        names = pf.schema_arrow.names
        k = resolve_column(split_col, names, len(names), "split", path, 1)
        with parquet_errors(path):
            column = pf.read(columns=[names[k]]).column(0)
        line_of = (lambda row: None)
    else:
        k = resolve_column(split_col, lay.header, lay.ncols, "split", path, lay.first_data_line)
        names = [f"c{i}" for i in range(lay.ncols)]
        with damaged_gzip(path, gz):
            raw = pa.OSFile(str(path), "rb")
            stream = pa.CompressedInputStream(raw, "gzip") if gz else raw
            # comments, blank lines and runs of spaces go as the event reader skips them
            clean = CleanStream(stream, lay.first_data_line - 1, squeeze=lay.sep == " ")
            try:
                chunks = [table.column(0) for table in clean_tables(
                    clean, 1 << 24, read_options=pacsv.ReadOptions(column_names=names),
                    parse_options=pacsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True),
                    convert_options=pacsv.ConvertOptions(include_columns=[names[k]],
                                                         column_types={names[k]: pa.string()}))]
                column = pa.chunked_array([c for ch in chunks for c in ch.chunks], type=pa.string())
            finally:
                raw.close()
        line_of = (lambda row: row_to_line(path, gz, lay.first_data_line, row))
    if k in [v for v in cols.values() if v is not None]:
        raise InputError(f"the split column ({split_col}) is also an event column", path)
    values = np.char.lower(np.char.strip(column.to_numpy(zero_copy_only=False).astype(str)))
    known = np.isin(values, list(_PERIOD_NAMES))
    if not known.all() or values.size != t.size:
        row = int(np.flatnonzero(~known)[0]) if not known.all() else min(values.size, t.size)
        bad = values[row] if row < values.size else ""
        raise InputError(f"split column: {bad!r} is not train, val or test (nor 0, 1, 2)", path, line_of(row))
    period = np.select([np.isin(values, [n for n, v in _PERIOD_NAMES.items() if v == p]) for p in (0, 1, 2)],
                       [0, 1, 2])
    for p, name in enumerate(("train", "val", "test")):
        if not np.any(period == p):
            raise InputError(f"split column: no {name} events", path)
    tf = t.astype(np.float64)
    ends = [tf[period == p].max() for p in range(3)]
    starts = [tf[period == p].min() for p in range(3)]
    for p, (a, b) in enumerate((("train", "val"), ("val", "test"))):
        if not ends[p] < starts[p + 1]:
            later = np.flatnonzero((period == p) & (tf >= starts[p + 1]))[0]
            raise InputError(f"split column: this {a} event is not earlier than every {b} event "
                             f"(the periods must follow each other in time)", path, line_of(int(later)))
    return float(ends[0]), float(ends[1])

