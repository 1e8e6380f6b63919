"""TGB datasets on disk: a fixture folder with TGB's processed files and stored negatives."""

import pickle

import numpy as np
import pytest

import speed
from speed.cli import main
from speed.train.eval.metrics import ranking_metrics

pd = pytest.importorskip("pandas")  # TGB's processed table is a pandas pickle (the dgl extra has pandas)

NAME = "tgbl-fixture"
from conftest import TINY  # noqa: E402  (the tests' one small model)
RUN = {**TINY, "epochs": 1, "seed": 0}


def make_tgb(root, n=1200, k=12, seed=0):
    """A folder as py-tgb leaves it: ml_NAME.pkl, ml_NAME_edge.pkl, NAME_{val,test}_ns_v2.pkl."""
    rng = np.random.default_rng(seed)
    folder = root / "tgbl_fixture"
    folder.mkdir()
    u = rng.integers(0, 40, n)
    i = rng.integers(40, 100, n)  # destinations after sources, as TGB numbers tgbl-wiki
    ts = np.sort(rng.integers(0, 10 ** 6, n))
    pd.DataFrame({"u": u, "i": i, "ts": ts, "idx": np.arange(1, n + 1), "w": np.ones(n)}).to_pickle(
        folder / f"ml_{NAME}.pkl")
    with open(folder / f"ml_{NAME}_edge.pkl", "wb") as f:
        pickle.dump(rng.normal(size=(n, 3)), f)
    val_time, test_time = np.quantile(ts, [0.70, 0.85])
    for period, mask in (("val", (ts > val_time) & (ts <= test_time)), ("test", ts > test_time)):
        table = {}
        for s, d, t in zip(u[mask], i[mask], ts[mask]):  # keys as TGB stores them: numpy scalars
            others = np.setdiff1d(np.arange(40, 100), i[(u == s) & (ts == t)])
            size = k if rng.random() > 0.2 else k - 5  # some lists shorter: rows are padded
            table[(s, d, t)] = rng.choice(others, size=size, replace=False)
        with open(folder / f"{NAME}_{period}_ns_v2.pkl", "wb") as f:
            pickle.dump(table, f)
    with open(folder / f"{NAME}_test_ns.pkl", "wb") as f:  # an older version, to be ignored
        pickle.dump({}, f)
    return folder, (u, i, ts, val_time, test_time)


def test_read_tgb_keeps_ids_split_and_stored_negatives(tmp_path):
    folder, (u, i, ts, val_time, test_time) = make_tgb(tmp_path)
    ev = speed.read_tgb(folder)
    assert ev.meta.format == "tgb" and ev.meta.split_times == (val_time, test_time)
    np.testing.assert_array_equal(ev.src, u)  # TGB's ids, unchanged
    np.testing.assert_array_equal(ev.dst, i)
    assert ev.msg.shape == (len(u), 3)
    cand, valid = ev.meta.eval_candidates["test"]
    assert cand.shape == (int((ts > test_time).sum()), 12)
    assert valid.sum(1).min() == 7 and valid.sum(1).max() == 12
    sp = speed.chronological_split(ev, times=ev.meta.split_times)
    assert (sp.num_train, sp.num_val, sp.num_test) == ((ts <= val_time).sum(), ((ts > val_time) & (ts <= test_time)).sum(),
                                                       (ts > test_time).sum())


def test_training_ranks_test_events_against_the_stored_negatives(tmp_path):
    folder, (u, i, ts, _, test_time) = make_tgb(tmp_path)
    m = speed.train(speed.read_tgb(folder), model="tgn", out=tmp_path / "run", **RUN)
    assert m["data"]["num_test_events"] == int((ts > test_time).sum())
    assert m["protocol"] == "tgb" and "inductive" not in m["test"]  # TGB's protocol is transductive
    ev = speed.read_tgb(folder)
    cand, valid = ev.meta.eval_candidates["test"]
    saved = np.load(tmp_path / "run" / "negatives.npz")
    np.testing.assert_array_equal(saved["test_candidates"], cand)
    # rescore the test period with the predictor: the same MRR as the run's evaluation
    pred = speed.load_run(tmp_path / "run", at="test")
    idx = np.flatnonzero(ev.t > test_time)
    pos, _, neg = pred.score_stream(ev.src[idx], ev.dst[idx], ev.t_float()[idx], msg=ev.msg[idx], candidates=cand)
    ranks = ranking_metrics(pos, neg, valid)
    assert ranks["mrr"] == pytest.approx(m["test"]["transductive"]["mrr"], abs=1e-9)
    # and from the command line
    assert main(["train", str(folder), "--format", "tgb", "--out", str(tmp_path / "cli"), "--epochs", "1",
                 "--memory-dim", "8",
                 "--time-dim", "8", "--embedding-dim", "8", "--no-progress"]) == 0


def test_tgb_folder_errors(tmp_path):
    with pytest.raises(speed.InputError, match="not a processed TGB folder"):
        speed.read_tgb(tmp_path)
    folder, (u, i, ts, _, test_time) = make_tgb(tmp_path)
    path = folder / f"{NAME}_test_ns_v2.pkl"
    with open(path, "rb") as f:
        table = pickle.load(f)
    table.pop(next(iter(table)))
    with open(path, "wb") as f:
        pickle.dump(table, f)
    with pytest.raises(speed.InputError, match=r"test_ns_v2\.pkl: no stored negatives for the event"):
        speed.read_tgb(folder)
    path.write_bytes(b"not a pickle")
    with pytest.raises(speed.InputError, match="not a readable pickle"):
        speed.read_tgb(folder)
