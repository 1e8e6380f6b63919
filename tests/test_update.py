"""Updating a trained run with new events (``speed update``, ``speed.train.online.update.update``):
prequential test-then-train, memory only, passes and replay, a complete new run."""

import hashlib
import json

import numpy as np
import pytest
import torch

import speed
from speed.cli import main
from speed.train.config import UpdateConfig
from speed.train.api import update
from speed.train.online.update import OnlineUpdater
from speed.train.run.predictor import open_checkpoint, predictor_from

from conftest import TINY  # noqa: E402  (the tests' one small model)
RUN = {**TINY, "epochs": 1, "seed": 0}


def _log(rng, n, t0=0.0, msg_dim=0, nodes=(60, 80)):
    src = rng.integers(0, nodes[0], n) * 7 + 1000
    dst = rng.integers(0, nodes[1], n) * 3 + 5
    t = t0 + np.sort(rng.uniform(0, 1e5, n)).round(1)
    msg = rng.normal(size=(n, msg_dim)).astype(np.float32) if msg_dim else None
    return speed.Events.from_arrays(src, dst, t, msg=msg, remap=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A TGN run on 2,000 events with edge features, and 1,000 later events (a few new nodes)."""
    root = tmp_path_factory.mktemp("update")
    rng = np.random.default_rng(3)
    base = _log(rng, 2000, msg_dim=3)
    speed.train(base, model="tgn", out=root / "run", **RUN)
    new = _log(rng, 1000, t0=2e5, msg_dim=3, nodes=(70, 90))
    return root, base, new


def digests(root):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir()) if p.is_file()}


def _updater(run, **kw):
    state, payload = open_checkpoint(run)
    pred = predictor_from(state, payload, "end", "cpu", run)
    return OnlineUpdater(pred, state, payload, UpdateConfig(progress=False, **kw).validate())


def test_memory_only_scores_equal_the_predictors_stream(trained):
    """Memory only, each batch is scored from the state before it, exactly as
    Predictor.score_stream scores the same events."""
    root, base, new = trained
    up = _updater(root / "run", train=False)
    up.run(new)
    pos, neg = up.last_scores
    ids = new.node_ids
    ref, _, _ = speed.load_run(root / "run").score_stream(ids[new.src], ids[new.dst], new.t_float(), msg=new.msg)
    np.testing.assert_allclose(pos, ref, atol=1e-5, rtol=0)


def test_each_batch_is_scored_before_it_is_trained_on(trained):
    """Test then train: the first batch's scores are those of the loaded run (the same as memory
    only); later batches are scored by weights trained on the earlier ones; and a batch's scores
    do not depend on any later event."""
    root, base, new = trained
    trained_up, memory_up = _updater(root / "run"), _updater(root / "run", train=False)
    trained_up.run(new)
    memory_up.run(new)
    (p1, n1), (p0, n0) = trained_up.last_scores, memory_up.last_scores
    np.testing.assert_allclose(p1[:100], p0[:100], atol=1e-5, rtol=0)
    np.testing.assert_allclose(n1[:100], n0[:100], atol=1e-5, rtol=0)
    assert np.abs(p1[100:] - p0[100:]).max() > 1e-4  # the weights moved
    # the same events up to batch 5, then other ones: the first five batches score alike
    other = _log(np.random.default_rng(11), 1000, t0=2e5, msg_dim=3)
    mixed = speed.Events.from_arrays(
        np.concatenate([new.node_ids[new.src[:500]], other.node_ids[other.src[500:]]]),
        np.concatenate([new.node_ids[new.dst[:500]], other.node_ids[other.dst[500:]]]),
        np.concatenate([new.t[:500], np.maximum(other.t[500:], new.t[499])]),
        msg=np.concatenate([new.msg[:500], other.msg[500:]]), remap=True)
    again = _updater(root / "run")
    again.run(mixed)
    np.testing.assert_allclose(again.last_scores[0][:500], p1[:500], atol=1e-5, rtol=0)


def test_updated_run_is_complete_and_the_old_one_unchanged(trained, tmp_path):
    root, base, new = trained
    before = digests(root / "run")
    first, second = new.select(slice(0, 600)), new.select(slice(600, 1000))
    m = update(root / "run", first, tmp_path / "run2", progress=False, mrr=True, mrr_negatives=5, windows=3)
    assert digests(root / "run") == before
    u = m["updates"][-1]
    assert u["increment"] == 1 and u["events"] == 600 and u["mode"] == "train" and 0.5 < u["ap"] <= 1
    assert 0 < u["mrr"] <= 1 and len(u["windows"]) == 3 and sum(w["events"] for w in u["windows"]) == 600
    assert (tmp_path / "run2" / "updates.png").stat().st_size > 0
    assert m["data"]["num_events"] == 2600
    pred = speed.load_run(tmp_path / "run2")
    assert pred.t_last == float(first.t[-1])
    known = set(first.node_ids[first.src].tolist()) | set(first.node_ids[first.dst].tolist())
    assert known <= set(pred.node_ids.tolist())
    assert pred.embed(pred.node_ids[:5]).shape == (5, 8)
    assert np.all(np.isfinite(pred.score(pred.node_ids[:3], pred.node_ids[3:6])))
    # a further update goes on from there; the history keeps both increments
    m3 = update(tmp_path / "run2", second, tmp_path / "run3", progress=False, replay=0.5, passes=2)
    assert [x["increment"] for x in m3["updates"]] == [1, 2] and m3["updates"][1]["passes"] == 2
    assert speed.load_run(tmp_path / "run3").t_last == float(second.t[-1])
    # the training run's figures describe the model before its updates, and are kept as such
    trained_m = json.loads((root / "run" / "metrics.json").read_text())
    for mm in (m, m3):
        assert "test" not in mm and "epochs" not in mm and mm["before_updates"]["test"] == trained_m["test"]
    assert m3["data"]["t_max"] == float(second.t[-1]) and not (tmp_path / "run3" / "curves.png").exists()
    # a new training run in an updated run's folder leaves none of the update's files
    speed.train(base, model="tgn", out=tmp_path / "run3", overwrite=True, **RUN)
    assert not (tmp_path / "run3" / "updates.png").exists()


def test_passes_take_each_event_into_the_memory_once(trained):
    root, base, new = trained
    one, two = _updater(root / "run"), _updater(root / "run", passes=2)
    one.run(new)
    two.run(new)
    for name, mem in one.model.state.memories().items():
        torch.testing.assert_close(two.model.state.memories()[name].last_update, mem.last_update)
    np.testing.assert_allclose(one.last_scores[0], two.last_scores[0], atol=1e-5, rtol=0)  # pass 1 scores
    assert one.pred.next_eid == two.pred.next_eid


def test_update_with_a_learned_static_table_grows_it_for_new_nodes(tmp_path):
    rng = np.random.default_rng(5)
    base = _log(rng, 1500)
    speed.train(base, model="tgn", out=tmp_path / "run", static_memory="learned", **RUN)
    new = _log(rng, 500, t0=2e5, nodes=(90, 120))
    m = update(tmp_path / "run", new, tmp_path / "run2", progress=False)
    assert m["updates"][0]["new_nodes"] > 0
    pred = speed.load_run(tmp_path / "run2")
    assert pred.net.static.table.shape[0] >= len(pred.node_ids)


def test_bad_updates_are_refused(trained, tmp_path, capsys):
    root, base, new = trained
    with pytest.raises(speed.InputError, match="own folder"):
        update(root / "run", new, root / "run", progress=False)
    with pytest.raises(speed.InputError, match="memory only"):
        update(root / "run", new, tmp_path / "x", train=False, passes=2, progress=False)
    with pytest.raises(speed.InputError, match="edge features"):
        update(root / "run", _log(np.random.default_rng(1), 50, t0=2e5), tmp_path / "x", progress=False)
    old = tmp_path / "old.csv"
    last = float(base.t[-1])
    old.write_text("src,dst,t,f1,f2,f3\n" + f"1000,5,{last + 1},0,0,0\n" + f"1007,8,{last - 5},0,0,0\n")
    assert main(["update", str(root / "run"), str(old), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "old.csv:3" in err and "older than the memory's last update" in err
    assert not (tmp_path / "r").exists()


def _base_and_more(tmp_path, n, base, users, items, *flags):
    """A random bipartite log written as base.csv (its first ``base`` events) and more.csv (the
    rest), and shards of base.csv in 2 parts; returns the shards' path."""
    rng = np.random.default_rng(8)
    src, dst = rng.integers(0, users, n), rng.integers(users, users + items, n)
    t = np.sort(rng.integers(0, 10 * n, n))
    rows = [f"{a},{b},{c}" for a, b, c in zip(src, dst, t)]
    (tmp_path / "base.csv").write_text("src,dst,t\n" + "\n".join(rows[:base]) + "\n")
    (tmp_path / "more.csv").write_text("src,dst,t\n" + "\n".join(rows[base:]) + "\n")
    s = tmp_path / "shards"
    assert main(["partition", str(tmp_path / "base.csv"), "-o", str(s), "--parts", "2", "--no-progress", *flags]) == 0
    return s


def test_cli_update_from_shards_takes_the_appended_events(tmp_path, capsys):
    s = _base_and_more(tmp_path, 3000, 2000, 50, 70)
    assert main(["train", str(s), "--out", str(tmp_path / "run"), "--epochs", "1", "--memory-dim", "8",
                 "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]) == 0
    assert main(["partition", str(tmp_path / "more.csv"), "-o", str(s), "--append", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["update", str(tmp_path / "run"), str(s), "--out", str(tmp_path / "run2"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("increment 1: 1,000 events") and "AP 0." in out
    m = json.loads((tmp_path / "run2" / "metrics.json").read_text())
    assert m["updates"][0]["events"] == 1000 and m["data"]["num_events"] == 3000
    # nothing new in the shards for the updated run
    assert main(["update", str(tmp_path / "run2"), str(s), "--out", str(tmp_path / "run3"), "--no-progress"]) == 2
    assert "nothing new" in capsys.readouterr().err


def test_the_replay_reservoir_is_a_uniform_sample_of_what_it_saw():
    from speed.train.online.update import Reservoir

    rng = np.random.default_rng(0)
    counts = np.zeros(1000)
    for trial in range(300):
        r = Reservoir(np.arange(10), np.arange(10) + 1, seen=10, capacity=50)
        for a in range(10, 1000, 90):  # chunks of any size
            b = min(1000, a + 90)
            r.add(np.arange(a, b), np.arange(a, b) + 1, rng)
        assert r.src.size == 50 and r.seen == 1000 and np.array_equal(r.dst, r.src + 1)
        counts[r.src] += 1
    # each of the 1,000 interactions is kept with probability 50/1000: 15 times in 300 trials
    assert abs(counts[:500].mean() - 15) < 1.5 and abs(counts[500:].mean() - 15) < 1.5


def test_parallel_update_from_shards(tmp_path):
    """--nproc: with one rank it scores exactly as the single-process update; with two, the ranks
    split the new events, and RUN2's state is the run's end state continued, memory only, with the
    trained weights."""
    s = _base_and_more(tmp_path, 4000, 3000, 60, 100, "--topk", "5")
    speed.train(s, model="tgn", out=tmp_path / "run", **RUN)
    assert main(["partition", str(tmp_path / "more.csv"), "-o", str(s), "--append", "--no-progress"]) == 0
    one = update(tmp_path / "run", s, tmp_path / "single", progress=False)["updates"][0]
    par1 = update(tmp_path / "run", s, tmp_path / "par1", nproc=1, progress=False)["updates"][0]
    assert par1["ap"] == pytest.approx(one["ap"], abs=1e-12) and par1["auc"] == pytest.approx(one["auc"], abs=1e-12)
    par2 = update(tmp_path / "run", s, tmp_path / "par2", nproc=2, progress=False)["updates"][0]
    assert par2["nproc"] == 2 and sum(par2["rank_events"]) == 1000 == par2["events"] and min(par2["rank_events"]) > 0
    assert len(par2["windows"]) == 10 and sum(w["events"] for w in par2["windows"]) == 1000
    updated = speed.load_run(tmp_path / "par2")
    again = speed.load_run(tmp_path / "run")
    again.net.load_state_dict({k: v for k, v in updated.net.state_dict().items()})
    new = speed.load_shards(s).events("appended")
    again.advance(new)
    for name, mem in updated.state.memories().items():
        torch.testing.assert_close(again.state.memories()[name].memory, mem.memory, atol=1e-5, rtol=0)
        torch.testing.assert_close(again.state.memories()[name].last_update, mem.last_update)
    with pytest.raises(speed.InputError, match="divides"):
        update(tmp_path / "run", s, tmp_path / "par3", nproc=3, progress=False)
    with pytest.raises(speed.InputError, match="nothing new"):
        update(tmp_path / "par2", s, tmp_path / "par4", nproc=2, progress=False)
    with pytest.raises(speed.InputError, match="shards folder"):
        update(tmp_path / "run", tmp_path / "more.csv", tmp_path / "par5", nproc=2, progress=False)


def test_two_updates_into_one_out_exactly_one_succeeds(tmp_path):
    """Two `speed update RUN NEW --out U` at once: the output is created exclusively, so one
    writes U and the other exits 2 having written nothing (once both exited 0, and the first
    result was silently replaced)."""
    import subprocess
    import sys

    s = _base_and_more(tmp_path, 3000, 2500, 40, 60)
    speed.train(s, model="jodie", out=tmp_path / "run", **RUN)
    argv = [sys.executable, "-m", "speed", "update", str(tmp_path / "run"), str(tmp_path / "more.csv"), "--out",
            str(tmp_path / "u"), "--no-progress"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    err = next(e for code, e in results if code == 2)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert speed.load_run(tmp_path / "u").t_last > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".u.")]  # no temporary left


def test_update_refuses_swapped_columns_and_ids_beyond_64_bits_naming_the_file(tmp_path, capsys):
    s = _base_and_more(tmp_path, 600, 500, 20, 30)
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "base.csv"), "--out", str(run), "--epochs", "1", "--model", "jodie",
                 "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]) == 0
    (tmp_path / "swapped.csv").write_text("dst,src,t\n25,3,99999\n")
    (tmp_path / "huge.csv").write_text(f"src,dst,t\n3,25,99999\n{2 ** 63},{2 ** 63 + 5},99999\n")
    capsys.readouterr()
    for name, said in (("swapped.csv", "column 'dst' is read as the source here but was the destination in the "
                                       "run's log"),
                       ("huge.csv", f"node id {2 ** 63} is larger than a 64-bit integer holds")):
        assert main(["update", str(run), str(tmp_path / name), "--out", str(tmp_path / "u"), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and name in err and len(err.splitlines()) == 1
        assert not (tmp_path / "u").exists()
    # a run trained from shards checks against the columns the shards recorded
    assert main(["train", str(s), "--out", str(tmp_path / "srun"), "--epochs", "1", "--model", "jodie",
                 "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]) == 0
    assert main(["update", str(tmp_path / "srun"), str(tmp_path / "swapped.csv"), "--out", str(tmp_path / "u"),
                 "--no-progress"]) == 2
    assert "in the run's log" in capsys.readouterr().err


def test_update_leaves_out_the_runs_last_events_sent_again(tmp_path, capsys):
    """A file that starts where the run's log ended repeats its events at the last time: the
    update takes in only the new ones (a multiset: held once, sent twice, taken once more)."""
    _base_and_more(tmp_path, 600, 500, 20, 30)
    rows = (tmp_path / "base.csv").read_text().splitlines()
    last = rows[-1]
    t_last = int(last.split(",")[2])
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "base.csv"), "--out", str(run), "--epochs", "1", "--model", "jodie",
                 "--memory-dim", "8", "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]) == 0
    held = sum(1 for r in rows[1:] if r == last)
    (tmp_path / "again.csv").write_text("src,dst,t\n" + f"{last}\n" * (held + 1) + f"3,25,{t_last + 1}\n")
    capsys.readouterr()
    assert main(["update", str(run), str(tmp_path / "again.csv"), "--out", str(tmp_path / "u"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"already taken in: {held} event(s)" in out
    m = json.loads((tmp_path / "u" / "metrics.json").read_text())
    assert m["updates"][-1]["events"] == 2 and m["updates"][-1]["already_taken"] == held
    (tmp_path / "same.csv").write_text(f"src,dst,t\n{last}\n")
    assert main(["update", str(run), str(tmp_path / "same.csv"), "--out", str(tmp_path / "v"), "--no-progress"]) == 2
    assert "were taken in already" in capsys.readouterr().err and not (tmp_path / "v").exists()


def test_update_from_shards_takes_events_by_time_not_by_count(tmp_path, capsys):
    """A run updated from a file, then from its shards after an append, takes every appended
    event (it used to count the file's events as the shards' and skip as many)."""
    s = _base_and_more(tmp_path, 3000, 2000, 50, 70)
    base = (tmp_path / "base.csv").read_text().splitlines()
    t_base = int(base[-1].split(",")[2])
    run = tmp_path / "run"
    assert main(["train", str(s), "--out", str(run), "--epochs", "1", "--memory-dim", "8", "--time-dim", "8",
                 "--embedding-dim", "8", "--no-progress"]) == 0
    # ten events of another source at the log's last time (pairs the log does not hold then)
    (tmp_path / "side.csv").write_text("src,dst,t\n" + "".join(f"{i},{50 + (i + 7) % 70},{t_base}\n"
                                                              for i in range(10)))
    assert main(["update", str(run), str(tmp_path / "side.csv"), "--out", str(tmp_path / "run2"),
                 "--no-progress"]) == 0
    assert main(["partition", str(tmp_path / "more.csv"), "-o", str(s), "--append", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["update", str(tmp_path / "run2"), str(s), "--out", str(tmp_path / "run3"), "--no-progress"]) == 0
    m = json.loads((tmp_path / "run3" / "metrics.json").read_text())
    assert m["updates"][-1]["events"] == 1000 and m["data"]["num_events"] == 3010


def test_an_update_keeps_the_static_tables_own_learning_rate(tmp_path):
    """The update's rate is the weights'; a learned static table keeps the run's static_lr (it
    was overwritten with the update's rate, the table's sparse group included)."""
    from speed.train.config import UpdateConfig
    from speed.train.online.update import LR_SCALE, OnlineUpdater
    from speed.train.run.predictor import open_checkpoint, predictor_from

    ev = speed.generate_events(80, 1500, seed=2)
    speed.train(ev, model="tgn", epochs=1, static_memory="learned", static_lr=5e-3, lr=1e-4, memory_dim=8,
                time_dim=8, embedding_dim=8, progress=False, out=tmp_path / "run")
    saved, payload = open_checkpoint(tmp_path / "run")
    pred = predictor_from(saved, payload, "end", "cpu", tmp_path / "run")
    up = OnlineUpdater(pred, saved, payload, UpdateConfig().validate())
    assert [g["lr"] for g in up.optimizer.dense.param_groups] == [pytest.approx(LR_SCALE * 1e-4)]
    assert [g["lr"] for g in up.optimizer.sparse.param_groups] == [5e-3]


def test_a_recipe_naming_no_module_is_refused(monkeypatch):
    from speed.train import recipes
    from speed.train.model import network
    from speed.train.recipes import Recipe

    monkeypatch.setitem(network.RECIPES, "typo", Recipe(updater="gru", embedding="atention"))
    with pytest.raises(ValueError, match="recipe 'typo': embedding 'atention' names no module"):
        network.build_model("typo", 10)
    assert "typo" in recipes.RECIPES  # (the same table)
