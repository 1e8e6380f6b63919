"""Training negatives: one random destination per event, drawn from the pool of the training
events' destinations (items of a bipartite log, every endpoint otherwise), as TGN does.

To add a training strategy: subclass :class:`NegativeSampler`.  The evaluation's negatives, which
follow each protocol's reference code, are in :mod:`speed.train.eval.negatives`.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch


Seed = Union[int, Sequence[int]]


def train_seed(seed: int, epoch: int, rank: int = 0) -> list:
    """The seed of the training negatives of one rank in one epoch (a single process is rank 0)."""
    return [int(seed), int(epoch), int(rank)]


def negative_pool(src: np.ndarray, dst: np.ndarray, bipartite: bool) -> np.ndarray:
    """Candidate negative destinations: the distinct destinations (bipartite) or endpoints.

    Parameters
    ----------
    src, dst : int64 ndarray, shape (E,)
        The events negatives are drawn for (the training events).
    bipartite : bool

    Returns
    -------
    int64 ndarray, shape (C,), ascending
    """
    return np.unique(dst if bipartite else np.concatenate([src, dst]))


class NegativeSampler:
    """Draws negative destinations; subclasses choose how."""

    def draw(self, n: int, k: int = 1) -> np.ndarray:  # pragma: no cover - interface
        """``(n, k)`` int64 node ids."""
        raise NotImplementedError

    def draw_tensor(self, n: int, k: int = 1, device=None) -> torch.Tensor:
        return torch.from_numpy(self.draw(n, k)).to(device)

    def next_edges(self, n: int):
        """Negatives of the next ``n`` events: ``(src or None, dst)``, int64 (n,); None keeps
        each event's own source (destination corruption, as in training)."""
        return None, self.draw(n, 1)[:, 0]


class RandomNegatives(NegativeSampler):
    """Uniform draws from a pool, from one seeded stream.

    Parameters
    ----------
    pool : int64 ndarray, shape (C,)
    seed : int or sequence of int
        Seeds ``numpy.random.default_rng``.
    """

    def __init__(self, pool: np.ndarray, seed: Seed):
        if pool.size == 0:
            raise ValueError("no candidate negatives (empty pool)")
        self.pool = pool
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def draw(self, n: int, k: int = 1) -> np.ndarray:
        return self.pool[self.rng.integers(0, self.pool.size, size=(n, k))]
