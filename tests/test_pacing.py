"""Evaluation passes that measure planning ahead against planning in the step (speed.train.eval.pacing).

A pass one process computes on a CPU may plan its steps in a thread beside them, the steps then
one torch thread fewer.  Whichever way, and whichever way it switches to mid-pass while it
measures, every score and every stored row must be the ones the plain pass gives, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import speed
from speed.train import TrainConfig
from speed.train.eval import pacing as pacing_mod
from speed.train.eval.evaluator import stream_scores
from speed.train.eval.pacing import PlanPacing
from speed.train.loop.trainer import Trainer


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def short_probe(monkeypatch):
    monkeypatch.setattr(pacing_mod, "WARM_BATCHES", 1)
    monkeypatch.setattr(pacing_mod, "PROBE_BATCHES", 3)
    monkeypatch.setattr(pacing_mod, "SETTLE_STEPS", 1)


def _trained(name):
    ev = speed.generate_events(num_nodes=300, num_events=6000, seed=11)
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.1)
    # the default widths: the steps' tensors are large enough for torch to use both threads
    cfg = TrainConfig(model=name, epochs=1, seed=0, progress=False, num_threads=2, max_steps=8,
                      batch_size=50).validate()
    tr = Trainer.local(ev, split, cfg)
    tr.training.train_epoch(1)
    return tr


@pytest.mark.parametrize("name", ["tgn", "jodie", "dyrep", "tige"])
def test_every_way_of_planning_a_pass_scores_and_stores_the_same_bits(name, two_threads, short_probe):
    tr = _trained(name)
    ev, m = tr.evaluator, tr.model
    ev.prepare(m)
    start = m.state.snapshots.backup()
    idx = ev.period("val")
    new = idx[ev.inductive("val")]
    assert idx.size >= 11 * ev.batch_size and new.size > 0  # (long enough to measure: see short_probe)
    decided = PlanPacing()
    decided.ahead = True
    ways = {"in the step": None, "ahead": decided, "measured": PlanPacing()}
    # ranking candidates (TGB's protocol) are queried after each step's own queries: TGN's val
    # pass ranks 5 of them per event as well
    ranked = np.random.default_rng(0).integers(0, m.num_nodes, (idx.size, 5)) if name == "tgn" else None
    for index, graph, cand in ((idx, None, ranked), (new, idx, None)):
        got = {}
        for way, pacing in ways.items():
            m.state.snapshots.restore(start)
            res = stream_scores(m, ev.event_stream, index, ev.batch_size,
                                ev.negatives("val", new_nodes=graph is not None), mrr_candidates=cand, graph=graph,
                                pacing=pacing)
            state = tuple(x.clone() for x in m.state.read_nodes(torch.arange(m.num_nodes)))
            got[way] = (res.pos, res.neg, res.mrr_neg, state, res.work)
            assert torch.get_num_threads() == 2  # restored after the stretches planned ahead
        p0, n0, r0, s0, w0 = got["in the step"]
        assert (r0 is not None) == (cand is not None)
        for way in ("ahead", "measured"):
            p, n, r, s, w = got[way]
            assert np.array_equal(p, p0) and np.array_equal(n, n0), (name, way)
            assert (r is None and r0 is None) or np.array_equal(r, r0), (name, way)
            assert all(torch.equal(a, b) for a, b in zip(s, s0)), (name, way)
        assert w0["planned_ahead"] == 0 and w0["step_threads"] == 2 and w0["pacing"] is None
        steps = -(-index.size // ev.batch_size)
        assert got["ahead"][4]["planned_ahead"] == steps and got["ahead"][4]["step_threads"] == 1
    # the measuring pass planned its probe ahead (3 steps at least) and said what it chose
    probe = ways["measured"].probe
    assert probe is not None and probe["threads"] == 2 and len(probe["step_median_seconds"]) == 2
    assert ways["measured"].ahead == probe["ahead"]


def test_the_stretches_cover_a_pass_and_follow_the_decision(monkeypatch, short_probe):
    p = PlanPacing(threads=2)
    assert p.segments(5) == [(0, 5, False, None)]  # too short to measure: in the step
    assert p.ahead is None
    got = p.segments(40)
    assert [(a, b) for a, b, _, _ in got] == [(0, 1), (1, 4), (4, 7), (7, 10), (10, 40)]
    assert [(way, label) for _, _, way, label in got] == [(False, None), (False, "step"), (True, "ahead"),
                                                         (False, "step"), (None, None)]
    for label, per_step in (("step", 1.0), ("ahead", 0.5), ("step", 1.1)):
        p.record(label, [9.0] + [per_step] * 3)  # (the first, settling, not counted)
    assert p.decide() is True and p.probe["ahead_median_seconds"] == 0.5
    assert p.segments(40) == [(0, 40, True, None)]
    # a tie keeps the steps planning their own plans; one thread has nothing to give
    q = PlanPacing(threads=2)
    for label, per_step in (("step", 1.0), ("ahead", 0.97), ("step", 1.0)):
        q.record(label, [per_step] * 4)
    assert q.decide() is False and q.segments(40) == [(0, 40, False, None)]
    assert PlanPacing(threads=1).segments(400) == [(0, 400, False, None)]


def test_step_threads_lowers_torch_threads_while_planning_ahead(two_threads):
    p = PlanPacing(threads=2)
    with p.step_threads(True) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with p.step_threads(False) as n:
        assert n == 2
    with pytest.raises(RuntimeError):
        with p.step_threads(True):
            raise RuntimeError("a failing step")
    assert torch.get_num_threads() == 2


def test_which_runs_measure(tmp_path, monkeypatch, short_probe):
    cpu = torch.device("cpu")
    assert TrainConfig(model="tgn").validate().paces_evaluation(cpu)
    for fixed in (dict(pipeline=False), dict(pipeline=True), dict(deterministic=True), dict(cuda_graph=True)):
        assert not TrainConfig(model="tgn", **fixed).validate().paces_evaluation(cpu), fixed
    assert not TrainConfig(model="tgn").validate().paces_evaluation(torch.device("cuda"))
    # a run with 2 threads: its first long pass measures and says so, the later ones follow
    log = speed.write_generated(tmp_path / "log.csv", 200, 6000, seed=3)
    kw = dict(model="tgn", epochs=1, seed=0, batch_size=50, progress=False, num_threads=2,
              memory_dim=8, time_dim=8, embedding_dim=8)
    m = speed.train(log, **kw)
    work = m["evaluation_work"][0]
    measured = [w for w in work if w["pacing"] is not None]
    assert len(measured) == 1 and measured[0] is next(w for w in work if w["steps"] >= 11)
    later = work[work.index(measured[0]) + 1:]
    assert later and all(w["planned_ahead"] == (w["steps"] if measured[0]["pacing"]["ahead"] else 0) for w in later)
    from speed.cli.summaries import format_train_summary

    line = next(x for x in format_train_summary(m, tmp_path).splitlines() if x.startswith("evaluation planned"))
    assert f"measured on the {measured[0]['pass']} pass" in line
    assert ("ahead, by a thread" in line) == measured[0]["pacing"]["ahead"]
    plain = speed.train(log, pipeline=False, **kw)
    assert all(w["pacing"] is None and w["planned_ahead"] == 0 for w in plain["evaluation_work"][0])
    assert "evaluation planned" not in format_train_summary(plain, tmp_path)
    assert plain["test"] == m["test"] and plain["epochs"][0]["val"] == m["epochs"][0]["val"]
