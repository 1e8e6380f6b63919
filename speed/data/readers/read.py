"""``read_events``: a log file into :class:`~speed.Events`, whatever its format."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

import numpy as np

from ...errors import InputError
from .. import _kernels
from ..events import Events
from .columns import WHAT, check_distinct, id_column, label_column, resolve_column, time_column, whole_labels
from .formats import FORMAT_SPECS, FORMATS
from .ids import compact
from .parquet import read_parquet
from .sniff import sniff
from .split_column import split_column_times
from .text import damaged_gzip, read_fast, read_text, row_to_line
from .textio import Column, is_gzip, is_number, is_parquet
from .times import DATETIME

def opened_as_parquet(path: Path, fmt: Optional[str], cols_in: dict) -> bool:
    """The checks every reader makes of its input before reading it (there, a file, not empty,
    a known ``fmt``), and whether it is read as Parquet; then ``cols_in``'s unnamed src, dst
    and t columns take Parquet's default names (in place)."""
    if not path.exists():
        raise InputError("file not found", path)
    if not path.is_file():
        raise InputError("not a file", path)
    if path.stat().st_size == 0:
        raise InputError("file is empty", path, 1)
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})", path)
    if not (FORMAT_SPECS[fmt].columnar if fmt is not None else is_parquet(path)):
        return False
    for k, default in zip(("src", "dst", "t"), FORMAT_SPECS["parquet"].columns(0)):
        if cols_in[k] is None:
            cols_in[k] = default
    return True


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
    fmt : {"dyglib", "tgl", "jodie", "snap", "csv", "parquet"}, optional
        Detected from the content when omitted (:data:`~speed.data.readers.formats.FORMAT_SPECS`,
        in table order): a ``,u,i,ts,label,idx`` header is DyGLib, a ``,src,dst,time`` header
        TGL, a ``user,item,timestamp[,label,features...]`` header JODIE (items get ids after
        users; columns 4+ become ``msg``), whitespace without a header SNAP, anything else
        generic delimited text.
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
        Stable-sort unsorted logs by time (reported in ``meta.sorted_input``);
        ``False`` refuses them.
    progress : bool, optional
        Progress bar on stderr; default on when stderr is a terminal.
    block_size : int
        Bytes per block of the streaming reader.
    split_col : int or str, optional
        A column that assigns each event to ``train``, ``val`` or ``test`` (or 0, 1, 2, as
        TGL's ``ext_roll``).  The periods must follow each other in time; they become the
        split times in ``meta.split_times``, which ``speed partition`` and ``speed
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
    cols_in = {"src": src_col, "dst": dst_col, "t": time_col, "label": label_col}
    msg_cols: List[int] = []
    if opened_as_parquet(path, fmt, cols_in):
        col, nrows, cols, col_names = read_parquet(path, cols_in, progress)
        fmt, gz, lay, fast, text_time = "parquet", False, None, None, False
        if nrows == 0:
            raise InputError("no events in the file", path)
    else:
        gz, lay, cols, msg_cols, text_time = text_source(path, fmt, cols_in, sep, header, time_format)
        col_names = None
        if split_col is not None:  # in a JODIE-style log the split column is no feature, nor the default label
            k = resolve_column(split_col, lay.header, lay.ncols, "split", path, lay.first_data_line)
            msg_cols = [c for c in msg_cols if c != k]
            if cols.get("label") == k and label_col is None:
                cols["label"] = None
        fmt = lay.fmt
        fast = read_fast(path, gz, lay, cols, msg_cols, text_time, progress)
        if fast is None:
            with damaged_gzip(path, gz):
                col, nrows = read_text(path, gz, lay, cols, msg_cols, block_size, progress, text_time)

    def where(row: int):
        if lay is None:
            return dict(path=path, line=None), f"row {row + 1}: "
        return dict(path=path, line=row_to_line(path, gz, lay.first_data_line, row)), ""

    if lay is not None and fast is not None:  # checked by the parser: ids present, times finite numbers
        ids, t = [fast.pop("src"), fast.pop("dst")], fast.pop("t")
        label = whole_labels(fast.pop("label")) if "label" in fast else None
    else:
        ids = [id_column(col(cols[what]), what, where) for what in ("src", "dst")]
        t = time_column(col(cols["t"]), time_format, path, where)
        label = None if cols.get("label") is None else label_column(col(cols["label"]), where)
    msg = None
    if msg_cols:
        msg = np.stack([col(k).to_numpy(zero_copy_only=False) for k in msg_cols], axis=1).astype(np.float32)
    spec = FORMAT_SPECS[fmt]
    extra = spec.extras(path, lay, t, msg) if spec.extras is not None else {}
    msg = extra.get("msg", msg)
    split_times = extra.get("split_times")
    if split_col is not None:
        split_times = split_column_times(path, gz, lay, split_col, t, cols)

    if not sort:  # refused here rather than in Events, to name the line
        k = int(_kernels.first_unsorted(t))
        if k >= 0:
            info, prefix = where(k)
            raise InputError(f"{prefix}time {t[k]} is earlier than the previous event's {t[k - 1]} (unsorted input)",
                             **info)
    # the order of the times as read, before any sort: a sign of a wrongly guessed time column
    out_of_order = int(np.count_nonzero(t[1:] < t[:-1])) if t.size > 1 else 0
    bipartite = spec.bipartite
    src, dst, node_ids = compact(ids[0], ids[1], bipartite=bipartite)
    ev = Events.from_arrays(src, dst, t, msg=msg, label=label, node_ids=node_ids,
                            bipartite=True if bipartite else None, remap=False, sort=sort)
    ev.meta.update(source=str(path), format=fmt)
    names = lay.header if lay is not None else col_names
    ev.meta.columns = {k: column_label(cols[k], names) for k in ("src", "dst", "t", "label")
                          if cols.get(k) is not None}
    ev.meta.out_of_order_rows = out_of_order
    if lay is not None and text_time:
        ev.meta.time_text = "iso"
    if time_col is None and not FORMAT_SPECS[fmt].names_time:
        _check_guessed_time(ev, path)
    if lay is not None:
        ev.meta.update(first_data_line=lay.first_data_line, gzip=gz)
    if split_times is not None:
        ev.meta.split_times = split_times
    return ev


_ROLES = {"src": "source", "dst": "destination", "t": "time"}


def _header_name(label) -> Optional[str]:
    """The header name in a :func:`column_label` (``'time' (column 3)``), None without a header."""
    m = re.fullmatch(r"'(.*)' \(column \d+\)", str(label or ""))
    return m.group(1) if m else None


def check_same_columns(old: Optional[dict], new: Optional[dict], where, whose: str) -> None:
    """Refuse events read with a header that gives a column another role than it had in the
    log they continue (``old``, ``meta.columns`` as recorded by ``whose``): ``dest,src,ts``
    taken in after ``src,dst,ts`` would reverse every edge.  A column named anew (``from``
    where the log had ``src``) is taken as it is: only a name that meant another column is a
    contradiction."""
    before = {k: _header_name(v) for k, v in (old or {}).items()}
    now = {k: _header_name(v) for k, v in (new or {}).items()}
    for role in _ROLES:
        name = now.get(role)
        if name is None or name == before.get(role):
            continue
        other = next((r for r in _ROLES if r != role and before.get(r) == name), None)
        if other is not None:
            raise InputError(f"column '{name}' is read as the {_ROLES[role]} here but was the {_ROLES[other]} in "
                             f"{whose}: the columns are in another order (choose them with --src-col, --dst-col "
                             f"and --time-col)", where)


class ColumnGuessWarning(UserWarning):
    """A column ``speed`` chose by default looks like something else."""


def column_label(k: int, names) -> str:
    """``'time' (column 3)`` with a header, ``column 3`` without (0-based, as the flags take it)."""
    name = names[k] if names is not None and k < len(names) else None
    return f"'{name}' (column {k})" if name not in (None, "") else f"column {k}"


def time_guess(column: str, n: int, out_of_order: int, distinct: int, t_first: float, t_last: float,
               whole: bool) -> Optional[str]:
    """Why a time column taken by default does not look like time, in words, or None: many rows
    out of order in the file, or a few small whole numbers (a rating, a label).  ``t_first`` and
    ``t_last`` are the smallest and largest times, ``distinct`` their distinct values, ``whole``
    whether every one is a whole number."""
    if n < 50:
        return None
    reasons = []
    if out_of_order > 0.05 * (n - 1):
        reasons.append(f"{100 * out_of_order / (n - 1):.0f}% of its rows are earlier than the row before")
    if distinct <= 10 and t_first >= -10 and t_last <= 10 and whole:
        reasons.append(f"it holds only {distinct} distinct small whole numbers ({t_first:g} to {t_last:g}), like a "
                       "rating or a label")
    return f"the time was taken from {column} by default, but {' and '.join(reasons)}" if reasons else None


def _check_guessed_time(ev: Events, path: Path) -> None:
    """Record (``meta.time_guess``) and warn, naming the flag, when the time column taken by
    default does not look like time (:func:`time_guess`)."""
    t = ev.t_float()
    if t.size == 0:
        return
    distinct = int(np.count_nonzero(t[1:] != t[:-1])) + 1
    ev.meta.time_guess = time_guess(ev.meta.columns["t"], len(ev), ev.meta.out_of_order_rows or 0, distinct,
                                    float(t[0]), float(t[-1]), bool(np.all(t == np.round(t))))
    if ev.meta.time_guess:
        import warnings

        warnings.warn(f"{path}: {ev.meta.time_guess}; if the time is in another column, pass --time-col "
                      "(time_col=)", ColumnGuessWarning, stacklevel=3)


def event_line(events: Events, k: int) -> Optional[int]:
    """The 1-based line of the text file ``events`` was read from that holds its event
    ``k`` (a position in the sorted log), or None when it did not come from a text file.
    For error messages about an event found after reading."""
    meta = events.meta
    if meta.first_data_line is None:
        return None
    order = meta.input_order
    row = int(order[k]) if order is not None else int(k)
    return row_to_line(Path(meta.source), meta.gzip, meta.first_data_line, row)


def text_source(path: Path, fmt: Optional[str], cols_in: dict, sep: Optional[str], header: Optional[bool],
                time_format: Optional[str]):
    """Sniff a text log and resolve its columns: ``(gz, layout, cols, msg_cols, text_time)``.

    ``cols_in`` maps src/dst/t/label to what the user gave (None: the format's default).
    """
    cols_in = dict(cols_in)
    gz = is_gzip(path)
    with damaged_gzip(path, gz):
        lay = sniff(path, gz, fmt, sep, header, cols_in["t"], time_format)
    spec = FORMAT_SPECS[lay.fmt]
    label_given = cols_in["label"] is not None
    for k, default in zip(("src", "dst", "t", "label"), spec.columns(lay.ncols)):
        if cols_in[k] is None:
            cols_in[k] = default
    line = lay.first_data_line
    cols = {k: resolve_column(v, lay.header, lay.ncols, WHAT[k], path, line) for k, v in cols_in.items()}
    check_distinct(cols, path)
    msg_cols: List[int] = []
    if spec.features_from is not None and not label_given and lay.ncols > spec.features_from:
        msg_cols = list(range(spec.features_from, lay.ncols))
    probe = lay.first_fields[cols["t"]].strip()
    text_time = time_format is not None or (not is_number(probe) and bool(DATETIME.match(probe)))
    return gz, lay, cols, msg_cols, text_time

