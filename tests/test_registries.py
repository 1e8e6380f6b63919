"""The registries decide: a model with a new kind of per-node state is its recipe row
(:data:`speed.train.recipes.RECIPES`) and its component (:data:`speed.train.state.components.COMPONENTS`),
nothing else; and no model, protocol or component name is compared outside its row."""

import ast
from pathlib import Path

import numpy as np
import torch

from speed.data.events import Events
from speed.data.split import chronological_split
from speed.train import recipes
from speed.train.config import TrainConfig
from speed.train.step.engine import Batches, Engine
from speed.train.step.negatives import RandomNegatives, negative_pool
from speed.train.protocols import PROTOCOLS
from speed.train.config import BASELINES
from speed.data.readers.formats import FORMAT_SPECS
from speed.train.step.loader import EventStream
from speed.train.model.network import build_model
from speed.train.run.predictor import load_run
from speed.train.state import components
from speed.train.state.memory import NodeMemory
from speed.train.loop.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1] / "speed"


class BatchCount(components.StateComponent):
    """A throw-away kind of state: how many batches each node took part in (a row-aligned
    memory, so it is backed up, gathered and checkpointed like the main one)."""

    def __init__(self, num_nodes, memory_dim, embedding_dim, device=None):
        super().__init__(num_nodes, memory_dim, embedding_dim, device)
        self.counts = NodeMemory(num_nodes, 1, device)

    def memories(self):
        return {"batch_count": self.counts}

    def absorb(self, plan, z):
        seen, last = self.counts.read(plan.ob_node)
        self.counts.write(plan.ob_node, seen + 1, last)


def register(monkeypatch):
    """The two places a new model with a new kind of state is written: its component (here
    registered as components.py's ``@component`` does) and its recipe row."""
    monkeypatch.setitem(components.COMPONENTS, "batch_count", BatchCount)
    BatchCount.name = BatchCount.state_key = "batch_count"
    monkeypatch.setitem(recipes.RECIPES, "counted", recipes.Recipe(updater="gru", embedding="attention",
                                                                   state=("batch_count",)))


def stream(num_nodes=30, num_events=600, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_events)
    dst = (src + 1 + rng.integers(0, num_nodes - 1, num_events)) % num_nodes
    return Events.from_arrays(src, dst, np.arange(num_events, dtype=np.float64), num_nodes=num_nodes)


def test_a_new_kind_of_state_is_a_recipe_row_and_a_component(monkeypatch):
    register(monkeypatch)
    ev = stream()
    model = build_model("counted", ev.num_nodes, memory_dim=8, time_dim=8, embedding_dim=8)
    engine = Engine(model, torch.optim.Adam(model.net.parameters(), lr=1e-3))
    index = np.arange(len(ev))
    engine.run_epoch(EventStream(ev), Batches(index, 100), RandomNegatives(negative_pool(ev.src, ev.dst, False), 0))
    expected = np.zeros(ev.num_nodes)
    for b in range(6):
        expected[np.unique(np.concatenate([ev.src[b * 100:(b + 1) * 100], ev.dst[b * 100:(b + 1) * 100]]))] += 1
    counts = model.state.snapshots.memory_dict()["batch_count.memory"][:, 0].numpy()
    assert np.array_equal(counts, expected)


def test_a_new_model_trains_saves_and_loads_as_a_run(monkeypatch, tmp_path):
    register(monkeypatch)
    ev = stream(num_events=1000)
    split = chronological_split(ev, new_node_fraction=0.0)
    config = TrainConfig(epochs=1, batch_size=100, memory_dim=8, time_dim=8, embedding_dim=8, progress=False,
                         num_threads=1).validate()
    model = build_model("counted", ev.num_nodes, memory_dim=8, time_dim=8, embedding_dim=8)
    metrics = Trainer.local(ev, split, config, model=model, out=tmp_path / "run").fit()
    assert metrics["best_epoch"] == 1
    assert set(metrics["test"]) == {"transductive"}  # no held-out nodes: no inductive figures
    pred = load_run(tmp_path / "run")
    assert pred.net.name == "counted"
    counts = pred.state.snapshots.memory_dict()["batch_count.memory"][:, 0]
    # every node took part in some batch of the log, and no node in more batches than the best
    # epoch's training, validation and test periods have
    batches = sum(-(-int(n) // 100) for n in (split.num_train, split.num_val, split.num_test))
    assert counts.min() >= 1 and counts.max() <= batches
    assert pred.score([0], [1]).shape == (1,)


REGISTRY_NAMES = set(recipes.RECIPES) | set(PROTOCOLS) | set(components.COMPONENTS) | set(BASELINES) | \
    set(FORMAT_SPECS)
# the rows themselves, and config.py, where the baselines' names are registered
REGISTRY_FILES = {"recipes.py", "protocols.py", "components.py", "formats.py", "config.py"}


def name_comparisons(tree):
    """Lines comparing anything to a registered name (``x == "tige"``, ``x in ("tgn", ...)``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left] + node.comparators:
                found += [f"{node.lineno} {c.value!r}" for c in ast.walk(side)
                          if isinstance(c, ast.Constant) and c.value in REGISTRY_NAMES]
    return found


def test_no_registered_name_is_compared_outside_its_registry():
    found = [f"{p.relative_to(ROOT.parent)}:{f}" for p in sorted(ROOT.rglob("*.py")) if p.name not in REGISTRY_FILES
             for f in name_comparisons(ast.parse(p.read_text()))]
    assert not found, "registered names compared outside their rows: " + "; ".join(found)


def test_the_name_check_finds_comparisons():
    src = "if cfg.model == 'tige': pass\nok = p.name in ('tgn', 'dyglib')\nx = {'tgb': 1}\n"
    assert name_comparisons(ast.parse(src)) == ["1 'tige'", "2 'tgn'", "2 'dyglib'"]
