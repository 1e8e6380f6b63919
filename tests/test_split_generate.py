"""Chronological split, inductive mask, and the synthetic generator."""

import numpy as np
import pytest

import speed
from conftest import random_stream
from speed.cli import main


def test_split_is_chronological_by_quantiles():
    ev = speed.Events.from_arrays(np.arange(100) % 7, (np.arange(100) + 1) % 7, np.arange(100))
    sp = speed.chronological_split(ev)
    assert (sp.num_train, sp.num_val, sp.num_test) == (70, 15, 15)
    assert ev.t[sp.num_train - 1] <= sp.val_time < ev.t[sp.num_train]
    assert len(sp.train(ev)) + len(sp.val(ev)) + len(sp.test(ev)) == 100


def test_equal_times_never_straddle_the_boundary():
    t = np.repeat(np.arange(10), 10)  # 10 events per timestamp
    ev = speed.Events.from_arrays(np.arange(100) % 9, (np.arange(100) + 3) % 9, t)
    sp = speed.chronological_split(ev, val=0.15, test=0.15)
    assert ev.t[sp.num_train - 1] < ev.t[sp.num_train]
    b = sp.num_train + sp.num_val
    assert ev.t[b - 1] < ev.t[b]


def test_inductive_mask_is_seeded_and_consistent():
    src, dst, t = random_stream(np.random.default_rng(0), 300, 5000)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=300)
    a = speed.chronological_split(ev, seed=1)
    b = speed.chronological_split(ev, seed=1)
    c = speed.chronological_split(ev, seed=2)
    assert np.array_equal(a.new_nodes, b.new_nodes) and not np.array_equal(a.new_nodes, c.new_nodes)
    later = np.union1d(ev.src[a.num_train:], ev.dst[a.num_train:])
    present = np.union1d(ev.src, ev.dst)
    assert a.new_nodes.sum() == int(0.1 * present.size)  # TGN: 10% of all nodes, drawn from the val/test ones
    assert set(np.flatnonzero(a.new_nodes)) <= set(later)
    tr = a.train(ev)
    # masked training events are exactly those touching a held-out node
    touches = a.new_nodes[tr.src] | a.new_nodes[tr.dst]
    assert np.array_equal(a.train_mask, ~touches)
    # a test event is inductive iff an endpoint never occurs in the kept training events
    seen = np.zeros(300, bool)
    seen[tr.src[a.train_mask]] = True
    seen[tr.dst[a.train_mask]] = True
    te = a.test(ev)
    assert np.array_equal(a.test_inductive, ~seen[te.src] | ~seen[te.dst])
    assert a.test_inductive[np.isin(te.src, np.flatnonzero(a.new_nodes))].all()


def test_bad_split_fractions():
    ev = speed.Events.from_arrays([0, 1], [1, 2], [0, 1])
    with pytest.raises(speed.InputError, match=r"val \(0.6\) and test \(0.5\) must be fractions with val \+ test < 1"):
        speed.chronological_split(ev, val=0.6, test=0.5)
    with pytest.raises(speed.InputError, match=r"new_node_fraction must be in \[0, 1\], got 1.5"):
        speed.chronological_split(ev, new_node_fraction=1.5)


def test_generator_power_law_and_deterministic():
    a = speed.generate_events(num_nodes=5000, num_events=50_000, seed=3)
    b = speed.generate_events(num_nodes=5000, num_events=50_000, seed=3)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.t, b.t)
    assert np.all(np.diff(a.t) >= 0) and a.num_nodes == 5000
    deg = np.sort(np.bincount(np.concatenate([a.src, a.dst]), minlength=5000))[::-1]
    # heavy tail: the top 1% of nodes carry far more than 1% of the endpoints
    assert deg[:50].sum() / deg.sum() > 0.15
    c = speed.generate_events(num_nodes=5000, num_events=50_000, seed=4)
    assert not np.array_equal(a.src, c.src)


def test_generator_bipartite_and_locality():
    ev = speed.generate_events(num_nodes=2000, num_events=20_000, bipartite=True, num_items=200, seed=0)
    assert ev.bipartite and ev.src.max() < 1800 and ev.dst.min() >= 1800
    # without hubs to replicate, community structure is what lets SEP cut fewer events (the
    # paper's rule alone: the default capacity replicates nodes, and that cuts both logs less)
    loc = speed.generate_events(num_nodes=5000, num_events=50_000, locality=0.95, communities=8, seed=0)
    flat = speed.generate_events(num_nodes=5000, num_events=50_000, locality=0.0, communities=8, seed=0)
    assert speed.partition(loc, 8, balance=None).edge_cut < speed.partition(flat, 8, balance=None).edge_cut - 0.05


def test_write_generated_reads_back(tmp_path):
    p = speed.write_generated(tmp_path / "g.csv.gz", 1000, 5000, seed=1)
    ev = speed.read_events(p)
    mem = speed.generate_events(1000, 5000, seed=1)
    assert len(ev) == 5000
    assert np.array_equal(ev.node_ids[ev.src], mem.src) and np.array_equal(ev.t, mem.t)
    assert [x.name for x in tmp_path.iterdir()] == ["g.csv.gz"]


def test_generator_has_no_self_loops():
    ev = speed.generate_events(num_nodes=300, num_events=50_000, alpha=1.5, communities=2, seed=0)
    assert ev.meta.self_loops == 0


def test_generator_fanout_makes_runs_that_share_a_source_and_a_time(tmp_path):
    one = speed.generate_events(num_nodes=200, num_events=40_000, alpha=1.5, seed=0)
    ev = speed.generate_events(num_nodes=200, num_events=40_000, alpha=1.5, fanout=4, seed=0)
    assert np.all(np.diff(ev.t) >= 0) and ev.meta.self_loops == 0

    def mean_run(e):  # consecutive events with the same source and time
        starts = np.r_[True, (e.src[1:] != e.src[:-1]) | (e.t[1:] != e.t[:-1])]
        return len(e) / starts.sum()

    assert mean_run(one) < 1.1 and 3.5 < mean_run(ev) < 4.5
    with pytest.raises(speed.InputError, match="fanout must be >= 1"):
        speed.generate_events(num_nodes=200, num_events=100, fanout=0.5)
    assert main(["generate", str(tmp_path / "g.csv"), "--nodes", "50", "--events", "500", "--fanout", "3",
                 "--no-progress"]) == 0
    assert len(speed.read_events(tmp_path / "g.csv")) == 500
