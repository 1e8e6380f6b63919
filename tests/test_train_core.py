"""Memory semantics, sampling, no-leakage, and evaluation metrics."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import speed
from speed.train.eval.metrics import link_metrics, ranking_metrics, true_edge_mask
from speed.train.model.network import StatefulModel, TemporalGNN, build_model
from speed.train.model.modules import IdentityEmbedding, IdentityMessage, LastAggregator, LinkPredictor
from speed.train.state.sampler import RecentNeighborSampler
from speed.train.recipes import MODELS


class AddUpdater(nn.Module):
    """s' = s_self + s_other + Φ  (message = [s_self, s_other, Φ]); hand-computable."""

    def forward(self, msg, state):
        return msg[:, 0:1] + msg[:, 1:2] + msg[:, 2:3]


def hand_model(num_nodes=5):
    net = TemporalGNN(1, 1, 0, IdentityMessage(1, 1, 0), LastAggregator(), AddUpdater(),
                      IdentityEmbedding(1), LinkPredictor(1))
    with torch.no_grad():  # Φ(Δt) = cos(0 * Δt + 0) = 1
        net.time_enc.lin.weight.zero_()
        net.time_enc.lin.bias.zero_()
    return StatefulModel.around(net, num_nodes, neighbors=2)


def view(model):
    """Memory as the model sees it after everything: every pending event applied."""
    every = np.arange(model.num_nodes)
    plan = model.plan(every, np.full(model.num_nodes, np.inf))
    states, lasts = model.net.key_states(plan, *model.inputs(plan))
    keys = plan.uq_key[plan.q_inv]
    return states[keys][:, 0].tolist(), lasts[keys].tolist()


def stream(model, src, dst, t, batch):
    src, dst = np.array(src), np.array(dst)
    t = np.array(t, dtype=np.float64)
    states = []
    with torch.no_grad():
        for s in range(0, len(src), batch):
            sl = slice(s, s + batch)
            states.append(view(model))
            model.step_events(src[sl], dst[sl], t[sl], np.arange(len(src))[sl])
        states.append(view(model))
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
        model.state.memory.memory[:, 0] = torch.tensor([0.0, 10.0, 100.0, 0.0])
    states = stream(model, [0, 0], [1, 2], [1, 2], 2)
    assert states[-1][0][0] == 0 + 100 + 1 and states[-1][1][0] == 2


def test_backup_restore_round_trip():
    model = hand_model()
    stream(model, [0, 1, 2], [1, 2, 3], [1, 2, 3], 1)
    snap = model.state.snapshots.backup()
    before = view(model)
    stream(model, [3, 4], [4, 0], [4, 5], 1)
    assert view(model) != before
    model.state.snapshots.restore(snap)
    assert view(model) == before
    model.state.reset()
    assert model.state.memory.memory.abs().sum() == 0 and model.state.memory.last_update.abs().sum() == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 15), st.integers(1, 120), st.integers(1, 5), st.integers(1, 20), st.integers(0, 2**31 - 1))
def test_sampler_returns_latest_k_strictly_earlier(n, e, k, batch, seed):
    """TGN's and DyGLib's finder: the k most recent events strictly before the query's time,
    earlier events of the query's own batch included, however many events share a time."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    t = np.sort(rng.integers(0, e // 4 + 1, e)).astype(np.float64)  # many equal times
    sampler = RecentNeighborSampler(n, k)
    for s in range(0, e, batch):
        sl = slice(s, s + batch)
        sampler.push(src[sl], dst[sl], t[sl], np.arange(s, min(e, s + batch)))
        q_nodes = np.concatenate([src[sl], dst[sl]])
        q_t = np.concatenate([t[sl], t[sl]])
        got = sampler.sample(q_nodes, q_t)
        for b, (node, qt) in enumerate(zip(q_nodes, q_t)):
            history = [(dst[i] if src[i] == node else src[i], t[i], i) for i in range(e)
                       if t[i] < qt and node in (src[i], dst[i])]
            expected = history[-k:][::-1]
            m = got.mask[b].numpy()
            assert got.eids[b].numpy()[m].tolist() == [h[2] for h in expected]
            assert got.nodes[b].numpy()[m].tolist() == [h[0] for h in expected]


def scores_of(model, src, dst, t, batch, msg=None):
    """Each event's score against its reversed pair, streaming in batches (eval mode)."""
    model.eval()
    if msg is not None:
        model.state.set_edge_features(msg)
    out = []
    with torch.no_grad():
        for s in range(0, len(src), batch):
            sl = slice(s, s + batch)
            m = len(src[sl])
            z = model.step_events(src[sl], dst[sl], t[sl], np.arange(len(src))[sl])
            out.append(model.score(z[:m], z[m:2 * m]))
    return torch.cat(out)


@pytest.mark.parametrize("name", MODELS)
def test_no_event_sees_itself_or_its_future(name):
    # Changing event k (its features) must not change the score of any event at or before its
    # time -- in its batch or earlier -- and does change some later ones.
    rng = np.random.default_rng(0)
    n, e, batch = 30, 120, 10
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    t = np.sort(rng.integers(0, 300, e)).astype(np.float64)  # equal times occur
    msg = rng.random((e, 4)).astype(np.float32)
    k = 55

    def scores(features):
        torch.manual_seed(0)
        model = build_model(name, n, msg_dim=4, memory_dim=8, time_dim=8, embedding_dim=8, neighbors=3)
        return scores_of(model, src, dst, t, batch, features)

    base = scores(msg)
    changed = msg.copy()
    changed[k] += 5.0
    other = scores(changed)
    upto = t <= t[k]
    assert torch.equal(base[upto], other[upto])
    assert not torch.equal(base[~upto], other[~upto])


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("batch", [2, 3, 4, 7])
def test_simultaneous_events_never_see_each_other_whatever_the_batching(name, batch):
    # events 3 and 4 share t = 3.0; wherever the batch boundaries fall, changing event 3 (its
    # destination) moves no score at t <= 3, neither in memory nor through the sampler
    src = np.array([0, 1, 2, 0, 1, 3, 0, 2])
    dst = np.array([1, 2, 3, 4, 0, 4, 2, 1])
    t = np.array([0.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0])

    def scores(d):
        torch.manual_seed(1)
        model = build_model(name, 6, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=3)
        return scores_of(model, src, d, t, batch)

    other = dst.copy()
    other[3] = 2  # a node with a memory by then, so event 3's message really changes
    a, b = scores(dst), scores(other)
    others = (t <= 3.0) & (np.arange(len(t)) != 3)  # every other event up to t = 3, event 4 included
    assert torch.equal(a[others], b[others])


def test_memory_applies_each_nodes_latest_event():
    # node 0 is a source at t=1 (with 1) and a destination at t=2 (from 2) in one batch: the
    # last aggregator applies its latest event, the one from 2, whichever side it was on
    model = hand_model(4)
    with torch.no_grad():
        model.state.memory.memory[:, 0] = torch.tensor([0.0, 10.0, 100.0, 0.0])
    states = stream(model, [0, 2], [1, 0], [1, 2], 2)
    assert states[-1][0][0] == 0 + 100 + 1 and states[-1][1][0] == 2
    states = stream(hand_model(4), [2, 0], [0, 1], [1, 2], 2)  # now the source side is the later
    assert states[-1][1][0] == 2


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("aggregator", ["last", "mean"])
def test_deduplicated_queries_give_the_same_embeddings_and_loss(name, aggregator):
    """A dense stream (few nodes, many repeats and equal times): computing each distinct query
    and memory key once gives the embeddings, scores and loss of computing every one alone."""
    from speed.train.step.engine import link_loss

    rng = np.random.default_rng(3)
    n, e, batch = 6, 240, 40
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    t = np.sort(rng.integers(0, 60, e)).astype(np.float64)
    msg = rng.random((e, 3)).astype(np.float32)
    neg = rng.integers(0, n, e)
    results = {}
    for dedup in (True, False):
        torch.manual_seed(0)
        model = build_model(name, n, msg_dim=3, memory_dim=8, time_dim=8, embedding_dim=8, neighbors=4,
                            aggregator=aggregator, dropout=0.0)
        model.state.set_edge_features(msg)
        model.state.dedup = dedup
        zs, losses = [], []
        for s in range(0, e, batch):
            sl = slice(s, s + batch)
            m = len(src[sl])
            plan = model.plan(np.concatenate([src[sl], dst[sl], neg[sl]]), np.tile(t[sl], 3),
                              events=(src[sl], dst[sl], t[sl], np.arange(e)[sl]))
            pos_logit, neg_logit, z, states, lasts = model(plan, m)
            loss = link_loss(pos_logit, neg_logit)
            loss.backward()  # gradients flow the same way (checked through the loss)
            model.absorb(plan, states, lasts, z)
            zs.append(z.detach())
            losses.append(float(loss))
        results[dedup] = (torch.cat(zs), losses, plan.num_keys)
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-6, rtol=0)
    np.testing.assert_allclose(results[True][1], results[False][1], atol=1e-6)
    assert results[True][2] < results[False][2]  # fewer memory computations


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
    from speed.train.model.modules import MeanAggregator

    msg = torch.tensor([[1.0, 10.0], [3.0, 30.0], [5.0, 50.0]])
    index = torch.tensor([0, 1, 0])
    t = torch.tensor([2.0, 4.0, 1.0], dtype=torch.float64)
    last, t_last = LastAggregator()(msg, index, t, 2)
    assert last.tolist() == [[5.0, 50.0], [3.0, 30.0]] and t_last.tolist() == [1.0, 4.0]  # the later entry wins
    mean, t_max = MeanAggregator()(msg, index, t, 2)
    assert mean.tolist() == [[3.0, 30.0], [3.0, 30.0]] and t_max.tolist() == [2.0, 4.0]


def test_custom_composition_with_mlp_message_and_mean_aggregator():
    # variants are built by passing modules in: MLP message + mean aggregation + GRU + attention
    from speed.train.model.modules import GraphAttentionEmbedding, GRUUpdater, MeanAggregator, MLPMessage

    message = MLPMessage(8, 8, 0, out_dim=12)
    model = StatefulModel.around(TemporalGNN(8, 8, 0, message, MeanAggregator(), GRUUpdater(12, 8),
                                             GraphAttentionEmbedding(8, 8, 0, 8), LinkPredictor(8)), 20, neighbors=3)
    src, dst = np.array([0, 1, 2, 0]), np.array([3, 4, 5, 4])
    t = np.array([1.0, 2.0, 3.0, 4.0])
    model.step_events(src[:2], dst[:2], t[:2], np.arange(2))
    plan = model.plan(np.concatenate([src[2:], dst[2:], [6, 7]]), np.tile(t[2:], 3),
                      events=(src[2:], dst[2:], t[2:], np.arange(2, 4)))
    pos, neg, *_ = model(plan, 2)  # node 0 has a pending message
    (pos.sum() - neg.sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in message.parameters())


def test_node_state_held_apart_from_the_weights_gives_the_same_scores():
    """keep_state_on moves rows per batch; on one device it must change nothing."""
    src = np.array([0, 1, 2, 0, 3, 1, 2, 3])
    dst = np.array([1, 2, 3, 2, 0, 3, 0, 1])
    t = np.arange(8, dtype=np.float64)
    out = []
    for keep in (False, True):
        torch.manual_seed(0)
        model = build_model("tige", 4, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2)
        if keep:
            model.keep_state_on("cpu")
            model.to("cpu")  # a later move of the weights leaves the node state where it is
            assert model.state.device == torch.device("cpu")
        out.append(scores_of(model, src, dst, t, 2))
    assert torch.equal(out[0], out[1])


def test_node_classification_leaves_the_global_rng_alone():
    from speed.train.eval.metrics import node_classification_auroc

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
    from speed.train.eval.metrics import node_classification_auroc

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 3000)
    z = rng.normal(size=(3000, 8)).astype(np.float32)
    masks = [np.arange(3000) < 2000, (np.arange(3000) >= 2000) & (np.arange(3000) < 2500), np.arange(3000) >= 2500]
    noise = node_classification_auroc(z, y, *masks, seed=0)
    z[:, 0] += 3.0 * y  # the label now shows in one coordinate
    signal = node_classification_auroc(z, y, *masks, seed=0)
    assert signal["auroc"] > 0.95 and abs(noise["auroc"] - 0.5) < 0.1, (signal, noise)


@pytest.mark.parametrize("staleness", [1, 2])
def test_stale_memory_reads_miss_at_most_k_steps(staleness):
    # the consumer marks the memory with the number of steps it has finished and is slow, so the
    # planning thread runs ahead as far as it is allowed: each step's read must see between
    # (its index - K) and (its index) finished steps
    import time

    from speed.train.step.engine import Batches
    from speed.train.step.loader import EventStream, PlanLoader

    ev = speed.generate_events(num_nodes=20, num_events=400, seed=0)
    model = hand_model(20)
    loader = PlanLoader(model, EventStream(ev), Batches(np.arange(len(ev)), 20), pipeline=True,
                        staleness=staleness)
    seen = []
    for step in loader:
        seen.append(int(step.plan.stale[0][0, 0]))
        time.sleep(0.01)
        with torch.no_grad():
            model.state.memory.memory.fill_(step.index + 1)
    assert len(seen) == 20
    assert all(j - staleness <= s <= j for j, s in enumerate(seen))
    assert max(j - s for j, s in enumerate(seen)) == staleness  # it does run ahead that far


@pytest.mark.parametrize("msg_dim", [0, 3])
@pytest.mark.parametrize("u", [5, 200])
def test_graph_attention_equals_the_per_slot_formula(msg_dim, u):
    # the module applies the edge weight through linearity, and meets few distinct neighbours
    # (u=5) all at once, many (u=40) slot by slot; here every slot's key and value are formed
    # as the docstring states them, with a Python loop over queries and heads
    from speed.train.model.modules import GraphAttentionEmbedding, TimeEncoder

    torch.manual_seed(0)
    d, t_dim, out, b, k = 6, 4, 8, 7, 3
    att = GraphAttentionEmbedding(d, t_dim, msg_dim, out, heads=2, dropout=0.0).eval()
    enc = TimeEncoder(t_dim)
    s, nbr_s = torch.randn(b, d), torch.randn(u, d)
    index = torch.randint(0, u, (b, k))
    mask = torch.rand(b, k) < 0.7
    mask[0] = False  # a query without neighbours
    dt = torch.where(mask, torch.rand(b, k, dtype=torch.float64) * 10, torch.zeros((), dtype=torch.float64))
    e = torch.randn(b, k, msg_dim) * mask.unsqueeze(-1)
    got = att(s, None, time_enc=enc, nbr_s=nbr_s, nbr_index=index, nbr_e=e, nbr_dt=dt, nbr_mask=mask)
    c = out // 2
    want = torch.zeros(b, out)
    with torch.no_grad():
        for i in range(b):
            q = att.query(s[i])
            z = att.root(s[i]).clone()
            real = [j for j in range(k) if mask[i, j]]
            for hd in range(2):
                sl = slice(hd * c, (hd + 1) * c)
                keys, values = [], []
                for j in real:
                    kv = att.node_kv(nbr_s[index[i, j]])
                    edge = att.edge(torch.cat([e[i, j], enc(dt[i, j:j + 1])[0]]))
                    keys.append(kv[:out][sl] + edge[sl])
                    values.append(kv[out:][sl] + edge[sl])
                if real:
                    a = torch.softmax(torch.stack([q[sl] @ key for key in keys]) / c ** 0.5, 0)
                    z[sl] += sum(a[n] * values[n] for n in range(len(real)))
            want[i] = z
    assert torch.allclose(got, want, atol=1e-5)
