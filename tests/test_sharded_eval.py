"""Exact evaluation with the node memories sharded over ranks (speed.train.pac.sharded).

The same state, evaluated by one process holding every row and by N gloo processes each holding
the rows it owns and doing its share of each step (speed.train.eval.divided), gives the same
scores bit for bit, for every model, protocol and negative strategy; the work divides (each key
computed once, each event scored once) and a rank receives only what its share needs."""

import numpy as np
import pytest
import torch
from _pac_helpers import SHARDED_CASES, run_workers, sharded_eval_worker

from speed.train.pac.sharded import owners


@pytest.mark.parametrize("world, ahead", [(1, False), (2, False), (3, False), (2, True), (3, True)])
def test_sharded_evaluation_equals_one_process_holding_every_row(world, ahead, tmp_path):
    """``ahead``: each rank builds its plans and cuts its part out of them in a planning thread,
    whose collectives (the sampler's answers) go over a group of their own."""
    res = run_workers(sharded_eval_worker, [(SHARDED_CASES, ahead)] * world, tmp_path / "store", timeout=600)
    assert set(res) == set(range(world))
    for r in range(world):
        for case in res[r]:
            assert case["diff"] == 0.0, (case["case"], case["diff"])  # bit for bit (relative logits)
            for ref, got in zip(case["ref"], case["got"]):
                for scope in ref:
                    for key, value in ref[scope].items():
                        if isinstance(value, float):
                            assert got[scope][key] == pytest.approx(value, abs=1e-6), (case["case"], scope, key)
    # the rows are divided: each held by one rank, and a rank read from the others what it lacked
    for i in range(len(SHARDED_CASES)):
        held = [res[r][i]["held"] for r in range(world)]
        assert sum(held) == 160
        work = [res[r][i]["work"] for r in range(world)]
        alone = res[0][i]["work_alone"]
        # the work is divided: every memory key computed once, by its owner; every event scored
        # once; a query embedded once (or by each rank whose share of a batch asks for it)
        assert sum(w["keys"] for w in work) == alone["keys"] > 0
        assert sum(w["scored"] for w in work) == alone["scored"] > 0
        assert alone["embeddings"] <= sum(w["embeddings"] for w in work) <= 1.1 * alone["embeddings"]
        if world > 1:
            assert max(held) < 160
            assert max(w["keys"] for w in work) < alone["keys"]
            assert all(w["rows_received"] > 0 and w["bytes_received"] > 0 for w in work)
            # what a rank receives, it receives once: its rows and key states, from their owners
            assert sum(w["rows_received"] for w in work) == sum(w["rows_sent"] for w in work)
            # a step moves what it reads to the device in two packed copies (its plan and rows,
            # then the key states received) and waits for the device once (what it sends and stores)
            for w in work:
                assert w["steps"] > 0 and w["seconds_dividing"] > 0  # each step's part cut out of its plan
                # the sampler's gathers of neighbour answers, part of building the plans (JODIE's
                # embedding reads no neighbours: it asks the sampler nothing)
                assert 0 <= w["seconds_planning_gathers"] <= w["seconds_planning"], w
                assert (w["seconds_planning_gathers"] > 0) == (SHARDED_CASES[i][0] != "jodie"), w
                assert w["plan_threads"] == int(ahead)
                # one exchange a step: the key states, with the next step's rows; the first step
                # fetches its own rows (TIGE, which stores its batch after the exchange, two)
                if SHARDED_CASES[i][0] == "tige":
                    assert w["exchanges"] >= 2 * w["steps"]
                else:
                    assert w["exchanges"] == w["steps"] + 1, w
                assert w["copies_in"] == 2 * w["steps"] and w["copies_out"] == w["steps"], w
        else:
            assert res[0][i]["read"]["calls"] == 0 and work[0]["rows_received"] == 0
            assert work[0]["seconds_planning_gathers"] == 0


def test_owners_follow_the_groups_and_spread_shared_and_unplaced_nodes():
    own = [np.array([0, 3]), np.array([1, 5])]
    shared = np.array([2, 4, 6])
    o = owners(8, shared, own, 2)
    assert o.tolist() == [0, 1, 0, 0, 1, 1, 0, 1]  # 2, 4, 6: shared 0, 1, 2 -> ranks 0, 1, 0; 7 of no part
    assert o.dtype == np.int16


def test_ranks_bring_their_state_to_the_owners_by_the_sync_rule(tmp_path):
    from _pac_helpers import shard_state_worker

    out = run_workers(shard_state_worker, [(), ()], tmp_path / "store")
    (memory, last), pending, held = out[0]
    # node: 0 rank 0's own (its local 2), 1 shared won by rank 0 (t 5 > 3), 2 rank 0's own (local 3),
    # 3 rank 1's own (local 2), 4 shared won by rank 1 (t 4 > 1), 5 rank 1's own (local 3)
    assert memory == [[4, 5], [0, 1], [6, 7], [104, 105], [102, 103], [106, 107]]
    assert last == [2.0, 5.0, 2.0, 7.0, 4.0, 7.0]
    assert held == [0, 1, 2] and out[1][2] == [3, 4, 5]  # shared node i on rank i % 2
    # every rank keeps every pending event: node 1's from its winner (rank 0), node 0's and 3's
    for r in (0, 1):
        node, other, t, eid = out[r][1]
        assert sorted(zip(node, other, eid)) == [(0, 2, 20), (1, 4, 10), (3, 5, 21)]


@pytest.mark.parametrize("fail", ["rows", "file"])
def test_a_failed_sharded_write_fails_on_every_rank_and_leaves_no_file(fail, tmp_path):
    from _pac_helpers import shard_writer_failure_worker

    out = run_workers(shard_writer_failure_worker, [(fail,), (fail,)], tmp_path / "store")
    if fail == "rows":  # rank 1 cannot write its rows: both ranks say so, naming it
        for r in (0, 1):
            assert "rank 1: OSError: disk full" in out[r][0]
    else:  # rank 0's file fails before the rows have a place: rank 1 stops waiting
        assert out[0][0].startswith("TypeError")
        assert "rank 0 could not write its file" in out[1][0]
    assert out[0][1] == []  # no JSON, no tensor file, no temporary left


def test_rows_written_by_their_owners_make_the_whole_array(tmp_path):
    """Three owners write their rows (a back-up's rows put over some) into one file, a window
    of 4 ids at a time: the file holds every row at its id's place."""
    from speed.train.state.sharded import _write_rows

    rng = np.random.default_rng(0)
    n, width = 23, 3
    whole = rng.standard_normal((n, width)).astype(np.float32)
    owner = rng.integers(0, 3, n)
    expect = whole.copy()
    path = tmp_path / "rows.bin"
    offset = 13  # the array need not start on a page (or an itemsize) boundary
    path.write_bytes(b"\xff" * (offset + whole.nbytes + 5))
    total = 0
    for r in range(3):
        mine = np.flatnonzero(owner == r)
        over = mine[::2]
        over_rows = rng.standard_normal((over.size, width)).astype(np.float32)
        expect[over] = over_rows
        total += _write_rows(torch.from_numpy(whole[mine]), n, mine, path, offset, 4,
                             (over[::-1].copy(), torch.from_numpy(over_rows[::-1].copy())))
    assert total == n
    raw = path.read_bytes()
    assert raw[:offset] == b"\xff" * offset and raw[offset + whole.nbytes:] == b"\xff" * 5
    got = np.frombuffer(raw[offset:offset + whole.nbytes], dtype=np.float32).reshape(n, width)
    assert np.array_equal(got, expect)
