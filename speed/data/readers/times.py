"""Times: date-time strings and Arrow timestamps to epoch seconds, with the line of the first
value that does not parse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InputError
from .textio import is_number

DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)?$")


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


def epoch_seconds(column, time_format: Optional[str], path: Path, where) -> pa.Array:
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


def looks_like_time(value: str, time_format: Optional[str]) -> bool:
    """Whether a field reads as a time (so its record is data, not a header)."""
    if is_number(value) or DATETIME.match(value):
        return True
    if time_format is not None:
        import datetime

        try:
            datetime.datetime.strptime(value, time_format)
            return True
        except ValueError:
            return False
    return False

