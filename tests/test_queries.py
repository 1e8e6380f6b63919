"""The step's query layout (speed.train.model.queries): one order for every run, and its users
lay their queries out through it."""

import numpy as np
import pytest
import torch

import speed
from speed.train.config import UpdateConfig
from speed.train.model.network import StatefulModel
from speed.train.model.queries import QueryLayout
from speed.train.online.update import OnlineUpdater
from speed.train.run.predictor import open_checkpoint, predictor_from


@pytest.mark.parametrize("groups,k", [(2, 0), (3, 0), (4, 0), (3, 5), (4, 2), (2, 3)])
def test_the_layout_places_each_group(groups, k):
    m = 7
    lay = QueryLayout.of_groups(m, groups, k)
    src, dst, nd, ns = (np.arange(m) + 100 * g for g in range(4))
    cand = np.arange(m * k).reshape(m, k) + 1000
    nodes = QueryLayout.nodes(src, dst, nd if groups >= 3 else None, ns if groups == 4 else None,
                              cand if k else None)
    assert nodes.size == lay.end == groups * m + m * k
    assert (nodes[lay.src] == src).all() and (nodes[lay.dst] == dst).all()
    if groups >= 3:
        assert (nodes[lay.neg_dst] == nd).all()
        assert (nodes[lay.neg_src] == (ns if groups == 4 else src)).all()
    else:
        with pytest.raises(ValueError):
            lay.neg_dst
    assert (nodes[lay.candidates] == cand.reshape(-1)).all()
    t = np.arange(m, dtype=np.float64) * 10
    times = lay.times(t)
    assert (times[lay.src] == t).all() and (times[lay.candidates] == np.repeat(t, k)).all()
    # a share of the events reads these positions, in the same order as its own layout
    lo, hi = 2, 5
    share = lay.share(hi - lo)
    pos = lay.positions(lo, hi)
    sub = QueryLayout.nodes(src[lo:hi], dst[lo:hi], nd[lo:hi] if groups >= 3 else None,
                            ns[lo:hi] if groups == 4 else None, cand[lo:hi] if k else None)
    assert (nodes[pos] == sub).all() and pos.size == share.end


def test_scoring_pairs_each_group_as_the_decoder_takes_them():
    m, k = 4, 3
    lay = QueryLayout(m, neg_dst=True, neg_src=True, k=k)
    z = torch.arange(lay.end, dtype=torch.float32).reshape(-1, 1)
    pos, neg, cand = lay.score(lambda a, b: a * 1000 + b, z)
    assert pos.reshape(-1).tolist() == [i * 1000 + m + i for i in range(m)]
    assert neg.reshape(-1).tolist() == [(3 * m + i) * 1000 + 2 * m + i for i in range(m)]
    assert cand.shape == (m, k) and cand[1, 2].item() == 1 * 1000 + 4 * m + 1 * k + 2
    assert lay.score(lambda a, b: a + b, z, which=("cand",))[:2] == (None, None)
    # the layout a decoder is given goes with it
    seen = []
    lay.score(lambda a, b, layout: seen.append(layout) or a, z, pairs="P", candidates="C")
    assert seen == ["P", "P", "C"]


def test_refuses_negative_sources_without_destinations():
    with pytest.raises(ValueError):
        QueryLayout(3, neg_dst=False, neg_src=True)
    with pytest.raises(ValueError):
        QueryLayout.of_groups(3, 5)


def test_an_updates_ranking_candidates_are_embedded_at_their_events_time(tmp_path, monkeypatch):
    """``speed update --mrr``: the k candidates of an event are queried at that event's time
    (they were once tiled over the batch's times, so most sat at another event's)."""
    rng = np.random.default_rng(0)
    n = 600
    src, dst = rng.integers(0, 30, n), rng.integers(30, 60, n)
    t = np.sort(rng.uniform(0, 1e4, n)).round(1)
    ev = speed.Events.from_arrays(src, dst, t, remap=True)
    speed.train(ev.select(np.arange(400)), model="tgn", out=tmp_path / "run", epochs=1, memory_dim=8, time_dim=8,
                embedding_dim=8, neighbors=3, batch_size=50, progress=False, num_threads=1, seed=0)
    saved, payload = open_checkpoint(tmp_path / "run")
    pred = predictor_from(saved, payload, "end", "cpu", tmp_path / "run")
    k = 4
    up = OnlineUpdater(pred, saved, payload, UpdateConfig(progress=False, mrr=True, mrr_negatives=k).validate())
    seen = []
    plan = StatefulModel.plan

    def spy(self, nodes, times, events=None, **kw):
        if events is not None and len(events[0]) and nodes.size == (3 + k) * len(events[0]):
            seen.append((np.asarray(times).copy(), np.asarray(events[2], dtype=np.float64)))
        return plan(self, nodes, times, events=events, **kw)

    monkeypatch.setattr(StatefulModel, "plan", spy)
    up.run(ev.select(np.arange(400, n)))
    assert seen, "no scored step was planned"
    for times, te in seen:
        lay = QueryLayout(te.size, k=k)
        np.testing.assert_array_equal(times[lay.candidates], np.repeat(te, k))


def test_the_queries_after_the_events_are_the_layouts_tail():
    m, k = 5, 2
    lay = QueryLayout(m, neg_dst=True, neg_src=True, k=k)
    src, dst, nd, ns = (np.arange(m) + 100 * g for g in range(4))
    cand = np.arange(m * k).reshape(m, k) + 1000
    t = np.arange(m, dtype=np.float64)
    nodes, times = lay.after_events(t, nd, ns, cand)
    assert (nodes == QueryLayout.nodes(src, dst, nd, ns, cand)[2 * m:]).all()
    assert (times == lay.times(t)[2 * m:]).all() and times.dtype == np.float64
