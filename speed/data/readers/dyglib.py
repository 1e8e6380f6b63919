"""DyGLib's and TGN's processed logs: ``ml_NAME.csv`` (``,u,i,ts,label,idx``) and its companions.

* ``ml_NAME.npy``: edge features, row ``idx`` per event (row 0 is DyGLib's padding) -> ``msg``;
* ``ml_NAME_node.npy``: node features, which the models here do not take (see
  :func:`check_node_features`).
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
    return sep == "," and low[:4] == ["", "u", "i", "ts"]


def columns(ncols: int):
    return "u", "i", "ts", ("label" if ncols > 4 else None)


def extras(path: Path, lay: Optional[Layout], t: np.ndarray, msg: Optional[np.ndarray]) -> dict:
    check_node_features(path)
    return {"msg": edge_features(path, len(t))}


def out_of_core(path: Path, lay: Layout, has_split_times: bool) -> None:
    if feature_file(path).exists():
        raise InputError(f"edge features from {feature_file(path).name} are read in memory only: "
                         "partition without --max-memory", path)


def feature_file(path: Path) -> Path:
    """``ml_NAME.npy`` beside ``ml_NAME.csv``: DyGLib's edge features, row ``idx`` per event."""
    return path.with_suffix(".npy")


def edge_features(path: Path, num_events: int) -> Optional[np.ndarray]:
    """Edge features of a DyGLib/TGN processed log (``ml_NAME.csv`` + ``ml_NAME.npy``), or None
    when there is no ``.npy``.  Row ``idx`` of the array belongs to the event with that ``idx``
    (row 0 is DyGLib's padding)."""
    npy = feature_file(path)
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


def check_node_features(path: Path) -> None:
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
                      "they are ignored", stacklevel=4)
