"""Reading a log block by block, for callers that cannot hold it whole (out-of-core partitioning)."""

from __future__ import annotations

import re

from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ...errors import InputError
from . import blocks
from .columns import WHAT, check_distinct, id_column, resolve_column, time_column
from .formats import FORMAT_SPECS
from .parquet import open_parquet, parquet_errors
from .read import column_label, opened_as_parquet, text_source
from .text import CleanStream, arrow_reason, clean_tables, damaged_gzip, diagnose, row_to_line

RESTART = object()  # from BlockStream.blocks(): drop the blocks so far, they come again


class BlockStream:
    """A text or Parquet log read block by block, for callers that cannot hold it whole.

    Blocks are dicts of raw columns -- ``src``, ``dst`` (int64 ids as in the file), ``t``
    (float64), and ``label`` (float64) and ``msg`` (float32, (m, d)) when present -- with
    the same values :func:`read_events` would read.  Node ids must be integers (a string
    id raises :class:`~speed.InputError`).  The parameters are those of :func:`read_events`.
    """

    def __init__(self, path, fmt=None, src_col=None, dst_col=None, time_col=None, label_col=None, sep=None,
                 header=None, time_format=None, block_size: int = 1 << 26):
        self.path = Path(path)
        self.time_format, self.block_size = time_format, block_size
        self.time_named = time_col is not None  # (a default column is checked like read_events checks it)
        cols_in = {"src": src_col, "dst": dst_col, "t": time_col, "label": label_col}
        if opened_as_parquet(self.path, fmt, cols_in):
            names = open_parquet(self.path).schema_arrow.names
            self.cols = {k: resolve_column(v, names, len(names), WHAT[k], self.path, 1) for k, v in cols_in.items()}
            check_distinct(self.cols, self.path)
            self.fmt, self.gz, self.lay, self.msg_cols, self.text_time = "parquet", False, None, [], False
            self.names = names
        else:
            self.gz, self.lay, self.cols, self.msg_cols, self.text_time = text_source(
                self.path, fmt, cols_in, sep, header, time_format)
            self.fmt = self.lay.fmt
        self.bipartite = FORMAT_SPECS[self.fmt].bipartite
        self.has_label = self.cols.get("label") is not None

    def provenance(self) -> dict:
        """What :func:`read_events` records in ``meta`` of the columns and times it read, for a
        log read block by block (which must be sorted: no row is out of order)."""
        names = self.lay.header if self.lay is not None else self.names
        meta = {"columns": {k: column_label(self.cols[k], names) for k in ("src", "dst", "t", "label")
                            if self.cols.get(k) is not None},
                "out_of_order_rows": 0}
        if self.text_time:
            meta["time_text"] = "iso"
        return meta

    def check_streamable(self, has_split_times: bool) -> None:
        """Refuse what this format carries beside its columns that only the in-memory reader
        reads (companion files, a split column), unless the split is given as times."""
        spec = FORMAT_SPECS[self.fmt]
        if spec.out_of_core is not None:
            spec.out_of_core(self.path, self.lay, has_split_times)

    def line_of(self, row: int) -> Optional[int]:
        """1-based line of 0-based data row ``row`` (None for Parquet)."""
        if self.lay is None:
            return None
        return row_to_line(self.path, self.gz, self.lay.first_data_line, row)

    def blocks(self, on_bytes=None):
        """Yield blocks in file order; :data:`RESTART` means: forget the blocks so far."""
        if self.lay is not None:
            fast = blocks.numeric_layout(self.path, self.gz, self.lay.first_data_line, self.lay.sep, self.lay.ncols,
                                         self.cols, self.msg_cols, self.text_time)
            if fast is not None:
                started = False
                try:
                    for block in blocks.iter_numeric_blocks(fast, self.block_size, on_bytes):
                        started = True
                        yield block
                    return
                except blocks.GiveUp:
                    if started:
                        yield RESTART
        yield from (self._parquet_blocks() if self.lay is None else self._text_blocks(on_bytes))

    def _not_integer(self, column, where) -> InputError:
        """The refusal of a block's first id that is not a 64-bit integer, naming its line."""
        for row, value in enumerate(column.to_pylist()):
            try:
                number = int(str(value).strip())
            except ValueError:
                break
            if abs(number) > np.iinfo(np.int64).max:
                loc, pre = where(row)
                return InputError(f"{pre}node id {number} is larger than a 64-bit integer holds (--max-memory reads "
                                  "64-bit integer ids; read the log in memory to take such ids as names)", **loc)
        return InputError("node ids that are not integers are not supported with --max-memory (max_memory); "
                          "read the log in memory, or map the ids to integers first", self.path)

    def _convert(self, column, what: str, row0: int):
        def where(row: int):
            if self.lay is None:
                return dict(path=self.path, line=None), f"row {row0 + row + 1}: "
            return dict(path=self.path, line=self.line_of(row0 + row)), ""

        if what in ("src", "dst"):
            ids = id_column(column, what, where)
            if not isinstance(ids, np.ndarray):
                raise self._not_integer(column, where)
            return ids.astype(np.int64, copy=False)
        if what == "t":
            return time_column(column, self.time_format, self.path, where)
        lab = column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if np.isnan(lab).any():
            loc, prefix = where(int(np.flatnonzero(np.isnan(lab))[0]))
            raise InputError(f"{prefix}missing label", **loc)
        return lab

    def _block(self, get, row0: int, nrows: int) -> dict:
        out = {what: self._convert(get(self.cols[what]), what, row0) for what in ("src", "dst", "t")}
        if self.has_label:
            out["label"] = self._convert(get(self.cols["label"]), "label", row0)
        if self.msg_cols:
            out["msg"] = np.stack([get(k).to_numpy(zero_copy_only=False) for k in self.msg_cols],
                                  axis=1).astype(np.float32)
        return out

    def _parquet_blocks(self):
        pf = open_parquet(self.path)
        want = sorted({c for c in self.cols.values() if c is not None})
        row0 = 0
        batches = iter(pf.iter_batches(batch_size=1 << 22, columns=[self.names[k] for k in want]))
        while True:
            with parquet_errors(self.path):
                batch = next(batches, None)
            if batch is None:
                return
            yield self._block(lambda k: batch.column(self.names[k]), row0, batch.num_rows)
            row0 += batch.num_rows

    def _text_blocks(self, on_bytes):
        lay, cols = self.lay, self.cols
        names = [f"c{k}" for k in range(lay.ncols)]
        include = sorted({v for v in cols.values() if v is not None} | set(self.msg_cols))
        types = {names[cols["src"]]: pa.int64(), names[cols["dst"]]: pa.int64(),
                 names[cols["t"]]: pa.string() if self.text_time else pa.float64()}
        if self.has_label:
            types[names[cols["label"]]] = pa.float64()
        for k in self.msg_cols:
            types[names[k]] = pa.float32()
        raw = pa.OSFile(str(self.path), "rb")
        stream = pa.CompressedInputStream(raw, "gzip") if self.gz else raw
        # comments and separator runs are filtered out as the blocks stream (see CleanStream)
        clean = CleanStream(stream, lay.first_data_line - 1, squeeze=lay.sep == " ")
        row0, last = 0, 0
        try:
            with damaged_gzip(self.path, self.gz):
                for table in clean_tables(
                        clean, self.block_size,
                        read_options=pacsv.ReadOptions(column_names=names),
                        parse_options=pacsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True),
                        convert_options=pacsv.ConvertOptions(include_columns=[names[k] for k in include],
                                                             column_types=types, null_values=[""],
                                                             strings_can_be_null=False, quoted_strings_can_be_null=False)):
                    yield self._block(lambda k: table.column(names[k]), row0, table.num_rows)
                    row0 += table.num_rows
                    if on_bytes is not None:
                        on_bytes(raw.tell() - last)
                        last = raw.tell()
        except pa.ArrowInvalid as exc:
            diagnose(self.path, self.gz, lay, cols, self.text_time)
            if "conversion error to int64" in str(exc):
                value = re.search(r"invalid value '([^']*)'", str(exc))
                number = None
                try:
                    number = int(value.group(1)) if value else None
                except ValueError:
                    pass
                if number is not None and abs(number) > np.iinfo(np.int64).max:
                    raise InputError(f"node id {number} is larger than a 64-bit integer holds (--max-memory reads "
                                     "64-bit integer ids; read the log in memory to take such ids as names)",
                                     self.path) from None
                raise InputError("node ids that are not integers are not supported with --max-memory (max_memory); "
                                 "read the log in memory, or map the ids to integers first", self.path) from None
            raise InputError(f"cannot parse: {arrow_reason(exc)}", self.path) from None
        finally:
            raw.close()

