"""Data-layer numba kernels against plain numpy / Python references on random inputs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from speed.data import _kernels


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 200), st.integers(1, 200), st.integers(0, 500), st.integers(0, 2**31 - 1))
def test_compact_dense_matches_unique(ne, nf, max_id, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, max_id + 1, ne)
    dst = rng.integers(0, max_id + 1, nf)  # lengths differ on purpose
    uniq, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    new_src, new_dst = src.copy(), dst.copy()
    ids = _kernels.compact_dense(new_src, new_dst, int(max(src.max(), dst.max())))
    assert np.array_equal(ids, uniq)
    assert np.array_equal(new_src, inv[:ne]) and np.array_equal(new_dst, inv[ne:])


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 300), st.integers(1, 6), st.integers(1, 100), st.integers(0, 2**31 - 1))
def test_duplicate_count_matches_python(n, nodes, times, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, n)
    dst = rng.integers(0, nodes, n)
    t = np.sort(rng.integers(0, times, n))  # few distinct times: long runs of equal times too
    seen, dup = set(), 0
    for key in zip(src.tolist(), dst.tolist(), t.tolist()):
        dup += key in seen
        seen.add(key)
    assert _kernels.count_duplicate_events(src, dst, t, nodes) == dup


def test_first_unsorted():
    assert _kernels.first_unsorted(np.array([1.0, 2.0, 2.0])) == -1
    assert _kernels.first_unsorted(np.array([1, 3, 2, 0])) == 2
