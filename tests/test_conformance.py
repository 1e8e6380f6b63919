"""Conformance of the evaluation protocols with their reference code, on hand-built logs.

Each check compares speed's output with a plain-Python restatement of a published definition:

* DyGLib (yule-BUAA/DyGLib), ``utils/utils.py:NegativeEdgeSampler`` -- ``random_sample``,
  ``historical_sample``, ``inductive_sample`` and ``random_sample_with_collision_check``;
  ``evaluate_link_prediction.py`` -- the samplers' data and ``last_observed_time`` per period;
  ``evaluate_models_utils.py:evaluate_model_link_prediction`` -- per-batch metrics.
* TGN (twitter-research/tgn), ``utils/data_processing.py:get_data`` -- the split, the new-node
  hold-out and the new-node events; ``evaluation/evaluation.py:eval_edge_prediction`` -- AP and
  AUC averaged over batches; ``train_self_supervised.py`` -- the evaluation neighbour finder
  over the full data, and the new-node pass from the memory at the period's start.
* TGB (shenyangHuang/TGB), ``tgb/linkproppred/negative_generator.py:NegativeEdgeGenerator`` --
  ``rnd`` and ``hist_rnd`` candidates; ``tgb/linkproppred/evaluate.py:Evaluator`` -- ranks with
  ties counting half.

The logs are small and hostile: yearly timestamps (many events share one), repeated pairs,
held-out nodes.
"""

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score

import speed
from speed.train.eval.metrics import batch_link_metrics, ranking_metrics
from speed.train.eval.evaluator import Evaluator
from speed.train.eval.negatives import edge_negatives, hist_rnd_candidates, random_candidates


def yearly_log(seed=0, nodes=60, years=10, per_year=480):
    """A unipartite log with yearly timestamps: every event of a year shares its time."""
    rng = np.random.default_rng(seed)
    n = years * per_year
    w = 1.0 / np.arange(1, nodes + 1)
    src = rng.choice(nodes, size=n, p=w / w.sum())
    dst = rng.choice(nodes, size=n, p=w / w.sum())
    t = np.repeat(np.arange(years), per_year).astype(np.float64)
    return speed.Events.from_arrays(src, dst, t, num_nodes=nodes)


# ---------------------------------------------------------------- DyGLib's negatives
def dyglib_batch_sets(ref, start, end, strategy, last_observed):
    """DyGLib's sets for a batch with times [start, end]: the historical (or inductive) edges
    that are not the batch's (by time range), as in ``historical_sample`` / ``inductive_sample``."""
    r_src, r_dst, r_t = ref
    earliest = min(r_t)
    historical = {(s, d) for s, d, t in zip(r_src, r_dst, r_t) if earliest <= t <= start}
    current = {(s, d) for s, d, t in zip(r_src, r_dst, r_t) if start <= t <= end}
    if strategy == "historical":
        return historical - current, current
    observed = {(s, d) for s, d, t in zip(r_src, r_dst, r_t) if earliest <= t <= last_observed}
    return historical - observed - current, current


def check_dyglib(src, dst, t, neg_src, neg_dst, batch_size, strategy, ref, last_observed, src_pool, dst_pool):
    """Every batch's negatives against ``dyglib_batch_sets``; returns, per batch, how many
    negatives are true edges of the batch's time range and how many random fills it had."""
    possible = {(int(a), int(b)) for a in src_pool for b in dst_pool}
    ref = tuple(np.asarray(x).tolist() for x in ref)
    report = []
    for a in range(0, len(src), batch_size):
        b = min(len(src), a + batch_size)
        size = b - a
        allowed, current = dyglib_batch_sets(ref, t[a], t[b - 1], strategy, last_observed)
        got = list(zip(neg_src[a:b].tolist(), neg_dst[a:b].tolist()))
        fill = max(0, size - len(allowed))
        if fill == 0:  # all from the allowed edges, drawn without replacement
            assert set(got) <= allowed and len(set(got)) == size
        else:  # every allowed edge, and `fill` random pairs that are not pairs of the batch
            rest = Counter(got)
            for e in allowed:
                assert rest[e] >= 1
                rest[e] -= 1
            rest = list(rest.elements())
            batch = set(zip(src[a:b].tolist(), dst[a:b].tolist()))
            outside = possible - batch or possible  # (a batch holding every possible pair: any pair)
            assert len(rest) == fill and all(e in outside for e in rest)
            if len(outside) >= fill:  # drawn without replacement when there are enough
                assert len(set(rest)) == len(rest)
        report.append((sum(e in current for e in got), fill))
    return report


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 30), st.integers(60, 600), st.integers(1, 60), st.sampled_from([17, 50, 200]),
       st.sampled_from(["historical", "inductive"]), st.integers(0, 10**6))
def test_historical_and_inductive_negatives_follow_dyglib(n, e, times, batch_size, strategy, seed):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    t = np.sort(rng.integers(0, times, e)).astype(np.float64)  # few distinct times: many ties
    lo = int(0.7 * e)
    last_observed = t[int(0.55 * e)]
    pools = np.unique(src), np.unique(dst)
    ns, nd = edge_negatives(src[lo:], dst[lo:], t[lo:], batch_size, strategy, seed, *pools, (src, dst, t),
                            last_observed)
    again = edge_negatives(src[lo:], dst[lo:], t[lo:], batch_size, strategy, seed, *pools, (src, dst, t),
                           last_observed)
    assert np.array_equal(ns, again[0]) and np.array_equal(nd, again[1])  # seeded
    check_dyglib(src[lo:], dst[lo:], t[lo:], ns, nd, batch_size, strategy, (src, dst, t), last_observed, *pools)


@pytest.mark.parametrize("batch_size", [200, 600])
def test_yearly_log_negatives_are_never_true_edges_of_their_batch_time(batch_size):
    """Historical test negatives, apart from random fills, are never a pair that occurs in the
    batch's own year: DyGLib decides "before" by time, so batch boundaries inside a year do not
    matter."""
    ev = yearly_log()
    split = speed.chronological_split(ev)
    evaluator = Evaluator(ev, split, batch_size, seed=0, strategy="historical", protocol="dyglib")
    idx = evaluator.period("test")
    ns, nd = evaluator.negative_edges("test")
    report = check_dyglib(ev.src[idx], ev.dst[idx], ev.t[idx], ns, nd, batch_size, "historical",
                          (ev.src, ev.dst, ev.t), evaluator._last_observed("test"), evaluator.src_pool,
                          evaluator.dst_pool)
    assert all(true <= fill for true, fill in report)  # only random fills may be true edges of the year
    assert sum(true for true, fill in report if fill == 0) == 0


def test_inductive_test_negatives_are_not_first_seen_in_validation():
    """DyGLib's test sampler observes everything up to the end of validation
    (``evaluate_link_prediction.py``: ``last_observed_time=val_data.node_interact_times[-1]``)."""
    ev = yearly_log(seed=1)
    split = speed.chronological_split(ev)
    evaluator = Evaluator(ev, split, 200, seed=0, strategy="inductive", protocol="dyglib")
    idx = evaluator.period("test")
    ns, nd = evaluator.negative_edges("test")
    end_val = split.num_train + split.num_val
    seen_by_val = set(zip(ev.src[:end_val].tolist(), ev.dst[:end_val].tolist()))
    report = check_dyglib(ev.src[idx], ev.dst[idx], ev.t[idx], ns, nd, 200, "inductive", (ev.src, ev.dst, ev.t),
                          float(ev.t[end_val - 1]), evaluator.src_pool, evaluator.dst_pool)
    for (a, (_, fill)) in zip(range(0, idx.size, 200), report):
        got = list(zip(ns[a:a + 200].tolist(), nd[a:a + 200].tolist()))
        assert sum(e in seen_by_val for e in got) <= fill  # only random fills may have been seen


def held_out_tail_log():
    """Training times 0-8 among nodes 0-9; at time 9, the training period's last, every event
    touches node 20, which is held out (so training ends at time 8); validation times 10-13 and
    test 14-17 among nodes 0-9, and once a year node 20 with node 11."""
    rng = np.random.default_rng(3)
    src, dst, t = [], [], []
    for year in range(18):
        if year == 9:
            s, d = np.full(10, 20), np.arange(10)
        else:  # 20 events a year in training, 10 later: training is the first 70%
            k = 20 if year < 9 else 10
            s, d = rng.integers(0, 10, k), rng.integers(0, 10, k)
            if year > 9:  # node 20 comes back, with node 11: no pair of time 9 recurs
                s[0], d[0] = 20, 11
        src += s.tolist()
        dst += d.tolist()
        t += [float(year)] * len(s)
    ev = speed.Events.from_arrays(np.array(src), np.array(dst), np.array(t), num_nodes=21)
    split = speed.chronological_split(ev, new_node_fraction=0.0)  # the quantiles fall at times 9 and 13
    held = np.zeros(21, dtype=bool)
    held[20] = True
    return ev, dataclasses.replace(split, new_nodes=held, new_node_fraction=0.05)


def test_validation_observes_up_to_the_last_trained_event():
    """DyGLib's validation sampler observes up to ``train_data.node_interact_times[-1]``, the
    last training event that survives the new-node mask: here time 8, not the training
    period's end (9).  The pairs first seen at time 9 are inductive negatives of validation."""
    ev, split = held_out_tail_log()
    assert (split.val_time, split.test_time, split.num_train) == (9.0, 13.0, 190)
    assert not split.train_mask[-10:].any()
    evaluator = Evaluator(ev, split, 20, seed=0, strategy="inductive", protocol="dyglib")
    assert evaluator._last_observed("val") == 8.0
    assert evaluator._last_observed("test") == 13.0  # validation is not masked
    idx = evaluator.period("val")
    ns, nd = evaluator.negative_edges("val")
    report = check_dyglib(ev.src[idx], ev.dst[idx], ev.t[idx], ns, nd, 20, "inductive", (ev.src, ev.dst, ev.t), 8.0,
                          evaluator.src_pool, evaluator.dst_pool)
    assert report[0][1] == 10  # the first batch: the 10 pairs of time 9, and 10 random fills
    assert {(20, x) for x in range(10)} <= set(zip(ns[:20].tolist(), nd[:20].tolist()))


def test_dyglib_selects_the_best_epoch_on_random_negatives():
    """DyGLib's training script validates with random negatives and keeps the best epoch; its
    historical and inductive negatives only score the saved model.  A run with historical
    negatives picks its epoch on exactly the figures a run with random negatives reports."""
    ev = yearly_log(seed=8, nodes=50, per_year=150)
    kw = dict(model="jodie", protocol="dyglib", epochs=3, batch_size=100, memory_dim=8, time_dim=8,
              embedding_dim=8, deterministic=True, progress=False, seed=1)
    hist = speed.train(ev, eval_negatives="historical", **kw)
    rand = speed.train(ev, eval_negatives="random", **kw)
    for h, r in zip(hist["epochs"], rand["epochs"]):
        assert h["val"]["selection"]["negatives"] == "random"
        assert h["val"]["selection"]["transductive"]["ap"] == r["val"]["transductive"]["ap"]
        assert "selection" not in r["val"]
    assert hist["best_epoch"] == rand["best_epoch"]
    best = hist["epochs"][hist["best_epoch"] - 1]["val"]
    assert hist["val"]["transductive"]["ap"] == best["transductive"]["ap"] != best["selection"]["transductive"]["ap"]
    from speed.cli.summaries import format_train_summary

    text = format_train_summary(hist, Path("run"))
    assert "best epoch chosen on validation AP with random negatives" in text


def test_random_negatives_are_the_events_sources_and_the_logs_destinations():
    """TGN's ``RandEdgeSampler(full_data.sources, full_data.destinations)`` and DyGLib's random
    strategy draw destinations from the distinct destinations of the whole log."""
    ev = yearly_log(seed=2)
    split = speed.chronological_split(ev)
    for protocol in ("tgn", "dyglib"):
        evaluator = Evaluator(ev, split, 200, seed=0, protocol=protocol)
        src, dst = evaluator.negative_edges("test")
        assert src is None  # each event keeps its own source
        assert set(dst.tolist()) <= set(ev.dst.tolist())
        assert np.array_equal(evaluator.dst_pool, np.unique(ev.dst))
    # a destination that only occurs in the test period is a candidate too
    late = speed.Events.from_arrays(np.r_[ev.src, [0] * 50], np.r_[ev.dst, [77] * 50], np.r_[ev.t, [10.0] * 50])
    pool = Evaluator(late, speed.chronological_split(late), 200, seed=0).dst_pool
    assert 77 in pool


# ---------------------------------------------------------------- ranking candidates
def test_tgb_random_candidates_come_from_every_id_between_the_first_and_last_destination():
    """TGB's generator draws from ``arange(first_dst_id, last_dst_id + 1)``: under ``--protocol
    tgb`` an id between two destinations that is never one is a candidate too; the other
    protocols rank against the log's distinct destinations."""
    rng = np.random.default_rng(4)
    n = 600
    ev = speed.Events.from_arrays(rng.integers(0, 30, n), rng.choice([40, 43, 47, 52], n),
                                  np.sort(rng.integers(0, 200, n)).astype(np.float64))
    split = speed.chronological_split(ev, new_node_fraction=0.0)
    tgb = Evaluator(ev, split, 200, seed=0, protocol="tgb", mrr_negatives=10)
    assert tgb.ranking_pool.tolist() == list(range(40, 53))
    cand, valid = tgb.ranking_candidates("test")
    assert set(cand[valid].tolist()) - {40, 43, 47, 52}  # ids no event has, as TGB draws them
    assert set(cand[valid].tolist()) <= set(range(40, 53))
    tgn = Evaluator(ev, split, 200, seed=0, protocol="tgn", mrr_negatives=10)
    assert tgn.ranking_pool.tolist() == [40, 43, 47, 52]


def test_mrr_candidates_are_distinct_and_never_true_edges():
    """TGB's ``rnd``: distinct destinations, none a true destination of the source at the time."""
    rng = np.random.default_rng(0)
    n = 2000
    src, dst = rng.integers(0, 50, n), rng.integers(0, 1000, n)
    t = np.sort(rng.integers(0, 40, n)).astype(np.float64)
    pool = np.arange(1000)
    cand, valid = random_candidates(src, dst, t, pool, 100, seed=3)
    assert cand.shape == (n, 100) and valid.all()
    assert all(len(set(row)) == 100 for row in cand.tolist())  # no repeated candidate in a row
    true = {}
    for s, d, tt in zip(src.tolist(), dst.tolist(), t.tolist()):
        true.setdefault((s, tt), set()).add(d)
    assert all(not (set(row) & true[(s, tt)]) for row, s, tt in zip(cand.tolist(), src.tolist(), t.tolist()))


def test_tgb_hist_rnd_candidates():
    """TGB's ``hist_rnd``: up to ``int(K * 0.5)`` distinct destinations the source met in training
    (not a true destination at the event's time), then random ones outside those and the true ones."""
    rng = np.random.default_rng(1)
    h_src, h_dst = rng.integers(0, 30, 3000), rng.integers(0, 200, 3000)
    src, dst = rng.integers(0, 35, 400), rng.integers(0, 200, 400)  # sources 30-34 never met anyone
    t = np.sort(rng.integers(0, 20, 400)).astype(np.float64)
    k = 20
    cand, valid = hist_rnd_candidates(src, dst, t, np.arange(200), k, seed=0, history=(h_src, h_dst))
    assert valid.all()
    seen = {}
    for s, d in zip(h_src.tolist(), h_dst.tolist()):
        seen.setdefault(s, set()).add(d)
    true = {}
    for s, d, tt in zip(src.tolist(), dst.tolist(), t.tolist()):
        true.setdefault((s, tt), set()).add(d)
    for row, s, tt in zip(cand.tolist(), src.tolist(), t.tolist()):
        hist = seen.get(s, set()) - true[(s, tt)]
        num_hist = min(int(k * 0.5), len(hist))
        assert set(row[:num_hist]) <= hist and len(set(row)) == k
        assert not (set(row[num_hist:]) & (true[(s, tt)] | seen.get(s, set())))


def test_fewer_candidates_than_asked_are_each_given_once_as_tgb():
    """TGB (negative_generator.py at 997ad91): when fewer than K destinations remain, all of
    them, each once; none left is an empty list, not an error.  Padding is marked invalid."""
    src = np.array([0, 0, 1, 2])
    dst = np.array([10, 11, 12, 10])
    t = np.array([5.0, 5.0, 5.0, 6.0])
    pool = np.arange(10, 14)  # four destinations
    cand, valid = random_candidates(src, dst, t, pool, 100, seed=0)
    rows = [set(c[v].tolist()) for c, v in zip(cand, valid)]
    assert [len(r) for r in rows] == [2, 2, 3, 3] and [int(v.sum()) for v in valid] == [2, 2, 3, 3]
    assert rows[0] == rows[1] == {12, 13} and rows[2] == {10, 11, 13} and rows[3] == {11, 12, 13}
    # a source whose true edges at the time cover the whole pool: nothing left to rank against
    cand, valid = random_candidates(np.zeros(4, int), pool, np.zeros(4), pool, 100, seed=0)
    assert not valid.any()
    # hist_rnd: the history part stays, the random part is what remains (here nothing)
    cand, valid = hist_rnd_candidates(np.array([0]), np.array([10]), np.array([9.0]), pool, 100, seed=0,
                                      history=(np.zeros(3, int), np.array([11, 12, 13])))
    assert sorted(cand[0][valid[0]].tolist()) == [11, 12, 13]


def test_ranking_ignores_padding():
    pos = np.array([0.5, 0.5])
    negs = np.array([[0.9, 0.1, 0.99], [0.9, 0.1, 0.99]])
    valid = np.array([[True, True, False], [False, False, False]])
    m = ranking_metrics(pos, negs, valid)
    assert m["mrr"] == pytest.approx((1 / 2 + 1 / 1) / 2)


def test_tgb_protocol_on_a_log_where_a_source_met_every_destination(tmp_path, capsys):
    """3,000 events, 150 users, 60 items: some users met every item in training.  Once a
    ValueError and a traceback (exit 1); now a run, with the candidate count said plainly."""
    from speed.cli import main

    rng = np.random.default_rng(0)
    n = 3000
    users = np.where(np.arange(n) < 600, np.arange(n) % 3, rng.integers(0, 150, n))  # users 0-2 meet all
    items = np.where(np.arange(n) < 600, np.arange(n) // 3 % 60, rng.integers(0, 60, n)) + 1000
    path = tmp_path / "log.csv"
    path.write_text("src,dst,t\n" + "".join(f"{u},{i},{k}\n" for k, (u, i) in enumerate(zip(users, items))))
    code = main(["train", str(path), "--protocol", "tgb", "--model", "jodie", "--epochs", "1", "--out",
                 str(tmp_path / "run"), "--no-progress", "--mrr-negatives", "100"])
    out = capsys.readouterr().out
    assert code == 0
    assert "up to 100 candidates per event" in out


def test_ranks_count_ties_half_as_tgb():
    """TGB's ``eval_rnk_metrics``: rank = 0.5 (optimistic + pessimistic) + 1."""
    pos = np.array([0.5, 0.5, 0.9])
    negs = np.array([[0.5, 0.5, 0.1], [0.6, 0.1, 0.1], [0.1, 0.2, 0.3]])
    opt = (negs > pos[:, None]).sum(1)
    pes = (negs >= pos[:, None]).sum(1)
    rank = 0.5 * (opt + pes) + 1
    m = ranking_metrics(pos, negs)
    assert m["mrr"] == pytest.approx(np.mean(1 / rank)) and m["hits@1"] == pytest.approx(np.mean(rank <= 1))


# ---------------------------------------------------------------- TGN's split and metrics
def tgn_hold_out(ev, val_time, held):
    """``get_data``: the masked training events, the new-node set, and the new-node events."""
    node_set = set(ev.src.tolist()) | set(ev.dst.tolist())
    train = [(s not in held and d not in held and t <= val_time)
             for s, d, t in zip(ev.src.tolist(), ev.dst.tolist(), ev.t_float().tolist())]
    train_nodes = {x for keep, s, d in zip(train, ev.src.tolist(), ev.dst.tolist()) if keep for x in (s, d)}
    new_node_set = node_set - train_nodes
    new_events = [s in new_node_set or d in new_node_set for s, d in zip(ev.src.tolist(), ev.dst.tolist())]
    return np.array(train), np.array(new_events)


@pytest.mark.parametrize("fraction", [0.1, 0.25])
def test_hold_out_is_tgns(fraction):
    ev = yearly_log(seed=3, nodes=200, per_year=300)
    sp = speed.chronological_split(ev, new_node_fraction=fraction, seed=5)
    held = set(np.flatnonzero(sp.new_nodes).tolist())
    n_total = len(set(ev.src.tolist()) | set(ev.dst.tolist()))
    later = set(ev.src[sp.num_train:].tolist()) | set(ev.dst[sp.num_train:].tolist())
    assert len(held) == int(fraction * n_total) and held <= later  # int(0.1 * n_total_unique_nodes), from val/test
    train, new_events = tgn_hold_out(ev, sp.val_time, held)
    assert np.array_equal(sp.train_mask, train[:sp.num_train]) and not train[sp.num_train:].any()
    val = slice(sp.num_train, sp.num_train + sp.num_val)
    assert np.array_equal(sp.val_inductive, new_events[val])
    assert np.array_equal(sp.test_inductive, new_events[sp.num_train + sp.num_val:])
    # the quantile split
    val_time, test_time = np.quantile(ev.t_float(), [0.70, 0.85])
    assert (sp.val_time, sp.test_time) == (val_time, test_time)


def test_per_batch_and_pooled_metrics():
    """``eval_edge_prediction``: AP and AUC of each batch (positives against negatives), averaged."""
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 450), rng.normal(0, 1, 450)
    m = batch_link_metrics(pos, neg, 200)
    ap, auc = [], []
    for a in range(0, 450, 200):
        y = np.r_[np.ones(len(pos[a:a + 200])), np.zeros(len(neg[a:a + 200]))]
        s = np.r_[pos[a:a + 200], neg[a:a + 200]]
        ap.append(average_precision_score(y, s))
        auc.append(roc_auc_score(y, s))
    assert m["ap"] == pytest.approx(np.mean(ap)) and m["auc"] == pytest.approx(np.mean(auc))
    y = np.r_[np.ones(450), np.zeros(450)]
    assert m["pooled"]["ap"] == pytest.approx(average_precision_score(y, np.r_[pos, neg]))
    assert batch_link_metrics(pos, neg, 200, "pooled")["ap"] == m["pooled"]["ap"]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 500), st.integers(1, 500), st.integers(1, 300), st.booleans(), st.integers(0, 10**6))
def test_grouped_ap_auc_is_scikit_learns(n, m, batch_size, ties, seed):
    """The vectorised per-batch AP and AUC equal scikit-learn's on each batch, ties included
    (a batch without negatives, when the sides differ in length, is NaN)."""
    from speed.train.eval.metrics import grouped_ap_auc

    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 4, n).astype(float) if ties else rng.normal(1, 1, n)
    neg = rng.integers(0, 4, m).astype(float) if ties else rng.normal(0, 1, m)
    ap, auc = grouped_ap_auc(pos, neg, batch_size)
    assert ap.size == -(-max(n, m) // batch_size)
    for b in range(ap.size):
        p, q = pos[b * batch_size:(b + 1) * batch_size], neg[b * batch_size:(b + 1) * batch_size]
        if p.size == 0 or q.size == 0:
            assert math.isnan(ap[b]) and math.isnan(auc[b])
            continue
        y, s = np.r_[np.ones(p.size), np.zeros(q.size)], np.r_[p, q]
        assert ap[b] == pytest.approx(average_precision_score(y, s), abs=1e-12)
        assert auc[b] == pytest.approx(roc_auc_score(y, s), abs=1e-12)


# ---------------------------------------------------------------- the new-node pass and the graph
def edgebank_reference(ev, split, period, batch_size, neg_src, neg_dst, new_only):
    """EdgeBank, by hand: the masked training events, then (for the test) the validation events,
    are remembered; the period's events -- or only its new-node events, from the state at the
    period's start -- are scored a batch at a time and then remembered."""
    seen = set(zip(ev.src[:split.num_train][split.train_mask].tolist(), ev.dst[:split.num_train][split.train_mask].tolist()))
    if period == "test":
        seen |= set(zip(ev.src[split.num_train:split.num_train + split.num_val].tolist(),
                        ev.dst[split.num_train:split.num_train + split.num_val].tolist()))
    lo = split.num_train if period == "val" else split.num_train + split.num_val
    hi = lo + (split.num_val if period == "val" else split.num_test)
    idx = np.arange(lo, hi)
    if new_only:
        idx = idx[split.val_inductive if period == "val" else split.test_inductive]
    pos, neg = [], []
    for a in range(0, idx.size, batch_size):
        b = idx[a:a + batch_size]
        for k, i in enumerate(b, start=a):
            ns = ev.src[i] if neg_src[k] < 0 else neg_src[k]
            pos.append(float((ev.src[i], ev.dst[i]) in seen))
            neg.append(float((ns, neg_dst[k]) in seen))
        seen |= set(zip(ev.src[b].tolist(), ev.dst[b].tolist()))
    return np.array(pos), np.array(neg)


@pytest.mark.parametrize("protocol", ["tgn", "dyglib"])
def test_new_node_pass_is_a_pass_of_its_own(tmp_path, protocol):
    ev = yearly_log(seed=4, nodes=120, per_year=200)
    m = speed.train(ev, model="edgebank", protocol=protocol, batch_size=100, out=tmp_path, progress=False)
    split = speed.chronological_split(ev)
    z = np.load(tmp_path / "negatives.npz")
    for period in ("val", "test"):
        new = split.val_inductive if period == "val" else split.test_inductive
        assert new.any()
        # the new-node pass's negatives: DyGLib's sampler over the new-node events; TGN validates
        # new nodes with its whole-log sampler and tests them with the new-node one
        idx = np.flatnonzero(new) + (split.num_train if period == "val" else split.num_train + split.num_val)
        pool = set(ev.dst.tolist()) if (protocol == "tgn" and period == "val") else set(ev.dst[idx].tolist())
        assert set(z[f"{period}_new_dst"].tolist()) <= pool
        pos, neg = edgebank_reference(ev, split, period, 100, z[f"{period}_new_src"], z[f"{period}_new_dst"], True)
        want = batch_link_metrics(pos, neg, 100)
        got = m["val" if period == "val" else "test"]["inductive"]
        assert got["count"] == int(new.sum())
        assert got["ap"] == pytest.approx(want["ap"], abs=1e-12) and got["pooled"] == pytest.approx(want["pooled"])
        pos, neg = edgebank_reference(ev, split, period, 100, z[f"{period}_src"], z[f"{period}_dst"], False)
        assert m[period]["transductive"]["ap"] == pytest.approx(batch_link_metrics(pos, neg, 100)["ap"], abs=1e-12)


def test_evaluation_sees_the_held_out_nodes_training_events():
    """TGN evaluates with ``full_ngh_finder``: a held-out node's training-period events are its
    neighbours in evaluation, though training never saw them."""
    ev = yearly_log(seed=6, nodes=80, per_year=150)
    split = speed.chronological_split(ev, new_node_fraction=0.2, seed=1)
    evaluator = Evaluator(ev, split, 100, seed=0)
    model = speed.build_model("tgn", ev.num_nodes, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=50)
    evaluator.prepare(model)
    held = np.flatnonzero(split.new_nodes)
    trained = (ev.src[:split.num_train, None] == held) | (ev.dst[:split.num_train, None] == held)
    node = held[trained.sum(0).argmax()]  # the held-out node with most training-period events
    nb = model.state.sampler.sample(np.array([node]), np.array([split.val_time + 0.5]))
    want = [i for i in range(split.num_train) if node in (ev.src[i], ev.dst[i])][-50:][::-1]
    assert nb.eids[0][nb.mask[0]].tolist() == want and len(want) > 0


def test_no_inductive_metric_without_held_out_nodes(tmp_path):
    ev = yearly_log(seed=7, nodes=50, per_year=100)
    m = speed.train(ev, model="edgebank", new_node_fraction=0.0, out=tmp_path, progress=False)
    assert "inductive" not in m["test"] and m["config"]["new_node_fraction"] == 0.0
    assert math.isfinite(m["test"]["transductive"]["ap"])


def test_reference_figure_on_float32_probabilities():
    """TGN's and DyGLib's loops compute AP on float32 sigmoid outputs: logits near +-20 saturate
    to 1.0 and tie.  speed keeps its figure on logits and reports the references' beside it."""
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(20, 3, 400), rng.normal(17, 3, 400)
    m = batch_link_metrics(pos, neg, 200, reference=True)
    want = []
    for a in range(0, 400, 200):
        p = torch.sigmoid(torch.tensor(np.concatenate([pos[a:a + 200], neg[a:a + 200]]), dtype=torch.float32))
        want.append(average_precision_score(np.r_[np.ones(200), np.zeros(200)], p.numpy()))
    assert m["float32"]["ap"] == pytest.approx(np.mean(want), abs=1e-12)
    assert m["float32"]["ap"] < m["ap"] - 0.05  # saturation ties cost the references' figure
    assert "float32" not in batch_link_metrics(pos, neg, 200)
