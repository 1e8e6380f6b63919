"""Negative destinations for link prediction: one object per stream, seeded.

Training draws one random negative per event from the pool of the training events'
destinations (items of a bipartite log, every node otherwise), as TGN does.  Evaluation
draws from the same pool with a fixed seed per period (:func:`eval_seed`), so every model and
every run on the same data scores the same negatives.

To add a sampling strategy: subclass :class:`NegativeSampler` and implement ``draw``.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch

# The evaluation negatives of a period are seeded with seed + offset: one rule, used by
# every evaluation (per-epoch validation, final test, replay, the true-edge count).
EVAL_SEED_OFFSETS = {"val": 1, "test": 2}

Seed = Union[int, Sequence[int]]


def eval_seed(seed: int, period: str) -> int:
    """The seed of the evaluation negatives of ``period`` ("val" or "test")."""
    return int(seed) + EVAL_SEED_OFFSETS[period]


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
