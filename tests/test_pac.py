"""PAC: grouping, the sync rule, equal steps, resume, failures (2-process gloo on CPU)."""

import json
import os
import time
import warnings

import numpy as np
import pytest
import torch
from _pac_helpers import free_port

import speed
from speed.cli import main
from speed.partition.shards import load_shards
from speed.train.config import ConfigError
from speed.train.pac import RankFailedError, check_world, combine_shared, part_groups
from speed.train.recipes import MODELS

from conftest import TINY, generated_shards  # noqa: E402  (TINY: the tests' one small model)


@pytest.fixture(scope="module")
def shards4(tmp_path_factory):
    return generated_shards(tmp_path_factory.mktemp("pac"), 300, 3000, 1, 4, "--topk", "5")


def test_groups_are_a_deterministic_partition_of_the_parts():
    for epoch in range(5):
        g = part_groups(8, 2, seed=3, epoch=epoch, shuffle=True)
        assert [x.tolist() for x in g] == [x.tolist() for x in part_groups(8, 2, seed=3, epoch=epoch, shuffle=True)]
        assert sorted(np.concatenate(g).tolist()) == list(range(8)) and all(len(x) == 4 for x in g)
    epochs = {tuple(part_groups(8, 2, 3, e, True)[0]) for e in range(6)}
    assert len(epochs) > 1  # shuffled from epoch to epoch
    assert [x.tolist() for x in part_groups(8, 2, 3, 5, False)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_balanced_groups_even_the_events_and_still_mix():
    from speed.train.pac.groups import PartLoads

    # one heavy part (0) and seven light ones; cut events between 0 and 1 come back together
    own = np.array([700, 100, 100, 100, 100, 100, 100, 100])
    cut = np.zeros((8, 8), dtype=np.int64)
    cut[0, 1] = cut[1, 0] = 50
    loads = PartLoads(own=own, cut=cut, everywhere=0)
    lpt = part_groups(8, 4, 0, 1, False, loads)
    assert [g.tolist() for g in lpt] == [g.tolist() for g in part_groups(8, 4, 5, 9, False, loads)]  # fixed
    assert loads.of(lpt).max() == 800  # 0 with a light part other than 1 (no cut events): the best possible
    assert 1 not in lpt[[0 in g for g in lpt].index(True)]
    # equal parts: every grouping is balanced, so the draw still mixes partners across epochs
    even = PartLoads(own=np.full(8, 100), cut=np.zeros((8, 8), dtype=np.int64), everywhere=0)
    firsts = {tuple(part_groups(8, 2, 3, e, True, even)[0]) for e in range(6)}
    assert len(firsts) > 1
    for e in range(6):  # and always near the best
        g = part_groups(8, 4, 3, e, True, loads)
        assert sorted(np.concatenate(g).tolist()) == list(range(8))
        assert loads.of(g).max() <= 800 * 1.02


def test_parts_must_be_a_multiple_of_ranks():
    with pytest.raises(speed.InputError, match="not a multiple of 3"):
        check_world(4, 3)


def test_sync_rule_by_hand():
    states = torch.tensor([[[1.0], [1.0], [1.0]], [[2.0], [2.0], [2.0]]])  # (ranks, shared, dim)
    last = torch.tensor([[5.0, 1.0, 3.0], [2.0, 4.0, 3.0]], dtype=torch.float64)
    s, t = combine_shared(states, last, "last")
    assert s[:, 0].tolist() == [1.0, 2.0, 1.0] and t.tolist() == [5.0, 4.0, 3.0]  # tie -> lowest rank
    s, t = combine_shared(states, last, "mean")
    assert s[:, 0].tolist() == [1.5, 1.5, 1.5] and t.tolist() == [5.0, 4.0, 3.0]


def test_sync_never_takes_in_a_state_from_the_receivers_future():
    """Within an epoch ranks move through time at their own pace: a rank whose clock is at 3.5
    keeps its own state of a node that the other rank last updated at 6 or 4 (its future), and
    takes the other's only when it is not later than 3.5."""
    states = torch.tensor([[[1.0], [1.0], [1.0]], [[2.0], [2.0], [2.0]]])
    last = torch.tensor([[2.0, 1.0, 3.0], [6.0, 4.0, 3.0]], dtype=torch.float64)
    s, t = combine_shared(states, last, "last", now=3.5, own=0)
    assert s[:, 0].tolist() == [1.0, 1.0, 1.0] and t.tolist() == [2.0, 1.0, 3.0]
    s, t = combine_shared(states, last, "last", now=10.0, own=1)  # the rank ahead takes the latest
    assert s[:, 0].tolist() == [2.0, 2.0, 1.0] and t.tolist() == [6.0, 4.0, 3.0]
    s, t = combine_shared(states, last, "mean", now=3.5, own=0)
    assert s[:, 0].tolist() == [1.0, 1.0, 1.5] and t.tolist() == [2.0, 1.0, 3.0]
    last2 = torch.tensor([[2.0, 1.0, 3.0], [3.0, 0.5, 3.0]], dtype=torch.float64)
    s, t = combine_shared(states, last2, "last", now=3.5, own=0)  # not later than the clock: taken
    assert s[:, 0].tolist() == [2.0, 1.0, 1.0] and t.tolist() == [3.0, 1.0, 3.0]


@pytest.mark.parametrize("mode, expected", [
    ("last", [1.0, 2.0, 1.0]), ("mean", [1.5, 1.5, 1.5]), ("none", None)])
def test_sync_across_two_processes(mode, expected, tmp_path):
    from _pac_helpers import run_workers, sync_worker

    out = run_workers(sync_worker, [(mode, float("inf")), (mode, float("inf"))], tmp_path / "store")
    for rank in (0, 1):
        mem, lu = out[rank]
        if expected is None:
            assert mem == [rank + 1.0] * 4
        else:
            assert mem[:3] == expected and lu[:3] == [5.0, 4.0, 3.0]
            assert mem[3] == rank + 1.0  # a rank's own node is never synchronised


def test_sync_across_two_processes_keeps_each_rank_in_its_own_time(tmp_path):
    """Rank 1's clock is at 4.5: rank 0's state of node 0 (updated at 5) is in its future."""
    from _pac_helpers import run_workers, sync_worker

    out = run_workers(sync_worker, [("last", float("inf")), ("last", 4.5)], tmp_path / "store")
    assert out[0] == ([1.0, 2.0, 1.0, 1.0], [5.0, 4.0, 3.0, 7.0])
    assert out[1] == ([2.0, 2.0, 1.0, 2.0], [2.0, 4.0, 3.0, 9.0])


def test_local_sgd_keeps_gradients_local_and_averages_weights_when_due(tmp_path):
    """every=2 over 3 steps: ranks average after steps 2 and 3 (the last), not after step 1."""
    from _pac_helpers import local_sgd_worker, run_workers

    out = run_workers(local_sgd_worker, [(2,), (2,)], tmp_path / "store")
    x = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]  # d(sum(w.x + b))/dw = x: each rank's own
    for rank in (0, 1):
        assert out[rank][0][0] == [x[rank]]  # the gradient is not averaged
    torch.manual_seed(0)
    w0 = torch.nn.Linear(3, 1).weight.detach()
    step1 = [w0 - 0.5 * torch.tensor([x[r]]) for r in (0, 1)]
    assert torch.allclose(torch.tensor(out[0][0][1]), step1[0]) and torch.allclose(torch.tensor(out[1][0][1]), step1[1])
    assert out[0][0][2] == out[1][0][2] == 0  # step 1: nothing averaged yet
    step2 = (step1[0] + step1[1]) / 2 - 0.5 * (torch.tensor([x[0]]) + torch.tensor([x[1]])) / 2
    for rank in (0, 1):
        assert torch.allclose(torch.tensor(out[rank][1][1]), step2) and out[rank][1][2] == 1
        assert out[rank][2][2] == 2  # the last step always averages
    assert out[0][2][1] == out[1][2][1]  # the ranks end with the same weights


@pytest.mark.parametrize("subgraph", ["assigned", "induced"])
def test_two_process_run_writes_per_rank_metrics_that_plan_predicts(shards4, tmp_path, subgraph, capsys):
    m = speed.train(speed.load_shards(shards4), model="tgn", epochs=2, seed=0, nproc=2, out=tmp_path,
                    subgraph=subgraph, patience=10, **TINY)
    assert m["nproc"] == 2 and len(m["epochs"]) == 2
    assert main(["plan", str(shards4), "--nproc", "2", "--epochs", "2", "--subgraph", subgraph, "--model", "tgn",
                 "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for e, p in zip(m["epochs"], plan["epochs"]):
        keys = ("rank", "parts", "events", "nodes", "memory_bytes")
        assert [{k: r[k] for k in keys} for r in e["ranks"]] == [{k: r[k] for k in keys} for r in p["ranks"]]
        shares = [r["events"] / m["data"]["num_train_events"] for r in e["ranks"]]
        assert [r["share"] for r in p["ranks"]] == pytest.approx(shares)
        assert p["expected_epoch_time"] == pytest.approx(max(shares))
        inflation = sum(r["events"] for r in e["ranks"]) / m["data"]["num_train_events"]
        assert p["work_inflation"] == pytest.approx(inflation)
        if subgraph == "assigned":
            assert p["work_inflation"] <= 1.0
        else:
            assert p["work_inflation"] > 1.0  # the shared-shared events are on both ranks
    assert plan["memory_bytes_unpartitioned"] == m["memory_bytes_unpartitioned"]
    for e in m["epochs"]:
        assert len(e["ranks"]) == 2 and {"train", "sync", "exchange", "validate"} <= set(e["seconds"])
        for r in e["ranks"]:
            assert {"rank", "parts", "nodes", "events", "steps", "memory_bytes"} <= set(r)
            assert r["memory_bytes"] < m["memory_bytes_unpartitioned"]
        assert sorted(sum((r["parts"] for r in e["ranks"]), [])) == [0, 1, 2, 3]
    assert {"ap", "auc"} <= set(m["test"]["transductive"]) and {"ap", "auc"} <= set(m["test"]["inductive"])
    assert (tmp_path / "best.json").exists() and (tmp_path / "curves.png").exists()
    assert not list(tmp_path.glob(".speed-log*"))  # the mapped log's folder went once the ranks mapped it
    # every node's rows in best.json were written by their owners, each rank its own, none twice
    import re

    from speed.train.run.serial import read_header

    header, _ = read_header(next(tmp_path.glob("best.*.safetensors")))
    rows = re.compile(r"^/model/memory\.|/memories/|/sampler/(nbr|nbr_t|nbr_e|head|count)$")
    whole = sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if rows.search(k))
    written = [w["rows_bytes"] for w in m["best_write"]]
    assert len(written) == 2 and min(written) > 0 and sum(written) == whole
    for w in m["best_write"]:
        assert w["peak_rss_bytes"] >= w["rss_before_bytes"] > 0
    # the summary says how many events the ranks trained on, as the epochs count them
    from speed.cli.summaries import format_train_summary

    trained = sorted({e["train_events"] for e in m["epochs"]})
    span = f"{trained[0]:,}" if len(trained) == 1 else f"{trained[0]:,} to {trained[-1]:,}"
    period = m["data"]["num_train_period_events"]
    said = format_train_summary(m, tmp_path)
    if trained != [m["data"]["num_train_events"]]:
        assert f"trained on {span} of the {period:,} training-period events per epoch" in said
    else:
        assert f"trained on {span} of the {period:,} training-period events:" in said or span == f"{period:,}"


def test_uneven_parts_run_equal_steps(tmp_path):
    ev = speed.generate_events(400, 4000, seed=2)
    split = speed.chronological_split(ev, seed=0)
    res = speed.partition(split.train(ev), 2)
    res.node_parts = np.where(np.arange(ev.num_nodes) < 40, 1, 0).astype(np.int64)  # part 1 is small
    res.shared = np.empty(0, dtype=np.int64)
    res.save(tmp_path / "s", events=ev, split=split)
    m = speed.train(tmp_path / "s", model="jodie", epochs=1, seed=0, nproc=2, shuffle=False, out=tmp_path / "run",
                    **TINY)
    ranks = m["epochs"][0]["ranks"]
    assert ranks[0]["steps"] == ranks[1]["steps"]
    assert ranks[0]["events"] > 5 * ranks[1]["events"] and ranks[1]["passes"] > 1


def test_resume_gives_the_same_result(shards4, tmp_path):
    cfg = dict(model="tgn", seed=0, patience=10, **TINY)
    full = speed.train(shards4, epochs=3, nproc=2, out=tmp_path / "full", **cfg)
    speed.train(shards4, epochs=1, nproc=2, out=tmp_path / "part", **cfg)
    resumed = speed.train(shards4, epochs=3, nproc=2, resume=True, out=tmp_path / "part", **cfg)

    def core(m):
        return json.dumps({"epochs": [(e["loss"], e["val"]) for e in m["epochs"]], "test": m["test"]},
                          sort_keys=True)

    assert core(full) == core(resumed)


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_with_its_name(shards4, tmp_path, monkeypatch, how):
    monkeypatch.setenv("SPEED_TEST_FAULT", f"1:{how}")
    start = time.perf_counter()
    with pytest.raises(RankFailedError, match="rank 1"):
        speed.train(shards4, model="tgn", epochs=1, nproc=2, timeout=60, out=tmp_path, **TINY)
    assert time.perf_counter() - start < 120


def test_one_rank_on_one_part_equals_the_single_process_trainer(tmp_path):
    ev = speed.generate_events(300, 3000, seed=4)
    split = speed.chronological_split(ev, seed=0)
    speed.partition(split.train(ev), 1).save(tmp_path / "s1", events=ev, split=split)
    cfg = dict(model="tgn", epochs=1, seed=0, **TINY)
    single = speed.train(speed.load_shards(tmp_path / "s1"), **cfg)
    # the same full-graph validation as the single-process trainer (local validation draws its
    # negatives per rank)
    pac = speed.train(tmp_path / "s1", nproc=1, out=tmp_path / "run", **cfg)  # full validation: the default
    assert pac["epochs"][0]["loss"] == pytest.approx(single["epochs"][0]["loss"], abs=1e-6)
    for period in ("transductive", "inductive"):
        assert pac["epochs"][0]["val"][period]["ap"] == pytest.approx(single["epochs"][0]["val"][period]["ap"],
                                                                      abs=1e-6)
        assert pac["test"][period]["ap"] == pytest.approx(single["test"][period]["ap"], abs=1e-6)
    replay = speed.train(tmp_path / "s1", nproc=1, eval="replay", validation="full", out=tmp_path / "rep", **cfg)
    assert replay["test"]["transductive"]["ap"] > 0.5  # replay runs and scores, differently


def test_cli_parallel_errors(shards4, tmp_path, capsys):
    assert main(["train", str(shards4), "--nproc", "3", "--out", str(tmp_path / "r")]) == 2
    assert "not a multiple of 3" in capsys.readouterr().err
    log = speed.write_generated(tmp_path / "log.csv", 50, 500, seed=0)
    assert main(["train", str(log), "--nproc", "2", "--out", str(tmp_path / "r")]) == 2
    assert "needs a shards directory" in capsys.readouterr().err


def test_torchrun_runs_the_same_entry_point(shards4, tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(free_port()), "-m", "speed", "train", str(shards4), "--model", "jodie", "--epochs", "1",
           "--out", str(run), "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8",
           "--threads", "1", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # kills torchrun on timeout
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((run / "metrics.json").read_text())
    assert m["nproc"] == 2 and len(m["epochs"][0]["ranks"]) == 2


def test_two_torchrun_nodes_on_one_host_equal_nproc_2(shards4, tmp_path):
    """Several machines, tested on one: two torchrun agents (``--nnodes 2``, static rendezvous on
    localhost) give the metrics of ``--nproc 2`` with the same seed.  No ``--threads``: each
    rank must count the ranks on its host, not only its agent's, to get the same threads."""
    import subprocess
    import sys

    args = [str(shards4), "--model", "jodie", "--epochs", "2", "--seed", "3", "--deterministic",
            "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                               "--node_rank", str(i), "--master_addr", "127.0.0.1", "--master_port", port,
                               "-m", "speed", "train", *args, "--out", str(tmp_path / "nodes")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-2000:]
    finally:  # a failed or hung agent must not outlive the test (it would hold the other's port)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()  # torchrun passes SIGTERM on to its workers
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert main(["train", *args, "--nproc", "2", "--out", str(tmp_path / "spawned")]) == 0
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("nodes", "spawned"))
    core = (lambda m: json.dumps({"epochs": [(e["loss"], e["val"]) for e in m["epochs"]], "test": m["test"]},
                                 sort_keys=True))
    assert core(a) == core(b)
    # the thread count a deterministic run depends on: cores over the ranks on this host
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert [r["threads"] for r in a["epochs"][0]["ranks"]] == [threads, threads]
    assert [r["threads"] for r in b["epochs"][0]["ranks"]] == [threads, threads]


@pytest.mark.parametrize("model", MODELS)
def test_every_model_trains_in_parallel_without_an_unused_parameter_search(shards4, tmp_path, model):
    # DDP runs with find_unused_parameters=False: a parameter outside the graph of any step
    # (e.g. DyRep's message embedding on a batch without pending events) would fail the run
    m = speed.train(shards4, model=model, epochs=1, seed=0, nproc=2, out=tmp_path, **TINY)
    assert m["epochs"][0]["ranks"][0]["steps"] >= 2 and np.isfinite(m["epochs"][0]["loss"])


def test_parallel_runs_are_deterministic(shards4, tmp_path):
    kw = dict(model="jodie", epochs=2, seed=0, nproc=2, deterministic=True, patience=10, **TINY)
    a = speed.train(shards4, out=tmp_path / "a", **kw)
    b = speed.train(shards4, out=tmp_path / "b", **kw)
    core = (lambda m: json.dumps({"epochs": [(e["loss"], e["val"]) for e in m["epochs"]], "test": m["test"]},
                                 sort_keys=True))
    assert core(a) == core(b)


def test_periodic_sync_and_sparse_validation(shards4, tmp_path):
    m = speed.train(shards4, model="tige", epochs=3, seed=0, nproc=2, sync_every=2, val_every=2, patience=10,
                    out=tmp_path, **TINY)
    assert [bool(e["val"]) for e in m["epochs"]] == [False, True, True]  # every 2nd epoch and the last
    for e in m["epochs"]:  # every 2nd step before the last, and once at the end of the epoch
        assert [r["sync_rounds"] for r in e["ranks"]] == [(r["steps"] - 1) // 2 + 1 for r in e["ranks"]]
        assert e["ranks"][0]["steps"] >= 3  # so some syncs happened inside the epoch
    assert "validate" not in m["epochs"][0]["seconds"]
    assert m["test"]["transductive"]["ap"] > 0.5


def test_local_sgd_run_averages_every_k_steps_and_at_the_end(shards4, tmp_path):
    m = speed.train(shards4, model="tgn", epochs=2, seed=0, nproc=2, average_every=3, sync_every=2, patience=10,
                    out=tmp_path, **TINY)
    for e in m["epochs"]:
        steps = e["ranks"][0]["steps"]
        assert steps >= 4  # so some averages happened inside the epoch
        assert [r["average_rounds"] for r in e["ranks"]] == [-(-steps // 3)] * 2
    assert m["config"]["average_every"] == 3 and [e["epoch"] for e in m["epochs"]] == [1, 2]


def test_local_validation_keeps_the_test_exact(shards4, tmp_path):
    kw = dict(model="tgn", epochs=1, seed=0, nproc=2, deterministic=True, **TINY)
    full = speed.train(shards4, validation="full", out=tmp_path / "full", **kw)
    local = speed.train(shards4, validation="local", out=tmp_path / "local", **kw)
    # one epoch: the same best epoch, so the full-graph val and test must be identical
    assert json.dumps(local["test"], sort_keys=True) == json.dumps(full["test"], sort_keys=True)
    assert json.dumps(local["val"], sort_keys=True) == json.dumps(full["val"], sort_keys=True)
    approx = local["epochs"][0]["val"]
    assert approx["scope"] == "local" and local["val_local"] == approx
    assert 0 < approx["transductive"]["count"] <= full["val"]["transductive"]["count"]
    assert (tmp_path / "local" / "best.json").exists()


def test_the_pipeline_waits_for_in_epoch_syncs_and_pass_ends(tmp_path):
    # two unequal parts: the lighter rank cycles its data; shared nodes sync every 2 steps; the
    # planning thread must stop at each of those steps, so the run equals the unpipelined one
    log = speed.write_generated(tmp_path / "log.csv", 300, 3000, seed=1)
    assert main(["partition", str(log), "-o", str(tmp_path / "s2"), "--parts", "2", "--topk", "5",
                 "--no-progress"]) == 0
    kw = dict(model="tgn", epochs=1, seed=0, nproc=2, deterministic=True, sync_every=2, **(TINY | {"batch_size": 60}))
    plain = speed.train(tmp_path / "s2", out=tmp_path / "plain", **kw)
    assert any(r["passes"] > 1 for r in plain["epochs"][0]["ranks"])
    for threads in (1, 3):  # one planning thread, and a plan's stages in three
        piped = speed.train(tmp_path / "s2", out=tmp_path / f"piped{threads}", pipeline=True, plan_threads=threads,
                            **kw)
        assert [e["loss"] for e in piped["epochs"]] == [e["loss"] for e in plain["epochs"]]
        assert [e["val"] for e in piped["epochs"]] == [e["val"] for e in plain["epochs"]]
        assert piped["test"] == plain["test"]
        # the evaluation's divided steps were planned ahead too, in one thread (an eager step's
        # plans get no stages), their part cut out there; the plain run's in the steps' thread
        for m, want in ((piped, 1), (plain, 0)):
            passes = [p for rank in m["evaluation_work"] for p in rank]
            assert passes and all(p["plan_threads"] == want and p["seconds_dividing"] > 0 for p in passes)


def test_one_rank_plans_its_evaluation_ahead_and_scores_the_same(shards4, tmp_path):
    """A world of one plans its evaluation steps in the pipeline's thread, as a single process
    does: the figures are the unpipelined run's."""
    kw = dict(model="tgn", epochs=2, seed=0, nproc=1, deterministic=True, **TINY)
    plain = speed.train(shards4, out=tmp_path / "plain", pipeline=False, **kw)
    piped = speed.train(shards4, out=tmp_path / "piped", pipeline=True, **kw)
    assert [e["val"] for e in piped["epochs"]] == [e["val"] for e in plain["epochs"]]
    assert piped["test"] == plain["test"]


@pytest.mark.slow
def test_balance_evens_the_ranks_of_a_dense_log_and_pac_keeps_accuracy(tmp_path, capsys):
    """The e-mail-like log of docs/parallel.md (a few senders write most mail), partitioned with
    the defaults (top-0% hubs, ``--balance 0.1``): the largest part and the largest of two ranks
    hold their fair share (the paper's rule alone leaves one part near 4x the mean).  On these
    shards, where most nodes are shared, PAC with the default in-epoch sync stays within 3 points
    of one process (measured 0.8972 / 0.9023 / 0.8986 against 0.9013 / 0.9037 / 0.9068; with
    end-of-epoch syncs only, top-5% balanced shards fell below 0.5 in 2 of 6 seeds,
    docs/parallel.md).  About two minutes."""
    log = speed.write_generated(tmp_path / "mail.csv", 184, 125000, alpha=1.5, communities=4, fanout=4, seed=3)
    for name, balance in (("off", ["--balance", "off"]), ("bal", [])):  # bal: the default
        assert main(["partition", str(log), "-o", str(tmp_path / name), "--parts", "4", *balance,
                     "--no-progress"]) == 0
        assert ("--sync-every" in capsys.readouterr().out) == (name == "bal")
    manifest = json.loads((tmp_path / "bal" / "manifest.json").read_text())
    assert manifest["largest_part_ratio"] <= 1.10
    assert json.loads((tmp_path / "off" / "manifest.json").read_text())["largest_part_ratio"] > 1.5
    from speed.train.pac.budget import plan

    p = plan(speed.load_shards(tmp_path / "bal"), speed.TrainConfig(epochs=1).validate(), 2)
    assert p["epochs"][0]["largest_share"] <= 0.55
    kw = dict(model="tgn", epochs=2, seed=0, progress=False)
    single = speed.train(tmp_path / "off", num_threads=1, **kw)
    balanced = speed.train(tmp_path / "bal", nproc=2, out=tmp_path / "run_bal", **kw)
    assert balanced["test"]["transductive"]["ap"] >= single["test"]["transductive"]["ap"] - 0.03
    assert "warnings" not in balanced


def test_transfer_warning_flags_only_a_full_graph_far_below_the_ranks():
    from speed.train.pac.validate import TRANSFER_GAP, transfer_warning

    def val(ap):
        return {"transductive": {"ap": ap}}

    assert transfer_warning(val(0.90), val(0.85)) is None  # the full graph often validates higher
    assert transfer_warning(val(0.85 - TRANSFER_GAP + 0.01), val(0.85)) is None
    message = transfer_warning(val(0.44), val(0.86))
    assert "0.4400" in message and "0.8600" in message and "--sync-every" in message
    assert "--static-memory learned" in message and "--average-every" not in message
    assert "--average-every 1" in transfer_warning(val(0.44), val(0.86), average_every=4)  # local SGD: named first
    assert transfer_warning({}, val(0.86)) is None


def test_a_run_whose_weights_do_not_transfer_warns_once(shards4, tmp_path, monkeypatch, capsys):
    from speed.train.pac import launch
    from speed.train.pac.validate import TransferWarning

    metrics = speed.train(shards4, model="jodie", epochs=1, seed=0, **TINY)  # a real run's metrics to report
    metrics["warnings"] = ["validation AP on the full graph (0.4433) is far below the ranks' own (0.8551)"]
    def launched(shards, config, out):
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        return metrics

    monkeypatch.setattr(launch, "run_parallel", launched)
    with pytest.warns(TransferWarning, match="0.4433"):
        speed.train(shards4, nproc=2, **TINY)
    with warnings.catch_warnings():  # the CLI prints it in its summary instead of a Python warning
        warnings.simplefilter("error")
        assert main(["train", str(shards4), "--nproc", "2", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "warning: validation AP on the full graph (0.4433)" in capsys.readouterr().out



def test_observed_events_become_pending_and_neighbours_without_being_queried():
    from speed.data.events import Events
    from speed.train.step.engine import Batches
    from speed.train.step.loader import EventStream, PlanLoader
    from speed.train.model.network import build_model

    model = build_model("tgn", 6, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=3)
    stream = EventStream(Events(src=np.array([0, 2]), dst=np.array([1, 3]), t=np.array([1.0, 3.0]),
                                eid=np.array([0, 1]), num_nodes=6))

    def observed(positions):  # one event between 4 and 5 at t=2, inside the step's times
        return np.array([4]), np.array([5]), np.array([2.0]), np.array([10])

    (step,) = list(PlanLoader(model, stream, Batches(np.arange(2), 2), observed=observed))
    assert len(step) == 2 and step.plan.uq_t.numel() == 4  # queried: the step's own endpoints only
    assert model.state.store.counts_before(np.array([4, 5, 0]), np.full(3, np.inf)).tolist() == [1, 1, 1]
    nb_node, nb_t, _, nb_mask = model.state.sampler.sample_arrays(np.array([4]), np.array([np.inf]))
    assert nb_node[nb_mask].tolist() == [5] and nb_t[nb_mask].tolist() == [2.0]
    with pytest.raises(ValueError, match="TIGE"):
        PlanLoader(build_model("tige", 6, memory_dim=4, time_dim=4, embedding_dim=4), stream,
                   Batches(np.arange(2), 2), observed=observed)


def test_observe_shared_trains_the_same_events(shards4, tmp_path):
    kw = dict(model="tgn", epochs=1, seed=0, nproc=2, deterministic=True, **TINY)
    plain = speed.train(shards4, out=tmp_path / "plain", **kw)
    seen = speed.train(shards4, observe="shared", out=tmp_path / "seen", **kw)
    assert [r["events"] for r in seen["epochs"][0]["ranks"]] == [r["events"] for r in plain["epochs"][0]["ranks"]]
    assert seen["config"]["observe"] == "shared"
    assert seen["test"]["transductive"]["ap"] != plain["test"]["transductive"]["ap"]  # the memory saw more
    for bad, match in ((dict(subgraph="induced"), "assigned"), (dict(model="tige"), "tige")):
        with pytest.raises(ConfigError, match=match):
            speed.TrainConfig(**{"observe": "shared", **bad}).validate()


def test_max_steps_cuts_every_rank_at_the_same_step(shards4, tmp_path):
    m = speed.train(shards4, model="tgn", epochs=1, seed=0, nproc=2, max_steps=2, out=tmp_path, **TINY)
    (ep,) = m["epochs"]
    assert ep["cut"] and [r["steps"] for r in ep["ranks"]] == [2, 2]
    assert ep["train_events"] <= 2 * 2 * TINY["batch_size"] and m["best_epoch"] is None and "test" not in m
    assert all(r["peak_rss_bytes"] > 0 for r in ep["ranks"])
    # a bounded evaluation takes the cut epoch through every phase: validated, tested, each rank writing its rows
    b = speed.train(shards4, model="tgn", epochs=1, seed=0, nproc=2, max_steps=2, eval_max_steps=1,
                    out=tmp_path / "bounded", **TINY)
    assert b["best_epoch"] == 1 and b["epochs"][0]["cut"]
    assert b["val"]["transductive"]["count"] == b["test"]["transductive"]["count"] == TINY["batch_size"]
    assert (tmp_path / "bounded" / "best.json").exists() and len(b["best_write"]) == 2


@pytest.fixture(scope="module")
def feature_shards(tmp_path_factory):
    """A bipartite JODIE-style log with 3 edge features and 10% of nodes held out, in 4 parts."""
    tmp = tmp_path_factory.mktemp("feat")
    rng = np.random.default_rng(2)
    n = 2400
    users, items = rng.integers(0, 120, n), rng.integers(0, 40, n)
    feats = rng.normal(size=(n, 3)).round(4)
    rows = "".join(f"{u},{i},{k},0,{a},{b},{c}\n" for k, (u, i, (a, b, c)) in enumerate(zip(users, items, feats)))
    (tmp / "log.csv").write_text("user_id,item_id,timestamp,state_label,f1,f2,f3\n" + rows)
    assert main(["partition", str(tmp / "log.csv"), "-o", str(tmp / "s"), "--parts", "4", "--topk", "5",
                 "--no-progress"]) == 0
    return tmp / "s"


def test_ranks_read_edge_features_and_training_nodes_in_place(feature_shards):
    """A rank other than 0 never loads the whole log: its edge features are read by event id from
    the shards' memory map, and local validation's nodes-seen-in-training and negative pool come
    from a chunked scan of the stored arrays.  Both equal what the whole log gives."""
    from speed.train.step.negatives import negative_pool
    from speed.train.state.features import MappedFeatures

    shards = load_shards(feature_shards)
    ev = shards.events()
    assert shards.msg_dim == 3 and ev.msg.shape == (len(ev), 3)
    feats = MappedFeatures(*shards.feature_rows())
    idx = torch.from_numpy(np.random.default_rng(0).integers(0, len(ev), 500))
    assert torch.equal(feats.index_select(0, idx), torch.from_numpy(ev.msg[idx.numpy()].astype(np.float32)))
    split = shards.split(ev)
    assert split.new_nodes.any()
    src_seen, dst_seen = shards.trained_endpoints(split.new_nodes)
    assert np.array_equal(src_seen | dst_seen, split._seen_in_training)
    train = split.train(ev)
    pool = negative_pool(train.src[split.train_mask], train.dst[split.train_mask], ev.bipartite)
    assert shards.bipartite and np.array_equal(np.flatnonzero(dst_seen), pool)
    assert shards.merge([0, 1], period="train", features=False).msg is None


def test_two_ranks_train_on_edge_features_read_in_place(feature_shards, tmp_path):
    kw = dict(model="tgn", epochs=1, seed=0, nproc=2, deterministic=True, **TINY)
    m = speed.train(feature_shards, validation="local", out=tmp_path / "run", **kw)
    again = speed.train(feature_shards, validation="local", out=tmp_path / "again", **kw)
    assert m["data"]["msg_dim"] == 3
    assert m["test"] == again["test"] and m["epochs"][0]["val"] == again["epochs"][0]["val"]


def test_planned_peak_is_the_largest_phase_over_the_runtime(shards4):
    """A rank's planned peak: the runtime, then the largest of the start (a window of the
    time-ordered log, on rank 0 that writes it), the end of a training epoch and the evaluation
    (its owned rows and every node's pending events, twice; once more of the pending events on
    the writer; what a pass holds per event of the period; the val and test events it streams),
    never their sum."""
    from speed.partition.ordered import WINDOW
    from speed.train.pac.budget import EVAL_COPIES, PERIOD_EVENT_BYTES, PERIOD_OWNED_BYTES, RANK_STATE_COPIES, \
        _event_bytes, rank_peak_bytes

    shards = load_shards(shards4)
    writer = rank_peak_bytes(1000, shards, 10, 7, 50, 30, writer=True)
    other = rank_peak_bytes(1000, shards, 10, 7, 50, 30, writer=False)
    local = rank_peak_bytes(1000, shards, 10, 7, 50, 30, writer=False, local_validation=True)
    sp = shards.manifest["split"]
    assert writer["log_window"] == 32 * min(WINDOW, shards.num_events) and other["log_window"] == 0
    assert _event_bytes(shards) == 32 and writer["features"] == 0  # src, dst, t, eid; no edge features
    from speed.train.eval.evaluator import RELEASE_EVERY

    window = min(max(sp["num_val_events"], sp["num_test_events"]), 2 * RELEASE_EVERY)
    assert writer["log_streamed"] == 32 * window == other["log_streamed"]
    assert writer["evaluation"] == EVAL_COPIES * 80 + 30 and other["evaluation"] == EVAL_COPIES * 80
    assert local["rank_state"] == (RANK_STATE_COPIES + 1) * 7
    period = max(sp["num_val_events"], sp["num_test_events"])
    assert writer["eval_period"] == other["eval_period"] == (PERIOD_EVENT_BYTES + PERIOD_OWNED_BYTES) * period
    four = rank_peak_bytes(1000, shards, 10, 7, 50, 30, writer=False, world=4)
    assert four["eval_period"] == (PERIOD_EVENT_BYTES + PERIOD_OWNED_BYTES // 4) * period  # the halves divide
    for p in (writer, other):
        assert p["total"] == 1000 + max(p["log_window"], 2 * 32 * 10 + RANK_STATE_COPIES * 7,
                                        p["evaluation"] + p["eval_period"] + p["log_streamed"])


def test_resume_with_another_number_of_ranks_is_refused_with_the_reason(shards4, tmp_path):
    speed.train(shards4, model="jodie", epochs=1, seed=0, nproc=2, out=tmp_path, **TINY)
    with pytest.raises(speed.InputError, match="the run had 2 processes, not 1 .*resume with 2"):
        speed.train(shards4, model="jodie", epochs=2, seed=0, nproc=1, out=tmp_path, resume=True, **TINY)


def test_strict_mode_refuses_a_collective_around_the_world(tmp_path):
    from _pac_helpers import run_workers, strict_world_worker

    out = run_workers(strict_world_worker, [(), ()], tmp_path / "store")
    for r in (0, 1):
        assert "not through speed.train.world.World" in out[r]["raw"]
        assert out[r]["through_world"] == [3.0, 3.0] and out[r]["objects"] == [0, 1]


@pytest.mark.parametrize("world", [2, 3])
def test_host_all_gather_gives_every_ranks_tensor_in_rank_order(tmp_path, world):
    """(It runs as an all-to-all of the tensor sent to every rank, where gloo's all_gather costs
    2-3x as long; bool and empty tensors take all_gather.)  Begun and waited for later
    (``host_all_gather_start``), with the host group's collectives run in between, it gives
    the same."""
    from _pac_helpers import host_gather_worker, run_workers
    from speed.train.world import A2A_GATHER_BYTES

    out = run_workers(host_gather_worker, [()] * world, tmp_path / "store")
    for r in range(world):
        got = out[r]
        assert got["float32"] == [(torch.arange(6, dtype=torch.float32).view(2, 3) / 7 + q).tolist()
                                  for q in range(world)]
        assert got["float64"] == [[1 / 3 + q, -0.0, float("inf")] for q in range(world)]
        assert got["int64"] == [(torch.arange(155).view(5, 31) * (q + 1) - 2 ** 40).tolist() for q in range(world)]
        assert got["bool"] == [[q % 2 == 0, True, False] for q in range(world)]
        assert got["empty"] == [[]] * world
        assert got["column"] == [[q, q + 2] for q in range(world)]
        assert got["shapes"] == [(5, 31)] * world
        n = A2A_GATHER_BYTES // 4 // world + 1
        assert got["big"] == [(n, q, n - 1 + q) for q in range(world)]
        # begun, with other collectives run before it was waited for
        assert got["begun"] == [[[q] * 4] * 3 for q in range(world)]
        assert got["begun_big"] == [(n, 2 * q, 2 * (n - 1 + q)) for q in range(world)]
        assert got["between"] == ([float(sum(range(1, world + 1)))] * 2, list(range(world)))


def test_every_collective_of_a_pac_run_passes_the_strict_checks(shards4, tmp_path, monkeypatch):
    """A PAC run of TIGE (training, in-epoch syncs, the hand-over, the divided evaluation with
    TIGE's extra exchange, the owners' writes of best.json), every collective through the World
    in strict mode: a raw torch.distributed call, a tensor not in host memory on a host group, or
    one off the rank's device on the device group would fail the run."""
    monkeypatch.setenv("SPEED_STRICT_COLLECTIVES", "1")  # the spawned ranks inherit it
    m = speed.train(shards4, model="tige", epochs=1, nproc=2, sync_every=2, out=tmp_path / "run", **TINY)
    assert m["test"]["transductive"]["count"] > 0
    work = m["evaluation_work"]
    assert len(work) == 2 and all(p["keys"] > 0 for rank in work for p in rank)


def test_drift_is_how_far_any_rank_is_from_rank_0(tmp_path):
    from _pac_helpers import drift_worker, run_workers

    same = run_workers(drift_worker, [([1.0, 2.0],), ([1.0, 2.0],)], tmp_path / "a")
    apart = run_workers(drift_worker, [([1.0, 2.0],), ([1.0, 2.5],), ([0.0, 2.0],)], tmp_path / "b")
    assert same == {0: 0.0, 1: 0.0}
    assert apart == {0: 1.0, 1: 1.0, 2: 1.0}


def test_captured_pac_steps_average_by_hand_as_ddp_does(tmp_path):
    """--cuda-graph under PAC: no DDP wrapper; each step's gradients are averaged in one
    collective over the flat buffer between the step and the optimiser (on a CPU the padded
    step runs eagerly).  The ranks' weights stay bit for bit one (checked every epoch by the
    run itself), and the losses are DDP's within the padding's rounding."""
    log = speed.write_generated(tmp_path / "log.csv", 300, 3000, seed=1)
    assert main(["partition", str(log), "-o", str(tmp_path / "s2"), "--parts", "2", "--topk", "5",
                 "--no-progress"]) == 0
    kw = dict(model="tgn", epochs=2, seed=0, nproc=2, sync_every=2, **(TINY | {"batch_size": 60}))
    ddp = speed.train(tmp_path / "s2", out=tmp_path / "ddp", **kw)
    cap = speed.train(tmp_path / "s2", out=tmp_path / "cap", cuda_graph=True, **kw)
    assert cap["cuda_graph"]["failed"] is None and cap["cuda_graph"]["bounds"]["shapes"]
    for a, b in zip(cap["epochs"], ddp["epochs"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert [r["loss"] for r in a["ranks"]] == pytest.approx([r["loss"] for r in b["ranks"]], rel=1e-4)
    assert cap["test"]["transductive"]["ap"] == pytest.approx(ddp["test"]["transductive"]["ap"], abs=2e-3)
