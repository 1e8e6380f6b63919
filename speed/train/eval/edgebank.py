"""EdgeBank (Poursafaei et al., NeurIPS 2022): the memorisation floor of link prediction.

A pair scores 1 if it has been seen in an earlier batch, else 0 -- with unlimited memory, or
only if seen within the last ``window`` of time.  No parameters, no training: it only remembers.
A learned model that does not beat it on the same negatives has learned nothing the log's
repetitions do not already give.

:class:`EdgeBank` speaks the evaluator's model interface (``plan``, ``compute``, ``score``,
``absorb``, a ``divider`` that runs a step, and a ``state`` with ``reset``, ``backup`` and
``restore``), so it is scored by the same :class:`~speed.train.eval.evaluator.Evaluator`, on the
same negatives, as the temporal GNNs: its "embedding" of a node is the node id and the query
time.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

import numpy as np
import torch

from ...data.events import Events
from ...data.split import Split
from .evaluator import Evaluator
from ..model.queries import QueryLayout
from ..run.folder import RunFolder
from ..run.report import data_block

EDGEBANK_MODES = ("unlimited", "window")


class EdgeBank:
    """Remembers the pairs seen so far and when each was last seen.

    Parameters
    ----------
    events : Events
        The log; its distinct pairs are the only ones that can ever have been seen.
    mode : {"unlimited", "window"}
    window : float, optional
        Memory span of ``mode="window"``: a pair counts if last seen at ``t - window`` or later.
    """

    def __init__(self, events: Events, mode: str = "unlimited", window: Optional[float] = None):
        if mode not in EDGEBANK_MODES:
            raise ValueError(f"unknown EdgeBank mode {mode!r} (choose from {', '.join(EDGEBANK_MODES)})")
        if mode == "window" and (window is None or not window > 0):
            raise ValueError("EdgeBank's window mode needs a positive window")
        self.mode, self.window = mode, window
        self.base = np.int64(events.num_nodes)
        self.keys = np.unique(events.src * self.base + events.dst)  # every pair of the log, sorted
        self.state = SeenPairs(self.keys.size)
        self.divider = _WholeStep()

    def eval(self) -> "EdgeBank":
        return self

    def _pair(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Index of each pair in ``keys``, or -1 for a pair that never occurs."""
        k = src * self.base + dst
        pos = np.minimum(np.searchsorted(self.keys, k), self.keys.size - 1)
        return np.where(self.keys[pos] == k, pos, -1)

    # -- the evaluator's model interface (see speed.train.state.batch_plan and TemporalGNN.compute) ---------
    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def plan(self, nodes, times, events=None, **_):
        """What a step needs: the queried ``(node, time)`` rows and the batch to remember."""
        return _Plan(np.asarray(nodes, dtype=np.int64), np.asarray(times, dtype=np.float64), events)

    def compute(self, plan):
        """``(node, time)`` rows, float64, as embeddings: what :meth:`score` needs to look a
        pair up; no states."""
        z = torch.from_numpy(np.stack([plan.nodes.astype(np.float64), plan.times], axis=1))
        return z, None, None

    def score(self, za: torch.Tensor, zb: torch.Tensor) -> torch.Tensor:
        """1.0 where the pair ``(za node, zb node)`` is remembered at ``za``'s time, else 0.0."""
        src = za[:, 0].cpu().numpy().astype(np.int64)
        dst = zb[:, 0].cpu().numpy().astype(np.int64)
        t = za[:, 1].cpu().numpy()
        pair = self._pair(src, dst)
        seen = np.where(pair >= 0, self.state.last_seen[np.maximum(pair, 0)], -np.inf)
        hit = seen > -np.inf if self.mode == "unlimited" else seen >= t - self.window
        return torch.from_numpy(hit.astype(np.float32))

    def absorb(self, plan, states=None, lasts=None, z=None) -> None:
        """Remember a batch of events (after it has been scored: no event sees itself)."""
        if plan.events is None:
            return
        s, d, tt = (np.asarray(x) for x in plan.events[:3])
        pair = self._pair(s.astype(np.int64), d.astype(np.int64))
        np.maximum.at(self.state.last_seen, pair, tt.astype(np.float64))


class SeenPairs:
    """EdgeBank's state: when each pair of the log was last seen (the evaluator's state verbs;
    it keeps no neighbours)."""

    #: seconds in collectives answering neighbour queries (:attr:`NodeStates.seconds_gathering`):
    #: none, it has no neighbours to ask
    seconds_gathering = 0.0

    def __init__(self, num_pairs: int):
        self.num_pairs = int(num_pairs)
        self.reset()

    def reset(self) -> None:
        self.last_seen = np.full(self.num_pairs, -np.inf)

    @property
    def snapshots(self) -> "SeenPairs":
        """Its back-ups (a node state's ``snapshots``): the pairs' times, taken and put back here."""
        return self

    def backup(self, nodes=None, keep=None) -> np.ndarray:
        # every pair's time, whatever the pass touches: one float per pair (``keep``: in memory
        # or spilled, as a model's state, speed.train.state.spill)
        return (keep.copy(self.last_seen) if keep is not None else self.last_seen.copy())

    def restore(self, state: np.ndarray, adopt: bool = False) -> None:
        self.last_seen = state if adopt else np.array(state, copy=True)

    def push_events(self, *events) -> None:
        pass

    def reset_neighbors(self) -> None:
        pass

    def insert_neighbors(self, *events) -> None:
        pass


class _WholeStep:
    """EdgeBank's evaluation step: score the batch against its negatives and candidates, then
    remember it (:class:`~speed.train.eval.divided.DividedStep`'s interface, one process)."""

    world = None
    size = 1  # one process: its plans are built as the loader builds them

    def __call__(self, bank: "EdgeBank", plan, step: QueryLayout, collect: bool = False, score: bool = True):
        from .divided import StepScores

        out = StepScores(events=step.m)
        if score and step.m:
            out.pos, out.neg, out.mrr = step.score(bank.score, bank.compute(plan)[0])
        bank.absorb(plan)
        return [out]

    def flush(self) -> list:
        return []  # (nothing is left for a later step)


class _Plan:
    __slots__ = ("nodes", "times", "events")

    def __init__(self, nodes, times, events):
        self.nodes, self.times, self.events = nodes, times, events


def default_window(events: Events, split: Split) -> float:
    """DyGLib's time window: the span of the test period (the last ``test`` fraction of time)."""
    t = events.t_float()
    return max(float(t[-1]) - float(split.test_time), float(np.finfo(np.float64).tiny))


def run_edgebank(events: Events, split: Split, config, out=None, mode: str = "unlimited",
                 window: Optional[float] = None) -> Dict:
    """Evaluate EdgeBank like a trained model: remember the training events, then stream the
    validation and test events through the evaluator (``config`` supplies batch size,
    seed, negatives and ranking settings).

    Returns
    -------
    dict
        ``metrics.json``'s content (also written to ``out`` with the negatives).
    """
    started = time.perf_counter()
    if mode == "window" and window is None:
        window = default_window(events, split)
    bank = EdgeBank(events, mode, window)
    ev = Evaluator.for_run(events, split, config, node_classification=False, pipeline=False)
    ev.stream(bank, ev.train_index, desc="edgebank train")
    val, _ = ev.evaluate(bank, "val")
    test, _ = ev.evaluate(bank, "test")
    metrics = {
        "model": config.model,
        "protocol": config.protocol_name,
        "config": config.to_dict(),
        "edgebank": {"mode": mode, "window": window},
        "data": data_block(events, split),
        "epochs": [],
        "best_epoch": None,
        "val": val,
        "test": test,
        "negatives_true_edges": ev.true_negative_counts(),
        "seconds": {"total": time.perf_counter() - started},
    }
    if out is not None:
        RunFolder.of(out).write_results(metrics, negatives=ev)
    return metrics
