"""Training-state numba kernels against numpy references on random inputs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from speed.train.state._kernels import unique_first_inverse

INT64 = np.iinfo(np.int64)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(INT64.min, INT64.max), max_size=300), st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_unique_by_hashing_is_numpys_unique(values, seed, repeat):
    """Values anywhere in int64 (its ends too), few or many repeats, any length: the same three
    arrays as np.unique(return_index=True, return_inverse=True)."""
    rng = np.random.default_rng(seed)
    keys = np.array(values, dtype=np.int64)
    if keys.size:
        keys = keys[rng.integers(0, keys.size, keys.size * repeat)]  # repeats, in any order
    got = unique_first_inverse(keys)
    want = np.unique(keys, return_index=True, return_inverse=True)
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w.reshape(-1))


def test_unique_by_hashing_on_a_steps_keys():
    """The shape of a step's memory keys: node ids times a count, many slots of a few hubs."""
    rng = np.random.default_rng(0)
    hubs = rng.integers(0, 10**6, 50) * 7 + 3
    keys = np.concatenate([rng.integers(0, 10**6, 5000) * 7, hubs[rng.integers(0, 50, 20000)]])
    got = unique_first_inverse(keys)
    want = np.unique(keys, return_index=True, return_inverse=True)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
