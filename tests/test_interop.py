"""DGL interoperability and the behaviour without DGL."""

import sys

import numpy as np
import pytest

import speed
from conftest import random_stream


@pytest.fixture
def dgl():
    return pytest.importorskip("dgl")


def rich_events(seed=0, n=60, e=500):
    rng = np.random.default_rng(seed)
    src, dst, t = random_stream(rng, n, e)
    return speed.Events.from_arrays(src, dst, t.astype(np.float64) / 7, msg=rng.random((e, 4)),
                                    label=rng.integers(0, 2, e), num_nodes=n + 5,
                                    node_ids=np.arange(100, 100 + n + 5))


def test_round_trip_preserves_every_event_and_attribute(dgl):
    ev = rich_events()
    g = speed.to_dgl(ev)
    assert g.num_edges() == len(ev) and g.num_nodes() == ev.num_nodes
    assert set(g.edata.keys()) >= {"t", "msg", "label", "eid"}
    back = speed.from_dgl(g)
    for name in ("src", "dst", "t", "eid", "msg", "label", "node_ids"):
        np.testing.assert_array_equal(getattr(back, name), getattr(ev, name), err_msg=name)
    assert back.num_nodes == ev.num_nodes


def test_from_dgl_sorts_and_validates(dgl):
    import torch

    g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))
    g.edata["ts"] = torch.tensor([3.0, 1.0, 2.0])
    ev = speed.from_dgl(g, time_key="ts")
    assert list(ev.t) == [1.0, 2.0, 3.0] and list(ev.src) == [1, 2, 0] and not ev.meta.sorted_input
    with pytest.raises(speed.InputError, match="no edge feature 't'"):
        speed.from_dgl(g)


def test_part_graphs_match_shards(dgl, tmp_path):
    ev = rich_events(n=200, e=3000)
    res = speed.partition(ev, 3, topk=0.05)
    sh = speed.load_shards(res.save(tmp_path / "s"))
    files = speed.save_dgl_parts(sh, tmp_path / "dgl")
    for p, f in enumerate(files):
        g = dgl.load_graphs(str(f))[0][0]
        part = sh.part(p)
        nid = g.ndata[dgl.NID].numpy()
        src, dst = (x.numpy() for x in g.edges())
        np.testing.assert_array_equal(nid[src], part.src)
        np.testing.assert_array_equal(nid[dst], part.dst)
        np.testing.assert_array_equal(g.edata[dgl.EID].numpy(), part.eid)
        n_shared = len(sh.shared)
        assert set(nid[:n_shared]) == set(sh.shared) and g.ndata["shared"].numpy()[:n_shared].all()


def test_cli_writes_dgl_parts(dgl, tmp_path):
    from speed.cli import main

    log = speed.write_generated(tmp_path / "log.csv", 200, 2000, seed=0)
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--parts", "2", "--dgl"]) == 0
    assert sorted(x.name for x in (tmp_path / "s" / "dgl").iterdir()) == ["part0.bin", "part1.bin"]


def test_without_dgl_core_works_and_calls_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "dgl", None)  # makes `import dgl` raise ImportError
    ev = rich_events()
    speed.partition(ev, 2)  # the core never needs DGL
    for call in (lambda: speed.to_dgl(ev), lambda: speed.partition(ev, 2, method="metis")):
        with pytest.raises(speed.MissingDependencyError, match=r"pip install 'speed-tig\[dgl\]'"):
            call()
    from speed.cli import main

    log = speed.write_generated(tmp_path / "log.csv", 100, 1000, seed=0)
    assert main(["partition", str(log), "-o", str(tmp_path / "s"), "--method", "metis"]) == 2
    assert not (tmp_path / "s").exists()


def test_import_speed_does_not_import_dgl():
    import subprocess

    code = "import sys, speed; speed.partition; print('dgl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_pyg_round_trip():
    pytest.importorskip("torch_geometric")
    import torch

    rng = np.random.default_rng(0)
    src, dst, t = random_stream(rng, 30, 400)
    ev = speed.Events.from_arrays(src, dst, t, num_nodes=35, msg=rng.random((400, 4)).astype(np.float32),
                                  label=rng.integers(0, 2, 400))
    data = speed.to_pyg(ev)
    assert data.msg.shape == (400, 4) and torch.equal(data.src, torch.from_numpy(ev.src))
    back = speed.from_pyg(data, num_nodes=ev.num_nodes)
    for k in ("src", "dst", "t", "msg", "label"):
        assert np.array_equal(getattr(back, k), getattr(ev, k)), k
    assert back.num_nodes == 35 and back.meta.format == "pyg"
    assert speed.from_pyg(data).num_nodes == int(max(ev.src.max(), ev.dst.max())) + 1  # PyG's own count
    # PyG's own temporal batching takes it
    from torch_geometric.loader import TemporalDataLoader

    assert sum(b.num_events for b in TemporalDataLoader(data, batch_size=100)) == 400


def test_from_pyg_refuses_data_without_times():
    pytest.importorskip("torch_geometric")
    import torch
    from torch_geometric.data import TemporalData

    with pytest.raises(speed.InputError, match="'t'"):
        speed.from_pyg(TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2])))
