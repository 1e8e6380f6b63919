"""A step costs O(its batch): writes go to the rows they name, and the growing structures
(pending events, TIGE's event values) grow by doubling instead of being copied every step.

These are structural checks (storage identity, counts of reallocations), not timings: a write
that copied the whole state would pass any exactness test and still make a step's cost grow
with the graph.
"""

import numpy as np
import torch

import speed
from speed.train.model.network import build_model


def _log(n_nodes, n_events, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n_nodes, n_events)
    dst = rng.integers(0, n_nodes, n_events)
    t = np.sort(rng.integers(0, n_events // 3, n_events)).astype(np.float64)
    return src, dst, t


def _storages(model):
    return {name: (m.memory.data_ptr(), m.last_update.data_ptr()) for name, m in model.state.memories().items()}


def test_memory_writes_keep_the_storage():
    """Steps, a settle, an exchange of rows and a back-up round trip write the memories in
    place: the tensors keep their storage (an out-of-place write would allocate, and copy, all
    num_nodes rows every time)."""
    model = build_model("tige", 5000, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2).eval()
    before = _storages(model)
    src, dst, t = _log(5000, 1500)
    for a in range(0, 1500, 50):
        model.step_events(src[a:a + 50], dst[a:a + 50], t[a:a + 50], np.arange(a, a + 50))
    ids = torch.arange(0, 5000, 7)
    model.settle(ids)
    rows = model.state.rows.read(ids)
    model.state.rows.load(ids, rows)
    snap = model.state.snapshots.backup()
    model.state.reset_memories()
    model.state.snapshots.restore(snap)
    assert _storages(model) == before
    # and the rows did change: the writes happened
    assert model.state.memory.memory.abs().sum() > 0


def test_training_epoch_keeps_the_storage():
    ev = speed.generate_events(num_nodes=300, num_events=2000, seed=1)
    split = speed.chronological_split(ev, new_node_fraction=0.0)
    from speed.train import TrainConfig, Trainer

    tr = Trainer.local(ev, split, TrainConfig(model="tgn", memory_dim=4, time_dim=4, embedding_dim=4, neighbors=3,
                                        batch_size=100, progress=False, new_node_fraction=0.0))
    before = _storages(tr.model)
    tr.training.train_epoch(1)
    assert _storages(tr.model) == before


def test_pending_store_grows_by_doubling():
    """Each step appends its events' entries; the flat arrays are reallocated only when full
    (doubling) or compacted (after 3x the live entries were appended): a handful of times in
    400 steps, where copying on every write reallocated them 400 times."""
    model = build_model("tgn", 100_000, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2).eval()
    src, dst, t = _log(100_000, 20_000, seed=2)
    store = model.state.store
    changes, last = 0, store.t
    for a in range(0, 20_000, 50):
        model.step_events(src[a:a + 50], dst[a:a + 50], t[a:a + 50], np.arange(a, a + 50))
        changes += store.t is not last
        last = store.t
        assert store.alive == int(store.count.sum())  # the running count is exact
    assert changes <= 12, changes


def test_tige_event_values_grow_by_doubling():
    model = build_model("tige", 50_000, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2).eval()
    (dual,) = model.state.components
    src, dst, t = _log(50_000, 20_000, seed=3)
    changes, last = 0, dual.values._eid
    for a in range(0, 20_000, 50):
        model.step_events(src[a:a + 50], dst[a:a + 50], t[a:a + 50], np.arange(a, a + 50))
        changes += dual.values._eid is not last
        last = dual.values._eid
    assert changes <= 16, changes


def test_allocator_tuning_applies_once_and_can_be_turned_off():
    import subprocess
    import sys

    code = "from speed._util import tune_allocator as t; print(t(), t())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "SPEED_MALLOC_TUNING": "0"}).stdout.split()
    if sys.platform.startswith("linux"):
        assert on == ["True", "True"]
    assert off == ["False", "False"]


def test_state_placement():
    """--state-device auto keeps the memories on an accelerator while they take at most half of
    its free memory, in host memory beyond; on a CPU the two are one place; an explicit setting
    wins."""
    from speed.train.model.build import place_state, state_placement

    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert state_placement("auto", gpu, 400, free_bytes=800) == "device"
    assert state_placement("auto", gpu, 401, free_bytes=800) == "host"
    assert state_placement("auto", cpu, 10**15) == "device"
    assert state_placement("host", cpu, 1) == "host" and state_placement("device", gpu, 10**15, 1) == "device"
    model = build_model("tgn", 300, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2)
    assert place_state(model, "host", cpu, 300) == "host" and model.state.device == cpu
    with np.testing.assert_raises(speed.InputError):
        speed.train(speed.Events.from_arrays(*_log(50, 300)), model="jodie", epochs=1, state_device="gpu",
                    progress=False)


def test_checkpoint_arrays_are_written_as_tensors_and_mapped_back(tmp_path):
    """A checkpoint's arrays (neighbour rings, pending events) go into its safetensors file and
    the JSON beside it stays small; reading maps them (no copy made until written to), and they
    come back as the same arrays, other values as they were.  The tensor file is an ordinary
    safetensors file."""
    from safetensors.numpy import load_file

    from speed.train.run import checkpoint as ckpt

    big = np.arange(2_000_000, dtype=np.int64)
    state = {"sampler": {"nbr": big, "t": big.astype(np.float64)[::2], "names": np.array(["a", "bc"])},
             "rng": (np.uint32(5), np.arange(3, dtype=np.uint32)), "w": torch.ones(3)}
    c = ckpt.Checkpoint(kind="best", epoch=1, model_name="tgn", config={}, model=state, optimizer={}, rng=[],
                        history=[], stopping={}, best={}, num_nodes=1)
    path = c.save(tmp_path / "c.json")
    assert path.stat().st_size < 10_000  # the 24 MB of arrays are in the tensor file
    (tensors,) = tmp_path.glob("c.*.safetensors")
    assert np.array_equal(load_file(tensors)["/model/sampler/nbr"], big)
    back = ckpt.load_checkpoint(path).model
    assert isinstance(back["sampler"]["nbr"], np.memmap) and np.array_equal(back["sampler"]["nbr"], big)
    assert np.array_equal(back["sampler"]["t"], big.astype(np.float64)[::2])
    assert back["sampler"]["names"].tolist() == ["a", "bc"] and back["rng"][1].dtype == np.uint32
    assert torch.equal(back["w"], torch.ones(3))
    back["sampler"]["nbr"][0] = -1  # copy-on-write: the file is not changed
    assert ckpt.load_checkpoint(path).model["sampler"]["nbr"][0] == 0


def test_the_hand_over_reads_the_memories_as_held_and_the_rings_let_flushed_events_go():
    """PAC's hand-over to the evaluation state reads the trained memories in place (a copy of
    every row, taken while both states are held, was the 10M-event run's peak); once every
    pushed event is in the rings the sampler lets its working arrays go."""
    model = build_model("tgn", 400, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=2).eval()
    src, dst, t = _log(400, 600)
    for a in range(0, 600, 50):
        model.step_events(src[a:a + 50], dst[a:a + 50], t[a:a + 50], np.arange(a, a + 50))
    copied, held = model.state.rows.read_all(), model.state.rows.read_all(views=True)
    for name, (s, lu) in held.memories.items():
        mem = model.state.memories()[name]
        assert s.data_ptr() == mem.memory.data_ptr() and lu.data_ptr() == mem.last_update.data_ptr()
        assert torch.equal(s, copied.memories[name][0]) and torch.equal(lu, copied.memories[name][1])
    assert all(torch.equal(a, b) for a, b in zip(held.pending, copied.pending))
    sampler = model.state.sampler
    later = np.arange(600, 900)
    sampler.insert(src[:300], dst[:300], t[-1] + 1 + later // 50, later)
    assert 0 < sampler.held < 300  # the last time's events wait for a later query
    sampler.flush(np.inf)
    assert sampler.held == 0 and all(a.size == 0 for a in sampler.hold.values())


def test_evaluation_inserts_the_training_period_a_window_at_a_time(monkeypatch):
    """The rings an evaluation starts from are the same whether the training period enters them
    whole or a window at a time (windows that split a timestamp's events included)."""
    from speed.train.eval import evaluator as ev_mod

    ev = speed.generate_events(num_nodes=200, num_events=3000, seed=3)
    ev = speed.Events.from_arrays(ev.src, ev.dst, np.floor(ev.t / 7.0))  # many events share a time
    split = speed.chronological_split(ev, new_node_fraction=0.1)
    states = []
    for window in (1 << 20, 97):
        monkeypatch.setattr(ev_mod, "PREPARE_WINDOW", window)
        model = build_model("tgn", ev.num_nodes, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=3).eval()
        ev_mod.Evaluator(ev, split, 100, 0).prepare(model)
        states.append(model.state.sampler.state_dict())
    whole, windows = states
    assert whole.keys() == windows.keys()
    for k in whole:
        a, b = whole[k], windows[k]
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(np.array_equal(a[x], b[x]) for x in a)
        else:
            assert np.array_equal(np.asarray(a), np.asarray(b)), k


def test_heap_trim_and_page_release_run_on_any_input(tmp_path):
    """trim_heap gives the heap's free pages back (glibc); release_arrays lets mapped pages go
    and leaves arrays in memory, views and None alone, the data unchanged."""
    import sys

    from speed._util import trim_heap
    from speed._util import release_arrays

    assert trim_heap() == sys.platform.startswith("linux")
    np.save(tmp_path / "a.npy", np.arange(100_000))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert int(mapped[::1000].sum()) == sum(range(0, 100_000, 1000))
    release_arrays([mapped, mapped[10:20], np.arange(5), None])
    assert int(mapped[::1000].sum()) == sum(range(0, 100_000, 1000))


def test_the_new_node_pass_pushes_its_neighbour_graph_a_window_at_a_time(monkeypatch):
    """The new-node pass gives the sampler the period's events a window at a time; its scores
    are those of one push of the whole period (windows that split a timestamp's events too)."""
    from speed.train.eval import evaluator as ev_mod

    ev = speed.generate_events(num_nodes=150, num_events=3000, seed=4)
    ev = speed.Events.from_arrays(ev.src, ev.dst, np.floor(ev.t / 5.0))
    split = speed.chronological_split(ev, new_node_fraction=0.2, seed=1)
    model = build_model("tgn", ev.num_nodes, memory_dim=4, time_dim=4, embedding_dim=4, neighbors=3).eval()
    evaluator = ev_mod.Evaluator(ev, split, 50, 0)
    evaluator.prepare(model)
    start = model.state.snapshots.backup()
    scores = []
    for window in (1 << 20, 29):
        monkeypatch.setattr(ev_mod, "PREPARE_WINDOW", window)
        model.state.snapshots.restore(start)
        out, _ = evaluator.evaluate(model, "val")
        scores.append(out["inductive"])
    assert scores[0]["count"] > 0 and scores[0] == scores[1]
