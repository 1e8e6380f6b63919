"""Shared-node sync: make the state of the nodes every rank holds agree across ranks.

To add a rule: a name in :data:`speed.train.config.SYNC_MODES` and a branch in
:func:`combine_shared`.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..models import NodeState, TemporalGNN


def combine_shared(states: torch.Tensor, last: torch.Tensor, mode: str):
    """The sync rule on gathered states ``(W, S, d)`` and times ``(W, S)``.

    ``last``: the state with the largest ``last_update`` wins (ties: the lowest rank);
    ``mean``: the mean state with the latest time.  Returns ``(states (S, d), last (S,))``.
    """
    if mode == "mean":
        return states.mean(0), last.max(0).values
    winner = torch.argmax(last, dim=0)  # first maximum: the lowest rank wins ties
    cols = torch.arange(states.shape[1], device=states.device)
    return states[winner, cols], last[winner, cols]


def sync_shared(model: TemporalGNN, num_shared: int, mode: str, world: int, group=None,
                before: float = float("inf")) -> float:
    """Synchronise the first ``num_shared`` local rows (the shared nodes) across ranks.

    Their pending events earlier than ``before`` (all, by default) are applied first, so each
    rank offers a complete state; other nodes keep theirs.  Tensor collectives on the shared
    rows only.  Returns the seconds spent.
    """
    start = time.perf_counter()
    if mode == "none" or num_shared == 0 or world == 1:
        return time.perf_counter() - start
    shared = torch.arange(num_shared, device=model.memory.memory.device)
    with torch.no_grad():
        model.settle(shared, before)
        state = model.node_state(shared)
        merged = {}
        for name, (s, lu) in state.memories.items():
            all_s = [torch.empty_like(s) for _ in range(world)]
            all_lu = [torch.empty_like(lu) for _ in range(world)]
            dist.all_gather(all_s, s.contiguous(), group=group)
            dist.all_gather(all_lu, lu.contiguous(), group=group)
            merged[name] = combine_shared(torch.stack(all_s), torch.stack(all_lu), mode)
        model.load_node_state(shared, NodeState(merged, state.pending))
    return time.perf_counter() - start
