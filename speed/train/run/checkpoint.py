"""One checkpoint schema for every run: best and last, single-process and PAC.

A run directory holds two files of the same schema (:class:`Checkpoint`):

* ``checkpoint.pt`` -- the best epoch by validation AP: weights *and* the full-graph node
  state at the end of that epoch's training (PAC: assembled from the ranks), so a model can
  be rebuilt and continued from it;
* ``last.pt`` -- the latest epoch: weights, optimiser, every rank's RNG state, the epoch
  history and early-stopping state, so ``resume=True`` continues the run exactly.

Both are written atomically by one process (rank 0).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from ..._util import atomic_file
from ...errors import InputError

FORMAT = 1
BEST = "checkpoint.pt"
LAST = "last.pt"
# a folder holding one of these is a run folder: --overwrite may reuse it
RUN_MARKERS = ("metrics.json", LAST, BEST)


@dataclass
class Checkpoint:
    """The saved state of a run.

    Attributes
    ----------
    kind : {"best", "last"}
    epoch : int
    model_name : str
    config : dict
        :meth:`TrainConfig.to_dict`.
    model : dict
        A state dict of the full-graph model: weights, plus memory buffers for all
        ``num_nodes`` nodes in a best checkpoint (weights only in ``last``).
    pending : tuple of 4 tensors or None
        Pending events ``(node, other, t, eid)`` in global ids (best only).
    optimizer : dict
    rng : list of dict
        RNG states (torch, numpy, python) of each rank, rank order.
    history : list of dict
        Epoch logs so far.
    stopping : dict
        :meth:`EarlyStopping.state_dict`.
    best : dict
        The best epoch's results (``val``, ``test``, ...), as reported in ``metrics.json``.
    num_nodes : int
    format : int
    """

    kind: str
    epoch: int
    model_name: str
    config: Dict[str, Any]
    model: Dict[str, torch.Tensor]
    optimizer: Dict[str, Any]
    rng: List[Dict[str, Any]]
    history: List[Dict[str, Any]]
    stopping: Dict[str, Any]
    best: Dict[str, Any]
    num_nodes: int
    pending: Optional[tuple] = None
    val_ap: Optional[float] = None
    format: int = FORMAT
    extra: Dict[str, Any] = field(default_factory=dict)

    def record(self, **changes) -> Dict[str, Any]:
        """The run's record in this checkpoint (:data:`RECORD`), with ``changes``: what a
        checkpoint written from this one keeps (an updated run's)."""
        return {**{name: getattr(self, name) for name in RECORD}, **changes}

    def save(self, path) -> Path:
        path = Path(path)
        # shallow: dataclasses.asdict would deep-copy every array of the node state first
        state = _nested(_to_stored, {f.name: getattr(self, f.name) for f in fields(self)})
        with atomic_file(path) as tmp:
            torch.save(state, tmp)
        return path


# what a checkpoint records of its run, beside the model (write_checkpoint's ``record``)
RECORD = ("epoch", "model_name", "config", "optimizer", "rng", "history", "stopping", "best", "num_nodes", "val_ap")


def write_checkpoint(path, kind: str, record: Dict[str, Any], model=None, params: Optional[Dict] = None,
                     predictor: Optional[Dict] = None, extra: Optional[Dict] = None) -> Path:
    """Write a checkpoint file: the one writer of ``checkpoint.pt`` and ``last.pt``, for the
    trainer, every PAC run and an updated run.

    Parameters
    ----------
    path : path-like
    kind : {"best", "last"}
        ``best``: ``model``'s weights and its whole node state (memories and pending events);
        ``last``: the weights ``params`` only.
    record : dict
        The run's record, the fields of :data:`RECORD`.
    model : StatefulModel, optional
        For ``best``.
    params : dict of tensors, optional
        For ``last``: the network's state dict.
    predictor : dict, optional
        The predictor payload (:func:`speed.train.run.predictor.predictor_payload`), so the run
        can be loaded and used.
    extra : dict, optional
        What else the file keeps (``last``: what a resumed run needs).
    """
    if kind == "best":
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        pending = model.state.pending_events()
    elif kind == "last":
        state = {k: v.detach().cpu() for k, v in params.items()}
        pending = None
    else:
        raise ValueError(f"kind must be 'best' or 'last', got {kind!r}")
    extra = dict(extra or {})
    if predictor is not None:
        extra["predictor"] = predictor
    return Checkpoint(kind=kind, model=state, pending=pending, extra=extra, **record).save(path)


# numpy dtypes a torch tensor can hold (torch.from_numpy shares the memory)
_TENSOR_DTYPES = {np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
                                        np.float32, np.float64)}


class StoredArray:
    """A numpy array saved as a tensor.  ``torch.save`` writes a tensor's bytes straight into the
    archive, while a pickled array is first copied whole into memory (twice: the pickle's bytes,
    then its buffer); the node state's neighbour rings and pending events are arrays, and those
    copies made a run's peak memory at the end, when the best checkpoint is written."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


def _to_stored(x):
    if isinstance(x, np.ndarray) and x.dtype in _TENSOR_DTYPES:
        return StoredArray(torch.from_numpy(np.ascontiguousarray(x)))
    return x


def _from_stored(x):
    return x.tensor.numpy() if isinstance(x, StoredArray) else x


def _nested(f, x):
    """``x`` with ``f`` applied to every value inside its dicts, lists and tuples; containers
    with nothing changed are returned as they are (a state dict keeps its ``_metadata``)."""
    y = f(x)
    if y is not x:
        return y
    if isinstance(x, dict):
        items = {k: _nested(f, v) for k, v in x.items()}
        if all(items[k] is v for k, v in x.items()):
            return x
        out = type(x)(items)
        if hasattr(x, "_metadata"):
            out._metadata = x._metadata
        return out
    if type(x) in (list, tuple):
        items = [_nested(f, v) for v in x]
        return x if all(a is b for a, b in zip(items, x)) else type(x)(items)
    return x


def require_resumable(out) -> Path:
    """``out/last.pt`` exists and is a torch archive: cheap checks a launcher makes before any
    rank starts, so ``--resume`` on the wrong folder is a one-line error (exit 2), not a
    failure inside every rank.  The ranks still read it fully (:func:`load_checkpoint`)."""
    import zipfile

    if out is None:
        raise InputError("resume needs the run directory (out=...)")
    path = Path(out) / LAST
    if not path.exists():
        raise InputError("no checkpoint here to resume from", path)
    if not zipfile.is_zipfile(path):
        raise InputError("not a readable checkpoint (not a torch archive)", path)
    return path


def load_checkpoint(path) -> Checkpoint:
    """Read and check a checkpoint; a missing, foreign or damaged file is an :class:`InputError`."""
    path = Path(path)
    if not path.exists():
        raise InputError("no checkpoint here", path)
    try:
        state = _nested(_from_stored, torch.load(path, map_location="cpu", weights_only=False))
    except Exception as exc:  # truncated or not a torch file
        raise InputError(f"not a readable checkpoint ({type(exc).__name__})", path) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else None
        raise InputError(f"unknown checkpoint format {found!r} (this version reads format {FORMAT})", path)
    names = {f.name for f in fields(Checkpoint)}
    missing = sorted(n for n in names if n not in state and n not in ("pending", "val_ap", "extra"))
    if missing:
        raise InputError(f"checkpoint lacks {', '.join(missing)}", path)
    return Checkpoint(**{k: v for k, v in state.items() if k in names})


def rng_state() -> Dict[str, Any]:
    """This process's RNG states."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    if "python" in state:
        random.setstate(state["python"])
