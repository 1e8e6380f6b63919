"""Plans built in stages, each stage in a thread of its own on its own batch (``plan_threads``).

The sampler is advanced by the first stage only and the pending store by the second only, so a
pipeline of three threads has three consecutive batches under way; every plan must still be
the one a single thread builds, at pass ends, at in-epoch barriers and under staleness.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import speed
from speed.train import TrainConfig
from speed.train.model.network import build_model
from speed.train.state.batch_plan import TENSOR_FIELDS, assemble_plan, plan_memory, plan_neighbors, stage_groups
from speed.train.step.engine import Batches, CyclingBatches
from speed.train.step.loader import EventStream, PlanLoader
from speed.train.step.negatives import RandomNegatives


def _plans(model, ev, threads, batches, barrier=None, fix=None, on_pass_start=True):
    model.state.reset()
    loader = PlanLoader(model, EventStream(ev), batches, RandomNegatives(np.arange(ev.num_nodes), [0, 1]).next_edges,
                        pipeline=threads, barrier=barrier, fix=fix,
                        on_pass_start=model.state.reset_structures if on_pass_start else None)
    out = []
    for step in loader:
        plan = step.plan
        out.append(([getattr(plan, f).clone() for f in TENSOR_FIELDS],
                    None if plan.dyrep is None else [x.clone() for x in (plan.dyrep.inv, plan.dyrep.nb_row,
                                                                         plan.dyrep.nb_dt)]))
    return out, loader


def _same(a, b):
    assert len(a) == len(b)
    for (ta, da), (tb, db) in zip(a, b):
        assert all(torch.equal(x, y) for x, y in zip(ta, tb))
        assert (da is None) == (db is None)
        if da is not None:
            assert all(torch.equal(x, y) for x, y in zip(da, db))


@pytest.mark.parametrize("name", ["tgn", "dyrep", "jodie", "tige"])
def test_staged_plans_are_the_serial_plans_over_several_passes(name):
    ev = speed.generate_events(num_nodes=40, num_events=900, seed=3)
    model = build_model(name, ev.num_nodes)
    groups = model.state.plan_stages()
    # DyRep samples in its memory stage: its first two stages share one thread
    assert len(groups) == (2 if name == "dyrep" else 3)
    assert [f for g in groups for f in g] == [plan_neighbors, plan_memory, assemble_plan]
    # 3 passes of 8 batches, as a PAC rank cycles its part (the pass ends are barriers)
    batches = CyclingBatches(np.arange(len(ev)), 110, 24)

    def barrier(index, ended):
        return ended or index % 5 == 4  # and an in-epoch sync every 5 steps

    serial, _ = _plans(model, ev, 0, batches)
    for threads in (1, 2, 3):
        got, loader = _plans(model, ev, threads, batches, barrier=barrier)
        _same(got, serial)
        assert len(loader._seconds) == min(threads, len(groups)) and all(s > 0 for s in loader._seconds)


@pytest.mark.parametrize("name", ["tgn", "dyrep", "tige"])
def test_overlapped_plans_are_the_serial_plans_and_a_pass_ends_on_its_own_state(name):
    # PlanLoader(overlap=True) begins each plan before the step ahead of it is handed out (a
    # sharded sampler's gather then runs while that step computes): the same plans, and a step
    # after which the state must be the step's (a pass's end, a barrier) is handed out first
    ev = speed.generate_events(num_nodes=40, num_events=900, seed=5)
    model = build_model(name, ev.num_nodes)
    batches = CyclingBatches(np.arange(len(ev)), 110, 24)

    def pushed():  # events the sampler has taken in (rings and held)
        s = model.state.sampler
        return int(s.count.sum()) + s.held

    def run(overlap, barrier=None):
        model.state.reset()
        loader = PlanLoader(model, EventStream(ev), batches, RandomNegatives(np.arange(ev.num_nodes), [0, 1]).next_edges,
                            on_pass_start=model.state.reset_structures, barrier=barrier, overlap=overlap)
        plans, seen = [], []
        for step in loader:
            plan = step.plan
            plans.append(([getattr(plan, f).clone() for f in TENSOR_FIELDS],
                          None if plan.dyrep is None else [x.clone() for x in (plan.dyrep.inv, plan.dyrep.nb_row,
                                                                               plan.dyrep.nb_dt)]))
            seen.append((step.index, step.ended, pushed()))
        return plans, seen, loader

    serial, at, _ = run(False)
    got, seen, loader = run(True, barrier=lambda index, ended: index % 5 == 4)
    _same(got, serial)
    assert loader.overlap and loader.plan_seconds > 0
    for (index, ended, now), (_, _, then) in zip(seen, at):
        if ended or index % 5 == 4 or index == len(seen) - 1:
            assert now == then  # nothing of the next batch taken in yet
    # elsewhere the next plan was begun: its events are in the sampler already
    assert any(now > then for (_, _, now), (_, _, then) in zip(seen, at))


def test_padded_plans_come_from_the_last_thread_the_same():
    from speed.train.loop.trainer import Trainer

    ev = speed.generate_events(num_nodes=60, num_events=1500, seed=4)
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.0)
    tr = Trainer.local(ev, split, TrainConfig(model="tgn", batch_size=100, cuda_graph=True, seed=0, progress=False,
                                              new_node_fraction=0.0, num_threads=1).validate())
    cap = tr.engine.captured
    from speed.train.step.fixed import FittedBounds

    runs = []
    for threads in (0, 3):
        cap.bounds = FittedBounds()  # (the padded sizes fitted afresh)
        runs.append(_plans(tr.model, ev, threads, Batches(np.arange(len(ev)), 100), fix=cap.fix)[0])
    _same(runs[1], runs[0])
    assert runs[0][0][0][0].shape[0] > 0


@pytest.mark.parametrize("staleness", [1, 2])
def test_stale_reads_keep_their_bound_with_three_threads(staleness):
    # as test_train_core's: each step's read sees between (its index - K) and its index finished steps
    import time

    ev = speed.generate_events(num_nodes=20, num_events=400, seed=0)
    model = build_model("tgn", 20)
    loader = PlanLoader(model, EventStream(ev), Batches(np.arange(len(ev)), 20), pipeline=3, staleness=staleness)
    seen = []
    for step in loader:
        seen.append(int(step.plan.stale[1][0].item()))
        time.sleep(0.01)
        with torch.no_grad():
            model.state.memory.last_update.fill_(step.index + 1)
    assert len(seen) == 20
    assert all(j - staleness <= s <= j for j, s in enumerate(seen))
    assert max(j - s for j, s in enumerate(seen)) == staleness


def test_a_failing_stage_reaches_the_consumer_and_a_stopped_loop_ends_every_thread(monkeypatch):
    ev = speed.generate_events(num_nodes=30, num_events=600, seed=1)
    model = build_model("tgn", 30)
    before = threading.active_count()

    # the consumer stops early: every planning thread ends
    loader = PlanLoader(model, EventStream(ev), Batches(np.arange(len(ev)), 20), pipeline=3)
    for step in loader:
        if step.index == 2:
            break
    assert threading.active_count() == before

    # a stage raises on the fifth batch: the consumer gets the error, after the four before it
    real = plan_memory
    calls = [0]

    def failing(state, draft):
        calls[0] += 1
        if calls[0] == 5:
            raise RuntimeError("the memory stage failed")
        real(state, draft)

    model.state.reset()
    monkeypatch.setattr(model.state, "plan_stages", lambda: [(plan_neighbors,), (failing,), (assemble_plan,)])
    loader = PlanLoader(model, EventStream(ev), Batches(np.arange(len(ev)), 20), pipeline=3)
    got = []
    with pytest.raises(RuntimeError, match="the memory stage failed"):
        for step in loader:
            got.append(step.index)
    assert got == [0, 1, 2, 3]
    assert threading.active_count() == before


def test_plan_threads_default_and_bounds(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    cfg = TrainConfig(model="tgn").validate()
    assert cfg.pipeline_threads(cpu) == 0  # no pipeline on a CPU by default
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    # stages in threads of their own for replayed steps only: an eager step wants the lock too
    assert cfg.pipeline_threads(gpu, captured=True) == 3
    assert cfg.pipeline_threads(gpu) == 1
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert cfg.pipeline_threads(gpu, captured=True) == 1
    assert TrainConfig(model="tgn", pipeline=True).validate().pipeline_threads(cpu) == 1
    assert TrainConfig(model="tgn", pipeline=True, plan_threads=2).validate().pipeline_threads(cpu) == 2
    assert TrainConfig(model="tgn", pipeline=False, plan_threads=3).validate().pipeline_threads(gpu) == 0
    with pytest.raises(speed.InputError, match="plan_threads"):
        TrainConfig(model="tgn", plan_threads=0).validate()


def test_stage_groups_follow_what_the_model_plans():
    assert len(stage_groups(build_model("tgn", 5).state)) == 3
    assert len(stage_groups(build_model("dyrep", 5).state)) == 2


def _featured_log(path):
    """A bipartite log with 3 edge features (the assembly stage reads them)."""
    rng = np.random.default_rng(2)
    n = 2400
    users, items = rng.integers(0, 120, n), rng.integers(0, 40, n)
    feats = rng.normal(size=(n, 3)).round(4)
    rows = "".join(f"{u},{i},{k},0,{a},{b},{c}\n" for k, (u, i, (a, b, c)) in enumerate(zip(users, items, feats)))
    path.write_text("user_id,item_id,timestamp,state_label,f1,f2,f3\n" + rows)
    return path


@pytest.mark.parametrize("case", ["edge features", "ranking candidates", "observed events"])
def test_runs_through_staged_plans_end_as_the_serial_ones(tmp_path, case):
    """Whole runs whose plans carry more: edge features, ranking candidates after the queries
    (an evaluation's), events observed beside each step's own (PAC's --observe shared)."""
    from speed.cli import main

    kw = dict(model="tgn", epochs=1, seed=0, deterministic=True, memory_dim=8, time_dim=8, embedding_dim=8,
              neighbors=3, batch_size=100, progress=False, num_threads=1)
    if case == "edge features":
        data = _featured_log(tmp_path / "log.csv")
    elif case == "ranking candidates":
        data, kw = speed.write_generated(tmp_path / "log.csv", 200, 3000, seed=1), {**kw, "mrr_negatives": 5}
    else:
        log = speed.write_generated(tmp_path / "log.csv", 300, 3000, seed=1)
        assert main(["partition", str(log), "-o", str(tmp_path / "s2"), "--parts", "2", "--topk", "5",
                     "--no-progress"]) == 0
        data, kw = tmp_path / "s2", {**kw, "nproc": 2, "observe": "shared"}
    runs = []
    for threads in (0, 3):
        extra = {"pipeline": True, "plan_threads": threads} if threads else {}
        m = speed.train(data, **kw, **extra, **({"out": tmp_path / f"run{threads}"} if "nproc" in kw else {}))
        runs.append(([e["loss"] for e in m["epochs"]], m["epochs"][0]["val"], m["test"]))
    assert runs[1] == runs[0]
