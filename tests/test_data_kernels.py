"""Data-layer numba kernels against plain numpy / Python references on random inputs."""

import numpy as np
import pytest
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


def test_time_scale_equals_the_mean_gap_of_each_nodes_sorted_events(monkeypatch):
    """JODIE's time unit, kept per node as first time, last time and count over windows of the
    log, equals the mean consecutive gap of every node's events sorted by time (the slow
    reference), self-loops, equal times and integer times included."""
    import speed
    from speed.train.model import build

    def reference(ev):
        nodes = np.concatenate([ev.src, ev.dst])
        t = np.concatenate([ev.t_float(), ev.t_float()])
        order = np.lexsort((t, nodes))
        same = nodes[order][1:] == nodes[order][:-1]
        gaps = np.diff(t[order])[same]
        scale = float(gaps.mean()) if gaps.size else 1.0
        return scale if scale > 0 else 1.0

    rng = np.random.default_rng(11)
    for trial in range(6):
        n, m = int(rng.integers(2, 60)), int(rng.integers(1, 3000))
        t = np.sort(rng.integers(0, 500, m)) if trial % 2 else np.sort(rng.random(m) * 1e6)
        ev = speed.Events.from_arrays(rng.integers(0, n, m), rng.integers(0, n, m), t)
        for window in (1 << 22, 7):
            monkeypatch.setattr(build, "SPAN_WINDOW", window)
            assert build.time_scale(ev) == pytest.approx(reference(ev), rel=1e-12)
    one = speed.Events.from_arrays([0], [1], [5.0])  # no node has two events
    assert build.time_scale(one) == 1.0
