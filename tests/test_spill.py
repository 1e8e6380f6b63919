"""Back-ups spilled to disk (speed.train.state.spill): the same arrays as in-memory copies,
written a window at a time, files gone at once, and runs that spill equal runs that do not."""

import os

import numpy as np
import pytest
import torch

import speed
from speed.train import TrainConfig, Trainer
from speed.train.state import spill as S

from conftest import TINY, generated_shards  # noqa: E402  (TINY: the tests' one small model)


@pytest.fixture
def small_windows(monkeypatch):
    monkeypatch.setattr(S, "SPILL_WINDOW_BYTES", 4096)  # many windows on small arrays


def test_spilled_copies_equal_the_arrays_and_leave_no_file(tmp_path, small_windows):
    sp = S.Spill(directory=str(tmp_path), min_bytes=0)
    rng = np.random.default_rng(0)
    a = rng.random((5000, 3))
    t = torch.randn(4000, 7)
    ca, ct = sp.copy(a), sp.copy(t)
    assert isinstance(ca, np.memmap) and np.array_equal(ca, a)
    assert isinstance(ct, torch.Tensor) and torch.equal(ct, t)
    rows = rng.permutation(4000)[:2500]
    taken = sp.take(t, rows)
    assert torch.equal(taken, t[rows])
    assert os.listdir(tmp_path) == []  # unlinked as soon as mapped
    assert sp.bytes_spilled == a.nbytes + t.numel() * 4 + 2500 * 7 * 4
    # the copy is the back-up's own: changing the source leaves it
    a[:] = 0
    assert ca.sum() > 0


def test_small_arrays_stay_in_memory(tmp_path):
    sp = S.Spill(directory=str(tmp_path), min_bytes=1 << 20)
    a = np.arange(10)
    c = sp.copy(a)
    assert not isinstance(c, np.memmap) and np.array_equal(c, a) and sp.bytes_spilled == 0
    assert S.Keep().take(torch.arange(10.0), np.array([3, 1])).tolist() == [3.0, 1.0]


def test_reading_back_goes_a_window_at_a_time(small_windows):
    sp = S.Spill(min_bytes=0)
    src = np.arange(30000, dtype=np.float64).reshape(10000, 3)
    spilled = sp.copy(src)
    spans = list(S.windows(spilled))
    assert len(spans) > 10 and spans[0][0] == 0 and spans[-1][1] == 10000
    assert all(b[0] == a[1] for a, b in zip(spans, spans[1:]))
    assert list(S.windows(src)) == [(0, 10000)]  # in memory: one window
    rows = np.random.default_rng(1).permutation(10000)
    dst = np.zeros_like(src)
    S.put_rows(dst, rows, spilled)
    assert np.array_equal(dst[rows], src)
    dt = torch.zeros(10000, 3, dtype=torch.float64)
    S.put_rows(dt, rows, torch.from_numpy(np.asarray(spilled)))
    assert np.array_equal(dt.numpy()[rows], src)


def test_a_spilled_sampler_state_is_copied_into_the_rings_held(small_windows):
    # restored without adopting: into the arrays the sampler holds (no second set beside them),
    # the same values, and the back-up left as it was by the writes that follow
    from speed.train.state.sampler import RecentNeighborSampler

    rng = np.random.default_rng(2)
    a = RecentNeighborSampler(3000, 5)
    a.push(rng.integers(0, 3000, 20000), rng.integers(0, 3000, 20000), np.sort(rng.random(20000)),
           np.arange(20000))
    a.flush(2.0)
    saved = a.state_dict(keep=S.Spill(min_bytes=0))
    assert isinstance(saved["nbr"], np.memmap)
    b = RecentNeighborSampler(3000, 5)
    held = {name: getattr(b, name) for name in ("nbr", "nbr_t", "nbr_e", "head", "count")}
    b.load_state_dict(saved)
    for name, arr in held.items():
        assert getattr(b, name) is arr  # the rings held, written in place
        assert np.array_equal(arr, getattr(a, name))
    b.push(np.arange(3000), np.arange(3000)[::-1], np.full(3000, 3.0), np.arange(3000))
    b.flush(4.0)
    assert not np.array_equal(b.nbr, a.nbr)
    assert np.array_equal(np.asarray(saved["nbr"]), a.nbr)  # the back-up is not the state
    c = RecentNeighborSampler(10, 5)  # rings of another size: new ones, filled the same way
    c.load_state_dict(saved)
    assert c.num_nodes == 3000 and not isinstance(c.nbr, np.memmap)
    for name in held:
        assert np.array_equal(getattr(c, name), getattr(a, name))


def _fit(log):
    events = speed.read_events(log, progress=False)
    split = speed.chronological_split(events, seed=0)
    cfg = TrainConfig(model="tige", epochs=1, deterministic=True, seed=0, **TINY).validate()
    return Trainer.local(events, split, cfg).fit()


def test_an_evaluation_that_spills_its_period_start_gives_the_same_figures(tmp_path, monkeypatch, small_windows):
    log = speed.write_generated(tmp_path / "log.csv", 200, 2500, seed=3)
    kept = _fit(log)
    monkeypatch.setattr(S, "SPILL_MIN_BYTES", 0)
    spilled = _fit(log)
    assert spilled["test"] == kept["test"] and spilled["val"] == kept["val"]
    assert "inductive" in spilled["test"]  # the new-node pass ran from the spilled start


def test_a_cycling_rank_that_spills_its_pass_gives_the_same_run(tmp_path, monkeypatch):
    shards = generated_shards(tmp_path, 300, 3000, 1, 2, "--topk", "5")
    kw = dict(model="tgn", epochs=1, seed=0, nproc=2, deterministic=True, **(TINY | {"batch_size": 60}))
    kept = speed.train(shards, out=tmp_path / "kept", **kw)
    monkeypatch.setenv("SPEED_SPILL_MIN_BYTES", "0")  # the spawned ranks spill every array
    monkeypatch.setenv("SPEED_SPILL_WINDOW_BYTES", "4096")
    spilled = speed.train(shards, out=tmp_path / "spilled", **kw)
    ranks = kept["epochs"][0]["ranks"]
    assert any(1 < r["passes"] != int(r["passes"]) for r in ranks)  # a rank restored its last pass
    assert [e["loss"] for e in spilled["epochs"]] == [e["loss"] for e in kept["epochs"]]
    assert spilled["test"] == kept["test"]
    # best.json's rows, written by their owners from the spilled test-period start and end
    for at in ("test", "end"):
        a, b = (speed.load_run(tmp_path / name, at=at) for name in ("kept", "spilled"))
        nodes = a.node_ids[:200]
        np.testing.assert_array_equal(a.embed(nodes), b.embed(nodes))
