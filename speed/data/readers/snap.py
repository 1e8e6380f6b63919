"""SNAP's whitespace-separated ``src dst t`` files, without a header."""

from __future__ import annotations

from typing import List

from .textio import is_number


def detect(fields: List[str], sep: str) -> bool:
    return sep in (" ", "\t") and all(is_number(x) or x == "" for x in fields[:3])
