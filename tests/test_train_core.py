"""Memory semantics, sampling, no-leakage, and evaluation metrics."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import speed
from speed.train.evaluate import link_metrics, mean_reciprocal_rank
from speed.train.models import TemporalGNN, build_model
from speed.train.modules import IdentityEmbedding, IdentityMessage, LastAggregator, LinkPredictor
from speed.train.sampler import RecentNeighborSampler


class AddUpdater(nn.Module):
    """s' = s_self + s_other + Φ  (message = [s_self, s_other, Φ]); hand-computable."""

    def forward(self, msg, state):
        return msg[:, 0:1] + msg[:, 1:2] + msg[:, 2:3]


def hand_model(num_nodes=5):
    model = TemporalGNN(num_nodes, 1, 1, 0, IdentityMessage(1, 1, 0), LastAggregator(), AddUpdater(),
                        IdentityEmbedding(1), LinkPredictor(1), neighbors=2)
    with torch.no_grad():  # Φ(Δt) = cos(0 * Δt + 0) = 1
        model.time_enc.lin.weight.zero_()
        model.time_enc.lin.bias.zero_()
    return model


def stream(model, src, dst, t, batch):
    src, dst = torch.tensor(src), torch.tensor(dst)
    t = torch.tensor(t, dtype=torch.float64)
    eid = torch.arange(len(src))
    states = []
    with torch.no_grad():
        for s in range(0, len(src), batch):
            sl = slice(s, s + batch)
            model.flush()
            states.append((model.memory.memory[:, 0].tolist(), model.memory.last_update.tolist()))
            model.observe(src[sl], dst[sl], t[sl], eid[sl])
        model.flush()
        states.append((model.memory.memory[:, 0].tolist(), model.memory.last_update.tolist()))
    return states


def test_exact_memory_through_ten_events():
    # batches of two; a batch's messages are applied when the next batch starts, computed
    # from the states before the update: s_i' = s_i + s_j + 1, last_update = event time.
    src = [0, 2, 0, 1, 0, 3, 2, 4, 0, 1]
    dst = [1, 3, 2, 4, 1, 4, 0, 1, 3, 2]
    t = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    states = stream(hand_model(), src, dst, t, 2)
    mem = [s[0] for s in states]
    last = [s[1] for s in states]
    assert mem[0] == [0, 0, 0, 0, 0]                 # nothing pending yet
    assert mem[1] == [1, 1, 1, 1, 0] and last[1] == [1, 1, 2, 2, 0]      # (0,1)@1 (2,3)@2
    assert mem[2] == [3, 2, 3, 1, 2] and last[2] == [3, 4, 3, 2, 4]      # (0,2)@3 (1,4)@4
    assert mem[3] == [6, 6, 3, 4, 4] and last[3] == [5, 5, 3, 6, 6]      # (0,1)@5 (3,4)@6
    assert mem[4] == [10, 11, 10, 4, 11] and last[4] == [7, 8, 7, 6, 8]  # (2,0)@7 (4,1)@8
    assert mem[5] == [15, 22, 22, 15, 11] and last[5] == [9, 10, 10, 9, 8]  # (0,3)@9 (1,2)@10


def test_last_aggregator_keeps_the_latest_message_of_a_batch():
    # node 0 meets 1 then 2 in one batch: only the later message (from 2) counts
    model = hand_model(4)
    with torch.no_grad():
        model.memory.memory[:, 0] = torch.tensor([0.0, 10.0, 100.0, 0.0])
    states = stream(model, [0, 0], [1, 2], [1, 2], 2)
    assert states[-1][0][0] == 0 + 100 + 1 and states[-1][1][0] == 2


def test_backup_restore_round_trip():
    model = hand_model()
    stream(model, [0, 1, 2], [1, 2, 3], [1, 2, 3], 1)
    snap = model.backup()
    before = model.memory.memory.clone()
    stream(model, [3, 4], [4, 0], [4, 5], 1)
    assert not torch.equal(before, model.memory.memory)
    model.restore(snap)
    assert torch.equal(before, model.memory.memory)
    model.reset_state()
    assert model.memory.memory.abs().sum() == 0 and model.memory.last_update.abs().sum() == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 15), st.integers(1, 120), st.integers(1, 5), st.integers(1, 20), st.integers(0, 2**31 - 1))
def test_sampler_returns_latest_k_strictly_earlier(n, e, k, batch, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    t = np.sort(rng.integers(0, e // 2 + 1, e)).astype(np.float64)
    sampler = RecentNeighborSampler(n, k)
    history = [[] for _ in range(n)]  # (neighbour, t, eid) in insertion order
    for s in range(0, e, batch):
        sl = slice(s, s + batch)
        q_nodes = np.concatenate([src[sl], dst[sl]])
        q_t = np.concatenate([t[sl], t[sl]])
        got = sampler.sample(q_nodes, q_t)
        for b, (node, qt) in enumerate(zip(q_nodes, q_t)):
            kept = history[node][-k:][::-1]
            expected = [h for h in kept if h[1] < qt]
            m = got.mask[b].numpy()
            assert m.sum() == len(expected)
            assert got.eids[b].numpy()[m].tolist() == [h[2] for h in expected]
            assert np.all(got.times[b].numpy()[m] < qt)
        sampler.insert(src[sl], dst[sl], t[sl], np.arange(s, min(e, s + batch)))
        for i in range(s, min(e, s + batch)):
            history[src[i]].append((dst[i], t[i], i))
            if src[i] != dst[i]:
                history[dst[i]].append((src[i], t[i], i))


@pytest.mark.parametrize("name", ["jodie", "dyrep", "tgn", "tige"])
def test_no_event_sees_itself_or_its_future(name):
    # Changing the features of event k (used only once its batch is over) must not change
    # any score of event k's batch or earlier ones; later scores may change.
    rng = np.random.default_rng(0)
    n, e, batch = 30, 120, 10
    src = torch.tensor(rng.integers(0, n, e))
    dst = torch.tensor(rng.integers(0, n, e))
    t = torch.tensor(np.sort(rng.integers(0, 1000, e)), dtype=torch.float64)
    msg = rng.random((e, 4)).astype(np.float32)
    k = 55  # in the batch covering events 50..59

    def scores(features):
        torch.manual_seed(0)
        model = build_model(name, n, msg_dim=4, memory_dim=8, time_dim=8, embedding_dim=8, neighbors=3).eval()
        model.set_edge_features(features)
        out = []
        with torch.no_grad():
            for s in range(0, e, batch):
                sl = slice(s, s + batch)
                model.flush()
                m = sl.stop - sl.start
                z = model.embed(torch.cat([src[sl], dst[sl]]), torch.cat([t[sl], t[sl]]))
                out.append(model.score(z[:m], z[m:]))
                model.observe(src[sl], dst[sl], t[sl], torch.arange(s, s + m), z)
        return torch.cat(out)

    base = scores(msg)
    changed = msg.copy()
    changed[k] += 5.0
    other = scores(changed)
    end_of_batch = (k // batch + 1) * batch
    assert torch.equal(base[:end_of_batch], other[:end_of_batch])
    assert not torch.equal(base[end_of_batch:], other[end_of_batch:])


def test_link_metrics_by_hand():
    # ranking 0.9(+) 0.5(-) 0.4(+) 0.1(-): AP = 1/2 * 1 + 1/2 * 2/3; AUC = 3 of 4 pairs
    m = link_metrics(np.array([0.9, 0.4]), np.array([0.5, 0.1]))
    assert m["ap"] == pytest.approx(0.5 + 1 / 3) and m["auc"] == pytest.approx(0.75)
    assert mean_reciprocal_rank(np.array([0.9, 0.2]), np.array([[0.95, 0.5, 0.1], [0.1, 0.0, 0.1]])) == \
        pytest.approx((1 / 2 + 1 / 1) / 2)
    assert np.isnan(link_metrics(np.array([]), np.array([0.1]))["ap"])
