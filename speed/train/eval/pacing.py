"""Whether an evaluation pass one process computes plans its steps ahead on a CPU: measured.

An evaluation step on a CPU can take the process's threads for its operators while its plan is
built in the same thread, one after the other; or give one of them to a planning thread that
builds the next plans while the step computes (:class:`~speed.train.step.loader.PlanLoader`'s
pipeline), the step keeping the others.  Which is faster depends on the model and the machine:
on 2 cores (the generated 2M-event log, TGN, batch 200) the plans ahead made a val pass about
1.5x as fast with every width 4, where the step's operators are too small to use a second
thread anyway (and torch's OpenMP workers, spinning after each kernel, would take the planning
thread's core), and about 1.4x as slow at the default width 100, where the step's matrix
products use both cores.  So the first long pass of a run tries both on consecutive stretches
of its own steps and the run keeps the faster (:class:`PlanPacing`).

Both ways compute the same figures, bit for bit: the plans are the same, and a step's results
do not depend on torch's thread count (each row is computed whole by one thread; checked by
``tests/test_pacing.py``).  Under ``--deterministic`` the pass plans in its step, without
measuring (:meth:`speed.train.config.TrainConfig.paces_evaluation`).
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Optional, Tuple

import torch

#: batches a pass runs before measuring (allocations and caches settle)
WARM_BATCHES = 4
#: batches in each measured stretch: planned in the step, ahead, and in the step again
PROBE_BATCHES = 40
#: the first steps of a stretch, not counted: a planning thread's first plan is not ahead, and
#: OpenMP's workers spin on for a while after torch's thread count changes
SETTLE_STEPS = 10
#: planning ahead is kept only when its median step takes at most this share of the faster
#: in-step stretch's (a tie keeps the simpler way, with no thread beside the step)
KEEP_AHEAD_BELOW = 0.95


class PlanPacing:
    """Measure, once per run, whether planning ahead makes a whole evaluation pass faster on
    this machine, and keep the answer for the run's later passes.

    Parameters
    ----------
    threads : int, optional
        The process's torch threads (default: ``torch.get_num_threads()`` when first asked).
        Planning ahead leaves the step one fewer; with fewer than 2 nothing is measured and
        every pass plans in its step.

    Attributes
    ----------
    ahead : bool or None
        The decision; None until a pass has measured.
    probe : dict or None
        What the measuring pass saw: seconds per event of each stretch, and the choice.
    """

    def __init__(self, threads: Optional[int] = None):
        self._threads = threads
        self.ahead: Optional[bool] = None
        self.probe: Optional[Dict] = None
        self._seen: Dict[str, List[float]] = {}

    @property
    def threads(self) -> int:
        if self._threads is None:
            self._threads = int(torch.get_num_threads())
        return self._threads

    @property
    def possible(self) -> bool:
        """Whether a planning thread can have a thread of its own (2 or more)."""
        return self.threads >= 2

    def segments(self, num_batches: int) -> List[Tuple[int, int, bool, Optional[str]]]:
        """A pass of ``num_batches`` batches as consecutive stretches ``(first, stop, ahead,
        label)``: while undecided and long enough, warm-up, in-step, ahead and in-step again
        (labelled, measured), then the rest in-step; decided, one stretch the decided way."""
        if not self.possible or num_batches <= 0:
            return [(0, max(0, num_batches), False, None)]
        if self.ahead is not None:
            return [(0, num_batches, self.ahead, None)]
        w, p = WARM_BATCHES, PROBE_BATCHES
        if num_batches < w + 3 * p + 1:  # too short to measure: in the step, still undecided
            return [(0, num_batches, False, None)]
        marks = [0, w, w + p, w + 2 * p, w + 3 * p, num_batches]
        ways = [(False, None), (False, "step"), (True, "ahead"), (False, "step"), (None, None)]
        return [(a, b, way, label) for (a, b), (way, label) in zip(zip(marks, marks[1:]), ways)]

    def record(self, label: str, seconds: List[float]) -> None:
        """A measured stretch: the wall seconds of each of its steps (its plan, or the wait for
        it, and its step), of which the median past the first :data:`SETTLE_STEPS` counts."""
        kept = sorted(seconds[SETTLE_STEPS:] or seconds)
        if kept:
            self._seen.setdefault(label, []).append(kept[len(kept) // 2])

    def decide(self) -> bool:
        """The choice from the stretches recorded: ahead when its median step is below
        :data:`KEEP_AHEAD_BELOW` of the faster in-step stretch's."""
        step = self._seen.get("step", [])
        ahead = self._seen.get("ahead", [])
        if not step or not ahead:
            self.ahead = False
            return False
        self.ahead = bool(ahead[0] <= KEEP_AHEAD_BELOW * min(step))
        self.probe = {"step_median_seconds": [round(x, 7) for x in step],
                      "ahead_median_seconds": round(ahead[0], 7), "ahead": self.ahead, "threads": self.threads}
        return self.ahead

    @contextlib.contextmanager
    def step_threads(self, ahead: bool) -> Iterator[int]:
        """torch's thread count for a stretch's steps: one fewer while a planning thread works
        beside them (it takes a core: torch's OpenMP workers spin after each kernel and would
        take it back), restored after.  Yields the count."""
        if not ahead:
            yield torch.get_num_threads()
            return
        before = torch.get_num_threads()
        torch.set_num_threads(max(1, self.threads - 1))
        try:
            yield torch.get_num_threads()
        finally:
            torch.set_num_threads(before)
