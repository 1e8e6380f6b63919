"""docs/architecture.md's "Where to add" table, shown: each test adds a throw-away thing in
exactly the places the table names (as the files' own edit would: a row, a function, a
field), and the user-facing way in follows without another change.  A kind of state is shown
in tests/test_registries.py.  Each test makes its additions through :class:`Edits`, which
counts the files they stand for; the count must be the one the row states."""

import argparse
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

import speed
from speed.cli import main
from speed.data.readers import formats
from speed.data.readers.read import read_events
from speed.partition import api as partition_api
from speed.train import config as train_config
from speed.train import config_file, protocols, recipes
from speed.train.eval import negatives as eval_negatives
from speed.train.pac import sync
from speed.train.step import negatives as train_negatives

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
from conftest import TINY  # noqa: E402

TRAIN = {**TINY, "epochs": 1, "seed": 0}


def log(num_events=800, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 40, num_events)
    dst = rng.integers(40, 80, num_events)
    return speed.Events.from_arrays(src, dst, np.sort(rng.uniform(0, 1e4, num_events)).round(2), remap=True)


def table_row(what: str) -> str:
    rows = [r for r in DOC.read_text().splitlines() if r.startswith(f"| {what} |")]
    assert len(rows) == 1, f"no row '{what}' in docs/architecture.md's table"
    return rows[0]


def files_in(row: str) -> int:
    """The number in the row's files column."""
    return int(row.rstrip(" |").rsplit("|", 1)[1])


class Edits:
    """A test's throw-away additions, each made where the real one would be written, and the
    files they stand for: a table's row or a name set in a module is an edit of that module's
    file (``where``: the module the edit is written in, when the name is reached through
    another), a new module is a new file."""

    def __init__(self, monkeypatch):
        self.mp, self.files = monkeypatch, set()

    def mark(self, module) -> None:
        """``module``'s file is edited (by the test's own hand, e.g. a row put first)."""
        self.files.add(Path(module.__file__).resolve())

    def new_module(self, name: str) -> None:
        self.files.add(name)

    def setitem(self, module, name, key, value, where=None) -> None:
        self.mp.setitem(getattr(module, name), key, value)
        self.mark(where or module)

    def setattr(self, module, name, value, where=None) -> None:
        self.mp.setattr(module, name, value, raising=False)  # a new name, or a new value of one
        self.mark(where or module)

    def check(self, row: str) -> None:
        assert len(self.files) == files_in(table_row(row)), (row, sorted(map(str, self.files)))


@pytest.fixture
def edits(monkeypatch):
    return Edits(monkeypatch)


# ------------------------------------------------------------------------- an input format
def detect_reversed(fields, sep):  # the throw-away format's module: its detect
    return fields[0] == "REVERSED"


def test_an_input_format_is_a_module_and_a_row(tmp_path, edits):
    """A module with ``detect`` and a FormatSpec row (tried in table order)."""
    edits.new_module("data/readers/reversed.py")  # detect_reversed above
    spec = formats.FormatSpec("reversed", detect_reversed, header=True, columns=lambda n: (1, 0, 2, None))
    edits.mark(formats)
    edits.check("an input format")
    saved = dict(formats.FORMAT_SPECS)
    formats.FORMAT_SPECS.clear()  # the row goes first, as a row written above csv's would be
    formats.FORMAT_SPECS.update({"reversed": spec, **saved})
    try:
        path = tmp_path / "log.csv"
        path.write_text("REVERSED,x,t\n" + "".join(f"{100 + i},{i},{i}\n" for i in range(20)))
        ev = read_events(path)  # detected
        assert ev.meta.format == "reversed"
        assert (ev.node_ids[ev.src] == np.arange(20)).all() and (ev.node_ids[ev.dst] == np.arange(100, 120)).all()
        assert read_events(path, fmt="reversed").meta.format == "reversed"
        args = speed.cli.build_parser().parse_args(["partition", str(path), "-o", str(tmp_path / "s"),
                                                    "--format", "reversed"])
        assert args.format == "reversed"
    finally:
        formats.FORMAT_SPECS.clear()
        formats.FORMAT_SPECS.update(saved)


# ------------------------------------------------------------------------------- a model
def test_a_model_is_a_recipe_row(edits, tmp_path):
    """A Recipe row of modules that exist."""
    edits.setitem(recipes, "RECIPES", "rnn-attention", recipes.Recipe(updater="rnn", embedding="attention"))
    edits.check("a model")
    metrics = speed.train(log(), model="rnn-attention", out=tmp_path / "run", **TRAIN)
    assert metrics["model"] == "rnn-attention" and metrics["best_epoch"] == 1
    assert speed.load_run(tmp_path / "run").net.spec["name"] == "rnn-attention"  # built again from its row
    args = speed.cli.build_parser().parse_args(["train", "x", "--out", "y", "--model", "rnn-attention"])
    assert args.model == "rnn-attention"


# --------------------------------------------------------------------------- a partitioner
def test_a_partitioner_is_a_function_and_a_method_row(edits, tmp_path):
    """A run function and a Method row, in one file (a numba kernel would add the layer's
    _kernels.py)."""

    def by_parity(events, num_parts, params, timer, progress):
        with timer.stage("assign"):
            parts = (np.arange(events.num_nodes) % num_parts).astype(np.int32)
        return partition_api.MethodOutput(parts, {"stream_loads": None})

    edits.setattr(partition_api, "by_parity", by_parity)
    edits.setitem(partition_api, "REGISTRY", "parity", partition_api.Method("parity", by_parity, ("seed",),
                                                                          vertex_cut=False))
    edits.check("a partitioner")
    res = speed.partition(log(), 2, method="parity")
    assert (res.node_parts == np.arange(res.node_parts.size) % 2).all()
    assert main(["partition", str(_csv(tmp_path)), "-o", str(tmp_path / "s"), "--parts", "2", "--method",
                 "parity", "--no-progress"]) == 0
    assert speed.load_shards(tmp_path / "s").manifest["method"] == "parity"


def _csv(tmp_path):
    ev = log()
    path = tmp_path / "log.csv"
    path.write_text("src,dst,t\n" + "".join(f"{s},{d},{t}\n" for s, d, t in zip(ev.src, ev.dst, ev.t_float())))
    return path


# ----------------------------------------------------------------------- a training option
def test_a_training_option_is_a_config_field(monkeypatch, edits, tmp_path):
    """A TrainConfig field with its help, choices and flag in its metadata; the CLI option and
    the config-file key follow."""
    extended = dataclasses.make_dataclass(
        "TrainConfig", [("warmup", str, train_config._opt("none", "a throw-away option", choices=("none", "linear")))],
        bases=(train_config.TrainConfig,))
    edits.setattr(train_config, "TrainConfig", extended)
    monkeypatch.setattr(config_file, "TrainConfig", extended)  # its import of the class, not an edit
    edits.check("a training option")
    args = speed.cli.build_parser().parse_args(["train", "x", "--out", "y", "--warmup", "linear"])
    assert args.warmup == "linear"
    with pytest.raises(SystemExit):  # its choices too
        speed.cli.build_parser().parse_args(["train", "x", "--out", "y", "--warmup", "cosine"])
    (tmp_path / "c.toml").write_text('warmup = "linear"\n')
    assert config_file.load_config_file(tmp_path / "c.toml")["warmup"] == "linear"
    assert extended(warmup="linear").validate().warmup == "linear"
    with pytest.raises(train_config.ConfigError, match="warmup"):
        extended(warmup="cosine").validate()


# ---------------------------------------------------------------------------- a sync rule
def test_a_sync_rule_is_a_name_and_a_function(edits):
    """Its name in config.SYNC_RULES and its function in pac/sync.py's COMBINE."""

    def first_rank(states, last, valid, latest):  # rank 0's state, whatever its time
        return states[0], last[0]

    edits.setitem(train_config, "SYNC_RULES", "first", "rank 0's state")
    edits.setitem(sync, "COMBINE", "first", first_rank)
    edits.check("a sync rule")
    assert train_config.TrainConfig(sync="first").validate().sync == "first"
    import torch

    states = torch.arange(12, dtype=torch.float32).reshape(2, 3, 2)
    last = torch.tensor([[1.0, 5.0, 2.0], [3.0, 4.0, 6.0]])
    s, lu = sync.combine_shared(states, last, "first")
    assert torch.equal(s, states[0]) and torch.equal(lu, last[0])
    args = speed.cli.build_parser().parse_args(["train", "x", "--out", "y", "--sync", "first"])
    assert args.sync == "first"


# --------------------------------------------------------------------- an evaluation protocol
def test_an_evaluation_protocol_is_a_row(edits, tmp_path):
    """When its fields take values the evaluator has: one Protocol row."""
    row = dataclasses.replace(protocols.PROTOCOLS["tgn"], name="tgn-transductive", new_node_fraction=0.0,
                              new_node_pass=False, transductive=True, title="TGN, transductive")
    edits.setitem(protocols, "PROTOCOLS", "tgn-transductive", row)
    edits.check("an evaluation protocol")
    metrics = speed.train(log(), model="tgn", protocol="tgn-transductive", **TRAIN)
    assert metrics["protocol"] == "tgn-transductive"
    assert set(metrics["test"]) == {"transductive"}  # no held-out nodes, no new-node pass
    args = speed.cli.build_parser().parse_args(["train", "x", "--out", "y", "--protocol", "tgn-transductive"])
    assert args.protocol == "tgn-transductive"


# --------------------------------------------------------------- a training negative sampler
def test_a_training_sampler_is_a_subclass_in_one_file(edits):
    """A NegativeSampler subclass in step/negatives.py, made TRAINING_SAMPLER."""
    drawn = []

    class Lowest(train_negatives.NegativeSampler):
        def __init__(self, pool, seed):
            self.pool = pool

        def next_edges(self, n):
            drawn.append(n)
            return None, np.full(n, self.pool.min(), dtype=np.int64)

    edits.setattr(train_negatives, "Lowest", Lowest)
    edits.setattr(train_negatives, "TRAINING_SAMPLER", Lowest)
    edits.check("a training negative sampler")
    ev = log()
    metrics = speed.train(ev, model="tgn", **TRAIN)
    assert sum(drawn) == metrics["data"]["num_train_events"]


# ------------------------------------------------------------ an evaluation negative strategy
def test_an_evaluation_strategy_is_a_name_a_function_and_a_protocol_row(edits, tmp_path):
    """Its name in config.EVAL_STRATEGIES, its drawing in eval/negatives.py's STRATEGIES, and
    the protocol rows that offer it."""

    def lowest(period):
        return None, np.full(period.src.size, period.dst_pool.min(), dtype=np.int64)

    edits.setattr(train_config, "EVAL_STRATEGIES", train_config.EVAL_STRATEGIES + ("lowest",))
    edits.setitem(eval_negatives, "STRATEGIES", "lowest", lowest)
    dyglib = protocols.PROTOCOLS["dyglib"]
    edits.setitem(protocols, "PROTOCOLS", "dyglib", dataclasses.replace(dyglib, strategies=dyglib.strategies + ("lowest",)))
    edits.check("an evaluation negative strategy")
    ev = log()
    speed.train(ev, model="tgn", protocol="dyglib", eval_negatives="lowest", out=tmp_path / "run", **TRAIN)
    saved = np.load(tmp_path / "run" / "negatives.npz")
    assert str(saved["strategy"]) == "lowest"
    assert (saved["test_dst"] == saved["test_dst"].min()).all() and saved["test_dst"].size > 0


# ----------------------------------------------------------------------------- a subcommand
def test_a_subcommand_is_a_parser_and_a_function(edits, capsys):
    """Its parser in cli/parser.py:build_parser and its function in cli/commands.py:COMMANDS."""
    from speed.cli import commands as cli_commands
    from speed.cli import parser as cli_parser

    build = speed.cli.build_parser

    def with_hello(unset=False):  # what the parser's own lines would add
        parser = build(unset)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.add_parser("hello").add_argument("name")
        return parser

    edits.setattr(speed.cli, "build_parser", with_hello, where=cli_parser)  # the command reads it here
    edits.setitem(speed.cli, "COMMANDS", "hello", lambda args: print(f"hello {args.name}") or 0, where=cli_commands)
    edits.check("a subcommand")
    assert main(["hello", "you"]) == 0
    assert capsys.readouterr().out == "hello you\n"


def test_every_row_of_the_table_is_shown_here():
    rows = [r for r in DOC.read_text().split("## Where to add", 1)[1].split("\n## ", 1)[0].splitlines()
            if r.startswith("| ") and not r.startswith("| to add") and not r.startswith("|---")]
    shown = set(re.findall(r'(?:table_row|check)\("([^"]+)"\)', Path(__file__).read_text()))
    named = {r.split("|")[1].strip() for r in rows}
    assert named - shown == {"a model with a new kind of state"}, named - shown  # tests/test_registries.py
    assert all(r.rstrip(" |").rsplit("|", 1)[1].strip().isdigit() for r in rows), rows
