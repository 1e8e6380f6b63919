"""Node memory: one state vector and one timestamp per node, with explicit verbs."""

from __future__ import annotations

from typing import Dict

import torch
from torch import nn


class NodeMemory(nn.Module):
    """Per-node memory ``s_i`` and the time of its last update.

    Both are buffers (they move with ``.to(device)`` and are saved in ``state_dict`` but
    receive no optimiser updates) and always hold detached values: the model computes
    gradient-carrying states on the fly from pending messages (see
    :meth:`speed.train.models.TemporalGNN.memory_of`) and writes them back detached.

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

    def reset_state(self) -> None:
        """Zero every state and timestamp (the start of a pass over the data)."""
        self.memory = torch.zeros_like(self.memory)
        self.last_update = torch.zeros_like(self.last_update)

    def resize(self, num_nodes: int) -> None:
        """Hold ``num_nodes`` fresh (zero) rows, on the same device."""
        self.num_nodes = int(num_nodes)
        self.memory = self.memory.new_zeros(self.num_nodes, self.memory_dim)
        self.last_update = self.last_update.new_zeros(self.num_nodes)

    def grow(self, num_nodes: int) -> None:
        """Append zero rows up to ``num_nodes`` (new nodes start with an empty memory)."""
        extra = int(num_nodes) - self.num_nodes
        if extra > 0:
            self.memory = torch.cat([self.memory, self.memory.new_zeros(extra, self.memory_dim)])
            self.last_update = torch.cat([self.last_update, self.last_update.new_zeros(extra)])
            self.num_nodes = int(num_nodes)

    def read(self, n_id: torch.Tensor):
        """``(memory[n_id], last_update[n_id])`` as stored, on the device of ``n_id``.

        The rows may live on another device than the computation (host memory for a
        full-graph evaluation model, see :meth:`TemporalGNN.keep_node_state_on`): only the
        requested rows move.
        """
        i = n_id.to(self.memory.device)
        return self.memory[i].to(n_id.device), self.last_update[i].to(n_id.device)

    def detach(self) -> None:
        """Cut any autograd history from the stored states (they are stored detached, so
        this is a guarantee, e.g. after values were assigned by hand)."""
        self.memory = self.memory.detach()

    def write(self, n_id: torch.Tensor, values: torch.Tensor, t: torch.Tensor) -> None:
        """Store detached states of ``n_id`` and their update times."""
        dev = self.memory.device
        i = n_id.to(dev)
        self.memory = self.memory.index_copy(0, i, values.detach().to(dev, self.memory.dtype))
        self.last_update = self.last_update.index_copy(0, i, t.to(dev, self.last_update.dtype))

    def backup(self) -> Dict[str, torch.Tensor]:
        """A detached copy of the state, for :meth:`restore`."""
        return {"memory": self.memory.clone(), "last_update": self.last_update.clone()}

    def restore(self, state: Dict[str, torch.Tensor]) -> None:
        self.memory = state["memory"].clone().to(self.memory.device)
        self.last_update = state["last_update"].clone().to(self.last_update.device)
        self.num_nodes = int(self.memory.shape[0])

    def extra_repr(self) -> str:
        return f"num_nodes={self.num_nodes}, memory_dim={self.memory_dim}"
