"""Evaluation negatives (random / historical / inductive) and their use in runs."""

import json

import numpy as np
import pytest

import speed
from conftest import random_stream
from speed.train.eval.metrics import link_metrics


def pair_set(src, dst):
    return set(zip(src.tolist(), dst.tolist()))


def test_runs_report_each_strategy_on_the_same_negatives(tmp_path):
    rng = np.random.default_rng(0)
    src, dst, t = random_stream(rng, 60, 1500)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=60)
    results = {}
    for strategy in ("random", "historical", "inductive"):
        for model in ("jodie", "tgn"):
            out = tmp_path / f"{strategy}-{model}"
            m = speed.train(ev, model=model, out=out, epochs=1, batch_size=100, memory_dim=8, time_dim=8,
                            embedding_dim=8, neighbors=3, eval_negatives=strategy, mrr_negatives=5, progress=False,
                            protocol="dyglib")
            assert m["config"]["eval_negatives"] == strategy
            assert {"ap", "auc", "mrr", "hits@1", "hits@10"} <= set(m["test"]["transductive"])
            with np.load(out / "negatives.npz") as z:
                results[strategy, model] = {k: z[k] for k in z.files}
    for strategy in ("random", "historical", "inductive"):
        a, b = results[strategy, "jodie"], results[strategy, "tgn"]
        assert all(np.array_equal(a[k], b[k]) for k in a)  # paired: every model scores the same negatives
        assert str(a["strategy"]) == strategy
    assert (results["random", "tgn"]["test_src"] == -1).all()  # random keeps each event's source
    assert (results["historical", "tgn"]["test_src"] >= 0).all()
    assert not np.array_equal(results["historical", "tgn"]["test_dst"], results["random", "tgn"]["test_dst"])


def test_unknown_strategy_is_a_config_error(tmp_path):
    ev = speed.Events.from_arrays([0, 1, 2, 3] * 10, [1, 2, 3, 0] * 10, np.arange(40))
    with pytest.raises(speed.InputError, match="eval_negatives"):
        speed.train(ev, out=tmp_path / "r", epochs=1, eval_negatives="hard")


def test_edgebank_by_hand():
    from speed.train.eval.edgebank import EdgeBank

    ev = speed.Events.from_arrays([0, 1, 0, 2], [1, 2, 2, 0], [0.0, 1.0, 5.0, 9.0], num_nodes=3)
    for mode, window, want in (("unlimited", None, [1.0, 1.0, 0.0, 0.0]), ("window", 4.0, [0.0, 1.0, 0.0, 0.0])):
        bank = EdgeBank(ev, mode, window)
        bank.absorb(bank.plan([], [], events=(np.array([0, 1]), np.array([1, 2]), np.array([0.0, 1.0]),
                                               np.array([0, 1]))))  # (0,1) at 0, (1,2) at 1
        z_src = bank.compute(bank.plan([0, 1, 1, 2], [5.0] * 4))[0]
        z_dst = bank.compute(bank.plan([1, 2, 0, 0], [5.0] * 4))[0]
        # (0,1) last seen at 0: 5 s ago; (1,2) at 1: 4 s ago; (1,0) never; (2,0) not yet
        assert bank.score(z_src, z_dst).tolist() == want, mode


def test_edgebank_runs_like_a_model_from_the_cli(tmp_path, capsys):
    from speed.cli import main

    rng = np.random.default_rng(1)
    src, dst, t = random_stream(rng, 40, 1200)
    log = tmp_path / "log.csv"
    log.write_text("src,dst,t\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(src, dst, t)))
    ev = speed.read_events(log)
    split = speed.chronological_split(ev)
    for model in ("edgebank", "edgebank-window"):
        out = tmp_path / model
        assert main(["train", str(log), "--out", str(out), "--model", model, "--mrr-negatives", "4",
                     "--eval-negatives", "historical", "--protocol", "dyglib", "--no-progress"]) == 0
        m = json.loads((out / "metrics.json").read_text())
        assert m["config"]["model"] == model and m["edgebank"]["mode"] == ("unlimited" if model == "edgebank"
                                                                            else "window")
        assert "mrr" in m["test"]["transductive"]
        # the test AP against a plain-Python EdgeBank over the saved negatives: a pair scores 1 if it
        # occurred (within the window) among the masked training events, the validation events and
        # the test batches before this one
        with np.load(out / "negatives.npz") as z:
            neg_src, neg_dst, eids = z["test_src"], z["test_dst"], z["test_eid"]
        window = m["edgebank"]["window"]
        seen = {}
        for i in np.flatnonzero(split.train_mask):
            seen[ev.src[i], ev.dst[i]] = ev.t[i]
        for i in range(split.num_train, split.num_train + split.num_val):
            seen[ev.src[i], ev.dst[i]] = ev.t[i]
        pos, neg = [], []
        for a in range(0, len(eids), 200):
            batch = eids[a:a + 200]
            for k, i in enumerate(batch, start=a):
                for pair, out_list in (((ev.src[i], ev.dst[i]), pos), ((neg_src[k], neg_dst[k]), neg)):
                    last = seen.get(pair)
                    out_list.append(float(last is not None and (window is None or last >= ev.t[i] - window)))
            for i in batch:
                seen[ev.src[i], ev.dst[i]] = ev.t[i]
        pos, neg = np.array(pos), np.array(neg)
        got = m["test"]["transductive"]
        assert got["pooled"]["ap"] == pytest.approx(link_metrics(pos, neg)["ap"], abs=1e-12), model
        per_batch = np.mean([link_metrics(pos[a:a + 200], neg[a:a + 200])["ap"] for a in range(0, pos.size, 200)])
        assert got["ap"] == got["per_batch"]["ap"] == pytest.approx(per_batch, abs=1e-12), model
    capsys.readouterr()


def test_true_negative_counts_equal_a_lookup_in_every_pair_of_the_log(monkeypatch):
    """The count of negatives that are real edges streams the log a window at a time; it equals
    the lookup in all of the log's pairs at once, windows that split the log included."""
    from speed.train.eval import evaluator as ev_mod

    rng = np.random.default_rng(5)
    n = 4000
    ev = speed.Events.from_arrays(rng.integers(0, 30, n), rng.integers(30, 45, n), np.sort(rng.integers(0, 900, n)))
    split = speed.chronological_split(ev)
    keys = np.unique(ev.src * np.int64(ev.num_nodes) + ev.dst)
    for strategy, protocol in (("random", "tgn"), ("historical", "dyglib")):
        evaluator = ev_mod.Evaluator(ev, split, 100, seed=0, strategy=strategy, protocol=protocol)
        expected = {}
        for p in ("val", "test"):
            src, neg = evaluator.negative_edges(p)
            src = ev.src[evaluator.period(p)] if src is None else src
            expected[p] = int(np.isin(src * np.int64(ev.num_nodes) + neg, keys).sum())
        assert 0 < expected["val"] and 0 < expected["test"]  # some negatives are real pairs here
        for window in (1 << 20, 333):
            monkeypatch.setattr(ev_mod, "PREPARE_WINDOW", window)
            assert evaluator.true_negative_counts() == expected
