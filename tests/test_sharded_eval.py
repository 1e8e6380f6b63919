"""Exact evaluation with the node memories sharded over ranks (speed.train.pac.sharded).

The same state, evaluated by one process holding every row and by N gloo processes each holding
the rows it owns, gives the same scores, for every model, protocol and negative strategy."""

import numpy as np
import pytest
import torch
from _pac_helpers import SHARDED_CASES, run_workers, sharded_eval_worker

from speed.train.pac.sharded import owners


@pytest.mark.parametrize("world", [1, 2, 3])
def test_sharded_evaluation_equals_one_process_holding_every_row(world, tmp_path):
    res = run_workers(sharded_eval_worker, [(SHARDED_CASES,)] * world, tmp_path / "store", timeout=600)
    assert set(res) == set(range(world))
    for r in range(world):
        for case in res[r]:
            assert case["diff"] <= 1e-6, case["case"]  # logits, relative to their size where above 1
            for ref, got in zip(case["ref"], case["got"]):
                for scope in ref:
                    for key, value in ref[scope].items():
                        if isinstance(value, float):
                            assert got[scope][key] == pytest.approx(value, abs=1e-6), (case["case"], scope, key)
    # the rows are divided: each held by one rank, and a rank read from the others what it lacked
    for i in range(len(SHARDED_CASES)):
        held = [res[r][i]["held"] for r in range(world)]
        assert sum(held) == 160
        if world > 1:
            assert max(held) < 160
            assert all(res[r][i]["read"]["rows_received"] > 0 for r in range(world))
        else:
            assert res[0][i]["read"]["calls"] == 0


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
