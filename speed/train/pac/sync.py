"""Shared-node sync: make the state of the nodes every rank holds agree across ranks.

To add a rule: a name in :data:`speed.train.config.SYNC_RULES` and a branch in
:func:`combine_shared`.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..config import SYNC_RULES  # the rules combine_shared applies ("none" never combines)
from ..model.network import StatefulModel
from ..state.nodes import StateRows


def combine_shared(states: torch.Tensor, last: torch.Tensor, mode: str, now: float = float("inf"),
                   own: int = 0):
    """The sync rule on gathered states ``(W, S, d)`` and times ``(W, S)``.

    ``last``: the state with the largest ``last_update`` wins (ties: the lowest rank);
    ``mean``: the mean state with the latest time.  Only the states not later than ``now`` (the
    receiving rank's clock; infinite at the end of an epoch) take part, so that within an epoch a
    rank that is behind in time never takes in another rank's state from its own future; its own
    state (rank ``own``) always takes part.  Returns ``(states (S, d), last (S,))``.
    """
    valid = last <= now
    valid[own] = True
    latest = torch.where(valid, last, torch.full_like(last, -float("inf")))
    if mode not in SYNC_RULES:
        raise ValueError(f"unknown sync rule {mode!r} (choose from {', '.join(SYNC_RULES)})")
    if mode == "mean":
        w = valid.to(states.dtype).unsqueeze(-1)
        return (states * w).sum(0) / w.sum(0), latest.max(0).values
    winner = torch.argmax(latest, dim=0)  # first maximum: the lowest rank wins ties
    cols = torch.arange(states.shape[1], device=states.device)
    return states[winner, cols], last[winner, cols]


def sync_shared(model: StatefulModel, num_shared: int, mode: str, world: int, group=None,
                before: float = float("inf")) -> float:
    """Synchronise the first ``num_shared`` local rows (the shared nodes) across ranks.

    Their pending events earlier than ``before`` (all, by default) are applied first, so each
    rank offers a complete state; other nodes keep theirs.  ``before`` is also the rank's clock:
    a state later than it is not taken in (:func:`combine_shared`), since ranks move through time
    at their own pace (unequal groups, a light rank's repeated passes).  Tensor collectives on
    the shared rows only.  Returns the seconds spent.
    """
    start = time.perf_counter()
    if mode == "none" or num_shared == 0 or world == 1:
        return time.perf_counter() - start
    shared = torch.arange(num_shared, device=model.state.device)
    with torch.no_grad():
        model.settle(shared, before)
        state = model.state.rows(shared)
        merged = {}
        for name, (s, lu) in state.memories.items():
            all_s = [torch.empty_like(s) for _ in range(world)]
            all_lu = [torch.empty_like(lu) for _ in range(world)]
            dist.all_gather(all_s, s.contiguous(), group=group)
            dist.all_gather(all_lu, lu.contiguous(), group=group)
            merged[name] = combine_shared(torch.stack(all_s), torch.stack(all_lu), mode, now=before,
                                          own=dist.get_rank(group))
        model.state.load_rows(shared, StateRows(merged, state.pending))
    return time.perf_counter() - start
