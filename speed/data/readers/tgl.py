"""TGL's ``edges.csv`` (``,src,dst,time,ext_roll``): columns by name, and two companions.

* ``ext_roll`` (0 train, 1 val, 2 test) becomes the chronological split, as split times;
* ``edge_features.pt`` beside the file (one row per line) becomes ``msg``.

Both are read in memory; out of core the split must be given as times.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ...errors import InputError
from .textio import Layout, lower_fields


def detect(fields: List[str], sep: str) -> bool:
    low = lower_fields(fields)
    return sep == "," and bool(low) and low[0] == "" and "src" in low and "dst" in low


def columns(ncols: int):
    return "src", "dst", "time", None


def extras(path: Path, lay: Optional[Layout], t: np.ndarray, msg: Optional[np.ndarray]) -> dict:
    """Edge features from ``edge_features.pt`` (unless the file has feature columns) and the
    ``ext_roll`` split."""
    return {"msg": edge_features(path, len(t)) if msg is None else msg, "split_times": split_times(path, lay, t)}


def out_of_core(path: Path, lay: Layout, has_split_times: bool) -> None:
    """TGL's companions are read by the in-memory reader only."""
    if (path.parent / "edge_features.pt").exists():
        raise InputError("edge_features.pt is read in memory only: partition without max_memory", path)
    if not has_split_times and "ext_roll" in [h.strip() for h in (lay.header or [])]:
        raise InputError("the ext_roll split is read in memory only: give the split times (--split-times) "
                         "or partition without max_memory", path)


def edge_features(path: Path, num_events: int) -> Optional[np.ndarray]:
    """TGL's ``edge_features.pt`` beside ``edges.csv`` (one row per line of the file), or None."""
    pt = path.parent / "edge_features.pt"
    if not pt.exists():
        return None
    import torch

    try:  # tensors only: a file that needs any other object unpickled is refused, never run
        feats = torch.load(pt, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, not a torch file, or holding more than tensors
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "weights_only" in str(exc) or "Unsupported" in str(exc) or "global" in str(exc).lower():
            why = "it holds more than tensors, and speed loads tensors only (weights_only)"
        raise InputError(f"unreadable edge features ({why})", pt) from None
    if not isinstance(feats, torch.Tensor) or feats.dim() != 2 or feats.shape[0] != num_events:
        shape = tuple(feats.shape) if isinstance(feats, torch.Tensor) else type(feats).__name__
        raise InputError(f"edge features must be a tensor of {num_events} rows (one per edge), got {shape}", pt)
    return feats.to(torch.float32).numpy()


def split_times(path: Path, lay: Layout, t: np.ndarray) -> Optional[tuple]:
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
