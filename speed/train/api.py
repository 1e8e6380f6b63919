"""``speed.train``: the one way in for training, single-process or parallel."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Dict, Optional

from ..data.events import Events
from ..data.split import Split, chronological_split
from ..errors import InputError
from ..partition.shards import Shards
from .config import BASELINES, TrainConfig
from .protocols import PROTOCOLS
from .run.folder import RunFolder


def train(data, model: str = "tgn", out=None, split: Optional[Split] = None, nproc: Optional[int] = None,
          overwrite: bool = False, **kwargs) -> Optional[Dict]:
    """Train a temporal GNN and return its metrics (the library form of ``speed train``).

    Parameters
    ----------
    data : Events, Shards, or path-like
        An event log (split chronologically here), a :class:`~speed.Shards` (trained on the
        merged graph, with the split stored at partitioning time), or a path to either.
    model : {"jodie", "dyrep", "tgn", "tige"}
    out : path-like, optional
        Run directory for ``metrics.json``, ``curves.png``, ``best.json`` and ``last.json``.
    split : Split, optional
        Overrides the chronological split of an event log.
    nproc : int, optional
        Train in parallel (PAC) with this many spawned ranks; needs shards and ``out``.
        Under torchrun every process calls this and is one rank (``nproc`` is then ignored).
    overwrite : bool
        Replace the run folder ``out`` when it holds a run (otherwise a folder with anything in
        it is refused, unless ``resume=True`` continues it; a folder that is not a run's is
        refused even then).
    **kwargs
        Any other field of :class:`~speed.train.config.TrainConfig` (``epochs``,
        ``batch_size``, ``lr``, ``sync``, ``resume``, ...).

    Returns
    -------
    dict or None
        The metrics written to ``metrics.json`` (None on non-zero torchrun ranks).
    """
    from .pac.launch import refuse_in_a_starting_rank, torchrun_rank, under_torchrun

    config = TrainConfig(model=model, nproc=nproc, **kwargs).validate()
    if config.parallel and not under_torchrun():
        refuse_in_a_starting_rank()
    folder = None if out is None else RunFolder(out)
    if folder is None and config.resume:
        raise InputError("resume needs the run directory (out=...)")
    # one run writes a folder at a time (under torchrun, rank 0 writes it, and checks it: the
    # others would find it being written)
    holds = folder is not None and (not under_torchrun() or torchrun_rank() == 0)
    if holds:
        folder.check_new_training(overwrite, config.resume)
        if config.resume:  # before any rank starts: one line, not an error in each
            folder.require_resumable()
    with folder.lock() if holds else contextlib.nullcontext():
        return _train(data, config, folder, split, under_torchrun())


def _train(data, config: TrainConfig, folder: Optional[RunFolder], split: Optional[Split],
           torchrun: bool) -> Optional[Dict]:
    from .pac.launch import run_parallel, torchrun_world

    out = None if folder is None else folder.path
    parallel = config.parallel or torchrun
    if config.model in BASELINES:
        if parallel:
            raise InputError(f"{config.model} is not trained: evaluate it without nproc or torchrun")
        from .eval.edgebank import run_edgebank

        events, split = _load(data, split, config)
        config = config.for_data(events.meta.format)
        split.require_trainable(events.meta.source)
        return run_edgebank(events, split, config, folder, mode=BASELINES[config.model])
    if parallel:
        path = data.path if isinstance(data, Shards) else data
        if isinstance(data, Events) or not Path(path).is_dir():
            raise InputError("parallel training (nproc, torchrun) needs a shards directory from `speed partition`",
                             None if isinstance(data, Events) else path)
        shards = data if isinstance(data, Shards) else Shards(path)
        from .pac.groups import check_world

        shards.require_trainable()
        refuse_guessed_time(shards.manifest.get("input", {}).get("time_guess"), shards.path, shards=True)
        config = config.for_data(shards.manifest.get("input", {}).get("format"))
        check_hold_out(config, float(shards.manifest["split"].get("new_node_fraction", 0.0)), shards.path)
        check_world(shards.num_parts, torchrun_world() if torchrun else config.nproc)
        metrics = run_parallel(shards, config, out)
        if metrics:  # rank 0 (torchrun) or the launcher
            from .pac.validate import TransferWarning

            for message in metrics.get("warnings", []):
                warnings.warn(message, TransferWarning, stacklevel=2)
        return metrics
    from .loop.trainer import Trainer

    events, split = _load(data, split, config)
    config = config.for_data(events.meta.format)
    split.require_trainable(events.meta.source)
    refuse_guessed_time(events.meta.time_guess, events.meta.source, shards=isinstance(data, Shards) or (
        isinstance(data, (str, Path)) and Path(data).is_dir()))
    return Trainer.local(events, split, config, out=folder).fit()


def refuse_guessed_time(guess: Optional[str], where, shards: bool = False) -> None:
    """Refuse to train on a log whose time column was taken by default and does not look like
    time (``meta.time_guess``): a model trained on a shuffled stream learns from the future of
    every event, and its figures mean nothing.  Naming the column (``--time-col``, even the
    same one) trains."""
    if not guess:
        return
    how = "partition again with --time-col naming it" if shards else "pass --time-col (time_col=) naming it"
    raise InputError(f"{guess}: not training on it; if the time is in another column, {how} (naming this "
                     "column confirms it)", where)


def _load(data, split: Optional[Split], config: TrainConfig):
    """Events and split from an event log, shards, or a path to either."""
    from ..data.readers import read_events

    if isinstance(data, (str, Path)):
        from ..data.tgb import check_input

        p = check_input(data)
        if p.is_dir():
            data = Shards(p)
        else:
            data = read_events(p, progress=config.progress)
    if isinstance(data, Shards):
        split = split or data.split()
        check_hold_out(config, split.new_node_fraction, data.path)
        events = data.events("split")
        events.meta.time_guess = data.manifest.get("input", {}).get("time_guess")
        events.meta.appended = data.num_events - len(events) or None  # not trained on: the summary says so
        return events, split
    if not isinstance(data, Events):
        raise InputError(f"cannot train on a {type(data).__name__}: give Events, Shards or a path")
    return data, split or chronological_split(data, val=config.val, test=config.test,
                                              new_node_fraction=config.hold_out, seed=config.seed,
                                              times=config.split_times if config.split_times is not None
                                              else data.meta.split_times)  # e.g. TGL's ext_roll


def check_hold_out(config: TrainConfig, stored: float, path) -> None:
    """Shards keep the split they were partitioned with: a run must not ask for another hold-out."""
    if config.new_node_fraction is not None and abs(stored - config.new_node_fraction) > 1e-12:
        raise InputError(f"the shards hold out new_node_fraction={stored:g} of the nodes, not "
                         f"{config.new_node_fraction:g}: re-partition with --new-node-fraction "
                         f"{config.new_node_fraction:g}", path)
    spec = PROTOCOLS.get(config.protocol) if config.protocol is not None else None
    if spec is not None and spec.transductive and stored > 0:
        raise InputError(f"{spec.title}'s protocol is transductive, but the shards hold out "
                         f"new_node_fraction={stored:g} of the nodes: re-partition with --new-node-fraction 0", path)


def update(run, data, out, reader: Optional[dict] = None, overwrite: bool = False, nproc: Optional[int] = None,
           **kwargs) -> Dict:
    """Update a trained run with new events (the library form of ``speed update``): in this
    process (:func:`speed.train.online.update.update`, where the parameters are described), or with
    ``nproc`` spawned ranks over the events appended to a shards folder
    (:mod:`speed.train.online.parallel`)."""
    if nproc is None:
        from .online.update import update as update_here

        return update_here(run, data, out, reader=reader, overwrite=overwrite, **kwargs)
    from .config import UpdateConfig
    from .online.parallel import update_parallel

    config = UpdateConfig(**kwargs).validate()
    RunFolder(out).check_update_output(RunFolder(run), overwrite)
    return update_parallel(run, data, out, nproc, overwrite, config)
