"""Fixed shapes and the captured step (speed.train.step.fixed, speed.train.step.captured).

A plan padded to its bounds computes, for its real rows, what the plan computes unpadded: the
logits, the key states and the memory stored within 1e-6, the gradients within 1e-5 of the
largest (a matrix product of another height may round a row's last bit differently), on the
sample, a 12-node log whose events share one time, and a heavy-tailed log.  The captured step's buffers and order
of work, run eagerly where there is no GPU, give the eager padded step's losses.  The GPU's
recording and replay are checked in tests/test_gpu.py."""

import dataclasses

import numpy as np
import pytest
import torch

import speed
from speed.train import TrainConfig, Trainer
from speed.train.config import ConfigError
from speed.train.model.queries import QueryLayout
from speed.train.step.fixed import Bounds, FittedBounds, pad_plan, unsupported
from speed.train.step.captured import CapturedStep
from speed.train.step.engine import Engine, StepResult
from speed.train.step.losses import link_loss


@pytest.fixture(scope="module")
def sample():
    events = speed.read_events("data/sample.csv", progress=False)
    return events, speed.chronological_split(events, seed=0)


def _few_nodes_one_time():
    """12 nodes, every event at one time: the heaviest repeats, every query at the same time."""
    ev = speed.generate_events(12, 3000, seed=3)
    ev.t[:] = 5
    return ev, speed.chronological_split(ev, seed=0)


def _heavy_tail():
    ev = speed.generate_events(400, 6000, alpha=2.5, seed=4)
    return ev, speed.chronological_split(ev, seed=0)


def _trainer(sample, model="tgn", **kw):
    events, split = sample
    cfg = TrainConfig(model=model, epochs=1, seed=0, progress=False, num_threads=1, max_steps=30, **kw).validate()
    tr = Trainer.local(events, split, cfg)
    for mod in tr.model.net.modules():  # the same arithmetic both ways: no dropout masks to draw
        if isinstance(getattr(mod, "dropout", None), float):
            mod.dropout = 0.0
    return tr


@pytest.mark.parametrize("model,log", [("tgn", "sample"), ("jodie", "sample"), ("tgn", "few nodes, one time"),
                                       ("tgn", "heavy tail")])
def test_a_padded_plan_computes_what_the_plan_computes(sample, model, log):
    data = {"sample": lambda: sample, "few nodes, one time": _few_nodes_one_time, "heavy tail": _heavy_tail}[log]()
    events, split = data
    tr = _trainer(data, model)
    m = tr.model
    m.state.reset()
    rng = np.random.default_rng(0)
    idx = np.flatnonzero(split.train_mask)
    b = 200
    worst = 0.0
    fitted = FittedBounds()
    for s in range(12):
        pos = idx[s * b:(s + 1) * b]
        src, dst = events.src[pos].astype(np.int64), events.dst[pos].astype(np.int64)
        t = events.t_float()[pos].astype(np.float64)
        neg = rng.integers(0, events.num_nodes, b)
        lay = QueryLayout(b)
        plan = m.plan(lay.nodes(src, dst, neg), lay.times(t), events=(src, dst, t, events.eid[pos].astype(np.int64)),
                      on_device=False)
        # the worst case on even steps, the sizes fitted to the plans so far on odd ones
        bnd = Bounds.of(plan) if s % 2 == 0 else fitted(plan)
        padded = pad_plan(plan, bnd)
        assert padded.uq_t.shape[0] == bnd.distinct and padded.key_row.shape[0] == bnd.keys
        assert padded.rows.shape[0] == bnd.rows and padded.pe_row.shape[0] == bnd.pending
        assert padded.nb_keys.shape[0] == bnd.nb_keys and padded.ob_node.shape[0] == bnd.endpoints
        out = {}
        for name, p in (("plain", plan), ("padded", padded)):
            m.net.zero_grad(set_to_none=True)
            pl, nl, z, states, lasts = m.net(p, *m.inputs(p), b)
            link_loss(pl, nl).backward()
            grads = torch.cat([q.grad.reshape(-1) for q in m.net.parameters() if q.grad is not None])
            out[name] = (pl.detach(), nl.detach(), states.detach()[:plan.key_row.shape[0]],
                         lasts.detach()[:plan.key_row.shape[0]], grads, states.detach(), lasts.detach())
        a, p_ = out["plain"], out["padded"]
        for x, y in zip(a[:4], p_[:4]):
            worst = max(worst, float((x - y).abs().max()))
            torch.testing.assert_close(y, x, rtol=0, atol=1e-6)
        # gradients are sums over many rows, which padding's heights may round in another order:
        # within 1e-5 of the largest (a heavy-tailed log put one element 1.9e-6 apart)
        assert float((p_[4] - a[4]).abs().max()) <= 1e-5 * float(a[4].abs().max())
        # what the padded plan stores is what the plan stores (its padding repeats endpoint 0)
        m.absorb(padded, p_[5], p_[6])
        got = m.state.read_nodes(plan.ob_node)
        want = a[2].index_select(0, plan.ob_key), a[3].index_select(0, plan.ob_key)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)
        assert torch.equal(got[1], want[1])
    assert worst <= 1e-6


def test_fitted_bounds_hold_every_plan_grow_geometrically_and_stay_under_the_worst_case(sample):
    """FittedBounds over a training epoch's plans at batch 200: every plan fits the sizes it is
    given, which are multiples of the quantum (or the worst case), never above the worst case,
    and change only when a plan outgrows them, an outgrown size by at least the growth factor
    and none shrinking; the last,
    smaller batch gets sizes of its own."""
    events, split = sample
    tr = _trainer(sample, "tgn")
    m = tr.model
    m.state.reset()
    idx = np.flatnonzero(split.train_mask)
    rng = np.random.default_rng(1)
    fitted = FittedBounds()
    sizes, changes, b = None, 0, 200
    starts = list(range(0, idx.size, b))
    for lo in starts:
        pos = idx[lo:lo + b]
        n = pos.size
        src, dst = events.src[pos].astype(np.int64), events.dst[pos].astype(np.int64)
        t = events.t_float()[pos].astype(np.float64)
        lay = QueryLayout(n)
        plan = m.plan(lay.nodes(src, dst, rng.integers(0, events.num_nodes, n)), lay.times(t),
                      events=(src, dst, t, events.eid[pos].astype(np.int64)), on_device=False)
        got, need, worst = fitted(plan), Bounds.needed(plan), Bounds.of(plan)
        assert got.covers(need) and worst.covers(got)
        for f in ("distinct", "nb_keys", "endpoints", "keys", "pending", "rows"):
            v = getattr(got, f)
            assert v % FittedBounds.QUANTUM == 0 or v in (getattr(worst, f), getattr(need, f))
        if n == b:
            if sizes is not None and got != sizes:
                changes += 1
                fields = ("distinct", "nb_keys", "endpoints", "keys", "pending", "rows")
                outgrown = [f for f in fields if getattr(need, f) > getattr(sizes, f)]
                assert outgrown  # only a plan that did not fit changes them
                assert got.covers(sizes)  # no size shrinks
                assert all(getattr(got, f) >= min(getattr(worst, f), getattr(sizes, f) * FittedBounds.GROWTH)
                           for f in outgrown)
            sizes = got
        pad_plan(plan, got)  # (it fits)
    assert idx.size % b  # the sample's last batch is smaller: a shape of its own
    d = fitted.as_dict()
    assert len(d["shapes"]) == 2 and d["grown"] == changes
    full = [x for x in d["shapes"] if x["events"] == b][0]
    assert 0 < full["of_worst_case"] < 1  # a real batch is far from the worst case


class _Step:
    def __init__(self, plan, n):
        self.plan, self.n = plan, n

    def __len__(self):
        return self.n


def test_the_captured_steps_order_of_work_gives_the_eager_losses(sample):
    """The captured step's path (padded plans packed in the loader's thread, copied into one
    input buffer, the step run on its views) against the engine's eager step on the same padded
    plans: the same losses, step by step."""
    losses = {}
    for capture in (True, False):
        tr = _trainer(sample, "tgn", cuda_graph=True)
        if capture:
            kept = tr
        eng = tr.engine
        if not capture:  # the loader still pads; each step goes the engine's eager way
            eng.captured.run = lambda plan, n, eng=eng: Engine.step(eng, _Step(dataclasses.replace(plan, packed=None),
                                                                                n)).loss
        seen = []
        real = eng.step
        eng.step = lambda step, *a, **k: seen.append(float(real(step, *a, **k).loss)) or StepResult(loss=torch.tensor(seen[-1]))
        tr.fit()
        losses[capture] = seen
    assert len(losses[True]) == 30
    assert losses[True] == pytest.approx(losses[False], rel=1e-6, abs=0)
    # the shapes outgrown by the fitted sizes are let go: at most KEEP input buffers (and graphs)
    cap = kept.engine.captured
    assert cap.bounds.grown >= CapturedStep.KEEP  # (more shapes went by than are kept)
    assert 1 <= len(cap.graphs) <= CapturedStep.KEEP

    def cells(key):  # elements of a shape's input buffer
        return sum(int(np.prod(shape)) for shape, _ in key)

    assert cells(next(reversed(cap.graphs))) == max(map(cells, cap.graphs))  # the newest is the largest


def test_what_cannot_be_captured_is_refused_clearly(sample):
    with pytest.raises(ConfigError, match="cuda_graph.*deterministic"):
        TrainConfig(model="tgn", cuda_graph=True, deterministic=True).validate()
    with pytest.raises(ConfigError, match="cuda_graph.*average-every"):
        TrainConfig(model="tgn", cuda_graph=True, nproc=2, average_every=4).validate()
    TrainConfig(model="tgn", cuda_graph=True, nproc=2).validate()  # PAC: gradients averaged by hand
    events, split = sample
    with pytest.raises(ConfigError, match="cannot capture tige's step: a state component"):
        Trainer.local(events, split, TrainConfig(model="tige", cuda_graph=True, progress=False).validate())


def test_the_cli_says_how_the_fitted_sizes_went(tmp_path, capsys):
    """``speed train --cuda-graph`` on a CPU: the steps run eagerly on the padded plans, and the
    summary and metrics.json say so, with the largest batch's fitted sizes against its worst case."""
    import json

    from speed.cli import main

    out = tmp_path / "run"
    assert main(["train", "data/sample.csv", "--cuda-graph", "--epochs", "1", "--max-steps", "25", "--out", str(out),
                 "--no-progress", "--threads", "1"]) == 0
    text = capsys.readouterr()
    said = text.out + text.err
    assert "--cuda-graph: no step was recorded" in said
    assert "--cuda-graph: plans padded to" in said and "of the worst case of a 200-event batch" in said
    cg = json.loads((out / "metrics.json").read_text())["cuda_graph"]
    assert cg["recorded"] == 0 and cg["replays"] == 0 and cg["failed"] is None
    (shape,) = cg["bounds"]["shapes"]
    assert shape["events"] == 200 and 0 < shape["of_worst_case"] < 1 and cg["bounds"]["grown"] >= 1


def _few_nodes_few_times():
    """12 nodes, 3000 events at 10 times: heavy repeats, and val and test periods to score."""
    ev = speed.generate_events(12, 3000, seed=3)
    ev.t[:] = np.arange(len(ev)) // 300
    return ev, speed.chronological_split(ev, seed=0)


@pytest.mark.parametrize("model,log", [("tgn", "sample"), ("jodie", "sample"), ("tgn", "few nodes, few times"),
                                       ("tgn", "heavy tail")])
def test_a_captured_evaluation_pass_scores_and_stores_what_the_plain_pass_does(sample, model, log):
    """The evaluation's padded steps (speed.train.eval.captured, run eagerly on this CPU) give
    every val event's scores, and leave the node state, within the padding's rounding of the
    plain pass; the new-node pass (its neighbour graph holds more events than it scores) too."""
    from speed.train.eval.captured import CapturedEval
    from speed.train.eval.evaluator import stream_scores

    data = {"sample": lambda: sample, "few nodes, few times": _few_nodes_few_times, "heavy tail": _heavy_tail}[log]()
    tr = _trainer(data, model, new_node_fraction=0.1)
    tr.training.train_epoch(1)
    ev, m = tr.evaluator, tr.model
    ev.prepare(m)
    start = m.state.snapshots.backup()
    idx = ev.period("val")
    new = idx[ev.inductive("val")]
    assert idx.size >= 2 * ev.batch_size
    cap = CapturedEval(m)
    for index, graph, name in ((idx, None, "val"), (new, idx, "val new nodes")):
        if index.size == 0:  # (no held-out node in the period: no new-node pass)
            continue
        got = []
        for captured in (None, cap):
            m.state.snapshots.restore(start)
            res = stream_scores(m, ev.event_stream, index, ev.batch_size, ev.negatives("val", new_nodes=graph is not None),
                                graph=graph, captured=captured)
            every = torch.arange(m.num_nodes)
            got.append((res.pos, res.neg, *(x.clone() for x in m.state.read_nodes(every))))
        (p0, n0, s0, l0), (p1, n1, s1, l1) = got
        assert p0.size == index.size and p1.size == index.size, name
        np.testing.assert_allclose(p1, p0, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(n1, n0, atol=1e-5, err_msg=name)
        torch.testing.assert_close(s1, s0, atol=1e-5, rtol=0, msg=name)
        assert torch.equal(l1, l0), name  # the times stored: exact
    assert cap.graphs and cap.bounds.as_dict()["shapes"]  # the padded path ran (eagerly: no GPU)
    assert cap.replays == 0 and cap.recorded == 0


def test_a_cuda_graph_run_evaluates_on_padded_steps_and_says_so(tmp_path, capsys):
    from speed.cli import main

    log = speed.write_generated(tmp_path / "log.csv", 200, 3000, seed=5)
    kw = dict(model="tgn", epochs=1, seed=0, batch_size=100, progress=False, num_threads=1)
    captured = speed.train(log, cuda_graph=True, **kw)
    ce = captured["cuda_graph_evaluation"]
    assert ce["failed"] is None and ce["bounds"]["shapes"] and ce["replays"] == 0  # eagerly, on this CPU
    # ranking candidates keep the eager step: a TGB-like run with MRR candidates still scores
    ranked = speed.train(log, cuda_graph=True, mrr_negatives=5, **kw)
    assert ranked["test"]["transductive"]["mrr"] > 0
    assert main(["train", str(log), "--cuda-graph", "--epochs", "1", "--batch-size", "100", "--out",
                 str(tmp_path / "run"), "--no-progress", "--threads", "1"]) == 0
    assert "--cuda-graph: no evaluation step was recorded (no CUDA device" in capsys.readouterr().out


def test_the_forward_pass_on_a_padded_plan_traces_as_one_graph(sample):
    """``torch.compile(fullgraph=True)`` traces TGN's forward pass and loss on a padded plan
    without a break (dynamo alone, ``backend="eager"``: no compiler needed), and the traced
    function gives the eager logits.  (A break would split a compiled step into many graphs:
    docs/training.md measures the compiled CPU step.)"""
    import torch._dynamo

    events, split = sample
    tr = _trainer(sample, "tgn")
    m = tr.model
    m.state.reset()
    idx = np.flatnonzero(split.train_mask)[:200]
    src, dst = events.src[idx].astype(np.int64), events.dst[idx].astype(np.int64)
    t = events.t_float()[idx].astype(np.float64)
    lay = QueryLayout(200)
    plan = m.plan(lay.nodes(src, dst, np.random.default_rng(0).integers(0, events.num_nodes, 200)), lay.times(t),
                  events=(src, dst, t, events.eid[idx].astype(np.int64)), on_device=False)
    padded = pad_plan(plan, Bounds.of(plan))

    def forward_loss(p):
        pos, neg, *_ = m.net(p, *m.inputs(p), 200)
        return link_loss(pos, neg), pos

    torch._dynamo.reset()
    try:
        traced = torch.compile(forward_loss, backend="eager", fullgraph=True, dynamic=False)
        with torch.no_grad():
            loss, pos = traced(padded)
            want_loss, want_pos = forward_loss(padded)
    finally:
        torch._dynamo.reset()
    assert torch.equal(pos, want_pos) and torch.equal(loss, want_loss)
