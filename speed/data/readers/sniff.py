"""Sniffing the head of a text log: separator, format (the detection table), header, first record."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...errors import InputError
from .formats import FORMAT_SPECS
from .textio import Column, Layout, is_comment, open_text, split_fields
from .times import looks_like_time
from .snap import detect as is_snap

SNIFF_BYTES = 1 << 16


# how a separator is named in messages, and how the CLI takes it
_SEP_NAMES = {",": "commas", "\t": "tabs", ";": "semicolons", " ": "spaces"}
_SEP_FLAGS = {",": "','", "\t": "tab", ";": "';'", " ": "space"}


def sniff(path: Path, gz: bool, fmt: Optional[str], sep: Optional[str], header: Optional[bool],
          time_col: Column, time_format: Optional[str] = None) -> Layout:
    with open_text(path, gz) as f:
        head = f.read(SNIFF_BYTES)
        if len(head) == SNIFF_BYTES:
            head += f.readline()
    lines = head.splitlines()
    skip = 0
    while skip < len(lines) and (not lines[skip].strip() or lines[skip].lstrip().startswith(("#", "%"))):
        skip += 1
    if skip == len(lines):
        raise InputError("file is empty (no records)", path, 1)
    first = lines[skip]
    given = sep is not None
    if sep is None:
        sep = "," if "," in first else "\t" if "\t" in first else ";" if ";" in first else " "
        if sep == "\t" and (fmt is None or FORMAT_SPECS[fmt].whitespace) and is_snap(first.split(), " ") and len(first.split("\t")) != \
                len(first.split()):
            sep = " "  # a SNAP file mixing tabs and spaces: whitespace-separated
    fields = split_fields(first, sep)
    if given and len(fields) < 3:  # a separator the user named that does not split the file
        other = next((c for c in (",", "\t", ";", " ") if c != sep and len(split_fields(first, c)) >= 3), None)
        hint = f"; its lines look separated by {_SEP_NAMES.get(other, repr(other))} (--sep " \
               f"{_SEP_FLAGS.get(other, repr(other))})" if other is not None else ""
        raise InputError(f"--sep {_SEP_FLAGS.get(sep, repr(sep))} splits this line into {len(fields)} column"
                         f"{'s' if len(fields) != 1 else ''}, and an event needs 3 (source, destination, time)"
                         f"{hint}", path, skip + 1)

    if fmt is None:
        fmt = next(f.name for f in FORMAT_SPECS.values() if f.detect is not None and f.detect(fields, sep))

    if header is None:
        header = FORMAT_SPECS[fmt].header
    if header is None:
        if isinstance(time_col, str) and time_col in [f.strip() for f in fields]:
            header = True  # the first record names the time column: it is a header
        else:  # a name the first record does not hold says nothing: look at the time field
            tpos = 2 if time_col is None or isinstance(time_col, str) else int(time_col)
            probe = fields[tpos] if 0 <= tpos < len(fields) else fields[-1]
            header = not looks_like_time(probe.strip(), time_format)
    names = [x.strip() for x in fields] if header else None
    data_idx = skip + (1 if header else 0)
    while data_idx < len(lines) and (not lines[data_idx].strip() or is_comment(lines[data_idx])):
        data_idx += 1
    if data_idx >= len(lines):
        if header:
            raise InputError("no events after the header", path, skip + 2)
        raise InputError("file is empty (no records)", path, 1)
    first_fields = split_fields(lines[data_idx], sep)
    irregular = sep == " " and any(ln != " ".join(ln.split()) for ln in lines[data_idx:data_idx + 1000]
                                   if ln.strip() and not is_comment(ln))
    return Layout(fmt=fmt, sep=sep, skip=skip, header=names, ncols=len(first_fields), first_data_line=data_idx + 1,
                   first_fields=first_fields, irregular=irregular)

