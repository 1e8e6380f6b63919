"""The general text reader: pyarrow's streaming CSV reader in blocks (multi-threaded C++, never
a Python loop per line), a filter for comments and separator runs, and the error path that
names the first bad line (the only place Python walks lines)."""

from __future__ import annotations

import contextlib
import csv
import gzip
import math
import os
import re
import zlib
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ..._util import progress_bar
from ...errors import InputError
from . import blocks
from .textio import Layout, is_comment, is_number, open_text

_COMMENT_LINE = re.compile(rb"(?m)^[ \t]*[#%][^\n]*(?:\n|\Z)")


_WHITESPACE = re.compile(rb"[ \t]+")


_LINE_EDGES = re.compile(rb"(?m)^ | (?=\r?$)")


class CleanStream:
    """A binary stream with the first ``skip`` lines and every comment line (``#``/``%``)
    removed, and, for whitespace-separated files, runs of spaces and tabs made one space.

    pyarrow's CSV reader knows neither comments nor separator runs; this filter runs C-level
    regular expressions over whole blocks (never a Python loop per line), and only for files
    that need it.
    """

    def __init__(self, raw, skip: int, squeeze: bool, block: int = 1 << 22):
        self.raw, self.skip, self.squeeze, self.block = raw, skip, squeeze, block
        self.buf, self.tail, self.eof, self.closed = b"", b"", False, False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def _clean(self, data: bytes) -> bytes:
        while self.skip and data:
            i = data.find(b"\n")
            data = b"" if i < 0 else data[i + 1:]
            self.skip -= 1
        data = _COMMENT_LINE.sub(b"", data)
        if self.squeeze:
            data = _LINE_EDGES.sub(b"", _WHITESPACE.sub(b" ", data))
        return data

    def read_lines(self, n: int) -> bytes:
        """At least ``n`` bytes of whole cleaned lines (fewer only at the end; b"" once done)."""
        while not self.eof and len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf, b""
        return out

    def _fill(self) -> None:
        chunk = self.raw.read(self.block)
        if not chunk:
            self.eof, data, self.tail = True, self.tail, b""
        else:
            data = self.tail + chunk
            cut = data.rfind(b"\n") + 1  # whole lines only; the rest waits for the next block
            data, self.tail = data[:cut], data[cut:]
        self.buf += self._clean(data)

    def read(self, n: int = -1) -> bytes:
        while not self.eof and (n < 0 or len(self.buf) < n):
            self._fill()
        if n < 0 or n >= len(self.buf):
            out, self.buf = self.buf, b""
        else:
            out, self.buf = self.buf[:n], self.buf[n:]
        return out


def clean_tables(clean: CleanStream, block_size: int, **csv_options) -> Iterator[pa.Table]:
    """The records of a cleaned stream, parsed by Arrow one block of whole lines at a time.

    Arrow must not read a Python file object itself: its read-ahead threads then hold
    Python-owned buffers, and one released after an error, while the interpreter exits,
    takes the GIL from a finalising interpreter: ``terminate called without an active
    exception`` and SIGABRT instead of a clean exit 2 (issue 30; apache/arrow#34314).  Here
    the Python side reads and filters on the calling thread, each block is copied into
    Arrow-owned memory, and Arrow parses it synchronously: no Arrow thread ever sees a
    Python object.

    Parameters
    ----------
    clean : CleanStream
    block_size : int
        Bytes of text per parsed block (whole lines, so a block may be a line longer).
    **csv_options
        ``read_options``, ``parse_options``, ``convert_options`` for :func:`pyarrow.csv.read_csv`.
    """
    while True:
        data = clean.read_lines(block_size)
        if not data:
            return
        if not data.strip():
            continue
        buf = pa.allocate_buffer(len(data))
        np.frombuffer(buf, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
        del data
        yield pacsv.read_csv(pa.BufferReader(buf), **csv_options)


def arrow_reason(exc: Exception, limit: int = 200) -> str:
    """The first line of an Arrow error, cut to ``limit`` characters: Arrow quotes the
    offending rows, which may span lines and be arbitrarily long."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def row_to_line(path: Path, gz: bool, first_data_line: int, row: int) -> int:
    """1-based line of data row ``row`` (0-based), skipping blank lines like the reader does."""
    with open_text(path, gz) as f:
        count = -1
        for lineno, line in enumerate(f, start=1):
            if lineno < first_data_line or not line.strip() or is_comment(line):
                continue
            count += 1
            if count == row:
                return lineno
    return first_data_line + row


def diagnose(path: Path, gz: bool, lay: Layout, cols: dict, text_time: bool = False) -> None:
    """Walk the records in Python to name the first bad line.  Error path only."""
    with open_text(path, gz) as f:
        reader = csv.reader(f, delimiter=lay.sep) if lay.sep != " " else (ln.split() for ln in f)
        try:
            _diagnose_records(path, lay, cols, text_time, reader)
        except csv.Error as exc:  # e.g. a field of 200 MB: past the csv module's limit
            raise InputError(f"unreadable line ({exc}): a damaged line, or a quote left open",
                             path, getattr(reader, "line_num", None)) from None


def _diagnose_records(path: Path, lay: Layout, cols: dict, text_time: bool, reader) -> None:
    """The records of :func:`diagnose`, checked one by one."""
    for lineno, fields in enumerate(reader, start=1):
        if lineno < lay.first_data_line or not fields or (len(fields) == 1 and not fields[0].strip()) \
                or fields[0].lstrip().startswith(("#", "%")):
            continue
        if len(fields) != lay.ncols:
            raise InputError(f"expected {lay.ncols} fields, found {len(fields)} (ragged row)", path, lineno)
        for what in ("src", "dst"):
            if not fields[cols[what]].strip():
                raise InputError(f"missing {what} id", path, lineno)
        raw = fields[cols["t"]].strip()
        if text_time:
            if not raw:
                raise InputError("time is missing", path, lineno)
            continue
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"time {raw!r} is not a number", path, lineno) from None
        if not math.isfinite(value):
            raise InputError(f"time {raw!r} is not finite", path, lineno)
        if cols.get("label") is not None:
            raw = fields[cols["label"]].strip()
            if not is_number(raw):
                raise InputError(f"label {raw!r} is not a number", path, lineno)


@contextlib.contextmanager
def damaged_gzip(path: Path, gz: bool):
    """A truncated or corrupt ``.gz`` is bad input: one line, not a decompressor's traceback."""
    try:
        yield
    except InputError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"the gzip stream is truncated or corrupt ({exc or type(exc).__name__})", path) from None
    except (OSError, pa.ArrowException) as exc:
        text = str(exc).lower()
        if gz and any(k in text for k in ("gzip", "zlib", "compress", "inflate", "end of", "truncat")):
            raise InputError(f"the gzip stream is truncated or corrupt ({str(exc).splitlines()[0]})", path) from None
        raise


@contextlib.contextmanager


def _system_pool():
    """Read with the system allocator, then hand freed memory back to the OS.

    Arrow's default pool (mimalloc or jemalloc) keeps the read's I/O buffers -- about the
    size of the file -- after they are freed, which would inflate peak memory for the
    rest of the pipeline.  The default is restored afterwards: no global side effect.
    """
    old = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(old)
        pa.system_memory_pool().release_unused()


def _empty_table(names, include, types) -> pa.Table:
    return pa.table({names[k]: pa.array([], type=types.get(names[k], pa.string())) for k in include})


def read_text(path: Path, gz: bool, lay: Layout, cols: dict, msg_cols: List[int], block_size: int,
              progress: Optional[bool], text_time: bool = False):
    names = [f"c{k}" for k in range(lay.ncols)]
    want = {k: v for k, v in cols.items() if v is not None}
    types = {names[cols["t"]]: pa.string() if text_time else pa.float64()}
    if cols.get("label") is not None:
        types[names[cols["label"]]] = pa.float64()
    for k in msg_cols:
        types[names[k]] = pa.float32()
    include = sorted(set(want.values()) | set(msg_cols))

    def read(id_type, clean: bool):
        for what in ("src", "dst"):
            types[names[cols[what]]] = id_type
        raw = pa.OSFile(str(path), "rb")
        stream = pa.CompressedInputStream(raw, "gzip") if gz else raw
        convert = pacsv.ConvertOptions(
            include_columns=[names[k] for k in include], column_types=types,
            # only an empty field is missing; "nan" must stay a (rejected) NaN time
            null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=False,
        )
        parse = pacsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True)
        size = os.path.getsize(path)
        try:
            with progress_bar(size, f"read {path.name}", unit="B", progress=progress) as bar:
                if clean:
                    tables = []
                    for table in clean_tables(CleanStream(stream, lay.first_data_line - 1, squeeze=lay.sep == " "),
                                              block_size, read_options=pacsv.ReadOptions(column_names=names),
                                              parse_options=parse, convert_options=convert,
                                              memory_pool=pa.system_memory_pool()):
                        tables.append(table)
                        bar.update(raw.tell() - bar.n)
                    return pa.concat_tables(tables) if tables else _empty_table(names, include, types)
                reader = pacsv.open_csv(
                    stream, memory_pool=pa.system_memory_pool(), parse_options=parse, convert_options=convert,
                    read_options=pacsv.ReadOptions(skip_rows=lay.first_data_line - 1, column_names=names,
                                                   block_size=block_size))
                try:
                    batches = []
                    for batch in reader:
                        batches.append(batch)
                        bar.update(raw.tell() - bar.n)
                    return pa.Table.from_batches(batches, schema=reader.schema)
                finally:
                    reader.close()
        finally:
            raw.close()

    def read_any(clean: bool):
        try:
            with _system_pool():
                return read(pa.int64(), clean)
        except pa.ArrowInvalid as exc:
            if "conversion error to int64" not in str(exc):
                raise
            with _system_pool():
                return read(pa.string(), clean)  # ids are not integers: read them as strings

    try:
        try:
            table = read_any(clean=lay.irregular)
        except pa.ArrowInvalid:
            if lay.irregular:
                raise
            # comment lines in mid-file, or separator runs past the head: read again, filtered
            table = read_any(clean=True)
    except pa.ArrowInvalid as exc:
        diagnose(path, gz, lay, cols, text_time)
        raise InputError(f"cannot parse: {arrow_reason(exc)}", path) from None

    columns = {k: table.column(names[k]) for k in include}
    nrows = table.num_rows
    del table
    # Each column is popped when converted, so its arrow buffers are freed as soon as
    # the numpy copy exists: peak memory stays near one column above the result.
    return columns.pop, nrows


def read_fast(path: Path, gz: bool, lay: Layout, cols: dict, msg_cols: List[int], text_time: bool,
              progress: Optional[bool]) -> Optional[Dict[str, np.ndarray]]:
    """Plain numeric records through the numba block parser, or None to use the general reader."""
    fast_lay = blocks.numeric_layout(path, gz, lay.first_data_line, lay.sep, lay.ncols, cols, msg_cols, text_time)
    if fast_lay is None:
        return None
    with progress_bar(os.path.getsize(path), f"read {path.name}", unit="B", progress=progress) as bar:
        try:
            return blocks.read_numeric(fast_lay, on_bytes=bar.update)
        except blocks.GiveUp:
            return None

