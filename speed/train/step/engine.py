"""The training engine: what the single-process trainer and every PAC rank run.

* :class:`Batches` / :class:`CyclingBatches` -- chronological batches over an event stream
  (:class:`~speed.train.step.loader.EventStream`); the cycling form runs a fixed number of steps,
  starting the stream again when it runs out (Alg. 2);
* :class:`Engine` -- one optimiser step (:meth:`Engine.step`) and one epoch
  (:meth:`Engine.run_epoch`, with Alg. 2's back-up at the end of each complete pass and
  restore at the end of the epoch);
* :class:`EarlyStopping` and :class:`EpochLog`.

The engine is given the model (weights and node state, a
:class:`~speed.train.model.network.StatefulModel`), the optimiser and the callable that runs the
forward pass (the weights, or their DDP wrapper under PAC): DDP wraps the weights and nothing
else.  Each
step's host work is planned by a :class:`~speed.train.step.loader.PlanLoader`, in a background
thread with ``pipeline=True``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from ..._util import TRIM_EVERY, progress_bar, trim_heap
from ..state.spill import Spill
from .captured import CapturedStep
from .loader import EventStream, PlanLoader, Step
from .losses import link_loss
from .negatives import NegativeSampler


class Batches:
    """Consecutive chronological batches of the event positions ``index``.

    Iterating yields ``(positions, pass_ended)``; ``pass_ended`` is True on the last batch.
    """

    def __init__(self, index: np.ndarray, batch_size: int):
        self.index = np.asarray(index, dtype=np.int64)
        self.batch_size = int(batch_size)

    def __len__(self) -> int:
        return self.num_batches

    @property
    def num_batches(self) -> int:
        """Batches in one pass."""
        return -(-self.index.size // self.batch_size)

    def batch(self, i: int) -> np.ndarray:
        """The positions of batch ``i`` of a pass."""
        return self.index[i * self.batch_size:(i + 1) * self.batch_size]

    def __iter__(self) -> Iterator[Tuple[np.ndarray, bool]]:
        n = len(self)
        for i in range(n):
            yield self.batch(i), i == n - 1


class CyclingBatches(Batches):
    """``steps`` batches of ``index``, starting again from its first batch when it runs out
    (PAC: every rank takes the same number of steps).  ``passes`` = steps / batches."""

    def __init__(self, index: np.ndarray, batch_size: int, steps: int):
        super().__init__(index, batch_size)
        self.steps = int(steps)

    @property
    def passes(self) -> float:
        return self.steps / max(1, self.num_batches)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Tuple[np.ndarray, bool]]:
        n = self.num_batches
        for s in range(self.steps):
            yield self.batch(s % n), s % n == n - 1


@dataclass
class EpochLog:
    """One epoch of a run, as written to ``metrics.json``.

    ``train_events`` are the distinct training events of the epoch (over all ranks);
    ``seconds`` splits the epoch's wall time into stages (train, sync, exchange, validate);
    ``ranks`` has one entry per PAC rank; ``cut``: the epoch stopped after ``max_steps`` steps
    (it is neither validated nor a candidate for the best epoch).
    """

    epoch: int
    train_seconds: float
    train_events: int
    train_events_per_s: float
    loss: float
    val: Dict = field(default_factory=dict)
    seconds: Dict[str, float] = field(default_factory=dict)
    ranks: List[Dict] = field(default_factory=list)
    cut: bool = False


def epoch_line(log: "EpochLog", epochs: int, best: bool) -> str:
    """``epoch 2/10  loss 0.9778  val AP 0.8356  AUC 0.8058  2,494 ev/s  8.6 s  (best)``."""
    v = log.val.get("selection", log.val).get("transductive") if log.val else None  # the figure that selects
    val = f"val AP {v['ap']:.4f}  AUC {v['auc']:.4f}" if v else "not validated"
    if log.cut:
        val = f"cut after {log.train_events:,} events (--max-steps), " + (f"{val} (bounded)" if v else "not validated")
    return (f"epoch {log.epoch}/{epochs}  loss {log.loss:.4f}  {val}  {log.train_events_per_s:,.0f} ev/s  "
            f"{log.train_seconds:.1f} s" + ("  (best so far)" if best else ""))


class EarlyStopping:
    """Stop after ``patience`` epochs without a better validation score."""

    def __init__(self, patience: int):
        self.patience = int(patience)
        self.best_score = -1.0
        self.best_epoch: Optional[int] = None
        self.waited = 0

    def offer(self, epoch: int, score: float) -> bool:
        """Offer an epoch's validation score; True if it is the best so far."""
        if score > self.best_score:
            self.best_score, self.best_epoch, self.waited = score, epoch, 0
            return True
        self.waited += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.waited >= self.patience

    def state_dict(self) -> Dict:
        return {"best_score": self.best_score, "best_epoch": self.best_epoch, "waited": self.waited}

    def load_state_dict(self, state: Dict) -> None:
        self.best_score, self.best_epoch, self.waited = state["best_score"], state["best_epoch"], state["waited"]


@dataclass
class StepResult:
    """What :meth:`Engine.step` returns.

    Attributes
    ----------
    loss : 0-dim float32 tensor, or None
        The step's loss, detached, where it was computed (reading it as a number waits for the
        device; None without an optimiser: the state took the batch in, nothing learnt).
    pos, neg : float32 ndarray of shape (B,), or None
        With ``score=True``: the logits of the batch's events and of their negatives, from the
        weights and state before the step.
    ranked : float32 ndarray, or None
        What the step's ``ranked`` callable returned.
    """

    loss: Optional[float] = None
    pos: Optional[np.ndarray] = None
    neg: Optional[np.ndarray] = None
    ranked: Optional[np.ndarray] = None


@dataclass
class EpochStats:
    """What one pass of the engine measured."""

    loss: float
    seconds: float
    steps: int
    passes: float


def sync_due(steps_done: int, every: int) -> bool:
    """Whether PAC's periodic shared-node sync runs after ``steps_done`` steps (every ``every``-th
    step; ``every`` 0: never): the rule the ranks' sync and the engine's pipeline barrier share."""
    return bool(every) and steps_done % every == 0


#: a progress bar shows the loss every this many steps (reading it waits for a GPU's queue)
LOSS_SHOWN_EVERY = 50


class Engine:
    """One training step and one epoch over a chronological stream.

    Parameters
    ----------
    model : StatefulModel
    optimizer : torch.optim.Optimizer
    forward : callable, optional
        Runs the forward pass, ``forward(plan, rows, message_inputs, num_events) -> (pos, neg,
        z, states, lasts)``: the weights ``model.net`` (default) or their
        DDP wrapper.
    progress : bool, optional
        A progress bar per epoch.
    pipeline : bool or int
        Plan the next batches in background threads while this one computes (the threads, as
        :class:`~speed.train.step.loader.PlanLoader` takes them; 0 or False: none).
    staleness : int
        With the pipeline, let a step read memory up to this many batches stale (0: exact).
    capture : bool
        Pad each training plan to a fixed shape and run its step from a CUDA graph recorded
        once per shape (:mod:`.captured`; eagerly on the same buffers without a GPU).  The
        caller checks :meth:`CapturedStep.why_not` first.
    reduce : callable, optional
        ``reduce(flat_grad)``: with ``capture``, PAC's gradient average over the ranks, in place
        on the optimiser's flat gradient buffer, between each step's backward pass and its
        optimiser step (``forward`` is then the weights themselves, not a DDP wrapper).
    """

    def __init__(self, model, optimizer: torch.optim.Optimizer, forward: Optional[Callable] = None,
                 progress: Optional[bool] = None, pipeline: int = 0, staleness: int = 0,
                 capture: bool = False, reduce: Optional[Callable[[torch.Tensor], None]] = None):
        self.model = model
        self.optimizer = optimizer
        self.forward = forward or model.net
        self.progress = progress
        self.pipeline = int(pipeline)
        self.staleness = int(staleness)
        self.captured = CapturedStep(model, optimizer, self.forward, reduce) if capture else None
        self.reduce = reduce if capture else None

    def step(self, step: Step, collect: Optional[list] = None, score: bool = False,
             ranked: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
             extra_loss: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> StepResult:
        """One step on a planned batch (in the memory order of :mod:`speed.train.model.network`): the
        forward pass, then, when the engine has an optimiser, one optimiser step on the batch's
        loss; the node state takes the batch in either way.

        Parameters
        ----------
        step : Step
            Its plan's first ``3 * len(step)`` queries are ``[src, dst, neg]``; more may follow
            (``ranked`` and ``extra_loss`` read them from ``z``).
        collect : list, optional
            Receives the batch's source embeddings (detached, on the host).
        score : bool
            Score first (test then train): return the batch's logits as the weights and state
            before this step give them.
        ranked : callable, optional
            ``ranked(z) -> logits``, run without gradients before the weights change (ranking
            candidates among the plan's later queries); its result is returned.
        extra_loss : callable, optional
            ``extra_loss(z) -> scalar tensor`` added to the link loss (replayed interactions).

        Returns
        -------
        StepResult
        """
        model = self.model
        n = len(step)
        training = self.optimizer is not None
        plan = step.plan
        if plan.packed is not None and self.captured is not None and training and collect is None \
                and not score and ranked is None and extra_loss is None:  # padded for a captured step
            return StepResult(loss=self.captured.run(plan, n))
        if plan.q_inv.device != model.device:  # a host plan (one the graph does not take runs eagerly)
            plan = plan.to(model.device)
        if training:
            self.optimizer.zero_grad()
        with torch.set_grad_enabled(training):
            pos_logit, neg_logit, z, states, lasts = self.forward(plan, *model.inputs(plan), n)
        out = StepResult()
        if score:
            out.pos, out.neg = pos_logit.detach().cpu().numpy(), neg_logit.detach().cpu().numpy()
        if ranked is not None:
            with torch.no_grad():
                out.ranked = ranked(z).cpu().numpy()
        if not training:
            model.absorb(plan, states, lasts, z)
            return out
        loss = link_loss(pos_logit, neg_logit)
        if extra_loss is not None:
            loss = loss + extra_loss(z)
        # stored states come from the weights that produced this batch's loss (PyG's order)
        model.absorb(plan, states, lasts, z)
        if collect is not None:
            collect.append(z[:n].detach().cpu())
        loss.backward()
        if self.reduce is not None:  # (a captured PAC run's step taken eagerly: averaged all the same)
            self.reduce(self.optimizer.flat_grad)
        self.optimizer.step()
        out.loss = loss.detach()
        return out

    def idle_step(self, step: Step) -> None:
        """An optimiser step that adds nothing of this process's own: a rank with no batch left
        while the others train (a parallel update).  The forward pass runs on ``step`` (any
        planned batch; the node state is neither read for the loss nor written) so that the
        gradient averaging of the DDP wrapper takes part, with zero gradients."""
        model = self.model
        self.optimizer.zero_grad()
        plan = step.plan.to(model.device) if step.plan.q_inv.device != model.device else step.plan
        pos_logit, neg_logit, _, _, _ = self.forward(plan, *model.inputs(plan), len(step))
        (0.0 * link_loss(pos_logit, neg_logit)).backward()
        self.optimizer.step()

    def run_epoch(self, stream: EventStream, batches: Batches, negatives: NegativeSampler, desc: str = "epoch",
                  collect: Optional[list] = None, on_step: Optional[Callable[[int], None]] = None,
                  sync_every: int = 0, observed: Optional[Callable] = None,
                  on_start: Optional[Callable[[], None]] = None) -> EpochStats:
        """Reset the model's state, then train on ``batches`` of ``stream``.

        With :class:`CyclingBatches` the state is backed up at the end of each complete
        pass and reset for the next; at the end the last complete pass's state is restored
        (Alg. 2).  ``on_step(step)`` runs after each step; with ``sync_every = K`` it may change
        the node state after every K-th step (PAC's periodic sync), and the pipeline waits for it.
        ``observed``: events each step takes in without scoring them
        (:class:`~speed.train.step.loader.PlanLoader`); ``on_start()`` runs once the state is
        reset, before the first step.
        """
        model = self.model
        model.train()
        model.state.reset()
        if on_start is not None:
            on_start()
        losses, backup, ended = [], None, True
        start = time.perf_counter()
        total = len(batches)
        trim_steps = max(1, TRIM_EVERY // max(batches.batch_size, 1))

        def barrier(index: int, pass_ended: bool) -> bool:
            return (pass_ended and index + 1 < total) or sync_due(index + 1, sync_every)

        loader = PlanLoader(model, stream, batches, negatives.next_edges, pipeline=self.pipeline, staleness=self.staleness,
                            barrier=barrier, on_pass_start=model.state.reset_structures, observed=observed,
                            fix=self.captured.fix if self.captured is not None else None)
        with progress_bar(total * batches.batch_size, desc, progress=self.progress) as bar:
            for step in loader:
                s, ended = step.index, step.ended
                losses.append(self.step(step, collect).loss)  # on the device: no wait here
                if on_step is not None:
                    on_step(s + 1)
                if ended and s + 1 < total:  # a complete pass with more steps to go
                    # kept on disk, written from the live state (no second copy in memory): it
                    # is read back only if the epoch stops inside the next pass
                    backup = None
                    backup = model.state.snapshots.backup(keep=Spill())
                    model.state.reset_memories()  # the loader resets sampler and store as it starts the pass
                bar.update(len(step))
                if not bar.disable and (s % LOSS_SHOWN_EVERY == 0 or s + 1 == total):
                    bar.set_postfix(loss=f"{float(losses[-1]):.3f}", refresh=False)
                if (s + 1) % trim_steps == 0:
                    trim_heap()  # what the steps freed goes back to the system, not kept as heap
        if not ended and backup is not None:  # stopped inside a pass: keep the last complete one
            model.state.snapshots.restore(backup, adopt=True)  # the back-up becomes the state, no copy
            backup = None
        # one read of every step's loss: the device's queue is waited for once an epoch
        loss = float(np.mean(torch.stack(losses).cpu().numpy().astype(np.float64))) if losses else float("nan")
        return EpochStats(loss=loss, seconds=time.perf_counter() - start, steps=total,
                          passes=getattr(batches, "passes", 1.0))
