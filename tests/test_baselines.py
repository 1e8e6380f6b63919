"""Baseline partitioners: exact results on hand-built streams and against references."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import speed
from conftest import random_stream
from reference_sep import reference_greedy, reference_hdrf, reference_spread

# (0,1) (2,3) (0,2) (1,3) (0,3) (1,4) with P = 2, worked by hand in the comments below.
SRC = [0, 2, 0, 1, 0, 1]
DST = [1, 3, 2, 3, 3, 4]


def events(src=SRC, dst=DST):
    return speed.Events.from_arrays(src, dst, np.arange(len(src)))


def test_hdrf_by_hand():
    # e0 all scores 0 -> p0.  e1 balance 0 vs 1/2 -> p1.  e2 (0,2): d=2,2, g=1.5 in p0 (node 0)
    # and p1 (node 2), balance 0 -> tie -> p0, node 2 replicated.  e3 (1,3): g 1.5 both,
    # balance 0 vs 1/2 -> p1.  e4 (0,3): 1.5 vs 1.5 -> p0.  e5 (1,4): d1=3, d4=1, theta1=3/4,
    # g1 = 1.25 in both parts, balance 0 vs 1/2 -> p1.
    res = speed.partition(events(), 2, method="hdrf")
    assert list(res.node_parts) == [0, -1, -1, -1, 1]
    assert res.stats["stream_loads"] == [3, 3] and res.edge_cut == 0.0


def test_greedy_by_hand():
    # degrees 0:3 1:3 2:2 3:3 4:1.  e0 -> p0; e1 -> p1 (least loaded); e2 (0,2) disjoint,
    # remaining 2 > 1 -> A(0) -> p0; e3 (1,3) disjoint, remaining 2 = 2 -> union -> p1;
    # e4 (0,3) remaining 1 = 1 -> union, loads 2,2 -> p0; e5 (1,4): A(1) = {0,1} -> p1.
    res = speed.partition(events(), 2, method="greedy")
    assert list(res.node_parts) == [0, -1, -1, -1, 1]
    assert res.stats["stream_loads"] == [3, 3]


def test_hdrf_prefers_replicating_the_high_degree_node():
    # hub 0 meets many leaves; with balance off (tiny lam) leaves follow the hub's parts, and
    # when a leaf already in another part meets it, the higher-degree hub is the one copied.
    src = [0, 0, 0, 5, 0]
    dst = [1, 2, 3, 6, 5]
    res = speed.partition(events(src, dst), 2, method="hdrf", lam=1e-6)
    assert res.node_parts[0] == -1 and res.node_parts[5] == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 30), st.integers(1, 200), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_vertex_cut_kernels_match_references(n, e, p, seed):
    src, dst, t = random_stream(np.random.default_rng(seed), n, e)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=n)
    h = speed.partition(ev, p, method="hdrf", lam=1.0, balance=0.1)
    ref_events = []
    ref_parts, ref_load = reference_hdrf(src, dst, n, p, event_parts=ref_events)
    assert list(h.node_parts) == ref_parts and h.stats["stream_loads"] == ref_load
    # balance spreads the shared-shared events after the stream
    assert h.event_part.tolist() == reference_spread(src, dst, ref_parts, ref_events, p)
    g = speed.partition(ev, p, method="greedy", balance=0.1)
    ref_events = []
    ref_parts, ref_load = reference_greedy(src, dst, n, p, event_parts=ref_events)
    assert list(g.node_parts) == ref_parts and g.stats["stream_loads"] == ref_load
    assert g.event_part.tolist() == reference_spread(src, dst, ref_parts, ref_events, p)
    assert speed.partition(ev, p, method="greedy", balance=None).event_part.tolist() == ref_events  # off: no spread
    assert speed.partition(ev, p, method="greedy").event_part.tolist() == g.event_part.tolist()  # default 0.1
    for res in (h, g):
        assert res.edge_cut == 0.0  # every event lands where both endpoints live


def test_random_is_seeded_without_replicas_and_cuts_about_three_quarters():
    src, dst, t = random_stream(np.random.default_rng(0), 2000, 40_000)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=2000)
    a = speed.partition(ev, 4, method="random", seed=1)
    b = speed.partition(ev, 4, method="random", seed=1)
    c = speed.partition(ev, 4, method="random", seed=2)
    assert np.array_equal(a.node_parts, b.node_parts) and not np.array_equal(a.node_parts, c.node_parts)
    assert len(a.shared) == 0 and a.replication_factor == 1.0
    assert 0.70 < a.edge_cut < 0.80


def two_communities(size=12, parts_per=1, seed=0):
    """Dense groups joined by one bridge event."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for base in range(0, 2 * parts_per * size, size):
        for _ in range(size * 6):
            a, b = rng.choice(size, 2, replace=False)
            src.append(base + a)
            dst.append(base + b)
    src.append(0)
    dst.append(size)
    return speed.Events.from_arrays(src, dst, np.arange(len(src)))


@pytest.mark.parametrize("method", ["kl", "metis"])
def test_static_methods_find_the_communities(method):
    ev = two_communities()
    res = speed.partition(ev, 2, method=method, seed=0)
    assert res.stats["cut_events"] == 1 and res.replication_factor == 1.0
    assert res.stats["stream_loads"] is None
    assert len(set(res.node_parts[:12])) == 1 and len(set(res.node_parts[12:])) == 1


def test_kl_recursion_reaches_any_number_of_parts():
    ev = two_communities(size=10, parts_per=2)  # four groups of 10
    res = speed.partition(ev, 3, method="kl", seed=0)
    assert sorted(set(res.node_parts.tolist())) == [0, 1, 2]
    sizes = np.bincount(res.node_parts, minlength=3)
    assert sorted(sizes.tolist()) == [13, 13, 14]  # 13 | 27 -> 13 | 13 + 14: KL keeps the sizes
    res4 = speed.partition(ev, 4, method="kl", seed=0)
    assert res4.stats["cut_events"] <= 12


@pytest.mark.parametrize("method", ["sep", "hdrf", "greedy", "random", "kl", "metis"])
def test_every_method_writes_loadable_shards(tmp_path, method):
    from speed.cli import main

    log = speed.write_generated(tmp_path / "log.csv", 300, 3000, seed=0)
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--method", method, "--parts", "3",
                 "--topk", "5", "--json"]) == 0
    sh = speed.load_shards(tmp_path / "s")
    assert sh.manifest["method"] == method
    m = sh.manifest
    assert [len(sh.part(p, "train")) for p in range(3)] == m["part_events"]
    assert len(sh.merge(range(3), "train")) == m["num_train_events"]
    if method in ("hdrf", "greedy"):
        assert m["edge_cut"] == 0.0
    if method in ("random", "kl", "metis"):
        assert m["shared_nodes"] == 0 and m["replication_factor"] == 1.0
