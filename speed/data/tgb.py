"""TGB link-prediction datasets already on disk, with their split and stored negatives.

The Temporal Graph Benchmark (``py-tgb``) keeps a dataset in a folder such as
``datasets/tgbl_wiki/``.  After its first load the folder holds TGB's processed log
``ml_{name}.pkl`` (a pandas DataFrame with columns ``u, i, ts, idx, w`` in TGB's node ids),
its edge features ``ml_{name}_edge.pkl``, and the evaluation negatives
``{name}_{val,test}_ns[_vN].pkl``: a dict from each positive ``(src, dst, t)`` to the
negative destinations it is ranked against.  :func:`read_tgb` reads these files directly
(pandas is needed for the DataFrame; py-tgb itself is not, and nothing is downloaded):

* node ids stay TGB's, so the stored negatives apply as they are;
* the split is TGB's: ``t <= quantile(t, 0.70)`` train, ``<= quantile(t, 0.85)`` val, the rest
  test (``meta.split_times``), transductive (no held-out nodes);
* the negatives become ``meta.eval_candidates``: for ``"val"`` and ``"test"``, int64
  candidates (n, K) padded to the longest list and a bool mask of the real ones.  The
  evaluator ranks each test event against them (MRR, Hits@k; TGB's tie rule).

This is a folder py-tgb has processed once (its raw ``*_edgelist*.csv`` is turned into the
processed files by a different loader per dataset, which :func:`read_tgb` does not repeat).
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from ..errors import InputError, MissingDependencyError
from .events import Events

# TGB's split (LinkPropPredDataset.generate_splits); its yago datasets use 0.10 / 0.10
VAL_RATIO, TEST_RATIO = 0.15, 0.15
_SIDE_FILES = ("_edge", "_node", "_nodeid", "_edgetype", "_nodeType")


# the input format of a TGB folder (``--format tgb``; ``meta.format`` of what read_tgb returns)
TGB_FORMAT = "tgb"
# what a folder that looks like a TGB dataset is told: its tables are read only when asked
TGB_HINT = ("looks like a TGB dataset folder (ml_NAME.pkl): its tables are pickles, and reading them can run code; "
            "read it with --format tgb (speed.read_tgb) only if you trust where it came from")


def tgb_name(folder) -> Optional[str]:
    """The dataset name of a processed TGB folder (``ml_{name}.pkl`` inside), or None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for p in sorted(folder.glob("ml_*.pkl")):
        stem = p.stem[3:]
        if not stem.endswith(_SIDE_FILES):
            return stem
    return None


def check_input(path) -> Path:
    """The one check of a training input's path (a log, a shards folder): it exists, and a
    folder that looks like a TGB dataset is not read unasked (its tables are pickles).  Returns
    it as a Path; raises a one-line :class:`~speed.errors.InputError` naming it."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path)
    if path.is_dir() and not (path / "manifest.json").exists() and tgb_name(path) is not None:
        raise InputError(TGB_HINT, path)
    return path


def _negatives_file(folder: Path, name: str, period: str) -> Path:
    """``{name}_{period}_ns.pkl`` or its newest ``_vN`` version."""
    found = []
    for p in folder.glob(f"{name}_{period}_ns*.pkl"):
        m = re.fullmatch(re.escape(f"{name}_{period}_ns") + r"(?:_v(\d+))?\.pkl", p.name)
        if m:
            found.append((int(m.group(1) or 1), p))
    if not found:
        raise InputError(f"no stored {period} negatives ({name}_{period}_ns*.pkl)", folder)
    return max(found)[1]


def _load_pickle(path: Path):
    """One of TGB's tables.  Unpickling runs code: reached only through read_tgb, which a user
    calls by name (``--format tgb``, ``speed.read_tgb``) for a folder they trust; no folder is
    taken for a TGB dataset on its own (see TGB_HINT)."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("pandas"):
            raise MissingDependencyError("pandas", "dgl", f"reading TGB's {path.name}") from None
        raise InputError(f"not a readable pickle ({exc})", path) from None
    except Exception as exc:  # truncated, or not a pickle
        raise InputError(f"not a readable pickle ({type(exc).__name__}: {exc})", path) from None


def read_tgb(folder, val_ratio: float = VAL_RATIO, test_ratio: float = TEST_RATIO) -> Events:
    """Read a processed TGB link-prediction folder as :class:`Events` with TGB's split and
    stored negatives (see the module docstring).

    TGB ships its tables as pickles, and unpickling runs whatever code a file names: call this
    (or ``--format tgb``) only on folders you trust.  Nothing else in ``speed`` opens a pickle.

    Parameters
    ----------
    folder : path-like
        E.g. ``datasets/tgbl_wiki`` (holding ``ml_tgbl-wiki.pkl`` and the ``_ns`` files).
    val_ratio, test_ratio : float
        TGB's split fractions (0.15 each; 0.10 for its yago datasets).

    Returns
    -------
    Events
        Time-sorted, TGB node ids, ``msg`` from the edge features, and ``meta`` (:class:`~speed.data.meta.EventsMeta`):
        ``split_times``, ``transductive=True``, ``eval_candidates``, ``format="tgb"``.
    """
    folder = Path(folder)
    name = tgb_name(folder)
    if name is None:
        raise InputError("not a processed TGB folder (no ml_NAME.pkl: load it once with py-tgb)", folder)
    df_path = folder / f"ml_{name}.pkl"
    df = _load_pickle(df_path)
    try:
        src, dst, ts = (np.asarray(df[c]) for c in ("u", "i", "ts"))
    except (KeyError, TypeError, IndexError):
        raise InputError("expected TGB's processed table with columns u, i, ts", df_path) from None
    src, dst, ts = src.astype(np.int64), dst.astype(np.int64), ts.astype(np.int64)  # TGB casts to int
    if src.size == 0:
        raise InputError("no events", df_path)
    msg = _edge_features(folder / f"ml_{name}_edge.pkl", src.size)
    if np.any(np.diff(ts) < 0):  # TGB's tables are time-sorted; sort first so candidates follow the log
        order = np.argsort(ts, kind="stable")
        src, dst, ts = src[order], dst[order], ts[order]
        msg = None if msg is None else msg[order]
    val_time, test_time = (float(x) for x in np.quantile(ts, [1 - val_ratio - test_ratio, 1 - test_ratio]))
    cand = {p: _candidates(_negatives_file(folder, name, p), src, dst, ts, mask)
            for p, mask in (("val", (ts > val_time) & (ts <= test_time)), ("test", ts > test_time))}
    top = max(int(src.max()), int(dst.max()), *(int(c[0].max(initial=0)) for c in cand.values()))
    ev = Events.from_arrays(src, dst, ts, msg=msg, num_nodes=top + 1, remap=False)
    ev.meta.update(source=str(folder), format=TGB_FORMAT, tgb_name=name, split_times=(val_time, test_time),
                   transductive=True, eval_candidates=cand)
    return ev


def _edge_features(path: Path, n: int) -> Optional[np.ndarray]:
    if not path.exists():
        return None
    feat = _load_pickle(path)
    feat = np.asarray(feat, dtype=np.float32)
    feat = feat[:, None] if feat.ndim == 1 else feat
    if feat.ndim != 2 or feat.shape[0] != n:
        raise InputError(f"edge features have shape {feat.shape}, expected ({n}, d)", path)
    return feat if feat.shape[1] else None


def _candidates(path: Path, src, dst, ts, mask) -> Tuple[np.ndarray, np.ndarray]:
    """The stored negatives of the events in ``mask`` (in log order), padded: (cand, valid)."""
    table: Dict = _load_pickle(path)
    if not isinstance(table, dict):
        raise InputError(f"expected a dict of (src, dst, t) -> negatives, found a {type(table).__name__}", path)
    idx = np.flatnonzero(mask)
    lists = []
    # one dict lookup per evaluated event: the stored table is a Python dict keyed that way
    for s, d, t in zip(src[idx].tolist(), dst[idx].tolist(), ts[idx].tolist()):
        neg = table.get((s, d, t))
        if neg is None:
            raise InputError(f"no stored negatives for the event (src={s}, dst={d}, t={t})", path)
        lists.append(np.asarray(neg, dtype=np.int64).ravel())
    lens = np.array([x.size for x in lists], dtype=np.int64)
    k = int(lens.max(initial=0))
    cand = np.zeros((len(lists), k), dtype=np.int64)
    valid = np.zeros((len(lists), k), dtype=bool)
    if lists:
        rows = np.repeat(np.arange(len(lists)), lens)
        cols = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        cand[rows, cols] = np.concatenate(lists)
        valid[rows, cols] = True
    if cand.size and cand.min() < 0:
        raise InputError("negative node ids among the stored negatives", path)
    return cand, valid
