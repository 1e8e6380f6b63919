"""Training negatives: one random destination per event, drawn from the pool of the training
events' destinations (items of a bipartite log, every endpoint otherwise), as TGN does.

To add a training strategy: subclass :class:`NegativeSampler` (taking ``(pool, seed)``) and make
it :data:`TRAINING_SAMPLER`: every training run, one process or a PAC rank, draws through
:func:`training_negatives`.  The evaluation's negatives, which
follow each protocol's reference code, are in :mod:`speed.train.eval.negatives`.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np


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
    """Where a stream's negatives come from, step after step: what the loader asks of it is
    :meth:`next_edges`."""

    def next_edges(self, n: int):  # pragma: no cover - interface
        """Negatives of the next ``n`` events: ``(src or None, dst)``, int64 (n,); None keeps
        each event's own source (destination corruption, as in training)."""
        raise NotImplementedError


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
        """``(n, k)`` int64 node ids."""
        return self.pool[self.rng.integers(0, self.pool.size, size=(n, k))]

    def next_edges(self, n: int):
        return None, self.draw(n, 1)[:, 0]


# What every training run draws its negatives with (a NegativeSampler taking ``(pool, seed)``).
TRAINING_SAMPLER = RandomNegatives


def training_negatives(pool: np.ndarray, seed: Seed) -> NegativeSampler:
    """The training negatives of one epoch of one rank (a single process is rank 0): a
    :data:`TRAINING_SAMPLER` over ``pool`` seeded with ``seed`` (:func:`train_seed`)."""
    return TRAINING_SAMPLER(pool, seed)
