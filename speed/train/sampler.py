"""Temporal neighbour sampling: the k most recent neighbours strictly before a time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import _kernels


@dataclass
class Neighbors:
    """Sampled neighbourhoods of B query nodes, most recent first.

    Attributes
    ----------
    nodes : int64 tensor, shape (B, k)
    times : float64 tensor, shape (B, k)
    eids : int64 tensor, shape (B, k)
        -1 in empty slots.
    mask : bool tensor, shape (B, k)
        True for real neighbours.
    """

    nodes: torch.Tensor
    times: torch.Tensor
    eids: torch.Tensor
    mask: torch.Tensor


class RecentNeighborSampler:
    """The ``k`` most recent neighbours of each node, updated as events stream in.

    Events are inserted after the batch that contains them has been processed, so a
    query never sees its own batch; the strict ``t < time`` filter also removes
    neighbours that share the query's timestamp.  A ring that holds events at the query
    time may therefore return fewer than ``k`` neighbours.

    Parameters
    ----------
    num_nodes : int
    k : int
        Neighbours kept per node.
    undirected : bool
        Record each event at both endpoints (default), as TGN does.
    """

    def __init__(self, num_nodes: int, k: int = 10, undirected: bool = True):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.num_nodes = int(num_nodes)
        self.k = int(k)
        self.undirected = undirected
        self.reset()

    def reset(self) -> None:
        """Forget every stored interaction."""
        self.nbr = np.zeros((self.num_nodes, self.k), dtype=np.int64)
        self.nbr_t = np.zeros((self.num_nodes, self.k), dtype=np.float64)
        self.nbr_e = np.full((self.num_nodes, self.k), -1, dtype=np.int64)
        self.head = np.zeros(self.num_nodes, dtype=np.int64)
        self.count = np.zeros(self.num_nodes, dtype=np.int64)

    def grow(self, num_nodes: int) -> None:
        """Append empty rings up to ``num_nodes`` nodes."""
        extra = int(num_nodes) - self.num_nodes
        if extra > 0:
            k = self.k
            self.nbr = np.concatenate([self.nbr, np.zeros((extra, k), dtype=np.int64)])
            self.nbr_t = np.concatenate([self.nbr_t, np.zeros((extra, k), dtype=np.float64)])
            self.nbr_e = np.concatenate([self.nbr_e, np.full((extra, k), -1, dtype=np.int64)])
            self.head = np.concatenate([self.head, np.zeros(extra, dtype=np.int64)])
            self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
            self.num_nodes = int(num_nodes)

    def insert(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """Record events (in time order)."""
        _kernels.ring_insert(np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
                             np.ascontiguousarray(t, dtype=np.float64), np.ascontiguousarray(eid, dtype=np.int64),
                             self.nbr, self.nbr_t, self.nbr_e, self.head, self.count, self.undirected)

    def sample(self, nodes: np.ndarray, times: np.ndarray) -> Neighbors:
        """Most recent neighbours of ``nodes[b]`` with time ``< times[b]``.

        Parameters
        ----------
        nodes : int64 ndarray, shape (B,)
        times : float64 ndarray, shape (B,)
        """
        b = nodes.shape[0]
        out_n = np.empty((b, self.k), dtype=np.int64)
        out_t = np.empty((b, self.k), dtype=np.float64)
        out_e = np.empty((b, self.k), dtype=np.int64)
        out_m = np.empty((b, self.k), dtype=np.bool_)
        _kernels.ring_query(np.ascontiguousarray(nodes, dtype=np.int64), np.ascontiguousarray(times, dtype=np.float64),
                            self.nbr, self.nbr_t, self.nbr_e, self.head, self.count, out_n, out_t, out_e, out_m)
        return Neighbors(torch.from_numpy(out_n), torch.from_numpy(out_t), torch.from_numpy(out_e),
                         torch.from_numpy(out_m))

    def state_dict(self) -> dict:
        return {"nbr": self.nbr.copy(), "nbr_t": self.nbr_t.copy(), "nbr_e": self.nbr_e.copy(),
                "head": self.head.copy(), "count": self.count.copy()}

    def load_state_dict(self, state: dict) -> None:
        for name in ("nbr", "nbr_t", "nbr_e", "head", "count"):
            setattr(self, name, state[name].copy())
        self.num_nodes = int(self.nbr.shape[0])
