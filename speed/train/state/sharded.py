"""A node memory whose rows are divided among ranks (PAC's exact, sharded evaluation).

Each node's rows live on one rank, its owner (:func:`speed.train.pac.sharded.owners`).  Every
rank runs the same evaluation steps, so each step's reads are the same on every rank:
:meth:`ShardedMemory.read` answers a read with one collective, every rank contributing the
requested rows it owns, each row once however many queries, neighbours or keys name it.  A write
keeps the rows the rank owns and drops the rest (every rank computed the same values), so writes
need no exchange.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

import numpy as np
import torch
import torch.distributed as dist

from .memory import NodeMemory


class Exchange:
    """Counts what the ranks send each other when reading sharded rows."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.rows = 0  # rows this rank received from others
        self.bytes = 0  # bytes this rank received from others
        self.seconds = 0.0

    def as_dict(self) -> Dict:
        return {"calls": self.calls, "rows_received": self.rows, "bytes_received": self.bytes,
                "seconds": self.seconds}


class ShardedMemory(NodeMemory):
    """A :class:`~speed.train.state.memory.NodeMemory` of ``len(owner)`` nodes of which this
    rank holds the rows it owns (its ``memory`` and ``last_update`` are those rows, in id order).

    Every rank must call :meth:`read` with the same ids at the same point (the evaluation runs
    the same stream on every rank); :meth:`write` needs no exchange.

    Parameters
    ----------
    owner : int16 ndarray, shape (num_nodes,)
        See :func:`owners` (one array, shared by a state's memories).
    memory_dim : int
    rank, world : int
    group : ProcessGroup, optional
        A gloo group (the rows are host memory).
    exchange : Exchange, optional
        Where the traffic is counted.
    """

    def __init__(self, owner: np.ndarray, memory_dim: int, rank: int, world: int, group=None,
                 exchange: Optional[Exchange] = None):
        self.owner = owner
        self.rank, self.world, self.group = int(rank), int(world), group
        self.mine = np.flatnonzero(owner == rank)  # global ids of the rows held, ascending
        self.exchange = exchange if exchange is not None else Exchange()
        super().__init__(self.mine.size, memory_dim, "cpu")
        self.num_nodes = int(owner.size)  # the ids it answers for

    # ------------------------------------------------------------------ rows
    def _local(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.mine, ids)

    def nbytes(self, num_nodes: int) -> int:
        return int(num_nodes) * (self.memory_dim * 4 + 8)

    def resize(self, num_nodes: int) -> None:
        raise RuntimeError("a sharded memory keeps its owners: build a new one")

    def grow(self, num_nodes: int) -> None:
        if int(num_nodes) > self.num_nodes:
            raise RuntimeError("a sharded memory keeps its owners: build a new one")

    def to(self, device) -> "ShardedMemory":
        if torch.device(device).type != "cpu":  # the exchange runs on a host (gloo) group
            raise ValueError("a sharded memory lives in host memory")
        return self

    def owned(self) -> np.ndarray:
        """Global ids of the rows this rank holds (int64, ascending)."""
        return self.mine

    def read(self, n_id: torch.Tensor):
        """``(memory[n_id], last_update[n_id])``: the rows this rank holds, and the others' from
        their owners, in one collective (every rank receives every requested row)."""
        ids = n_id.detach().cpu().numpy().astype(np.int64, copy=False)
        dev = n_id.device
        if self.world == 1 or ids.size == 0:
            i = torch.from_numpy(self._local(ids))
            return self.memory[i].to(dev), self.last_update[i].to(dev)
        t0 = time.perf_counter()
        d = self.memory_dim
        who = self.owner[ids]
        counts = np.bincount(who, minlength=self.world)  # known to every rank: the ids are the same
        mine = np.flatnonzero(who == self.rank)
        loc = torch.from_numpy(self._local(ids[mine]))
        # one float32 row per node: its memory, then its float64 time as two float32 words (bit-exact)
        rows = torch.empty(int(counts.max()), d + 2)
        rows[:mine.size, :d] = self.memory[loc]
        rows[:mine.size, d:] = self.last_update[loc].view(torch.float32).reshape(-1, 2)
        got = [torch.empty_like(rows) for _ in range(self.world)]
        dist.all_gather(got, rows, group=self.group)
        out = torch.empty(ids.size, d + 2)
        for r in range(self.world):
            out[torch.from_numpy(np.flatnonzero(who == r))] = got[r][:int(counts[r])]
        ex = self.exchange
        ex.calls += 1
        ex.rows += int(ids.size - mine.size)
        ex.bytes += int(ids.size - mine.size) * (d + 2) * 4
        ex.seconds += time.perf_counter() - t0
        last = out[:, d:].contiguous().view(torch.float64).reshape(-1)
        return out[:, :d].contiguous().to(dev), last.to(dev)

    read_host = read

    def restore(self, state: Dict[str, torch.Tensor], adopt: bool = False) -> None:
        """Take this rank's rows of a :meth:`backup` (or, from a full-graph back-up, the rows it owns)."""
        memory, last = state["memory"], state["last_update"]
        if memory.shape[0] != self.mine.size:  # a full-graph back-up (a resumed run's)
            i = torch.from_numpy(self.mine)
            memory, last = torch.as_tensor(memory)[i], torch.as_tensor(last)[i]
        super().restore({"memory": memory, "last_update": last}, adopt=False)
        self.num_nodes = int(self.owner.size)

    def write(self, n_id: torch.Tensor, values: torch.Tensor, t: torch.Tensor) -> None:
        """Keep the rows of ``n_id`` this rank owns (every rank computed the same values)."""
        ids = n_id.detach().cpu().numpy().astype(np.int64, copy=False)
        keep = np.flatnonzero(self.owner[ids] == self.rank)
        if keep.size == 0:
            return
        k = torch.from_numpy(keep)
        super().write(torch.from_numpy(self._local(ids[keep])), values.detach().cpu().index_select(0, k),
                      t.detach().cpu().index_select(0, k))

    def write_owned(self, ids: np.ndarray, values: torch.Tensor, t: torch.Tensor) -> None:
        """Store rows of nodes this rank owns (``ids`` int64, every one owned here)."""
        if ids.size:
            super().write(torch.from_numpy(self._local(ids)), values, t)

    def stream_to(self, dst: int, field: str, write=None, source: Optional[Dict[str, torch.Tensor]] = None,
                  chunk: int = 1 << 16) -> None:
        """Every node's ``field`` (``"memory"`` or ``"last_update"``) in id order, handed to
        ``write`` on rank ``dst`` a block of ``chunk`` nodes at a time: no rank holds more than
        its own rows and one block.  ``source``: this rank's rows of a :meth:`backup` instead of
        the held ones.  Collective (``dist.gather`` per block)."""
        held = (source if source is not None else {"memory": self.memory, "last_update": self.last_update})[field]
        for lo in range(0, self.num_nodes, chunk):
            hi = min(lo + chunk, self.num_nodes)
            who = self.owner[lo:hi]
            mine = np.flatnonzero(who == self.rank) + lo
            rows = held[torch.from_numpy(self._local(mine))]
            if self.world == 1:
                block = rows
            else:
                counts = np.bincount(who, minlength=self.world)
                pad = rows.new_zeros((int(counts.max()),) + tuple(rows.shape[1:]))
                pad[:rows.shape[0]] = rows
                got = [torch.empty_like(pad) for _ in range(self.world)] if self.rank == dst else None
                dist.gather(pad, got, dst=dst, group=self.group)
                block = None
                if self.rank == dst:
                    block = rows.new_empty((hi - lo,) + tuple(rows.shape[1:]))
                    for r in range(self.world):
                        block[torch.from_numpy(np.flatnonzero(who == r))] = got[r][:int(counts[r])]
            if self.rank == dst and write is not None:
                write(block.numpy())

    def __repr__(self) -> str:
        return (f"ShardedMemory(num_nodes={self.num_nodes}, held={self.mine.size}, memory_dim={self.memory_dim}, "
                f"rank={self.rank}/{self.world})")
