"""Low-level helpers shared by the text readers: opening (gzip or plain), splitting a record,
comments, and the :class:`Layout` that sniffing finds."""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

Column = Union[int, str, None]

def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def is_parquet(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def open_text(path: Path, gz: bool):
    raw = gzip.open(path, "rb") if gz else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


@dataclass


class Layout:
    """What sniffing the head of a text file found."""

    fmt: str
    sep: str
    skip: int  # comment and blank lines before the first record
    header: Optional[List[str]]  # column names when the first record is a header
    ncols: int  # fields in the first data record
    first_data_line: int  # 1-based line number of the first data record
    first_fields: List[str] = None  # the first data record, split
    irregular: bool = False  # the head has separator runs or edge whitespace (whitespace-separated files)


def split_fields(line: str, sep: str) -> List[str]:
    if sep == " ":  # whitespace-separated: runs of spaces and tabs are one separator
        return line.split()
    return next(csv.reader([line.rstrip("\r\n")], delimiter=sep))


def is_comment(line: str) -> bool:
    return line.lstrip().startswith(("#", "%"))


def lower_fields(fields: List[str]) -> List[str]:
    return [x.strip().lower() for x in fields]

