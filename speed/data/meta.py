"""What is known of an event log beside its arrays: :class:`EventsMeta`, typed.

Readers fill it (where the log came from, how its columns and times were read, what it held
that the arrays do not say), and the layers above read it: the shards' manifest, the split
(a benchmark's own split times, a transductive protocol), the evaluation (TGB's stored
negatives), and every error message that names a file's line.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


@dataclass
class EventsMeta:
    """Provenance and facts of an event log (:attr:`speed.Events.meta`).

    Attributes
    ----------
    source : str, optional
        The file or folder read (``"generated"``, ``"dgl"``, ``"pyg"`` for logs made in memory).
    format : str, optional
        The reader's format name (a row of :data:`speed.data.readers.formats.FORMAT_SPECS`, or
        ``"shards"``, ``"synthetic"``, ``"dgl"``, ``"pyg"``, ``"tgb"``).
    columns : dict of str, optional
        The columns the ids, times and labels were read from, as labelled in the file.
    time_text : str, optional
        ``"iso"`` when times were parsed from ISO date strings.
    sorted_input : bool
        The input was in time order (an unsorted one was stable-sorted).
    input_order : int64 ndarray of shape (E,), optional
        For an unsorted input: the input row of each sorted event (to name its line).
    out_of_order_rows : int, optional
        Rows earlier than the row before them.
    time_guess : str, optional
        Why the time column taken by default (no ``time_col``) does not look like time (many
        rows out of order, a few small whole numbers), in words; None when it looks right or
        the column was named.  Training refuses such a log until the column is named.
    self_loops, duplicate_events : int, optional
        Counts (both are kept: they are real interactions).
    first_data_line : int, optional
        The file line of the first event (a text file), for :func:`speed.data.readers.event_line`.
    gzip : bool
        The file was gzip-compressed.
    split_times : tuple of 2 floats, optional
        A split the data set defines itself (TGL's ``ext_roll``, TGB's): validation and test start.
    transductive : bool
        The data set's protocol holds no node out (TGB's).
    eval_candidates : dict, optional
        Stored ranking negatives by period (``"val"``, ``"test"``: int64 candidates and a validity
        mask), TGB's.
    tgb_name : str, optional
    t_range : tuple of 2 floats, optional
        ``(t_min, t_max)`` of a log read out of core (its times are not all in memory).
    whole_labels : optional
        Whether every event carried a label, counted while reading out of core.
    parts : list of int, optional
        The parts a PAC rank's sub-graph was merged from.
    appended : int, optional
        Of a shards folder's split log: the events appended to the shards after it (not in it).
    """

    source: Optional[str] = None
    format: Optional[str] = None
    columns: Optional[Dict[str, Any]] = None
    time_text: Optional[str] = None
    sorted_input: bool = True
    input_order: Optional[np.ndarray] = None
    out_of_order_rows: Optional[int] = None
    time_guess: Optional[str] = None
    self_loops: Optional[int] = None
    duplicate_events: Optional[int] = None
    first_data_line: Optional[int] = None
    gzip: bool = False
    split_times: Optional[Tuple[float, float]] = None
    transductive: bool = False
    eval_candidates: Optional[Dict[str, Any]] = None
    tgb_name: Optional[str] = None
    t_range: Optional[Tuple[float, float]] = None
    whole_labels: Any = None
    parts: Optional[List[int]] = None
    appended: Optional[int] = None

    def update(self, **values) -> "EventsMeta":
        """Set fields by name (an unknown name is a ``TypeError``, not a new key); returns self."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"EventsMeta has no field {', '.join(unknown)}")
        for k, v in values.items():
            setattr(self, k, v)
        return self

    def copy(self) -> "EventsMeta":
        """A shallow copy (arrays are shared)."""
        return replace(self)

    def __getitem__(self, name: str):
        # the dict this replaced was read by key: keep such code working, and say what to write
        warnings.warn(f"meta[{name!r}] is deprecated: read the attribute meta.{name}", DeprecationWarning,
                      stacklevel=2)
        if name not in {f.name for f in fields(self)}:
            raise KeyError(name)
        return getattr(self, name)
