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


def _reference_positions(index: np.ndarray, period: int) -> np.ndarray:
    """The layout's places by a stable sort on the residues (how RowLayout placed rows before
    its numba kernel): the j-th row of residue r goes to period * j + r."""
    residue = index % period
    order = np.argsort(residue, kind="stable")
    counts = np.bincount(residue, minlength=period)
    rank = np.empty(index.size, dtype=np.int64)
    rank[order] = np.arange(index.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return period * rank + residue


@pytest.mark.parametrize("seed", range(6))
def test_the_residue_kernel_places_rows_as_a_stable_sort_on_residues_does(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    # distinct indices in any order (a layout's rows need not be ascending), some dense, some spread
    index = rng.permutation(int(rng.integers(n, 4 * n + 2)))[:n].astype(np.int64)
    if seed % 2:
        index = np.sort(index)
    lay = RowLayout(index)
    expect = _reference_positions(index, RowLayout.PERIOD)
    assert lay.positions("cpu").numpy().tolist() == expect.tolist()
    height = int(expect.max()) + 1 if n else 0
    assert lay.rows == max(1, -(-height // RowLayout.BLOCK)) * RowLayout.BLOCK
