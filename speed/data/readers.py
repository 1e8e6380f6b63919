"""Readers for event logs: JODIE CSV, SNAP whitespace, TGL edges.csv, generic text, Parquet.

Files are read in blocks by pyarrow's streaming CSV reader (multi-threaded C++,
never a Python loop per line).  Python only walks lines on the error path, to name
the exact line of a problem.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import math
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from .._util import progress_bar
from ..errors import InputError
from . import _kernels, blocks
from .events import Events

Column = Union[int, str, None]

_JODIE_NAMES = (
    {"user_id", "user", "u", "src"},
    {"item_id", "item", "i", "dst"},
    {"timestamp", "ts", "time", "t"},
)


@dataclass(frozen=True)
class FormatSpec:
    """What the reader knows about one input format.

    Attributes
    ----------
    name : str
    detect : callable or None
        ``detect(fields, sep) -> bool`` on the first record of a text file; formats are
        tried in table order, the first match wins.  None: never detected from text.
    header : bool or None
        Whether the first record is a header; None: decided from the time field.
    columns : callable
        ``columns(ncols) -> (src, dst, t, label)`` default columns (index or name).
    bipartite : bool
        Sources and destinations are different node sets (destinations get ids after sources).
    features_from : int or None
        First edge-feature column (``msg``) when the record has more columns.
    """

    name: str
    detect: Optional[Callable[[List[str], str], bool]]
    header: Optional[bool]
    columns: Callable[[int], Tuple[Column, Column, Column, Column]]
    bipartite: bool = False
    features_from: Optional[int] = None


def _low(fields: List[str]) -> List[str]:
    return [x.strip().lower() for x in fields]


def _is_tgl(fields, sep) -> bool:
    low = _low(fields)
    return sep == "," and bool(low) and low[0] == "" and "src" in low and "dst" in low


def _is_jodie(fields, sep) -> bool:
    low = _low(fields)
    return len(low) >= 3 and all(low[k] in names for k, names in enumerate(_JODIE_NAMES)) \
        and low[:3] != ["src", "dst", "t"]


def _is_dyglib(fields, sep) -> bool:
    low = _low(fields)
    return sep == "," and low[:4] == ["", "u", "i", "ts"]


def _is_snap(fields, sep) -> bool:
    return sep in (" ", "\t") and all(_is_number(x) or x == "" for x in fields[:3])


_FIRST_THREE = (lambda ncols: (0, 1, 2, None))

# To add a text format: a row here (and its detection function); detection runs in this order.
FORMAT_SPECS: Dict[str, FormatSpec] = {f.name: f for f in (
    FormatSpec("dyglib", _is_dyglib, header=True, columns=lambda ncols: ("u", "i", "ts", "label" if ncols > 4 else None)),
    FormatSpec("tgl", _is_tgl, header=True, columns=lambda ncols: ("src", "dst", "time", None)),
    FormatSpec("jodie", _is_jodie, header=True, columns=lambda ncols: (0, 1, 2, 3 if ncols > 3 else None),
               bipartite=True, features_from=4),
    FormatSpec("snap", _is_snap, header=False, columns=_FIRST_THREE),
    FormatSpec("csv", lambda fields, sep: True, header=None, columns=_FIRST_THREE),
    FormatSpec("parquet", None, header=True, columns=_FIRST_THREE),
)}
FORMATS = tuple(FORMAT_SPECS)
_SNIFF_BYTES = 1 << 16
_WHAT = {"src": "src", "dst": "dst", "t": "time", "label": "label"}


# ---------------------------------------------------------------------------- sniffing
def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def _open_text(path: Path, gz: bool):
    raw = gzip.open(path, "rb") if gz else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


@dataclass
class _Layout:
    """What sniffing the head of a text file found."""

    fmt: str
    sep: str
    skip: int  # comment and blank lines before the first record
    header: Optional[List[str]]  # column names when the first record is a header
    ncols: int  # fields in the first data record
    first_data_line: int  # 1-based line number of the first data record
    first_fields: List[str] = None  # the first data record, split
    irregular: bool = False  # the head has separator runs or edge whitespace (whitespace-separated files)


def _split(line: str, sep: str) -> List[str]:
    if sep == " ":  # whitespace-separated: runs of spaces and tabs are one separator
        return line.split()
    return next(csv.reader([line.rstrip("\r\n")], delimiter=sep))


_COMMENT_LINE = re.compile(rb"(?m)^[ \t]*[#%][^\n]*(?:\n|\Z)")
_WHITESPACE = re.compile(rb"[ \t]+")
_LINE_EDGES = re.compile(rb"(?m)^ | (?=\r?$)")


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith(("#", "%"))


class _CleanStream:
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

    def read(self, n: int = -1) -> bytes:
        while not self.eof and (n < 0 or len(self.buf) < n):
            chunk = self.raw.read(self.block)
            if not chunk:
                self.eof, data, self.tail = True, self.tail, b""
            else:
                data = self.tail + chunk
                cut = data.rfind(b"\n") + 1  # whole lines only; the rest waits for the next block
                data, self.tail = data[:cut], data[cut:]
            self.buf += self._clean(data)
        if n < 0 or n >= len(self.buf):
            out, self.buf = self.buf, b""
        else:
            out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _looks_like_time(value: str, time_format: Optional[str]) -> bool:
    """Whether a field reads as a time (so its record is data, not a header)."""
    if _is_number(value) or _DATETIME.match(value):
        return True
    if time_format is not None:
        import datetime

        try:
            datetime.datetime.strptime(value, time_format)
            return True
        except ValueError:
            return False
    return False


def _sniff(path: Path, gz: bool, fmt: Optional[str], sep: Optional[str], header: Optional[bool],
           time_col: Column, time_format: Optional[str] = None) -> _Layout:
    with _open_text(path, gz) as f:
        head = f.read(_SNIFF_BYTES)
        if len(head) == _SNIFF_BYTES:
            head += f.readline()
    lines = head.splitlines()
    skip = 0
    while skip < len(lines) and (not lines[skip].strip() or lines[skip].lstrip().startswith(("#", "%"))):
        skip += 1
    if skip == len(lines):
        raise InputError("file is empty (no records)", path, 1)
    first = lines[skip]
    if sep is None:
        sep = "," if "," in first else "\t" if "\t" in first else ";" if ";" in first else " "
    if sep == "\t" and fmt in (None, "snap") and _is_snap(first.split(), " ") and len(first.split("\t")) != \
            len(first.split()):
        sep = " "  # a SNAP file mixing tabs and spaces: whitespace-separated
    fields = _split(first, sep)

    if fmt is None:
        fmt = next(f.name for f in FORMAT_SPECS.values() if f.detect is not None and f.detect(fields, sep))

    if header is None:
        header = FORMAT_SPECS[fmt].header
    if header is None:
        if isinstance(time_col, str):
            header = True
        else:
            tpos = 2 if time_col is None else int(time_col)
            probe = fields[tpos] if 0 <= tpos < len(fields) else fields[-1]
            header = not _looks_like_time(probe.strip(), time_format)
    names = [x.strip() for x in fields] if header else None
    data_idx = skip + (1 if header else 0)
    while data_idx < len(lines) and (not lines[data_idx].strip() or _is_comment(lines[data_idx])):
        data_idx += 1
    if data_idx >= len(lines):
        if header:
            raise InputError("no events after the header", path, skip + 2)
        raise InputError("file is empty (no records)", path, 1)
    first_fields = _split(lines[data_idx], sep)
    irregular = sep == " " and any(ln != " ".join(ln.split()) for ln in lines[data_idx:data_idx + 1000]
                                   if ln.strip() and not _is_comment(ln))
    return _Layout(fmt=fmt, sep=sep, skip=skip, header=names, ncols=len(first_fields), first_data_line=data_idx + 1,
                   first_fields=first_fields, irregular=irregular)


# ------------------------------------------------------------------------- columns
def _resolve(col: Column, names: Optional[Sequence[str]], ncols: int, what: str, path: Path,
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


def _check_distinct(cols: dict, path: Path) -> None:
    used = [(k, v) for k, v in cols.items() if v is not None]
    for a in range(len(used)):
        for b in range(a + 1, len(used)):
            if used[a][1] == used[b][1]:
                raise InputError(f"{_WHAT[used[a][0]]} and {_WHAT[used[b][0]]} are the same column "
                                 f"({used[a][1]})", path)


# ----------------------------------------------------------------- error diagnosis
def _row_to_line(path: Path, gz: bool, first_data_line: int, row: int) -> int:
    """1-based line of data row ``row`` (0-based), skipping blank lines like the reader does."""
    with _open_text(path, gz) as f:
        count = -1
        for lineno, line in enumerate(f, start=1):
            if lineno < first_data_line or not line.strip() or _is_comment(line):
                continue
            count += 1
            if count == row:
                return lineno
    return first_data_line + row


def _diagnose(path: Path, gz: bool, lay: _Layout, cols: dict, text_time: bool = False) -> None:
    """Walk the records in Python to name the first bad line.  Error path only."""
    with _open_text(path, gz) as f:
        reader = csv.reader(f, delimiter=lay.sep) if lay.sep != " " else (ln.split() for ln in f)
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
                if not _is_number(raw):
                    raise InputError(f"label {raw!r} is not a number", path, lineno)


@contextlib.contextmanager
def _damaged_gzip(path: Path, gz: bool):
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


# ------------------------------------------------------------------- column checks
# ``where(row)`` gives the error location of a 0-based data row: (kwargs of InputError, prefix).

def _id_column(c, what: str, where):
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


def _time_column(t_col, time_format: Optional[str], path: Path, where) -> np.ndarray:
    """Times as float64: numbers as they are, date-times in epoch seconds; all finite."""
    if pa.types.is_string(t_col.type) or pa.types.is_large_string(t_col.type) or pa.types.is_timestamp(t_col.type):
        t_col = _epoch_seconds(t_col, time_format, path, where)
    if not (pa.types.is_floating(t_col.type) or pa.types.is_integer(t_col.type)):
        raise InputError(f"time column has type {t_col.type}, expected numbers or date-times", path)
    t = t_col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    bad = np.flatnonzero(~np.isfinite(t))
    if bad.size:
        loc, prefix = where(int(bad[0]))
        what = "missing" if t_col.null_count and t_col.is_null()[int(bad[0])].as_py() else f"{t[bad[0]]}, not finite"
        raise InputError(f"{prefix}time is {what}", **loc)
    return t


def _label_column(c, where) -> np.ndarray:
    """Labels as int64 when they are whole numbers, else float64; missing labels are errors."""
    lab = c.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if np.isnan(lab).any():
        loc, prefix = where(int(np.flatnonzero(np.isnan(lab))[0]))
        raise InputError(f"{prefix}missing label", **loc)
    return _whole_labels(lab)


def _whole_labels(lab: np.ndarray) -> np.ndarray:
    return lab.astype(np.int64) if np.all(lab == np.round(lab)) else lab


# ------------------------------------------------------------------------ date-times
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)?$")
_ZONED = re.compile(r"[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)$")


def _cast_times(strings: pa.Array, time_format: Optional[str]) -> pa.Array:
    """Strings to timestamp[us] (UTC): by ``strptime`` format, or ISO-8601 with or without a zone."""
    if time_format is not None:
        return pc.strptime(strings, format=time_format, unit="us", error_is_null=False)
    first = strings[0].as_py().strip() if len(strings) else ""
    zoned = bool(_ZONED.search(first))  # a zone after a time of day (a bare date's "-02" is none)
    trimmed = pc.utf8_trim_whitespace(strings)
    if zoned:
        return pc.cast(trimmed, pa.timestamp("us", tz="UTC"))
    return pc.cast(trimmed, pa.timestamp("us"))


def _epoch_seconds(column, time_format: Optional[str], path: Path, where) -> pa.Array:
    """Date-times (strings or Arrow timestamps) as float64 seconds since 1970-01-01 UTC.

    A value that does not parse is reported with its line (found by bisection, so the
    error path costs a few extra casts, not a Python loop over the rows).
    """
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_timestamp(column.type):
        ts = column
    else:
        nulls = column.is_null()
        if column.null_count:
            row = int(np.flatnonzero(nulls.to_numpy(zero_copy_only=False))[0])
            loc, prefix = where(row)
            raise InputError(f"{prefix}time is missing", **loc)
        try:
            ts = _cast_times(column, time_format)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            lo, hi = 0, len(column)  # the first row that does not parse lies in [lo, hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                try:
                    _cast_times(column.slice(lo, mid - lo), time_format)
                    lo = mid
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    hi = mid
            loc, prefix = where(lo)
            how = f"does not match --time-format {time_format!r}" if time_format else \
                "is not a number or an ISO-8601 date-time"
            raise InputError(f"{prefix}time {column[lo].as_py()!r} {how}", **loc) from None
    unit = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[ts.type.unit]
    micros = pc.cast(ts.cast(pa.timestamp(ts.type.unit)), pa.int64())  # drop the zone: values are UTC
    return pc.divide(pc.cast(micros, pa.float64()), unit)


# ------------------------------------------------------------------------ text read
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
def _read_text(path: Path, gz: bool, lay: _Layout, cols: dict, msg_cols: List[int], block_size: int,
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
        skip = lay.first_data_line - 1
        if clean:
            stream, skip = pa.PythonFile(_CleanStream(stream, skip, squeeze=lay.sep == " "), mode="r"), 0
        reader = pacsv.open_csv(
            stream,
            memory_pool=pa.system_memory_pool(),
            read_options=pacsv.ReadOptions(
                skip_rows=skip, column_names=names, block_size=block_size,
            ),
            parse_options=pacsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=[names[k] for k in include], column_types=types,
                # only an empty field is missing; "nan" must stay a (rejected) NaN time
                null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=False,
            ),
        )
        batches = []
        size = os.path.getsize(path)
        with progress_bar(size, f"read {path.name}", unit="B", progress=progress) as bar:
            for batch in reader:
                batches.append(batch)
                bar.update(raw.tell() - bar.n)
        raw.close()
        return pa.Table.from_batches(batches, schema=reader.schema)

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
        _diagnose(path, gz, lay, cols, text_time)
        raise InputError(f"cannot parse: {exc}", path) from None

    columns = {k: table.column(names[k]) for k in include}
    nrows = table.num_rows
    del table
    # Each column is popped when converted, so its arrow buffers are freed as soon as
    # the numpy copy exists: peak memory stays near one column above the result.
    return columns.pop, nrows


def _read_fast(path: Path, gz: bool, lay: _Layout, cols: dict, msg_cols: List[int], text_time: bool,
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


def _read_parquet(path: Path, cols_in: dict, progress: Optional[bool]):
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(str(path))
    names = pf.schema_arrow.names
    cols = {k: _resolve(v, names, len(names), _WHAT[k], path, 1) for k, v in cols_in.items()}
    _check_distinct(cols, path)
    with progress_bar(pf.metadata.num_rows, f"read {path.name}", unit="ev", progress=progress) as bar:
        batches = []
        for batch in pf.iter_batches(columns=[names[v] for v in set(c for c in cols.values() if c is not None)]):
            batches.append(batch)
            bar.update(batch.num_rows)
    table = pa.Table.from_batches(batches) if batches else pf.read(columns=[])
    columns = {k: table.column(names[k]) for k in set(c for c in cols.values() if c is not None)}
    return columns.pop, table.num_rows, cols


# -------------------------------------------------------------------------- public
def read_events(
    path,
    fmt: Optional[str] = None,
    src_col: Column = None,
    dst_col: Column = None,
    time_col: Column = None,
    label_col: Column = None,
    sep: Optional[str] = None,
    header: Optional[bool] = None,
    sort: bool = True,
    progress: Optional[bool] = None,
    block_size: int = 1 << 24,
    time_format: Optional[str] = None,
    split_col: Column = None,
) -> Events:
    """Read a timestamped event log into :class:`~speed.Events`.

    Parameters
    ----------
    path : path-like
        A text file (optionally ``.gz``) or a Parquet file.
    fmt : {"jodie", "snap", "tgl", "csv", "parquet"}, optional
        Detected from the content when omitted: a ``,src,dst,time`` header is TGL, a
        ``user,item,timestamp[,label,features...]`` header is JODIE (items get ids
        after users; columns 4+ become ``msg``), whitespace without a header is SNAP,
        anything else generic delimited text.
    src_col, dst_col, time_col, label_col : int or str, optional
        Columns by 0-based index or by header name.  Without them columns 0, 1 and 2
        are ``src``, ``dst`` and ``t`` (TGL: ``src``, ``dst``, ``time``; JODIE: label 3).
    sep : str, optional
        Field delimiter; sniffed from the first record when omitted.
    header : bool, optional
        Whether the first record is a header; detected when omitted (the time field of
        a header is not a number).
    time_format : str, optional
        A ``strptime`` format for the time column (e.g. ``"%d/%m/%Y %H:%M"``).  Without it
        numbers are read as they are, and ISO-8601 / ``YYYY-MM-DD HH:MM:SS[.fff]`` times,
        with or without a zone (``Z``, ``+02:00``; none means UTC), are detected and
        converted to epoch seconds.
    sort : bool
        Stable-sort unsorted logs by time (reported in ``meta['sorted_input']``);
        ``False`` refuses them.
    progress : bool, optional
        Progress bar on stderr; default on when stderr is a terminal.
    block_size : int
        Bytes per block of the streaming reader.
    split_col : int or str, optional
        A column that assigns each event to ``train``, ``val`` or ``test`` (or 0, 1, 2, as
        TGL's ``ext_roll``).  The periods must follow each other in time; they become the
        split times in ``meta["split_times"]``, which ``speed partition`` and ``speed
        train`` use as the chronological split.

    Returns
    -------
    Events

    Raises
    ------
    InputError
        One line naming the file, the line and the problem.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path)
    if not path.is_file():
        raise InputError("not a file", path)
    if path.stat().st_size == 0:
        raise InputError("file is empty", path, 1)
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})", path)

    cols_in = {"src": src_col, "dst": dst_col, "t": time_col, "label": label_col}
    msg_cols: List[int] = []
    if fmt == "parquet" or (fmt is None and _is_parquet(path)):
        for k, default in zip(("src", "dst", "t"), FORMAT_SPECS["parquet"].columns(0)):
            if cols_in[k] is None:
                cols_in[k] = default
        col, nrows, cols = _read_parquet(path, cols_in, progress)
        fmt, gz, lay, fast = "parquet", False, None, None
        if nrows == 0:
            raise InputError("no events in the file", path)
    else:
        gz, lay, cols, msg_cols, text_time = _text_source(path, fmt, cols_in, sep, header, time_format)
        if split_col is not None:  # in a JODIE-style log the split column is no feature, nor the default label
            k = _resolve(split_col, lay.header, lay.ncols, "split", path, lay.first_data_line)
            msg_cols = [c for c in msg_cols if c != k]
            if cols.get("label") == k and label_col is None:
                cols["label"] = None
        fmt = lay.fmt
        fast = _read_fast(path, gz, lay, cols, msg_cols, text_time, progress)
        if fast is None:
            with _damaged_gzip(path, gz):
                col, nrows = _read_text(path, gz, lay, cols, msg_cols, block_size, progress, text_time)

    def where(row: int):
        if lay is None:
            return dict(path=path, line=None), f"row {row + 1}: "
        return dict(path=path, line=_row_to_line(path, gz, lay.first_data_line, row)), ""

    if lay is not None and fast is not None:  # checked by the parser: ids present, times finite numbers
        ids, t = [fast.pop("src"), fast.pop("dst")], fast.pop("t")
        label = _whole_labels(fast.pop("label")) if "label" in fast else None
    else:
        ids = [_id_column(col(cols[what]), what, where) for what in ("src", "dst")]
        t = _time_column(col(cols["t"]), time_format, path, where)
        label = None if cols.get("label") is None else _label_column(col(cols["label"]), where)
    msg = None
    if msg_cols:
        msg = np.stack([col(k).to_numpy(zero_copy_only=False) for k in msg_cols], axis=1).astype(np.float32)
    if fmt == "dyglib":
        msg = _dyglib_edge_features(path, len(t))
        _check_dyglib_node_features(path)
    split_times = None
    if fmt == "tgl":
        msg = _tgl_edge_features(path, len(t)) if msg is None else msg
        split_times = _tgl_split_times(path, lay, t)
    if split_col is not None:
        split_times = _split_column_times(path, gz, lay, split_col, t, cols)

    if not sort:  # refused here rather than in Events, to name the line
        k = int(_kernels.first_unsorted(t))
        if k >= 0:
            info, prefix = where(k)
            raise InputError(f"{prefix}time {t[k]} is earlier than the previous event's {t[k - 1]} (unsorted input)",
                             **info)
    bipartite = FORMAT_SPECS[fmt].bipartite
    src, dst, node_ids = _compact(ids[0], ids[1], bipartite=bipartite)
    ev = Events.from_arrays(src, dst, t, msg=msg, label=label, node_ids=node_ids,
                            bipartite=True if bipartite else None, remap=False, sort=sort)
    ev.meta.update(source=str(path), format=fmt)
    if lay is not None:
        ev.meta.update(first_data_line=lay.first_data_line, gzip=gz)
    if split_times is not None:
        ev.meta["split_times"] = split_times
    return ev


def event_line(events: Events, k: int) -> Optional[int]:
    """The 1-based line of the text file ``events`` was read from that holds its event
    ``k`` (a position in the sorted log), or None when it did not come from a text file.
    For error messages about an event found after reading."""
    meta = events.meta
    if "first_data_line" not in meta:
        return None
    order = meta.get("input_order")
    row = int(order[k]) if order is not None else int(k)
    return _row_to_line(Path(meta["source"]), meta["gzip"], meta["first_data_line"], row)


def _tgl_edge_features(path: Path, num_events: int) -> Optional[np.ndarray]:
    """TGL's ``edge_features.pt`` beside ``edges.csv`` (one row per line of the file), or None."""
    pt = path.parent / "edge_features.pt"
    if not pt.exists():
        return None
    import torch

    try:
        feats = torch.load(pt, map_location="cpu")
    except Exception as exc:  # truncated, or not a torch file
        raise InputError(f"unreadable edge features ({type(exc).__name__}: {exc})", pt) from None
    if not isinstance(feats, torch.Tensor) or feats.dim() != 2 or feats.shape[0] != num_events:
        shape = tuple(feats.shape) if isinstance(feats, torch.Tensor) else type(feats).__name__
        raise InputError(f"edge features must be a tensor of {num_events} rows (one per edge), got {shape}", pt)
    return feats.to(torch.float32).numpy()


def _tgl_split_times(path: Path, lay: _Layout, t: np.ndarray) -> Optional[tuple]:
    """TGL's ``ext_roll`` (0 train, 1 val, 2 test) as split times ``(last train time, last val
    time)``, when the file has the column and every period has events."""
    if lay is None or lay.header is None or "ext_roll" not in [h.strip() for h in lay.header]:
        return None
    try:
        roll = pacsv.read_csv(str(path), convert_options=pacsv.ConvertOptions(
            include_columns=["ext_roll"], column_types={"ext_roll": pa.int64()})).column("ext_roll").to_numpy()
    except pa.ArrowInvalid as exc:
        raise InputError(f"ext_roll must be 0 (train), 1 (val) or 2 (test) on every line ({exc})", path) from None
    if roll.size != t.size or not np.isin(roll, (0, 1, 2)).all():
        raise InputError("ext_roll must be 0 (train), 1 (val) or 2 (test) on every line", path)
    periods = [t[roll == k] for k in range(3)]
    if any(p.size == 0 for p in periods):
        return None
    if not (periods[0].max() < periods[1].min() and periods[1].max() < periods[2].min()):
        raise InputError("ext_roll's periods overlap in time, so they cannot be a chronological split "
                         "(drop the column to split by fractions)", path)
    return float(periods[0].max()), float(periods[1].max())


_PERIOD_NAMES = {"0": 0, "train": 0, "1": 1, "val": 1, "valid": 1, "validation": 1, "2": 2, "test": 2}


def _split_column_times(path: Path, gz: bool, lay: Optional[_Layout], split_col: Column, t: np.ndarray,
                        cols: dict) -> tuple:
    """A user's split column (train/val/test or 0/1/2 per event, in file order) as split
    times ``(last train time, last val time)``; periods must follow each other in time."""
    if lay is None:  # parquet
        import pyarrow.parquet as pq

        names = pq.ParquetFile(str(path)).schema_arrow.names
        k = _resolve(split_col, names, len(names), "split", path, 1)
        column = pq.read_table(str(path), columns=[names[k]]).column(0)
        line_of = (lambda row: None)
    else:
        k = _resolve(split_col, lay.header, lay.ncols, "split", path, lay.first_data_line)
        names = [f"c{i}" for i in range(lay.ncols)]
        with _damaged_gzip(path, gz):
            raw = pa.OSFile(str(path), "rb")
            stream = pa.CompressedInputStream(raw, "gzip") if gz else raw
            # comments, blank lines and runs of spaces go as the event reader skips them
            stream = pa.PythonFile(_CleanStream(stream, lay.first_data_line - 1, squeeze=lay.sep == " "), mode="r")
            try:
                column = pacsv.read_csv(
                    stream, read_options=pacsv.ReadOptions(column_names=names),
                    parse_options=pacsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True),
                    convert_options=pacsv.ConvertOptions(include_columns=[names[k]],
                                                         column_types={names[k]: pa.string()})).column(0)
            finally:
                raw.close()
        line_of = (lambda row: _row_to_line(path, gz, lay.first_data_line, row))
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


def dyglib_feature_file(path: Path) -> Path:
    """``ml_NAME.npy`` beside ``ml_NAME.csv``: DyGLib's edge features, row ``idx`` per event."""
    return path.with_suffix(".npy")


def _dyglib_edge_features(path: Path, num_events: int) -> Optional[np.ndarray]:
    """Edge features of a DyGLib/TGN processed log (``ml_NAME.csv`` + ``ml_NAME.npy``), or None
    when there is no ``.npy``.  Row ``idx`` of the array belongs to the event with that ``idx``
    (row 0 is DyGLib's padding)."""
    npy = dyglib_feature_file(path)
    if not npy.exists():
        return None
    try:
        feats = np.load(npy, mmap_mode="r")
    except Exception as exc:  # truncated or not an .npy
        raise InputError(f"unreadable edge features ({type(exc).__name__}: {exc})", npy) from None
    if feats.ndim != 2:
        raise InputError(f"edge features must be a 2-D array, got shape {feats.shape}", npy)
    try:
        table = pacsv.read_csv(str(path), convert_options=pacsv.ConvertOptions(include_columns=["idx"],
                                                                               column_types={"idx": pa.int64()}))
    except (pa.ArrowInvalid, KeyError) as exc:
        raise InputError(f"a DyGLib log needs an integer idx column to index ml_NAME.npy ({exc})", path) from None
    if table.num_columns == 0 or table.num_rows != num_events:
        raise InputError("a DyGLib log needs its idx column to match ml_NAME.npy", path)
    idx = table.column("idx").to_numpy()
    if idx.min() < 0 or idx.max() >= feats.shape[0]:
        raise InputError(f"idx goes up to {int(idx.max())} but the edge features have {feats.shape[0]} rows", npy)
    return np.ascontiguousarray(feats[idx], dtype=np.float32)


def _check_dyglib_node_features(path: Path) -> None:
    """``ml_NAME_node.npy``: the models here have no node-feature input, so the features are
    not used.  DyGLib's public logs ship all-zero ones (nothing is lost); real ones get a
    warning rather than being dropped silently."""
    npy = path.with_name(path.stem + "_node.npy")
    if not npy.exists():
        return
    try:
        feats = np.load(npy, mmap_mode="r")
    except Exception as exc:  # truncated or not an .npy
        raise InputError(f"unreadable node features ({type(exc).__name__}: {exc})", npy) from None
    if feats.size and np.any(feats):
        import warnings

        warnings.warn(f"{npy}: node features are not used (speed's models take edge features only); "
                      "they are ignored", stacklevel=3)


def _text_source(path: Path, fmt: Optional[str], cols_in: dict, sep: Optional[str], header: Optional[bool],
                 time_format: Optional[str]):
    """Sniff a text log and resolve its columns: ``(gz, layout, cols, msg_cols, text_time)``.

    ``cols_in`` maps src/dst/t/label to what the user gave (None: the format's default).
    """
    cols_in = dict(cols_in)
    gz = _is_gzip(path)
    with _damaged_gzip(path, gz):
        lay = _sniff(path, gz, fmt, sep, header, cols_in["t"], time_format)
    spec = FORMAT_SPECS[lay.fmt]
    label_given = cols_in["label"] is not None
    for k, default in zip(("src", "dst", "t", "label"), spec.columns(lay.ncols)):
        if cols_in[k] is None:
            cols_in[k] = default
    line = lay.first_data_line
    cols = {k: _resolve(v, lay.header, lay.ncols, _WHAT[k], path, line) for k, v in cols_in.items()}
    _check_distinct(cols, path)
    msg_cols: List[int] = []
    if spec.features_from is not None and not label_given and lay.ncols > spec.features_from:
        msg_cols = list(range(spec.features_from, lay.ncols))
    probe = lay.first_fields[cols["t"]].strip()
    text_time = time_format is not None or (not _is_number(probe) and bool(_DATETIME.match(probe)))
    return gz, lay, cols, msg_cols, text_time


def _compact_ints(s: np.ndarray, d: np.ndarray):
    """Compact int ids: O(E) by marking when they are dense enough, else by sorting.

    ``s`` and ``d`` (int64, owned by the caller) are overwritten with the compact ids and
    returned, with the original id of each compact id.
    """
    both = [a for a in (s, d) if a.size]
    lo = min(int(a.min()) for a in both)
    hi = max(int(a.max()) for a in both)
    if lo >= 0 and hi < 4 * (s.size + d.size) + (1 << 20):
        return s, d, _kernels.compact_dense(s, d, hi)
    ids, inv = np.unique(np.concatenate([s, d]), return_inverse=True)
    s[:] = inv[: s.size]
    d[:] = inv[s.size:]
    return s, d, ids


def _compact(src_col, dst_col, bipartite: bool):
    """Compact ids from two columns: numpy integer arrays, or arrow string columns.

    Integer arrays are renumbered in place when they are int64 (the reader's own arrays).
    Returns int64 src, dst and the original ids.
    """
    if isinstance(src_col, np.ndarray) and isinstance(dst_col, np.ndarray):
        s, d = (a.astype(np.int64, copy=not a.flags.writeable) for a in (src_col, dst_col))
        if bipartite:
            # numbered separately: users first, then items (the JODIE convention)
            none = np.empty(0, dtype=np.int64)
            si, _, us = _compact_ints(s, none)
            di, _, vs = _compact_ints(d, none)
            di += len(us)
            return si, di, np.concatenate([us, vs])
        return _compact_ints(s, d)
    src_col = pa.chunked_array([pa.array(src_col)]) if isinstance(src_col, np.ndarray) else src_col
    dst_col = pa.chunked_array([pa.array(dst_col)]) if isinstance(dst_col, np.ndarray) else dst_col
    src_col = src_col.cast(pa.string())
    dst_col = dst_col.cast(pa.string())
    if bipartite:
        (si, us), (di, vs) = _encode_sorted(src_col.chunks), _encode_sorted(dst_col.chunks)
        return si, di + len(us), np.concatenate([us, vs])
    inv, ids = _encode_sorted(src_col.chunks + dst_col.chunks)
    n = len(src_col)
    return inv[:n], inv[n:], ids


def _encode_sorted(chunks):
    """Dictionary-encode string chunks (in C++), numbering the distinct values in sorted order
    so ids do not depend on the order of first appearance."""
    enc = pa.chunked_array(chunks, type=pa.string()).combine_chunks().dictionary_encode()
    values = enc.dictionary.to_numpy(zero_copy_only=False).astype(str)
    order = np.argsort(values, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[enc.indices.to_numpy().astype(np.int64)], values[order]


# ------------------------------------------------------------------------ streaming
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
        if not self.path.exists():
            raise InputError("file not found", self.path)
        if not self.path.is_file():
            raise InputError("not a file", self.path)
        if self.path.stat().st_size == 0:
            raise InputError("file is empty", self.path, 1)
        if fmt is not None and fmt not in FORMATS:
            raise InputError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})", self.path)
        self.time_format, self.block_size = time_format, block_size
        cols_in = {"src": src_col, "dst": dst_col, "t": time_col, "label": label_col}
        if fmt == "parquet" or (fmt is None and _is_parquet(self.path)):
            import pyarrow.parquet as pq

            names = pq.ParquetFile(str(self.path)).schema_arrow.names
            for k, default in zip(("src", "dst", "t"), FORMAT_SPECS["parquet"].columns(0)):
                cols_in[k] = default if cols_in[k] is None else cols_in[k]
            self.cols = {k: _resolve(v, names, len(names), _WHAT[k], self.path, 1) for k, v in cols_in.items()}
            _check_distinct(self.cols, self.path)
            self.fmt, self.gz, self.lay, self.msg_cols, self.text_time = "parquet", False, None, [], False
            self.names = names
        else:
            self.gz, self.lay, self.cols, self.msg_cols, self.text_time = _text_source(
                self.path, fmt, cols_in, sep, header, time_format)
            self.fmt = self.lay.fmt
        self.bipartite = FORMAT_SPECS[self.fmt].bipartite
        self.has_label = self.cols.get("label") is not None
        if self.fmt == "dyglib" and dyglib_feature_file(self.path).exists():
            raise InputError(f"edge features from {dyglib_feature_file(self.path).name} are read in memory only: "
                             "partition without --max-memory", self.path)

    def line_of(self, row: int) -> Optional[int]:
        """1-based line of 0-based data row ``row`` (None for Parquet)."""
        if self.lay is None:
            return None
        return _row_to_line(self.path, self.gz, self.lay.first_data_line, row)

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

    def _convert(self, column, what: str, row0: int):
        def where(row: int):
            if self.lay is None:
                return dict(path=self.path, line=None), f"row {row0 + row + 1}: "
            return dict(path=self.path, line=self.line_of(row0 + row)), ""

        if what in ("src", "dst"):
            ids = _id_column(column, what, where)
            if not isinstance(ids, np.ndarray):
                raise InputError("node ids that are not integers are not supported with --max-memory (max_memory); "
                                 "read the log in memory, or map the ids to integers first", self.path)
            return ids.astype(np.int64, copy=False)
        if what == "t":
            return _time_column(column, self.time_format, self.path, where)
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
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(str(self.path))
        want = sorted({c for c in self.cols.values() if c is not None})
        row0 = 0
        for batch in pf.iter_batches(batch_size=1 << 22, columns=[self.names[k] for k in want]):
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
        # comments and separator runs are filtered out as the blocks stream (see _CleanStream)
        stream = pa.PythonFile(_CleanStream(stream, lay.first_data_line - 1, squeeze=lay.sep == " "), mode="r")
        row0, last = 0, 0
        try:
            with _damaged_gzip(self.path, self.gz):
                reader = pacsv.open_csv(
                    stream,
                    read_options=pacsv.ReadOptions(column_names=names, block_size=self.block_size),
                    parse_options=pacsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True),
                    convert_options=pacsv.ConvertOptions(include_columns=[names[k] for k in include],
                                                         column_types=types, null_values=[""],
                                                         strings_can_be_null=False, quoted_strings_can_be_null=False))
                for batch in reader:
                    yield self._block(lambda k: batch.column(names[k]), row0, batch.num_rows)
                    row0 += batch.num_rows
                    if on_bytes is not None:
                        on_bytes(raw.tell() - last)
                        last = raw.tell()
        except pa.ArrowInvalid as exc:
            _diagnose(self.path, self.gz, lay, cols, self.text_time)
            if "conversion error to int64" in str(exc):
                raise InputError("node ids that are not integers are not supported with --max-memory (max_memory); "
                                 "read the log in memory, or map the ids to integers first", self.path) from None
            raise InputError(f"cannot parse: {exc}", self.path) from None
        finally:
            raw.close()
