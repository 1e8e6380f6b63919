"""RowLayout: where rows go when each row's result must not depend on the others computed with it."""

import numpy as np
import pytest
import torch

from speed.train.model.network import RowLayout


@pytest.mark.parametrize("n", [0, 1, 15, 16, 31, 32, 33, 200, 1001])
def test_the_leading_rows_are_placed_and_taken_as_their_indices_are(n):
    x = torch.randn(n, 3)
    whole, first = RowLayout(np.arange(n)), RowLayout.leading(n)
    assert first.rows == whole.rows and first.n == whole.n == n
    assert torch.equal(first.positions("cpu"), whole.positions("cpu"))
    assert torch.equal(first.place(x), whole.place(x))
    y = torch.randn(whole.rows, 2)
    assert torch.equal(first.take(y), whole.take(y))
    assert torch.equal(RowLayout.contiguous(0, n).place(x), whole.place(x))


def test_a_subset_is_placed_by_residue_and_the_height_in_blocks():
    lay = RowLayout(np.array([3, 19, 4, 40]))
    # residue 3: 3 then 19 (16 apart); residue 4: 4; residue 8: 40
    assert lay.positions("cpu").tolist() == [3, 19, 4, 8]
    assert lay.rows == 32
    x = torch.arange(4.0).unsqueeze(1)
    assert torch.equal(lay.take(lay.place(x)), x)


@pytest.mark.parametrize("n", [0, 1, 15, 32, 33, 200])
@pytest.mark.parametrize("spread", [False, True])
def test_gathering_into_places_takes_back_the_rows_that_placing_a_gather_does(n, spread):
    gen = torch.Generator().manual_seed(n)
    source = torch.randn(50, 4, generator=gen)
    index = torch.randint(0, 50, (n,), generator=gen)
    lay = RowLayout(np.sort(np.random.default_rng(n).choice(5 * n + 1, n, replace=False))) if spread \
        else RowLayout.leading(n)
    placed, got = lay.place(source.index_select(0, index)), lay.gather(source, index)
    assert got.shape == placed.shape
    assert torch.equal(lay.take(got), lay.take(placed))
    assert torch.equal(lay.take(got), source.index_select(0, index))
    # no row to read: the placed rows are zeros, as placing gives
    assert torch.equal(RowLayout.leading(0).gather(source[:0], index[:0]), torch.zeros(32, 4))


def test_two_layouts_are_the_same_when_they_place_every_row_alike():
    a, b = RowLayout(np.array([3, 19, 4])), RowLayout(np.array([3, 19, 4]))
    assert a.same(b) and a.same(a)
    assert not a.same(RowLayout(np.array([3, 20, 4])))
    assert not a.same(RowLayout.leading(3))
    assert RowLayout.leading(5).same(RowLayout.leading(5)) and not RowLayout.leading(5).same(RowLayout.leading(6))
