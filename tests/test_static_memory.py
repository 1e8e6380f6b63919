"""DistTGL's static node memory: where it enters, what trains it, how ranks merge it, no leakage."""


import numpy as np
import pytest
import torch

import speed
from speed.cli import main
from speed.train.model.network import build_model
from speed.train.model.static import merge_static, pretrain_static  # noqa: F401  (merge_static runs in the workers)
from speed.train.recipes import MODELS

from conftest import TINY  # noqa: E402  (the tests' one small model)
RUN = {**TINY, "seed": 0, "deterministic": True}


def _log(rng, n=1500, test_only=()):
    """A unipartite log; the nodes ``test_only`` take part only in its last 10% of events."""
    src, dst = rng.integers(0, 40, n), rng.integers(0, 40, n)
    late = np.arange(n) >= int(0.9 * n)
    for i, node in enumerate(test_only):
        src[late & (np.arange(n) % 3 == i)] = node
    t = np.sort(rng.uniform(0, 1e5, n)).round(1)
    return src, dst, t


@pytest.mark.parametrize("name", MODELS)
def test_a_zero_table_embeds_exactly_as_without_static_memory(name):
    rng = np.random.default_rng(0)
    src, dst, t = _log(rng, 400)
    z = {}
    for kind in ("none", "learned", "pretrained"):
        torch.manual_seed(0)
        model = build_model(name, 40, memory_dim=6, time_dim=6, embedding_dim=6, neighbors=3, static_memory=kind)
        assert (model.net.static is None) == (kind == "none")
        model.eval()
        out = []
        for a in range(0, 400, 50):
            b = slice(a, a + 50)
            out.append(model.step_events(src[b], dst[b], t[b], np.arange(a, min(a + 50, 400))))
        z[kind] = torch.cat(out)
    torch.testing.assert_close(z["learned"], z["none"], atol=1e-6, rtol=0)
    torch.testing.assert_close(z["pretrained"], z["none"], atol=1e-6, rtol=0)


def test_a_filled_table_changes_the_embedding_through_the_map():
    torch.manual_seed(0)
    model = build_model("tgn", 10, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2, static_memory="learned")
    model.eval()
    before = model.embed(np.arange(10), np.full(10, 5.0))
    model.net.static.load_table(torch.ones(10, 4))
    after = model.embed(np.arange(10), np.full(10, 5.0))
    assert not torch.allclose(before, after)


@pytest.mark.parametrize("name", ["jodie", "dyrep"])
def test_a_memory_only_embedding_gets_the_static_part_after_it(name):
    # JODIE: z = (1 + w dt) * s + P row, not (1 + w dt) * (s + P row); DyRep: z = s + P row
    torch.manual_seed(0)
    model = build_model(name, 6, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2, static_memory="learned")
    model.eval()
    nodes, t = np.arange(6), np.full(6, 50.0)  # dt = 50 from a last update at 0: the projection is not 1
    plain = model.embed(nodes, t)  # a zero table: the dynamic part alone
    rows = torch.arange(24, dtype=torch.float32).reshape(6, 4) / 10
    model.net.static.load_table(rows)
    with torch.no_grad():
        expected = plain + model.net.static(torch.as_tensor(nodes))
    torch.testing.assert_close(model.embed(nodes, t), expected, atol=1e-6, rtol=0)


def test_row_adam_is_torch_sparse_adam():
    # the reference is torch's own SparseAdam; gradients with repeated rows, empty steps, two lrs
    from speed.train.model.static import RowAdam

    rng = np.random.default_rng(0)
    for lr in (1e-3, 0.5):
        start = torch.as_tensor(rng.normal(size=(30, 5)), dtype=torch.float32)
        a, b = nn_param(start), nn_param(start)
        opt_a, opt_b = torch.optim.SparseAdam([a], lr=lr), RowAdam([b], lr=lr)
        for step in range(40):
            n = 0 if step == 7 else int(rng.integers(1, 25))
            idx = torch.as_tensor(rng.integers(0, 30, n))  # repeats: coalesced into one row
            vals = torch.as_tensor(rng.normal(size=(n, 5)), dtype=torch.float32)
            for p, opt in ((a, opt_a), (b, opt_b)):
                p.grad = torch.sparse_coo_tensor(idx.unsqueeze(0), vals, (30, 5))
                opt.step()
        torch.testing.assert_close(b.detach(), a.detach(), atol=1e-6, rtol=1e-5)
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt_b.state[b][key], opt_a.state[a][key], atol=1e-7, rtol=1e-5)
        assert opt_b.state[b]["step"] == opt_a.state[a]["step"]
        opt_b.load_state_dict(opt_a.state_dict())  # the state is interchangeable
    with pytest.raises(RuntimeError, match="sparse"):
        b.grad = torch.ones(30, 5)
        opt_b.step()


def nn_param(x):
    return torch.nn.Parameter(x.clone())


def test_learned_rows_train_only_for_training_nodes_and_the_test_period_never_trains_them(tmp_path):
    src, dst, t = _log(np.random.default_rng(1), test_only=(41, 42))
    runs = {}
    for tag, d in (("a", dst), ("b", np.concatenate([dst[:1350], np.random.default_rng(9).permutation(dst[1350:])]))):
        events = speed.Events.from_arrays(src, d, t)
        for kind in ("learned", "pretrained"):
            out = tmp_path / f"{tag}_{kind}"
            speed.train(events, model="tgn", epochs=2, static_memory=kind, new_node_fraction=0.0, out=out, **RUN)
            runs[tag, kind] = speed.load_run(out).net.static.table.detach()
    for kind in ("learned", "pretrained"):
        table = runs["a", kind]
        assert table[41].abs().sum() == 0 and table[42].abs().sum() == 0  # only in the test period
        assert (table[:40].abs().sum(1) > 0).all()  # every training node's row was trained
        # the test period's events differ between the runs; the trained tables do not
        torch.testing.assert_close(runs["b", kind], table, atol=0, rtol=0)


def test_pretraining_reads_only_the_events_it_is_given_and_is_seeded():
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 30, 500), rng.integers(0, 30, 500)
    pool = np.unique(np.concatenate([src, dst]))
    a = pretrain_static(src, dst, 35, 4, pool, seed=3, epochs=2, progress=False)
    b = pretrain_static(src, dst, 35, 4, pool, seed=3, epochs=2, progress=False)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert a.shape == (35, 4) and a[30:].abs().sum() == 0  # nodes 30-34 are in no event
    assert (a[pool].abs().sum(1) > 0).all()


def test_two_ranks_merge_their_changes_to_the_table(tmp_path):
    from _pac_helpers import run_workers, static_merge_worker

    out = run_workers(static_merge_worker, [(), ()], tmp_path / "store")
    # row 0: rank 0's value; row 1: the mean of both changes; row 2: rank 1's; row 3: untouched
    expected = [[1.0, 2.0], [1.5, 3.0], [2.0, 4.0], [0.0, 0.0]]
    # Adam's first moment after one step is 0.1 x the gradient (rank r's gradient: r + 1)
    moments = [0.1, 0.15, 0.2, 0.0]
    for r in (0, 1):
        table, m = out[r]
        assert table == expected
        assert m == pytest.approx(moments, abs=1e-7)


def test_parallel_run_trains_one_table_that_plan_counts(tmp_path, capsys):
    log = speed.write_generated(tmp_path / "log.csv", 200, 2500, seed=4)
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "4", "--topk", "10",
                 "--no-progress"]) == 0
    m = speed.train(tmp_path / "s", model="tgn", nproc=2, epochs=2, static_memory="learned", out=tmp_path / "run",
                    **{**RUN, "deterministic": False})
    ranks = m["epochs"][-1]["ranks"]
    # the merge is timed on every rank and reported with the syncs
    assert m["epochs"][-1]["seconds"]["sync"] == max(r["sync_seconds"] + r["static_merge_seconds"] for r in ranks)
    table = speed.load_run(tmp_path / "run").net.static.table.detach()
    events = speed.load_shards(tmp_path / "s").events()
    assert table.shape == (events.num_nodes, 8)
    trained = (table.abs().sum(1) > 0).sum().item()
    assert trained > 0.5 * events.num_nodes  # rows of both ranks' nodes survived the merge
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "s"), "--nproc", "2", "--static-memory", "learned", "--memory-dim", "8",
                 "--json"]) == 0
    import json

    p = json.loads(capsys.readouterr().out)
    assert p["static_memory_bytes"] == events.num_nodes * 8 * 4 * 3  # the table and its two Adam moments


def test_bad_static_settings_are_refused_by_name(tmp_path, capsys):
    from speed.train.config import ConfigError

    with pytest.raises(ConfigError, match="static_memory"):
        speed.train(speed.Events.from_arrays(*_log(np.random.default_rng(0), 200)), static_memory="frozen")
    with pytest.raises(ConfigError, match="static_lr"):
        speed.train(speed.Events.from_arrays(*_log(np.random.default_rng(0), 200)), static_lr=0.0)
    log = speed.write_generated(tmp_path / "log.csv", 30, 300, seed=0)
    assert main(["train", str(log), "--static-lr", "-1", "--out", str(tmp_path / "run"), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "--static-lr" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
