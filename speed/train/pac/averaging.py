"""Local SGD for PAC ranks: average the ranks' weights every K steps instead of their gradients
every step (``--average-every K``).

Why: a rank's gradient all-reduce is a lock-step meeting of all ranks at every step.  Where a
step is short and the interconnect slow (CPU ranks over gloo: ~16 ms of compute against ~5 ms
of waiting and transfer for TGN on a dense log), that meeting costs a quarter of a rank's rate.
With K > 1 each rank steps its own optimiser on its own gradients for K steps, then the ranks
average their weights once (one all-reduce of the flattened parameters), so they meet K times
less often.  Each rank keeps its own Adam moments, as PyTorch's post-local SGD does.  K = 1 is
DDP's gradient averaging, unchanged.

The ranks also average at the end of every epoch, so every rank holds the same weights when
they are evaluated, checkpointed or gathered.
"""

from __future__ import annotations

import time
from typing import List, Sequence

import torch


def local_step_hook(state, bucket):
    """A DDP communication hook that leaves each rank's gradients its own (no all-reduce).

    ``bucket`` is a ``dist.GradBucket``; returns a completed ``torch.futures.Future`` of its
    buffer.  (Not annotated: DDP checks annotations against the classes, and this module's
    ``from __future__ import annotations`` would turn them into strings.)
    """
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def averaged_parameters(ddp: torch.nn.Module) -> List[torch.nn.Parameter]:
    """The parameters the DDP wrapper ``ddp`` (:meth:`~speed.train.world.World.wrap`) synchronises (those it was told to ignore, e.g. a learned static
    table merged by :func:`speed.train.model.static.merge_static`, are left out)."""
    ignore = getattr(ddp, "parameters_to_ignore", set())
    return [p for name, p in ddp.module.named_parameters() if p.requires_grad and name not in ignore]


class WeightAverager:
    """Average ``params`` over the ranks every ``every`` steps.

    Parameters
    ----------
    params : sequence of Parameter
        The same parameters, in the same order, on every rank.
    every : int
        Steps between averages (>= 1).
    world : World
        The ranks (:class:`~speed.train.world.World`: an all-reduce over its device group).

    Attributes
    ----------
    seconds : float
        Time spent averaging so far.
    rounds : int
        Averages done so far.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], every: int, world):
        self.params = list(params)
        self.every = int(every)
        self.world = world
        self.seconds = 0.0
        self.rounds = 0

    def average(self) -> None:
        """Replace every rank's parameters by their mean over the ranks (one all-reduce)."""
        start = time.perf_counter()
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in self.params])
            self.world.all_reduce(flat)
            flat /= self.world.size
            offset = 0
            for p in self.params:
                n = p.numel()
                p.copy_(flat[offset:offset + n].view_as(p))
                offset += n
        self.seconds += time.perf_counter() - start
        self.rounds += 1

    def after_step(self, step: int, last: int) -> None:
        """Call after step ``step`` (1-based) of ``last``: averages every ``every`` steps and
        after the last one (the same steps on every rank, so the collectives line up)."""
        if step % self.every == 0 or step == last:
            self.average()
