"""Every run's optimiser: Adam over the weights, and a row-wise sparse Adam (:class:`RowAdam`)
over a learned static table (:mod:`speed.train.model.static`), stepped as one."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..model.static import RowAdam


class TwoOptimizers:
    """Dense Adam over the weights and sparse Adam over a learned static table, stepped as one
    (the engine and the checkpoints see one optimiser)."""

    def __init__(self, dense: torch.optim.Optimizer, sparse: torch.optim.Optimizer):
        self.dense, self.sparse = dense, sparse

    @property
    def param_groups(self):
        return self.dense.param_groups + self.sparse.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        self.sparse.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.dense.step()
        self.sparse.step()

    def state_dict(self) -> dict:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.dense.load_state_dict(state["dense"])
        self.sparse.load_state_dict(state["sparse"])


def make_optimizer(model: nn.Module, lr: float, static_lr: Optional[float] = None):
    """Adam over ``model``'s weights at ``lr``; a learned static table gets its own sparse
    Adam at ``static_lr`` (default ``lr``)."""
    static = getattr(model, "static", None)
    if static is None or not static.trainable:
        # foreach: one kernel per step for all parameters instead of a Python loop over them
        return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr, foreach=True)
    local = set(model.local_parameters())
    dense = [p for n, p in model.named_parameters() if p.requires_grad and n not in local]
    return TwoOptimizers(torch.optim.Adam(dense, lr=lr, foreach=True),
                         RowAdam([static.table], lr=lr if static_lr is None else static_lr))
