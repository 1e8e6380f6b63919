"""The ``speed`` command's arguments: argparse lives in this package and only here.

:func:`build_parser` builds every subcommand; ``speed train``'s options are generated from the
fields of :class:`~speed.train.config.TrainConfig` (help, choices and flag in their metadata).
"""

from __future__ import annotations

import argparse

from ..data.split import DEFAULT_NEW_NODE_FRACTION, DEFAULT_TEST, DEFAULT_VAL
from ..data.tgb import TGB_FORMAT

EXIT_INPUT = 2
UNSET = object()  # the default of every training option when finding the flags given explicitly


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2, like every other input error."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message}\n")


def _split_time(value: str) -> float:
    """A split time on the command line: a number, or an ISO-8601 date-time (no zone: UTC)."""
    import datetime

    try:
        return float(value)
    except ValueError:
        pass
    try:
        d = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or an ISO-8601 date-time: {value!r}") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return d.timestamp()


def _add_split_times(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split-times", nargs=2, type=_split_time, default=None, metavar=("T_VAL", "T_TEST"),
                   help="split at these times instead of --val/--test fractions: train t <= T_VAL, val up to "
                        "T_TEST, test after (numbers, or ISO-8601 date-times for logs with date-times)")


def _balance(value: str):
    """--balance: a number >= 0, or "off"."""
    if value.lower() in ("off", "none"):
        return None
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'off': {value!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0 or 'off', got {value!r}")
    return v


def _column(value: str):
    """A column given on the command line: a 0-based index if it is all digits, else a name."""
    return int(value) if value.isdigit() else value


def _add_reader_options(p: argparse.ArgumentParser, log_only: bool = True) -> None:
    """The reader's options; ``log_only=False`` leaves out those that concern a whole log (the
    split column, the refusal of unsorted input), for files of new events or of pairs."""
    from ..data.readers import FORMATS

    g = p.add_argument_group("input")
    g.add_argument("--format", choices=FORMATS + (TGB_FORMAT,), default=None,
                   help="input format (default: detected); tgb: a processed TGB dataset folder, whose tables are "
                        "pickles (reading them can run code: only folders you trust)")
    g.add_argument("--src-col", type=_column, default=None, metavar="C", help="source column: name or 0-based index")
    g.add_argument("--dst-col", type=_column, default=None, metavar="C", help="destination column")
    g.add_argument("--time-col", type=_column, default=None, metavar="C", help="time column")
    g.add_argument("--label-col", type=_column, default=None, metavar="C", help="label column (optional)")
    g.add_argument("--sep", default=None, help="field delimiter (default: sniffed)")
    g.add_argument("--time-format", default=None, metavar="FMT",
                   help="strptime format of the time column, e.g. '%%d/%%m/%%Y %%H:%%M' (default: numbers, or "
                        "ISO-8601 date-times detected)")
    if not log_only:
        return
    g.add_argument("--split-col", type=_column, default=None, metavar="C",
                   help="column giving each event's period: train/val/test or 0/1/2 (periods must follow each "
                        "other in time; used as the split instead of --val/--test)")
    g.add_argument("--no-sort", action="store_true", help="refuse unsorted input instead of sorting it")


def _add_config_options(t: argparse.ArgumentParser, unset: bool = False, only=None, defaults=None,
                        required=()) -> None:
    """Options of :class:`TrainConfig` fields, each with its default, choices and help: every
    field the CLI exposes (``speed train``), or the fields named in ``only`` (``speed plan``),
    with ``defaults`` replacing some defaults and the fields in ``required`` required."""
    import typing
    from dataclasses import MISSING, fields

    from ..train.config import TrainConfig, cli_flag

    hints = typing.get_type_hints(TrainConfig)
    groups = {"train": t, "pac": t.add_argument_group("parallel training (PAC) on a shards directory")}
    for f in fields(TrainConfig):
        meta = f.metadata
        if not meta["cli"] if only is None else f.name not in only:
            continue
        g, flag, default = groups[meta["group"]], cli_flag(f), (defaults or {}).get(f.name, f.default)
        assert default is not MISSING
        if hints[f.name] is bool:
            action = "store_false" if flag.startswith("--no-") else "store_true"
            # a --no-X flag turns off what the field's help describes
            g.add_argument(flag, dest=f.name, action=action,
                           help=("do not " if action == "store_false" else "") + meta["help"])
            if unset:
                g.set_defaults(**{f.name: UNSET})
            continue
        typ = next(a for a in typing.get_args(hints[f.name]) if a is not type(None)) \
            if typing.get_origin(hints[f.name]) is typing.Union else hints[f.name]
        if typ is bool:  # on, off, or (unset) the field's own default: --X / --no-X
            g.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                           default=UNSET if unset else default, help=meta["help"])
            continue
        shown = "" if default is None or f.name in required else f" (default {default})"
        g.add_argument(flag, dest=f.name, type=typ, default=UNSET if unset else default, choices=meta["choices"],
                       metavar=meta["metavar"], help=meta["help"] + shown, required=f.name in required)


def build_parser(unset: bool = False) -> argparse.ArgumentParser:
    """The ``speed`` parser; with ``unset`` every training option defaults to a marker, so a
    parse tells which ones were given (they override a ``--config`` file)."""
    parser = _Parser(prog="speed", description="Partition temporal interaction logs (SEP) and train temporal "
                                                "GNNs on the shards (PAC).")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"speed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("partition", help="split an event log chronologically and partition it into shards")
    p.add_argument("input", help="event log: CSV/TSV/SNAP/JODIE/TGL text (optionally .gz) or Parquet")
    p.add_argument("-o", "--output", required=True, help="shards directory to create")
    from ..partition.api import DEFAULTS as PD, METHODS

    p.add_argument("--parts", type=int, default=PD["num_parts"], help=f"number of parts P (default {PD['num_parts']})")
    p.add_argument("--method", choices=METHODS, default=PD["method"],
                   help=f"{PD['method']} (default); baselines: hdrf, greedy (vertex-cut), random, kl, metis (edge-cut)")
    p.add_argument("--topk", type=float, default=100 * PD["topk"],
                   help=f"percent of nodes that may be replicated (default {100 * PD['topk']:g})")
    p.add_argument("--beta", type=float, default=PD["beta"], help=f"centrality time decay (default {PD['beta']})")
    p.add_argument("--lam", type=float, default=PD["lam"], help=f"load-balance weight λ (default {PD['lam']})")
    p.add_argument("--eps", type=float, default=PD["eps"], help=f"load-balance smoothing ε (default {PD['eps']})")
    p.add_argument("--balance", type=_balance, default=PD["balance"], metavar="B",
                   help=f"keep every part's training events within (1 + B) x the mean: SEP replicates nodes whose part "
                        f"is full, and events between shared nodes are spread (default {PD['balance']}; off: the paper's "
                        f"rule alone)")
    p.add_argument("--seed", type=int, default=PD["seed"],
                   help=f"seed of the split's inductive node mask (default {PD['seed']})")
    p.add_argument("--val", type=float, default=DEFAULT_VAL, help=f"validation fraction (default {DEFAULT_VAL})")
    p.add_argument("--test", type=float, default=DEFAULT_TEST, help=f"test fraction (default {DEFAULT_TEST})")
    p.add_argument("--new-node-fraction", type=float, default=DEFAULT_NEW_NODE_FRACTION, metavar="F",
                   help=f"hold out int(F x nodes) of the nodes seen in val/test for the inductive metric (TGN's rule; "
                        f"default {DEFAULT_NEW_NODE_FRACTION}; 0 for a transductive run, e.g. TGB's protocol)")
    _add_split_times(p)
    p.add_argument("--json", action="store_true", help="print the manifest as JSON instead of the table")
    p.add_argument("--dgl", action="store_true", help="also write OUT/dgl/part{p}.bin (DGL graphs; dgl extra)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing shards folder (one with a manifest.json; never another folder)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--append", action="store_true",
                   help="append INPUT's events to the SEP shards in OUTPUT: SEP goes on from their saved stream state "
                        "(the partitioning and split options stored with them apply); the events must not be older "
                        "than the shards' last one")
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="partition out of core within SIZE (e.g. 3G): the log streams from disk, memory is per-node "
                        "state plus one chunk; needs integer node ids and time-sorted input (default: in memory)")
    _add_reader_options(p)

    t = sub.add_parser("train", help="train a temporal GNN on an event log or a shards directory")
    t.add_argument("input", help="event log (same formats as partition) or a shards directory")
    t.add_argument("--out", required=True, help="run directory for metrics.json, curves.png, best.json, last.json")
    t.add_argument("--overwrite", action="store_true",
                   help="reuse an existing run folder (one with metrics.json or last.json; never another folder)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_split_times(t)
    t.add_argument("--config", default=None, metavar="FILE",
                   help="settings from a TOML or YAML file (keys as the options below, e.g. batch_size = 200); "
                        "flags given here override it; the run writes its resolved settings to RUN/config.toml")
    _add_config_options(t, unset=unset)
    _add_reader_options(t)

    from ..train.config import PLAN_FIELDS

    pl = sub.add_parser("plan", help="dry run of a parallel run: events, nodes and memory per rank, events trained per epoch")
    pl.add_argument("input", help="shards directory from `speed partition`")
    # the fields that decide a plan, generated like `speed train`'s; one epoch unless asked
    _add_config_options(pl, only=PLAN_FIELDS, defaults={"epochs": 1}, required=("nproc",))
    pl.add_argument("--json", action="store_true", help="print JSON instead of the table")

    e = sub.add_parser("embed", help="node embeddings from a trained run, optionally continued on new events")
    e.add_argument("run", help="run directory from `speed train`")
    e.add_argument("-o", "--output", required=True, help="embeddings to write (.npy, float32, one row per node; "
                                                         "the node ids go to OUTPUT.nodes.csv)")
    e.add_argument("--events", default=None, metavar="FILE",
                   help="new events to continue the memory with first (time-sorted, none older than the log)")
    e.add_argument("--at", type=_split_time, default=None, metavar="T",
                   help="time of the embeddings, a number or an ISO-8601 date-time (default: the latest event)")
    e.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT (and its .nodes.csv)")
    e.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_reader_options(e, log_only=False)  # for --events

    sc = sub.add_parser("score", help="link probabilities of (src, dst, t) pairs from a trained run")
    sc.add_argument("run", help="run directory from `speed train`")
    sc.add_argument("pairs", help="src,dst,t records (any format `speed train` reads; any order)")
    sc.add_argument("-o", "--output", required=True, help="CSV to write: src,dst,t,score,known in the pairs' order (known 0: a node the "
                    "run never saw)")
    sc.add_argument("--events", default=None, metavar="FILE", help="new events to continue the memory with first")
    sc.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    sc.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT")
    sc.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_reader_options(sc, log_only=False)  # for PAIRS and --events

    from ..train.config import UpdateConfig

    UD = UpdateConfig()
    u = sub.add_parser("update", help="update a trained run with new events: score each batch, then train on it")
    u.add_argument("run", help="run directory from `speed train` or an earlier `speed update`")
    u.add_argument("events", help="new events (same formats as partition; none older than the run's last event), or a "
                                  "shards folder (the events appended to it since the run)")
    u.add_argument("--out", required=True, help="the updated run's directory (RUN stays as it was)")
    u.add_argument("--passes", type=int, default=UD.passes,
                   help=f"passes of training over the new events (default {UD.passes})")
    u.add_argument("--replay", type=float, default=UD.replay, metavar="F",
                   help="earlier interactions added to each step's loss, as a fraction of the batch, against "
                        f"forgetting (default {UD.replay:g})")
    u.add_argument("--memory-only", action="store_true",
                   help="do not train: the memory takes the events in with the weights fixed")
    u.add_argument("--mrr", action="store_true", help="also rank each event against random destinations (MRR)")
    u.add_argument("--mrr-negatives", type=int, default=UD.mrr_negatives, metavar="K",
                   help=f"destinations each event is ranked against with --mrr (default {UD.mrr_negatives})")
    u.add_argument("--lr", type=float, default=UD.lr, help="learning rate of the updates (default: 10 x the run's)")
    u.add_argument("--windows", type=int, default=UD.windows,
                   help=f"slices of the new events scored apart in metrics.json and the plot (default {UD.windows})")
    u.add_argument("--seed", type=int, default=UD.seed, help=f"seed of the negatives and replay draws (default "
                                                             f"{UD.seed})")
    u.add_argument("--device", default=UD.device, help=f"cpu, cuda or cuda:N (default {UD.device})")
    u.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="update in N spawned processes, each on the new events of its parts (EVENTS must be a shards "
                        "folder; N divides its parts)")
    u.add_argument("--overwrite", action="store_true", help="replace an existing run folder OUT")
    u.add_argument("--json", action="store_true", help="print this increment's scores as JSON")
    u.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_reader_options(u, log_only=False)

    c = sub.add_parser("convert-run", help="convert a run folder of an earlier version (pickled checkpoint.pt, "
                                           "last.pt) to today's format (best.json, last.json: safetensors and JSON)")
    c.add_argument("old", help="the run folder of an earlier version (left as it is)")
    c.add_argument("new", help="the converted run folder to write (must not exist)")
    c.add_argument("--trust-pickle", action="store_true",
                   help="unpickle the old checkpoints, which can run any code they name: only for folders you made "
                        "or trust (required)")

    g = sub.add_parser("generate", help="write a synthetic power-law event log (CSV, .gz to compress)")
    g.add_argument("output", help="CSV file to write")
    g.add_argument("--nodes", type=int, default=100_000, help="number of nodes (default 100000)")
    g.add_argument("--events", type=int, default=1_000_000, help="number of events (default 1000000)")
    g.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent of popularity (default 1)")
    g.add_argument("--communities", type=int, default=None, help="communities (default nodes/1000)")
    g.add_argument("--locality", type=float, default=0.8, help="chance of an in-community event (default 0.8)")
    g.add_argument("--bipartite", action="store_true", help="users -> items log")
    g.add_argument("--items", type=int, default=None, help="items in a bipartite log (default nodes/10)")
    g.add_argument("--fanout", type=float, default=1.0,
                   help="mean recipients per message: runs of events share a source and a time (default 1)")
    g.add_argument("--seed", type=int, default=0, help="seed of the generator (default 0)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser
