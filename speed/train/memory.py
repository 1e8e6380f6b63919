"""Node memory: one state vector and one timestamp per node, with explicit verbs."""

from __future__ import annotations

from typing import Dict

import torch
from torch import nn


class NodeMemory(nn.Module):
    """Per-node memory ``s_i`` and the time of its last update.

    Both are buffers (they move with ``.to(device)`` and are saved in ``state_dict`` but
    receive no optimiser updates).  The buffers always hold detached values.  Rows written
    by :meth:`write` with a gradient are also kept as a small overlay that :meth:`read`
    patches in, so the loss reaches the updater through exactly those rows without
    autograd ever touching the full ``(num_nodes, memory_dim)`` tensor; :meth:`detach`
    drops the overlay after the optimiser step.

    Parameters
    ----------
    num_nodes : int
        Rows of the memory (the rank's local nodes under PAC, every node otherwise).
    memory_dim : int

    Attributes
    ----------
    memory : float32 tensor, shape (num_nodes, memory_dim)
    last_update : float64 tensor, shape (num_nodes,)
    """

    def __init__(self, num_nodes: int, memory_dim: int):
        super().__init__()
        self.num_nodes = int(num_nodes)
        self.memory_dim = int(memory_dim)
        self.register_buffer("memory", torch.zeros(self.num_nodes, self.memory_dim))
        self.register_buffer("last_update", torch.zeros(self.num_nodes, dtype=torch.float64))
        self._fresh_ids = None  # sorted ids written this step with a gradient
        self._fresh_vals = None

    def reset_state(self) -> None:
        """Zero every state and timestamp (the start of a pass over the data)."""
        self.memory = torch.zeros_like(self.memory)
        self.last_update = torch.zeros_like(self.last_update)
        self._fresh_ids = self._fresh_vals = None

    def detach(self) -> None:
        """Cut the autograd history of the stored states (after each optimiser step)."""
        self._fresh_ids = self._fresh_vals = None

    def read(self, n_id: torch.Tensor):
        """``(memory[n_id], last_update[n_id])``, with this step's gradient-carrying rows."""
        values = self.memory[n_id]
        if self._fresh_ids is not None:
            pos = torch.searchsorted(self._fresh_ids, n_id).clamp(max=self._fresh_ids.numel() - 1)
            hit = self._fresh_ids[pos] == n_id
            values = torch.where(hit.unsqueeze(-1), self._fresh_vals.index_select(0, pos), values)
        return values, self.last_update[n_id]

    def write(self, n_id: torch.Tensor, values: torch.Tensor, t: torch.Tensor) -> None:
        """Set the states of ``n_id`` (unique, sorted ids, as ``torch.unique`` gives) and
        their update times.  A gradient through ``values`` reaches later reads until
        :meth:`detach`."""
        values = values.to(self.memory.dtype)
        self.memory = self.memory.index_copy(0, n_id, values.detach())
        self.last_update = self.last_update.index_copy(0, n_id, t.to(self.last_update.dtype))
        if values.requires_grad:
            if self._fresh_ids is not None:  # a second write in one step: merge the overlays
                keep = ~torch.isin(self._fresh_ids, n_id)
                ids = torch.cat([self._fresh_ids[keep], n_id])
                vals = torch.cat([self._fresh_vals[keep], values])
                order = torch.argsort(ids)
                n_id, values = ids[order], vals[order]
            self._fresh_ids, self._fresh_vals = n_id, values

    def backup(self) -> Dict[str, torch.Tensor]:
        """A detached copy of the state, for :meth:`restore`."""
        return {"memory": self.memory.clone(), "last_update": self.last_update.clone()}

    def restore(self, state: Dict[str, torch.Tensor]) -> None:
        self.memory = state["memory"].clone().to(self.memory.device)
        self.last_update = state["last_update"].clone().to(self.last_update.device)

    def extra_repr(self) -> str:
        return f"num_nodes={self.num_nodes}, memory_dim={self.memory_dim}"
