"""A run's record and its two checkpoint files, for the loop and the evaluation alike.

:class:`Checkpointer` writes ``last.json`` (what ``resume`` needs) and ``best.json`` (the best
epoch's weights and state), and makes the record both keep (:data:`speed.train.run.checkpoint.RECORD`:
the epoch, the optimiser, the random streams, the history, early stopping, the results).  The
trainer makes one and hands it to the evaluation's calls that keep or write a best epoch, so the
evaluation reads no member of the trainer and is handed no closure.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Dict, List, Optional

from ...errors import InputError
from ..run import checkpoint as ckpt
from ..run.folder import RunFolder
from ..step.engine import EarlyStopping, EpochLog


class Checkpointer:
    """The record of a run at an epoch, and its files in ``folder`` (none when None).

    Parameters
    ----------
    folder : RunFolder, optional
    world : World
        The run's processes: ``last.json`` keeps each one's random streams; the main one writes.
    config : TrainConfig
    training : Training
        Its ``model``, ``optimizer`` and ``data_size()`` go into the record.
    stopping : EarlyStopping
    history : list of EpochLog
        The epochs so far (the trainer's list, read when a record is made).
    """

    def __init__(self, folder: Optional[RunFolder], world, config, training, stopping: EarlyStopping,
                 history: List[EpochLog]):
        self.folder, self.world, self.config = folder, world, config
        self.training, self.stopping, self.history = training, stopping, history

    @property
    def writes(self) -> bool:
        """Whether the run has a folder to write (every process knows)."""
        return self.folder is not None

    def record(self, epoch: int, best: Dict, rng: Optional[List[Dict]] = None) -> Dict:
        """The run's record at ``epoch`` with the results ``best`` (this process's random
        streams unless ``rng`` gives every process's)."""
        nodes, events = self.training.data_size()
        return dict(epoch=epoch, model_name=self.training.model.name, config=self.config.to_dict(),
                    optimizer=self.training.optimizer.state_dict(),
                    rng=rng if rng is not None else [ckpt.rng_state()], history=[asdict(h) for h in self.history],
                    stopping=self.stopping.state_dict(), best=best, num_nodes=nodes,
                    val_ap=self.stopping.best_score, num_events=events)

    def write_last(self, epoch: int, best: Dict, extra: Dict) -> None:
        """``last.json`` (collective: every process's random streams): the weights, the record,
        and ``extra``, what the evaluation must keep to finish the run."""
        rngs = self.world.objects(ckpt.rng_state())
        if self.world.is_main and self.writes:
            ckpt.write_checkpoint(self.folder.last, "last", self.record(epoch, best, rngs),
                                  params=self.training.model.params_state_dict(), extra=extra)

    def write_best(self, record: Dict, model, predictor: Optional[Dict] = None,
                   memories: Optional[Dict] = None) -> None:
        """``best.json`` (the main process): ``model``'s weights and node state (or its
        ``memories`` as written apart), with ``record`` and the ``predictor`` payload."""
        ckpt.write_checkpoint(self.folder.best, "best", record, model=model, predictor=predictor, memories=memories)

    def read_last(self) -> ckpt.Checkpoint:
        """``last.json``, checked against this run: the same model, processes and data."""
        if self.folder is None:
            raise InputError("resume needs the run directory (out=...)")
        path = self.folder.last
        saved = ckpt.load_checkpoint(path)
        name = self.training.model.name
        if saved.model_name != name:
            raise InputError(f"cannot resume: the run trained {saved.model_name}, not {name}", path)
        if len(saved.rng) != self.world.size:
            raise InputError(f"cannot resume: the run had {len(saved.rng)} processes, not {self.world.size} (each "
                             "process's random streams go on where it stopped, and the parts' grouping follows the "
                             f"number of processes: resume with {len(saved.rng)}, or train a new run)", path)
        nodes, events = self.training.data_size()
        if saved.num_events is not None and (saved.num_nodes, saved.num_events) != (nodes, events):
            raise InputError(f"cannot resume: the run trained on data of {saved.num_nodes:,} nodes and "
                             f"{saved.num_events:,} events, and this data has {nodes:,} and {events:,} (events "
                             "appended since?): train a new run, or update this one (speed update)", path)
        return saved
