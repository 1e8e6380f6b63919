"""The set operations a divided evaluation step's cut runs on a plan's positions
(:func:`speed.train.eval.divided.distinct`, :func:`speed._util.places`, which also maps a
rank's or a group's global node ids to local ones), against
numpy's sort-based ``unique`` and ``searchsorted`` on random inputs (DyRep's part of the cut
uses them; the rest is in kernels, checked against the numpy they replaced in
tests/test_cut_kernels.py); the cut as a whole is checked bit for bit through the evaluations
of tests/test_sharded_eval.py."""

import numpy as np
import pytest

from speed._util import places
from speed.train.eval.divided import distinct


@pytest.mark.parametrize("seed", range(8))
def test_distinct_is_numpys_unique_for_integers_below_the_bound(seed):
    rng = np.random.default_rng(seed)
    bound = int(rng.integers(1, 5000))
    values = rng.integers(0, bound, int(rng.integers(0, 3 * bound)))
    got = distinct(values, bound)
    assert got.dtype == np.int64
    assert got.tolist() == np.unique(values).tolist()


def test_distinct_of_nothing_is_empty_and_a_value_past_the_bound_is_an_error():
    assert distinct(np.empty(0, dtype=np.int64), 0).size == 0
    assert distinct(np.empty(0, dtype=np.int64), 7).size == 0
    with pytest.raises(IndexError):
        distinct(np.array([3]), 3)


@pytest.mark.parametrize("seed", range(8))
def test_places_are_searchsorted_for_members_and_minus_one_for_the_rest(seed):
    rng = np.random.default_rng(seed)
    bound = int(rng.integers(1, 4000))
    table = np.sort(rng.choice(bound, int(rng.integers(0, bound + 1)), replace=False)).astype(np.int64)
    at = places(table, bound)
    member = np.zeros(bound, dtype=bool)
    member[table] = True
    values = rng.integers(0, bound, 1000)
    inside = member[values]
    assert at[values[inside]].tolist() == np.searchsorted(table, values[inside]).tolist()
    assert (at[values[~inside]] == -1).all()


def test_places_keep_a_narrow_dtype_and_take_an_empty_table():
    at = places(np.array([4, 1], dtype=np.int64), 6, dtype=np.int32)
    assert at.dtype == np.int32 and at.tolist() == [-1, 1, -1, -1, 0, -1]
    assert places(np.empty(0, dtype=np.int64), 3).tolist() == [-1, -1, -1]
