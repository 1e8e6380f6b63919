"""Memory semantics, sampling, no-leakage, and evaluation metrics."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import speed
from speed.train.evaluate import link_metrics, ranking_metrics, true_edge_mask
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
    every = torch.arange(model.num_nodes)

    def view():  # memory as the model sees it: pending events applied
        mem, last = model.memory_of(every)
        return mem[:, 0].tolist(), last.tolist()

    with torch.no_grad():
        for s in range(0, len(src), batch):
            sl = slice(s, s + batch)
            states.append(view())
            model.observe(src[sl], dst[sl], t[sl], eid[sl])
        states.append(view())
    return states


def test_exact_memory_through_ten_events():
    # Batches of two.  M is the stored memory, P[i] a node's pending event (its last one in
    # its most recent batch).  The view of node i is M_i, or M_i + M_j + 1 (j, t from P[i],
    # M_j as stored *now*) with last_update t.  After a batch its endpoints store their view
    # and their pending events become the batch's.
    src = [0, 2, 0, 1, 0, 3, 2, 4, 0, 1]
    dst = [1, 3, 2, 4, 1, 4, 0, 1, 3, 2]
    t = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    states = stream(hand_model(), src, dst, t, 2)
    mem = [x[0] for x in states]
    last = [x[1] for x in states]
    assert mem[0] == [0, 0, 0, 0, 0]
    # B1 (0,1)@1 (2,3)@2 stored nothing new: M = 0; P0=(1,1) P1=(0,1) P2=(3,2) P3=(2,2)
    assert mem[1] == [1, 1, 1, 1, 0] and last[1] == [1, 1, 2, 2, 0]
    # B2 (0,2)@3 (1,4)@4 stored M0=1 M1=1 M2=1 M4=0; node 3 kept P3=(2,2): 0 + M2 + 1 = 2
    assert mem[2] == [3, 2, 3, 2, 2] and last[2] == [3, 4, 3, 2, 4]
    # B3 (0,1)@5 (3,4)@6 stored M0=3 M1=2 M3=2 M4=2; node 2 kept P2=(0,3): M2 + M0 + 1 = 1 + 3 + 1
    assert mem[3] == [6, 6, 5, 5, 5] and last[3] == [5, 5, 3, 6, 6]
    # B4 (2,0)@7 (4,1)@8 stored M2=5 M0=6 M4=5 M1=6; node 3 kept P3=(4,6): M3 + M4 + 1 = 2 + 5 + 1
    assert mem[4] == [12, 12, 12, 8, 12] and last[4] == [7, 8, 7, 6, 8]
    # B5 (0,3)@9 (1,2)@10 stored M0=12 M3=8 M1=12 M2=12; node 4 kept P4=(1,8): 5 + 12 + 1
    assert mem[5] == [21, 25, 25, 21, 18] and last[5] == [9, 10, 10, 9, 8]


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
    every = torch.arange(model.num_nodes)
    before = model.memory_of(every)[0].clone()
    stream(model, [3, 4], [4, 0], [4, 5], 1)
    assert not torch.equal(before, model.memory_of(every)[0])
    model.restore(snap)
    assert torch.equal(before, model.memory_of(every)[0])
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
    assert np.isnan(link_metrics(np.array([]), np.array([0.1]))["ap"])


def test_ranking_metrics_by_hand_with_ties_and_filtering():
    pos = np.array([0.9, 0.2, 0.5, 0.3])
    negs = np.array([[0.95, 0.5, 0.1],   # one higher: rank 2
                     [0.1, 0.0, 0.1],    # none higher: rank 1
                     [0.5, 0.5, 0.7],    # one higher, two tied: optimistic 2, pessimistic 4 -> 3
                     [0.8, 0.9, 0.1]])   # two higher, but both filtered out below: rank 1
    valid = np.ones_like(negs, dtype=bool)
    valid[3, :2] = False
    m = ranking_metrics(pos, negs, valid)
    ranks = np.array([2.0, 1.0, 3.0, 1.0])
    assert m["mrr"] == pytest.approx(np.mean(1 / ranks))
    assert m["hits@1"] == pytest.approx(0.5) and m["hits@3"] == pytest.approx(1.0) and m["count"] == 4
    assert ranking_metrics(pos[:1], negs[:1])["mrr"] == pytest.approx(0.5)  # unfiltered by default


def test_true_edge_mask_is_same_source_same_time():
    src = np.array([0, 0, 0, 1])
    dst = np.array([5, 6, 7, 5])
    t = np.array([1.0, 1.0, 2.0, 1.0])
    cand = np.array([[6, 7], [5, 5], [5, 6], [6, 5]])
    # event 0 (0->5 @1): 6 is a true edge of 0 at time 1, 7 is at time 2 only
    # event 3 (1->5 @1): 5 is itself, 6 is 0's edge, not 1's
    want = np.array([[True, False], [True, True], [False, False], [False, True]])
    assert np.array_equal(true_edge_mask(src, dst, t, cand, 8), want)


def test_aggregators_by_hand():
    from speed.train.modules import MeanAggregator

    msg = torch.tensor([[1.0, 10.0], [3.0, 30.0], [5.0, 50.0]])
    index = torch.tensor([0, 1, 0])
    t = torch.tensor([2.0, 4.0, 1.0], dtype=torch.float64)
    last, t_last = LastAggregator()(msg, index, t, 2)
    assert last.tolist() == [[5.0, 50.0], [3.0, 30.0]] and t_last.tolist() == [1.0, 4.0]  # the later entry wins
    mean, t_max = MeanAggregator()(msg, index, t, 2)
    assert mean.tolist() == [[3.0, 30.0], [3.0, 30.0]] and t_max.tolist() == [2.0, 4.0]


def test_custom_composition_with_mlp_message_and_mean_aggregator():
    # variants are built by passing modules in: MLP message + mean aggregation + GRU + attention
    from speed.train.modules import GraphAttentionEmbedding, GRUUpdater, MeanAggregator, MLPMessage

    message = MLPMessage(8, 8, 0, out_dim=12)
    model = TemporalGNN(20, 8, 8, 0, message, MeanAggregator(), GRUUpdater(12, 8),
                        GraphAttentionEmbedding(8, 8, 0, 8), LinkPredictor(8), neighbors=3)
    src, dst = torch.tensor([0, 1, 2, 0]), torch.tensor([3, 4, 5, 4])
    t = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    model.observe(src[:2], dst[:2], t[:2], torch.arange(2))
    pos, neg, _ = model(src[2:], dst[2:], torch.tensor([6, 7]), t[2:])  # node 0 has a pending message
    (pos.sum() - neg.sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in message.parameters())


def test_node_state_held_apart_from_the_weights_gives_the_same_scores():
    """keep_node_state_on moves rows per batch; on one device it must change nothing."""
    src = torch.tensor([0, 1, 2, 0, 3, 1, 2, 3])
    dst = torch.tensor([1, 2, 3, 2, 0, 3, 0, 1])
    t = torch.arange(8, dtype=torch.float64)
    eid = torch.arange(8)
    out = []
    for keep in (False, True):
        torch.manual_seed(0)
        model = build_model("tige", 4, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2)
        if keep:
            model.keep_node_state_on("cpu")
            model.to("cpu")  # a later move of the weights leaves the node state where it is
            assert model._state_device == torch.device("cpu")
        model.eval()
        scores = []
        with torch.no_grad():
            for b in range(0, 8, 2):
                s, d, tt, e = src[b:b + 2], dst[b:b + 2], t[b:b + 2], eid[b:b + 2]
                pos, neg, z = model(s, d, d.flip(0), tt)
                model.observe(s, d, tt, e, z[:4])
                scores.append(pos)
        out.append(torch.cat(scores))
    assert torch.equal(out[0], out[1])


def test_node_classification_leaves_the_global_rng_alone():
    from speed.train.evaluate import node_classification_auroc

    rng = np.random.default_rng(0)
    z = rng.normal(size=(300, 4)).astype(np.float32)
    y = rng.integers(0, 2, 300)
    masks = [np.arange(300) < 200, (np.arange(300) >= 200) & (np.arange(300) < 250), np.arange(300) >= 250]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = node_classification_auroc(z, y, *masks, epochs=2, seed=5)
    assert torch.equal(torch.get_rng_state(), before)
    assert node_classification_auroc(z, y, *masks, epochs=2, seed=5) == a  # still seeded


def test_node_classifier_learns_a_separable_label_and_not_noise():
    from speed.train.evaluate import node_classification_auroc

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 3000)
    z = rng.normal(size=(3000, 8)).astype(np.float32)
    masks = [np.arange(3000) < 2000, (np.arange(3000) >= 2000) & (np.arange(3000) < 2500), np.arange(3000) >= 2500]
    noise = node_classification_auroc(z, y, *masks, seed=0)
    z[:, 0] += 3.0 * y  # the label now shows in one coordinate
    signal = node_classification_auroc(z, y, *masks, seed=0)
    assert signal["auroc"] > 0.95 and abs(noise["auroc"] - 0.5) < 0.1, (signal, noise)
