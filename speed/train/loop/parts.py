"""The two parts a :class:`~.trainer.Trainer` is given, as interfaces: how an epoch trains
(:class:`Training`) and how the model is evaluated (:class:`Evaluation`).

The loop reads nothing of a part but what is written here.  The parts of one process are
:class:`~.training.StreamTraining` and :class:`~.evaluation.WholeEvaluation`; a PAC rank's are
:class:`speed.train.pac.rank.RankTraining` and :class:`speed.train.pac.evaluation.ShardedEvaluation`;
a test drives the loop with stand-ins (tests/test_trainer_loop.py).
"""

from __future__ import annotations

from typing import Dict, Optional, Protocol, Tuple, runtime_checkable

from ..step.engine import EpochLog


@runtime_checkable
class Training(Protocol):
    """How an epoch trains.

    Attributes
    ----------
    model : StatefulModel
        The model trained (its ``name``, ``params_state_dict()`` and ``load_params()`` are
        checkpointed).
    optimizer : torch.optim.Optimizer
    device : torch.device
    note : str
        A line the trainer announces at start ("" for none).
    state_on : str
        Where the node state lives (``--state-device``'s choice, reported).
    """

    model: object
    optimizer: object
    device: object
    note: str
    state_on: str

    def train_epoch(self, epoch: int, collect: Optional[list] = None) -> EpochLog:
        """Train epoch ``epoch``; ``collect`` receives the batches' source embeddings."""

    def data_size(self) -> Tuple[int, int]:
        """``(nodes, events)`` of the data trained on (a resumed run must find the same)."""

    def data_summary(self) -> Dict:
        """What ``metrics.json``'s ``data`` adds for this kind of training."""

    def extra_metrics(self) -> Dict:
        """What ``metrics.json`` adds for this kind of training."""


@runtime_checkable
class Evaluation(Protocol):
    """How the model is validated, how the best epoch is kept, and how the test is scored.

    Attributes
    ----------
    evaluator : Evaluator
        Its ``protocol``, ``work``, ``stored_candidates`` and ``true_negative_counts()`` are
        reported, and ``save_negatives(path)`` writes the run's ``negatives.npz``.
    best : dict
        The best epoch's results so far (``val``; ``test`` once scored).
    """

    evaluator: object
    best: Dict

    def collector(self) -> Optional[list]:
        """A list for an epoch's training embeddings, when the evaluation reads them (or None)."""

    def validate_epoch(self, log: EpochLog) -> Optional[Dict]:
        """Validate after the epoch of ``log`` (on every process); the scores on the main one."""

    def on_best(self, log: EpochLog, checkpointer) -> None:
        """The epoch of ``log`` is the best so far (on every process): keep what its test
        figures come from (the record: :meth:`~.checkpointer.Checkpointer.record`)."""

    def final_results(self, best_epoch: int, checkpointer) -> Dict:
        """Score the test period from the best epoch's state and write ``best.json``; the
        results (on the main process)."""

    def save_last(self, epoch: int, checkpointer) -> None:
        """Write ``last.json`` (:meth:`~.checkpointer.Checkpointer.write_last`) with what a resumed
        run needs of the evaluation."""

    def resume(self, best: Dict, extra: Dict) -> None:
        """Take back what :meth:`save_last` kept."""

    def extra_metrics(self) -> Dict:
        """What ``metrics.json`` adds for this kind of evaluation."""
