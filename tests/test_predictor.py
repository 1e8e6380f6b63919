"""Using a trained run: speed.load_run, the Predictor's verbs, `speed embed` and `speed score`."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import speed
from speed.cli import main
from speed.train.eval.metrics import link_metrics
from speed.data.node_index import NodeIndex
from speed.train.run.checkpoint import load_checkpoint

from conftest import TINY  # noqa: E402  (the tests' one small model)
RUN = {**TINY, "epochs": 1, "seed": 0}


def _log(rng, n=2000, msg_dim=0, string_ids=False):
    src = rng.integers(0, 60, n) * 7 + 1000
    dst = rng.integers(0, 80, n) * 3 + 5
    t = np.sort(rng.uniform(0, 1e5, n)).round(1)
    msg = rng.normal(size=(n, msg_dim)).astype(np.float32) if msg_dim else None
    if string_ids:
        src, dst = np.char.add("u", src.astype(str)), np.char.add("v", dst.astype(str))
    return speed.Events.from_arrays(src, dst, t, msg=msg, remap=True)


def _rescore_test(pred, events, run):
    """Score the test period with the predictor against the run's saved negatives,
    continuing the memory batch by batch (Predictor.score_stream); returns link_metrics."""
    neg = np.load(run / "negatives.npz")
    idx = np.searchsorted(events.eid, neg["test_eid"])
    ids = events.node_ids
    ns = np.where(neg["test_src"] < 0, events.src[idx], neg["test_src"])
    pos, negs, _ = pred.score_stream(ids[events.src[idx]], ids[events.dst[idx]], events.t_float()[idx], ids[ns],
                                  ids[neg["test_dst"]], None if events.msg is None else events.msg[idx])
    return {"ap": link_metrics(pos, negs)["ap"], "auc": link_metrics(pos, negs)["auc"],
            "per_batch_ap": float(np.mean([link_metrics(pos[a:a + 100], negs[a:a + 100])["ap"]
                                           for a in range(0, pos.size, 100)]))}


@pytest.mark.parametrize("model,extra", [("tgn", dict(msg_dim=3)), ("tige", {}), ("jodie", dict(string_ids=True)),
                                         ("dyrep", {})])
def test_scores_on_the_test_period_equal_the_runs_own_evaluation(tmp_path, model, extra):
    events = _log(np.random.default_rng(1), **extra)
    m = speed.train(events, model=model, out=tmp_path, **RUN)
    pred = speed.load_run(tmp_path, at="test")
    got = _rescore_test(pred, events, tmp_path)
    assert got["ap"] == pytest.approx(m["test"]["transductive"]["pooled"]["ap"], abs=1e-9)
    assert got["auc"] == pytest.approx(m["test"]["transductive"]["pooled"]["auc"], abs=1e-9)
    assert got["per_batch_ap"] == pytest.approx(m["test"]["transductive"]["ap"], abs=1e-9)  # TGN's headline
    # continuing through the test period reaches the state saved after the whole log
    end = speed.load_run(tmp_path)
    assert pred.t_last == end.t_last == float(events.t[-1])
    for name, mem in end.state.memories().items():
        other = pred.state.memories()[name]
        torch.testing.assert_close(other.memory, mem.memory, atol=1e-6, rtol=0)
        torch.testing.assert_close(other.last_update, mem.last_update)
    nodes = end.node_ids[:50]
    np.testing.assert_allclose(pred.embed(nodes, end.t_last + 10), end.embed(nodes, end.t_last + 10), atol=1e-5)


def test_replay_evaluation_checkpoint_matches_its_metrics(tmp_path):
    events = _log(np.random.default_rng(2))
    m = speed.train(events, model="tgn", out=tmp_path, eval="replay", **{**RUN, "epochs": 2})
    got = _rescore_test(speed.load_run(tmp_path, at="test"), events, tmp_path)
    assert got["ap"] == pytest.approx(m["test"]["transductive"]["pooled"]["ap"], abs=1e-9)


def test_parallel_run_checkpoint_matches_its_metrics(tmp_path):
    log = speed.write_generated(tmp_path / "log.csv", 300, 3000, seed=1)
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "4", "--no-progress"]) == 0
    m = speed.train(tmp_path / "s", model="tgn", nproc=2, out=tmp_path / "run", **RUN)
    events = speed.load_shards(tmp_path / "s").events()
    got = _rescore_test(speed.load_run(tmp_path / "run", at="test"), events, tmp_path / "run")
    assert got["ap"] == pytest.approx(m["test"]["transductive"]["pooled"]["ap"], abs=1e-9)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    events = _log(np.random.default_rng(3))
    speed.train(events, model="tgn", out=tmp / "run", **RUN)
    return tmp / "run", events


def test_update_embed_score_and_their_refusals(run):
    path, events = run
    pred = speed.load_run(path)
    t0 = pred.t_last
    assert len(pred.node_ids) == events.num_nodes
    with pytest.raises(speed.InputError, match="older than the memory's last update"):
        pred.advance(([1000], [5], [t0 - 1]))
    with pytest.raises(speed.InputError, match="earlier than the previous event"):
        pred.advance(([1000, 1007], [5, 8], [t0 + 2, t0 + 1]))
    with pytest.raises(speed.InputError, match="before the memory's last update"):
        pred.embed([1000], t0 - 1)
    with pytest.raises(speed.InputError, match="before the memory's last update"):
        pred.score([1000], [5], t0 - 1)
    with pytest.raises(speed.InputError, match="not an integer"):
        pred.embed(["abc"])
    before = pred.embed([1000, 5], t0 + 1)
    pred.advance(([1000, 424242], [5, 5], [t0 + 1, t0 + 2]))  # one node the run never saw
    assert pred.t_last == t0 + 2 and len(pred.node_ids) == events.num_nodes + 1
    after = pred.embed([1000, 5], t0 + 3)
    assert not np.allclose(before, after)  # the memory moved on
    p = pred.score([1000, 424242, 999999], [5, 5, 5], t0 + 3)
    z_src, z_dst = pred.embed([1000, 424242, 999999], t0 + 3), pred.embed([5, 5, 5], t0 + 3)
    with torch.no_grad():
        want = torch.sigmoid(pred.net.score(torch.from_numpy(z_src), torch.from_numpy(z_dst))).numpy()
    np.testing.assert_allclose(p, want, atol=1e-6)  # scores are the decoder on the embeddings
    # 999999 was only scored and embedded: read-only, it was not added (424242 came by update)
    assert pred.embed_all().shape == (events.num_nodes + 1, pred.embedding_dim)


def test_edge_features_are_required_when_the_model_uses_them(tmp_path):
    events = _log(np.random.default_rng(4), n=800, msg_dim=3)
    speed.train(events, model="tgn", out=tmp_path, **RUN)
    pred = speed.load_run(tmp_path)
    t = pred.t_last + 1
    with pytest.raises(speed.InputError, match="uses 3 edge features"):
        pred.advance(([1000], [5], [t]))
    with pytest.raises(speed.InputError, match="uses 3 edge features"):
        pred.advance(([1000], [5], [t], np.zeros((1, 2))))
    pred.advance(([1000], [5], [t], np.ones((1, 3))))
    assert pred.state.edge_features.shape[1] == 3


def test_per_side_ids_of_a_bipartite_log():
    # users 1, 2 and items 1, 3: id 1 names two nodes
    idx = NodeIndex(np.array([1, 2, 1, 3]), 4, num_src_ids=2)
    assert idx.rows([1, 2], "src")[0].tolist() == [0, 1]
    assert idx.rows([1, 3], "dst")[0].tolist() == [2, 3]
    with pytest.raises(speed.InputError, match="side='src' or side='dst'"):
        idx.side(None)
    names = NodeIndex(np.array(["a", "bb"]), 2)
    assert names.rows(["a", "a-much-longer-id"])[0].tolist() == [0, 2]
    assert names.ids.tolist() == ["a", "bb", "a-much-longer-id"]  # not cut to the old width
    rows, n = idx.rows([7, 1], "dst")
    assert rows.tolist() == [4, 2] and n == 5 and idx.sides.tolist() == ["src", "src", "dst", "dst", "dst"]
    assert idx.rows([7], "src")[0].tolist() == [5]  # a new user 7 is not the new item 7


def test_jodie_format_run_keeps_users_and_items_apart(tmp_path):
    rng = np.random.default_rng(5)
    n = 1500
    lines = ["user_id,item_id,timestamp,state_label,f1"]
    t = np.sort(rng.uniform(0, 1e4, n))
    for u, i, tt in zip(rng.integers(0, 40, n), rng.integers(0, 40, n), t):
        lines.append(f"{u},{i},{tt:.3f},0,0.5")
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    events = speed.read_events(tmp_path / "log.csv")
    assert events.meta.format == "jodie"
    speed.train(events, model="jodie", out=tmp_path / "run", **RUN)
    pred = speed.load_run(tmp_path / "run")
    assert pred.index.per_side
    with pytest.raises(speed.InputError, match="side="):
        pred.embed([3])
    z_user, z_item = pred.embed([3], side="src"), pred.embed([3], side="dst")
    assert not np.allclose(z_user, z_item)


def test_load_run_errors(tmp_path, run):
    with pytest.raises(speed.InputError, match="no such run directory"):
        speed.load_run(tmp_path / "nothing")
    with pytest.raises(speed.InputError, match="no best.json here"):
        speed.load_run(tmp_path)
    with pytest.raises(speed.InputError, match="at must be one of"):
        speed.load_run(run[0], at="middle")
    with pytest.raises(speed.InputError, match="device must be"):
        speed.load_run(run[0], device="tpu")
    speed.train(run[1], model="edgebank", out=tmp_path / "eb", progress=False)
    with pytest.raises(speed.InputError, match="baseline with no trained model"):
        speed.load_run(tmp_path / "eb")


def test_cli_embed_and_score(run, tmp_path, capsys):
    path, events = run
    t0 = float(events.t[-1])
    (tmp_path / "new.csv").write_text(f"src,dst,t\n1000,5,{t0 + 1}\n77777,8,{t0 + 2}\n")
    (tmp_path / "pairs.csv").write_text(f"src,dst,t\n1007,8,{t0 + 9}\n1000,5,{t0 + 5}\n55,5,{t0 + 5}\n")
    assert main(["embed", str(path), "-o", str(tmp_path / "emb.npy"), "--events", str(tmp_path / "new.csv"),
                 "--at", str(t0 + 3), "--no-progress"]) == 0
    emb = np.load(tmp_path / "emb.npy")
    ids = (tmp_path / "emb.nodes.csv").read_text().split()
    assert ids[0] == "id" and len(ids) - 1 == emb.shape[0] == events.num_nodes + 1 and ids[-1] == "77777"
    pred = speed.load_run(path).advance(([1000, 77777], [5, 8], [t0 + 1, t0 + 2]))
    np.testing.assert_allclose(emb, pred.embed_all(t0 + 3), atol=1e-6)

    assert main(["score", str(path), str(tmp_path / "pairs.csv"), "-o", str(tmp_path / "s.csv"), "--no-progress"]) == 0
    assert "1 involve nodes the run never saw" in capsys.readouterr().out
    rows = [r.split(",") for r in (tmp_path / "s.csv").read_text().split()]
    assert rows[0] == ["src", "dst", "t", "score", "known"]
    assert [r[:2] for r in rows[1:]] == [["1007", "8"], ["1000", "5"], ["55", "5"]]  # the file's order
    assert [r[4] for r in rows[1:]] == ["1", "1", "0"]  # node 55 was never seen: its row says so
    want = speed.load_run(path).score([1007, 1000, 55], [8, 5, 5], [t0 + 9, t0 + 5, t0 + 5])
    np.testing.assert_allclose([float(r[3]) for r in rows[1:]], want, rtol=1e-6)


def test_cli_refusals_name_the_line_and_write_nothing(run, tmp_path, capsys):
    path, events = run
    t0 = float(events.t[-1])
    (tmp_path / "old.csv").write_text(f"src,dst,t\n1000,5,{t0 + 1}\n1000,5,{t0 + 2}\n1007,5,{t0 - 50}\n")
    (tmp_path / "oldsorted.csv").write_text(f"src,dst,t\n1000,5,{t0 - 50}\n")
    (tmp_path / "pairs.csv").write_text(f"src,dst,t\n1007,8,{t0 + 9}\n\n1000,5,{t0 - 5}\n")
    out = tmp_path / "emb.npy"
    assert main(["embed", str(path), "-o", str(out), "--events", str(tmp_path / "old.csv")]) == 2
    assert "old.csv:4: time" in capsys.readouterr().err
    assert main(["embed", str(path), "-o", str(out), "--events", str(tmp_path / "oldsorted.csv")]) == 2
    assert "oldsorted.csv:2: event at time" in capsys.readouterr().err
    assert main(["score", str(path), str(tmp_path / "pairs.csv"), "-o", str(tmp_path / "s.csv")]) == 2
    assert "pairs.csv:4: time" in capsys.readouterr().err
    assert main(["embed", str(path), "-o", str(out), "--at", str(t0 - 1)]) == 2
    assert "--at" in capsys.readouterr().err
    assert main(["embed", str(tmp_path), "-o", str(out)]) == 2
    assert "no best.json here" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv", "oldsorted.csv", "pairs.csv"]


def test_checkpoint_config_is_the_runs_and_an_older_payload_is_refused(run, tmp_path):
    path, _ = run
    metrics = json.loads((path / "metrics.json").read_text())
    pred = speed.load_run(path)
    assert pred.config == metrics["config"] and pred.net.name == metrics["model"]
    # a checkpoint whose predictor payload has another format is refused with one line, not misread
    saved = load_checkpoint(path / "best.json")
    saved.extra["predictor"]["format"] -= 1
    old = tmp_path / "old"
    old.mkdir()
    saved.save(old / "best.json")
    with pytest.raises(speed.InputError, match="written by an older version of speed"):
        speed.load_run(old)


def test_scoring_and_embedding_never_add_nodes(tmp_path):
    """Scoring is read-only: a node the run never saw is scored from a cold state (what a new
    node starts with), and is not added; only update() adds nodes."""
    import speed

    ev = speed.read_events(Path(__file__).resolve().parents[1] / "data" / "sample.csv", progress=False)
    speed.train(ev, model="jodie", epochs=1, out=tmp_path / "run", progress=False)
    pred = speed.load_run(tmp_path / "run")
    n = len(pred.node_ids)
    t = pred.t_last
    first = pred.score([573, 10**9], [288, 10**9 + 1], t=t + 1)
    pred.embed([10**9 + 2], t=t + 1)
    assert len(pred.node_ids) == n
    again = pred.score([573, 10**9 + 7], [288, 10**9 + 8], t=t + 1)
    np.testing.assert_allclose(first, again, rtol=1e-6)  # every unseen node reads the same cold state
    pred.advance(([10**9], [288], [t + 2]))
    assert len(pred.node_ids) == n + 1


def _mapped(a, folder) -> bool:
    """Whether ``a`` (an array or tensor) lies in a mapping of one of ``folder``'s safetensors files
    (Linux's /proc/self/maps), not in rows of its own."""
    ptr = a.data_ptr() if isinstance(a, torch.Tensor) else a.__array_interface__["data"][0]
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith(str(folder)) and parts[5].endswith(".safetensors"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= ptr < hi:
                return True
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's mappings (Linux)")
def test_opening_a_run_maps_its_rows_and_scoring_reads_only_what_it_touches(run, tmp_path):
    """load_run maps the node rows (memories, neighbour rings, pending events) from the run's
    tensor file and holds them as they are: scoring a few pairs materialises no per-node array,
    so its cost does not grow with the node count (benchmarks/run_open.py measured the RSS; retired, git show f837953:benchmarks/run_open.py).
    Writing to a loaded run changes that process's copy only, never the file."""
    path, events = run
    pred = speed.load_run(path)
    t = pred.t_last + 5
    ids = pred.node_ids[:5]
    before = pred.score(ids, pred.node_ids[5:10], t=t)
    state = pred.state
    rows = [m.memory for m in state.memories().values()] + [m.last_update for m in state.memories().values()]
    rows += [state.sampler.nbr, state.sampler.nbr_t, state.sampler.nbr_e, state.store.start, state.store.count]
    assert all(_mapped(a, path) for a in rows)
    digest = {p.name: p.read_bytes() for p in path.iterdir() if p.suffix == ".safetensors"}
    pred.advance((ids, pred.node_ids[5:10], np.full(5, t)))  # written in place: copy-on-write pages
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.suffix == ".safetensors"} == digest
    np.testing.assert_array_equal(speed.load_run(path).score(ids, pred.node_ids[5:10], t=t), before)
