"""The input formats: one :class:`FormatSpec` row per format, tried in table order.

To add a format: a module beside this one with its ``detect`` (and, if the format carries
more than columns, ``extras`` and ``out_of_core``), and one row in :data:`FORMAT_SPECS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from . import dyglib, jodie, snap, tgl
from ..._util import Registered
from .textio import Column, Layout

# extras(path, layout, t, msg) -> {"msg": ..., "split_times": ...}: what a format reads beside its columns
Extras = Callable[[Path, Optional[Layout], np.ndarray, Optional[np.ndarray]], dict]
# out_of_core(path, layout, has_split_times): raise InputError for what streaming cannot read
OutOfCore = Callable[[Path, Layout, bool], None]


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
    extras : callable, optional
        What the format reads beside its columns (companion files, a split), see ``Extras``.
    out_of_core : callable, optional
        Refuses, with an :class:`~speed.InputError`, what the streaming reader cannot do.
    names_time : bool
        The format says which column is time (a plain CSV's third column is only a guess, checked
        to look like time: ``meta.time_guess``).
    whitespace : bool
        Fields are separated by runs of spaces and tabs (SNAP).
    columnar : bool
        A columnar binary file (Parquet), read by pyarrow, never sniffed as text.
    """

    name: str
    detect: Optional[Callable[[List[str], str], bool]]
    header: Optional[bool]
    columns: Callable[[int], Tuple[Column, Column, Column, Column]]
    bipartite: bool = False
    features_from: Optional[int] = None
    extras: Optional[Extras] = None
    out_of_core: Optional[OutOfCore] = None
    names_time: bool = False
    whitespace: bool = False
    columnar: bool = False


FIRST_THREE = (lambda ncols: (0, 1, 2, None))

FORMAT_SPECS: Dict[str, FormatSpec] = {f.name: f for f in (
    FormatSpec("dyglib", dyglib.detect, header=True, columns=dyglib.columns, extras=dyglib.extras,
               out_of_core=dyglib.out_of_core, names_time=True),
    FormatSpec("tgl", tgl.detect, header=True, columns=tgl.columns, extras=tgl.extras, out_of_core=tgl.out_of_core,
               names_time=True),
    FormatSpec("jodie", jodie.detect, header=True, columns=jodie.columns, bipartite=True, features_from=4,
               names_time=True),
    FormatSpec("snap", snap.detect, header=False, columns=FIRST_THREE, whitespace=True),
    FormatSpec("csv", lambda fields, sep: True, header=None, columns=FIRST_THREE),
    FormatSpec("parquet", None, header=True, columns=FIRST_THREE, columnar=True),
)}
FORMATS = Registered(lambda: FORMAT_SPECS)  # as the table is now (a row added is a format at once)
