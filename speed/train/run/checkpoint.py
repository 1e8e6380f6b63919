"""One checkpoint schema for every run: best and last, single-process and PAC.

A run directory holds two checkpoints of the same schema (:class:`Checkpoint`), each a pair of
files written by :mod:`.serial` -- tensors in ``NAME.safetensors``, everything else in
``NAME.json`` -- so that opening a run never runs code (no pickle):

* ``best.json`` -- the best epoch by validation AP: weights *and* the full-graph node state
  after the log, so a model can be rebuilt, used and continued from it;
* ``last.json`` -- the latest epoch: weights, optimiser, every rank's RNG state (as numbers),
  the epoch history and early-stopping state, so ``resume=True`` continues the run exactly.

Both are written atomically by one process (rank 0).  Run folders of earlier versions held
pickles (``checkpoint.pt``, ``last.pt``): they are refused with the command that converts them,
``speed convert-run OLD NEW --trust-pickle``, which unpickles only when told to
(:func:`convert_run`).
"""

from __future__ import annotations

import os
import pickle  # format 1 only: convert_run(trust_pickle=True)
import random
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from ...errors import InputError
# the folder's names and refusals are its owner's
from .folder import BEST, KIND, LAST, MARKERS, NO_LAST, OLD_BEST, OLD_LAST, OWNED, refuse_pickled
from .serial import load_tree, save_tree

FORMAT = 2  # 2: safetensors and JSON (1: one torch pickle per checkpoint)


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
    num_events: Optional[int] = None
    format: int = FORMAT
    extra: Dict[str, Any] = field(default_factory=dict)

    def record(self, **changes) -> Dict[str, Any]:
        """The run's record in this checkpoint (:data:`RECORD`), with ``changes``: what a
        checkpoint written from this one keeps (an updated run's)."""
        return {**{name: getattr(self, name) for name in RECORD}, **changes}

    def save(self, path) -> Path:
        """Write the checkpoint as ``path`` (JSON) and its tensors beside it (no pickle)."""
        return save_tree({f.name: getattr(self, f.name) for f in fields(self)}, path)


# what a checkpoint records of its run, beside the model (write_checkpoint's ``record``)
RECORD = ("epoch", "model_name", "config", "optimizer", "rng", "history", "stopping", "best", "num_nodes", "val_ap",
          "num_events")


def write_checkpoint(path, kind: str, record: Dict[str, Any], model=None, params: Optional[Dict] = None,
                     predictor: Optional[Dict] = None, extra: Optional[Dict] = None,
                     memories: Optional[Dict[str, torch.Tensor]] = None) -> Path:
    """Write a checkpoint file: the one writer of ``best.json`` and ``last.json`` (with their
    safetensors files), for the trainer, every PAC run and an updated run.

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
    memories : dict of tensors, optional
        For ``best``: the memories as :meth:`~speed.train.state.snapshots.Snapshots.memory_dict` gives them, when the model
        does not hold them all (a PAC run's, sharded over the ranks and brought to the writer).
    """
    if kind == "best":
        held = model.net.state_dict() if memories is not None else model.weights_and_memories()
        state = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
                 for k, v in {**held, **(memories or {})}.items()}
        pending = model.state.rows.pending()
    elif kind == "last":
        state = {k: v.detach().cpu() for k, v in params.items()}
        pending = None
    else:
        raise ValueError(f"kind must be 'best' or 'last', got {kind!r}")
    extra = dict(extra or {})
    if predictor is not None:
        extra["predictor"] = predictor
    return Checkpoint(kind=kind, model=state, pending=pending, extra=extra, **record).save(path)


def load_checkpoint(path) -> Checkpoint:
    """Read and check a checkpoint (its tensors memory-mapped); a missing, foreign or damaged
    file is an :class:`InputError`, and so is a pickled checkpoint of an earlier version."""
    path = Path(path)
    if not path.exists():
        refuse_pickled(path)
        raise InputError(NO_LAST if path.name == LAST else "no checkpoint here", path)
    state = load_tree(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else None
        raise InputError(f"unknown checkpoint format {found!r} (this version reads format {FORMAT})", path)
    names = {f.name for f in fields(Checkpoint)}
    missing = sorted(n for n in names if n not in state and n not in ("pending", "val_ap", "extra", "num_events"))
    if missing:
        raise InputError(f"checkpoint lacks {', '.join(missing)}", path)
    return Checkpoint(**{k: v for k, v in state.items() if k in names})


def convert_run(old, new, trust_pickle: bool = False) -> Path:
    """Convert a run folder of an earlier version (pickled ``checkpoint.pt`` / ``last.pt``) into
    a new folder ``new`` of today's format.

    Unpickling runs whatever code the file names, so it is done only with ``trust_pickle=True``
    (``speed convert-run OLD NEW --trust-pickle``), for folders you made or trust.  The other files
    (``metrics.json``, ``curves.png``, ``negatives.npz``, ...) are copied; ``old`` is left as it was.
    """
    import shutil

    from ..._util import atomic_dir

    old, new = Path(old), Path(new)
    if not trust_pickle:
        raise InputError("converting a run unpickles its checkpoints, which can run code: pass --trust-pickle "
                         "(trust_pickle=True) only for a folder you trust", old)
    if not (old / OLD_BEST).exists() and not (old / OLD_LAST).exists():
        raise InputError(f"no {OLD_BEST} or {OLD_LAST} here: not a run folder of an earlier version", old)
    with atomic_dir(new, overwrite=False, markers=MARKERS, kind=KIND, owned=OWNED) as tmp:
        for name in sorted(os.listdir(old)):
            src = old / name
            if name in (OLD_BEST, OLD_LAST):
                state = _unpickle(src)
                state["format"] = FORMAT
                Checkpoint(**{k: v for k, v in state.items() if k in {f.name for f in fields(Checkpoint)}}).save(
                    tmp / (BEST if name == OLD_BEST else LAST))
            elif src.is_file() and not src.is_symlink():
                shutil.copy2(src, tmp / name)
    return new


def _unpickle(path: Path) -> Dict[str, Any]:
    """A format-1 checkpoint, unpickled.  This runs code: its one caller is :func:`convert_run`,
    and only with ``trust_pickle=True`` (``--trust-pickle``), which the user gives by name."""
    try:  # (format 1 named its array class under the module's old place, speed.train.checkpoint)
        state = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_RenamedPickle)
    except Exception as exc:
        raise InputError(f"not a readable checkpoint ({type(exc).__name__})", path) from None
    if not isinstance(state, dict) or state.get("format") != 1:
        raise InputError("not a checkpoint of format 1", path)
    return _nested(_from_stored, state)


class _RenamedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return super().find_class(__name__ if module == "speed.train.checkpoint" else module, name)


class _RenamedPickle:
    """``pickle`` with format 1's class names mapped to where they live now (torch.load's
    ``pickle_module``)."""

    Unpickler = _RenamedUnpickler
    load = staticmethod(pickle.load)
    __name__ = "pickle"


class StoredArray:
    """How format 1 stored a numpy array (a tensor inside the pickle); kept so that
    :func:`_unpickle` can read those files."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


def _from_stored(x):
    return x.tensor.numpy() if isinstance(x, StoredArray) else x


def _nested(f, x):
    """``x`` with ``f`` applied to every value inside its dicts, lists and tuples."""
    y = f(x)
    if y is not x:
        return y
    if isinstance(x, dict):
        return type(x)({k: _nested(f, v) for k, v in x.items()})
    if type(x) in (list, tuple):
        return type(x)(_nested(f, v) for v in x)
    return x


def rng_state() -> Dict[str, Any]:
    """This process's RNG states."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    if "python" in state:
        random.setstate(state["python"])
