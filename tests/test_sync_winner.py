"""The shared-node winner of a sync, one rule written twice over: :func:`latest_rank` over
every rank's time of every shared node (W, S), and :func:`winning_offers` over the offers a
sync receives, which differ in number per node.  On random offers, with many ties, they agree."""

import numpy as np
import pytest
import torch

from speed.train.pac.sync import latest_rank, winning_offers


@pytest.mark.parametrize("seed", range(20))
def test_winning_offers_agree_with_latest_rank(seed):
    rng = np.random.default_rng(seed)
    world, nodes = int(rng.integers(1, 6)), int(rng.integers(1, 60))
    last = torch.from_numpy(rng.integers(0, 4, (world, nodes)).astype(np.float64))  # few times: many ties
    offered = rng.random((world, nodes)) < 0.6
    offered[rng.integers(0, world, nodes), np.arange(nodes)] = True  # every node has an offer
    rank, node = (torch.from_numpy(x) for x in np.nonzero(offered))
    shuffle = torch.from_numpy(rng.permutation(node.numel()))  # offers arrive in any order
    rank, node = rank[shuffle], node[shuffle]
    win = winning_offers(node, rank, last[rank, node])
    assert torch.equal(node[win], torch.arange(nodes))
    # latest_rank over the same offers, the ranks that offered nothing at -inf
    dense = torch.where(torch.from_numpy(offered), last, torch.tensor(float("-inf"), dtype=torch.float64))
    assert torch.equal(rank[win], latest_rank(dense))


def test_a_tie_goes_to_the_lowest_rank_and_the_latest_time_wins():
    node = torch.tensor([5, 5, 5, 2, 2])
    rank = torch.tensor([2, 0, 1, 1, 0])
    last = torch.tensor([3.0, 3.0, 1.0, 7.0, 6.0], dtype=torch.float64)
    assert winning_offers(node, rank, last).tolist() == [3, 1]
