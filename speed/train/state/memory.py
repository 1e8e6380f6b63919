"""Node memory: one state vector and one timestamp per node, with explicit verbs."""

from __future__ import annotations

import threading
from typing import Dict, Optional

import numpy as np
import torch

from .spill import Keep, windows
from .staging import staging_for


class NodeMemory:
    """Per-node memory ``s_i`` and the time of its last update.

    Plain tensors, not module buffers: node state is owned by
    :class:`~speed.train.state.nodes.NodeStates`, apart from the weights, so it never enters
    a module's ``state_dict``, DDP or an optimiser.  The stored values are always detached:
    the model computes gradient-carrying states on the fly from pending messages and they are
    written back detached.

    Parameters
    ----------
    num_nodes : int
        Rows of the memory (the rank's local nodes under PAC, every node otherwise).
    memory_dim : int
    device : torch.device, optional

    Attributes
    ----------
    memory : float32 tensor, shape (num_nodes, memory_dim)
    last_update : float64 tensor, shape (num_nodes,)
    """

    def __init__(self, num_nodes: int, memory_dim: int, device=None):
        self.num_nodes = int(num_nodes)
        self.memory_dim = int(memory_dim)
        self.memory = torch.zeros(self.num_nodes, self.memory_dim, device=device)
        self.last_update = torch.zeros(self.num_nodes, dtype=torch.float64, device=device)
        # a planning thread may read rows ahead (read_host) while the step writes in place:
        # the lock keeps each read from seeing half of a write
        self._lock = threading.Lock()
        self._staging = {}  # compute device -> HostStaging (host rows read from a GPU)

    @property
    def device(self) -> torch.device:
        return self.memory.device

    def to(self, device) -> "NodeMemory":
        self.memory = self.memory.to(device)
        self.last_update = self.last_update.to(device)
        self._staging = {}
        return self

    def _stage(self, compute: torch.device):
        """The pinned staging buffers for rows moving between these host rows and ``compute``
        (None: plain indexing, see :func:`~speed.train.state.staging.staging_for`)."""
        if compute not in self._staging:
            self._staging[compute] = staging_for(self.memory, self.last_update, compute)
        return self._staging[compute]

    def reset_state(self) -> None:
        """Zero every state and timestamp (the start of a pass over the data), in place."""
        with self._lock:
            self.memory.zero_()
            self.last_update.zero_()

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
        full-graph evaluation state): only the requested rows move.
        """
        stage = self._stage(n_id.device) if n_id.device != self.memory.device else None
        i = n_id.to(self.memory.device)
        if stage is not None:
            with self._lock:  # the buffers are shared with write
                return stage.gather(self.memory, self.last_update, i, n_id.device)
        # index_select, not memory[i]: the same rows, gathered 2-3x faster on a CPU (advanced
        # indexing goes through the general index kernel)
        return self.memory.index_select(0, i).to(n_id.device), self.last_update.index_select(0, i).to(n_id.device)

    def local_rows(self, ids: np.ndarray):
        """``(memory[ids], last_update[ids])`` of rows held here, as host tensors (``ids``: int64
        node ids)."""
        i = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))
        with self._lock:
            return self.memory.index_select(0, i.to(self.memory.device)).cpu(), \
                self.last_update.index_select(0, i.to(self.memory.device)).cpu()

    def held(self):
        """``(memory, last_update)``: every row as held, no copy.  For a reader done before the
        next write (PAC's hand-over to the evaluation state, which would otherwise copy every
        row at the moment it holds both states)."""
        return self.memory, self.last_update

    def read_host(self, rows: torch.Tensor):
        """:meth:`read` from another thread: host rows are gathered with numpy, so that thread
        starts no torch thread pool of its own beside the step's."""
        if self.memory.device.type != "cpu" or rows.device.type != "cpu":
            return self.read(rows)
        r = rows.numpy()
        with self._lock:
            return torch.from_numpy(self.memory.numpy()[r]), torch.from_numpy(self.last_update.numpy()[r])

    def write(self, n_id: torch.Tensor, values: torch.Tensor, t: torch.Tensor) -> None:
        """Store detached states of ``n_id`` and their update times, in place: O(rows written),
        whatever the number of nodes.

        In place is safe under autograd: the stored tensors never require gradients, and every
        read (:meth:`read`, :meth:`read_host`, :meth:`backup`) returns a copy, so no graph and
        no plan read ahead (``--staleness``) holds a view that a later write could change."""
        dev = self.memory.device
        i = n_id.to(dev)
        stage = self._stage(values.device) if values.device != dev else None
        with self._lock:
            if stage is not None and values.dtype == self.memory.dtype and t.dtype == self.last_update.dtype:
                values, t = stage.to_host(values, t)
            else:
                values, t = values.detach().to(dev, self.memory.dtype), t.to(dev, self.last_update.dtype)
            self.memory.index_copy_(0, i, values)
            self.last_update.index_copy_(0, i, t)

    def nbytes(self, num_nodes: int) -> int:
        """Bytes of ``num_nodes`` rows (states and timestamps)."""
        return int(num_nodes) * (self.memory_dim * self.memory.element_size() + self.last_update.element_size())

    def backup(self, keep: Optional[Keep] = None) -> Dict[str, torch.Tensor]:
        """A detached copy of the state, for :meth:`restore` (``keep``: where the copy lives,
        in memory by default or spilled to disk, :mod:`~speed.train.state.spill`)."""
        keep = keep or Keep()
        return {"memory": keep.copy(self.memory), "last_update": keep.copy(self.last_update)}

    def backup_rows(self, n_id: np.ndarray, keep: Optional[Keep] = None) -> Dict[str, torch.Tensor]:
        """A copy of the rows ``n_id`` (int64, distinct), for :meth:`restore_rows`: a back-up of
        what a pass may write, when it writes few of the rows."""
        keep = keep or Keep()
        ids = np.asarray(n_id, dtype=np.int64)
        with self._lock:
            return {"ids": torch.from_numpy(ids), "memory": keep.take(self.memory, ids),
                    "last_update": keep.take(self.last_update, ids)}

    def restore_rows(self, rows: Dict[str, torch.Tensor]) -> None:
        """Put back the rows of a :meth:`backup_rows` (a spilled one a window at a time)."""
        ids, memory, last = rows["ids"], rows["memory"], rows["last_update"]
        for lo, hi in windows(memory):
            self.write(ids[lo:hi], memory[lo:hi], last[lo:hi])

    def restore(self, state: Dict[str, torch.Tensor], adopt: bool = False) -> None:
        """Take the rows of a :meth:`backup` (copied in place when the shape is the same).

        ``adopt``: hold the given tensors themselves, no copy (tensors nobody else writes to,
        e.g. a checkpoint's rows mapped copy-on-write: a reader then pays for the rows it touches)."""
        memory, last = state["memory"], state["last_update"]
        with self._lock:
            if adopt and memory.device == self.memory.device and memory.dtype == self.memory.dtype \
                    and last.dtype == self.last_update.dtype:
                self.memory, self.last_update = memory, last
            elif memory.shape == self.memory.shape:
                # a window at a time: a spilled back-up's pages go as they are copied
                for lo, hi in windows(memory):
                    self.memory[lo:hi].copy_(torch.as_tensor(memory[lo:hi]))
                for lo, hi in windows(last):
                    self.last_update[lo:hi].copy_(torch.as_tensor(last[lo:hi]))
            else:
                self.memory = memory.clone().to(self.memory.device, self.memory.dtype)
                self.last_update = last.clone().to(self.last_update.device, self.last_update.dtype)
        self.num_nodes = int(self.memory.shape[0])

    def __repr__(self) -> str:
        return f"NodeMemory(num_nodes={self.num_nodes}, memory_dim={self.memory_dim})"
