"""The ``speed`` command.  argparse lives here and only here; every command builds
arguments for a library call and prints what it returns."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import List, Optional

from .data.split import DEFAULT_TEST, DEFAULT_VAL
from .errors import InputError, MissingDependencyError

EXIT_INPUT = 2


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


def _column(value: str):
    """A column given on the command line: a 0-based index if it is all digits, else a name."""
    return int(value) if value.isdigit() else value


def _add_reader_options(p: argparse.ArgumentParser) -> None:
    from .data.readers import FORMATS

    g = p.add_argument_group("input")
    g.add_argument("--format", choices=FORMATS, default=None, help="input format (default: detected)")
    g.add_argument("--src-col", type=_column, default=None, metavar="C", help="source column: name or 0-based index")
    g.add_argument("--dst-col", type=_column, default=None, metavar="C", help="destination column")
    g.add_argument("--time-col", type=_column, default=None, metavar="C", help="time column")
    g.add_argument("--label-col", type=_column, default=None, metavar="C", help="label column (optional)")
    g.add_argument("--sep", default=None, help="field delimiter (default: sniffed)")
    g.add_argument("--time-format", default=None, metavar="FMT",
                   help="strptime format of the time column, e.g. '%%d/%%m/%%Y %%H:%%M' (default: numbers, or "
                        "ISO-8601 date-times detected)")
    g.add_argument("--split-col", type=_column, default=None, metavar="C",
                   help="column giving each event's period: train/val/test or 0/1/2 (periods must follow each "
                        "other in time; used as the split instead of --val/--test)")
    g.add_argument("--no-sort", action="store_true", help="refuse unsorted input instead of sorting it")


def _read(args):
    from .data.readers import read_events
    from .data.tgb import read_tgb, tgb_name

    if Path(args.input).is_dir() and tgb_name(args.input) is not None:  # a TGB dataset folder
        return read_tgb(args.input)

    return read_events(args.input, sort=not args.no_sort, progress=None if not args.no_progress else False,
                       **_reader_kwargs(args))


# --------------------------------------------------------------------------- partition
def _cmd_partition(args) -> int:
    if args.parts < 1:
        raise InputError(f"--parts must be >= 1, got {args.parts}")
    if not 0.0 <= args.topk <= 100.0:
        raise InputError(f"--topk is a percent in [0, 100], got {args.topk}")
    out = Path(args.output)
    if out.exists() and not args.overwrite and (not out.is_dir() or any(out.iterdir())):
        raise InputError("output already exists (pass --overwrite)", out)
    progress = False if args.no_progress else None
    if args.max_memory is not None:
        _partition_out_of_core(args, out, progress)
    else:
        _partition_in_memory(args, out, progress)
    if args.dgl:
        from .interop import save_dgl_parts

        save_dgl_parts(out, out / "dgl", overwrite=True)
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(format_summary(manifest))
    return 0


def _reader_kwargs(args) -> dict:
    sep = {"\\t": "\t", "tab": "\t", "space": " "}.get(args.sep, args.sep)
    return dict(fmt=args.format, src_col=args.src_col, dst_col=args.dst_col, time_col=args.time_col,
                label_col=args.label_col, sep=sep, time_format=args.time_format, split_col=args.split_col)


def _partition_out_of_core(args, out: Path, progress) -> None:
    from .partition.outofcore import partition_file

    partition_file(args.input, out, args.max_memory, num_parts=args.parts, topk=args.topk / 100.0, beta=args.beta,
                   lam=args.lam, eps=args.eps, seed=args.seed, method=args.method, val=args.val, test=args.test,
                   split_times=args.split_times, overwrite=args.overwrite, progress=progress,
                   reader=_reader_kwargs(args))


def _partition_in_memory(args, out: Path, progress) -> None:
    from .data.split import chronological_split
    from .partition.api import partition

    t0 = time.perf_counter()
    events = _read(args)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    # TGL's ext_roll or a --split-col
    times = args.split_times if args.split_times is not None else events.meta.get("split_times")
    split = chronological_split(events, val=args.val, test=args.test, seed=args.seed, times=times)
    t_split = time.perf_counter() - t0
    result = partition(split.train(events), args.parts, topk=args.topk / 100.0, beta=args.beta, lam=args.lam,
                       eps=args.eps, seed=args.seed, method=args.method, progress=progress)
    result.stats["seconds"] = {"read": round(t_read, 4), "split": round(t_split, 4), **result.stats["seconds"]}
    result.save(out, events=events, split=split, overwrite=args.overwrite, progress=progress)


def format_summary(m: dict) -> str:
    """A human-readable table of a shards manifest."""
    inp = m.get("input", {})
    sp = m.get("split", {})
    secs = m.get("seconds", {})
    lines = [
        f"input        {inp.get('source')} ({inp.get('format')}{', bipartite' if inp.get('bipartite') else ''})",
        f"events       {m['num_events']:,} (train {m['num_train_events']:,}, val {sp.get('num_val_events', 0):,}, "
        f"test {sp.get('num_test_events', 0):,})",
        f"nodes        {m['num_nodes']:,} ({m.get('num_train_nodes', 0):,} in training events)",
    ]
    if not inp.get("sorted_input", True):
        lines.append("note         input was not sorted by time; events were stable-sorted")
    if inp.get("self_loops") or inp.get("duplicate_events"):
        lines.append(f"kept         {inp.get('self_loops', 0):,} self-loops, {inp.get('duplicate_events', 0):,} "
                     "duplicate events")
    params = ", ".join(f"{k}={v}" for k, v in m["params"].items())
    hubs = f", {m['num_hubs']:,} hubs" if m.get("num_hubs") is not None else ""
    lines += [
        f"method       {m['method']} P={m['num_parts']} ({params})",
        f"edge cut     {100 * m['edge_cut']:.2f}% ({m.get('cut_events', 0):,} training events)",
        f"replication  {m['replication_factor']:.4f} ({m['shared_nodes']:,} shared nodes{hubs})",
        f"node portion {100 * m.get('node_portion_mean', 0):.2f}% ± {100 * m.get('node_portion_std', 0):.2f}%",
        "",
        f"{'part':>4}  {'nodes':>10}  {'events':>12}  {'stream load':>12}",
    ]
    loads = m.get("stream_loads") or [None] * m["num_parts"]
    for p, (nn, ne, ld) in enumerate(zip(m["part_nodes"], m["part_events"], loads)):
        lines.append(f"{p:>4}  {nn:>10,}  {ne:>12,}  {'' if ld is None else format(ld, ','):>12}")
    lines.append("")
    lines.append("seconds      " + ", ".join(f"{k} {v:.3f}" for k, v in secs.items()))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- generate
def _cmd_generate(args) -> int:
    from .data.generate import write_generated

    if args.events < 1 or args.nodes < 2:
        raise InputError(f"--events must be >= 1 and --nodes >= 2, got {args.events} and {args.nodes}")
    t0 = time.perf_counter()
    write_generated(args.output, args.nodes, args.events, alpha=args.alpha, communities=args.communities,
                    locality=args.locality, bipartite=args.bipartite, num_items=args.items, seed=args.seed,
                    progress=False if args.no_progress else None)
    print(f"wrote {args.events:,} events over {args.nodes:,} nodes to {args.output} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


# ------------------------------------------------------------------------------- train
def _cmd_train(args) -> int:
    from dataclasses import fields

    from .train.api import train
    from .train.config import TrainConfig
    from .train.pac.launch import RankFailedError, under_torchrun

    out = Path(args.out)
    if out.exists() and not (args.overwrite or args.resume) and (not out.is_dir() or any(out.iterdir())):
        raise InputError("run directory already exists (pass --overwrite, or --resume to continue it)", out)
    inp = Path(args.input)
    if not inp.exists():
        raise InputError("file not found", inp)
    # every option, and settings a --config file gave that have no flag (val, test, ...)
    config = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    if config.get("split_times") is None:
        config.pop("split_times", None)
    config["progress"] = False if args.no_progress else None
    parallel = args.nproc is not None or under_torchrun()
    # an event log is read here, with the reader options; shards (and parallel runs) by path
    data = inp if (inp.is_dir() or parallel) else _read(args)
    try:
        metrics = train(data, out=out, **config)
    except RankFailedError as exc:
        print(f"speed train: error: {exc}", file=sys.stderr)
        return 1
    if metrics is None:  # a non-zero rank under torchrun
        return 0
    from .train.config_file import dump_toml

    (out / "config.toml").write_text(dump_toml(metrics["config"]))
    print(format_train_summary(metrics, out))
    return 0


def _apply_config_file(args, argv) -> None:
    """Settings from ``--config`` into ``args``, except those given as flags."""
    from .train.config_file import load_config_file

    explicit = build_parser(unset=True).parse_args(sys.argv[1:] if argv is None else argv)
    for key, value in load_config_file(args.config).items():
        if getattr(explicit, key, _UNSET) is _UNSET:
            setattr(args, key, value)


def _cmd_embed(args) -> int:
    from .train.apply import embed_file

    r = embed_file(args.run, args.output, events=args.events, at=args.at, device=args.device,
                   progress=False if args.no_progress else None)
    more = f" after {r['new_events']:,} new events" if args.events else ""
    print(f"{r['nodes']:,} node embeddings ({r['dim']} dims) at t={r['t']:g}{more} -> {r['out']} "
          f"(row ids in {r['ids']})")
    return 0


def _cmd_score(args) -> int:
    from .train.apply import score_file

    r = score_file(args.run, args.pairs, args.output, events=args.events, device=args.device,
                   progress=False if args.no_progress else None)
    more = f" after {r['new_events']:,} new events" if args.events else ""
    unseen = f"; {r['unseen']:,} involve nodes the run never saw (empty memory)" if r["unseen"] else ""
    print(f"scored {r['pairs']:,} pairs{more} -> {r['out']}{unseen}")
    return 0


def _cmd_plan(args) -> int:
    from .partition.shards import Shards
    from .train.config import TrainConfig
    from .train.pac.plan import plan

    config = TrainConfig(model=args.model, epochs=args.epochs, seed=args.seed, shuffle=args.shuffle,
                         subgraph=args.subgraph, memory_dim=args.memory_dim, time_dim=args.time_dim,
                         embedding_dim=args.embedding_dim, nproc=args.nproc).validate()
    inp = Path(args.input)
    if not inp.exists():
        raise InputError("file not found", inp)
    p = plan(Shards(inp), config, args.nproc)
    print(json.dumps(p, indent=2) if args.json else format_plan(p))
    return 0


def format_plan(p: dict) -> str:
    """A human-readable table of :func:`speed.train.pac.plan.plan`."""
    mib = 1 << 20
    lines = [f"{p['shards']}: {p['num_parts']} parts, {p['num_shared']:,} shared nodes, "
             f"{p['train_events']:,} training events",
             f"{p['nproc']} ranks, subgraph {p['subgraph']}, {p['model']} node state "
             f"{p['memory_bytes_per_node']} B/node ({p['memory_bytes_unpartitioned'] / mib:,.1f} MiB unpartitioned)",
             "", f"{'epoch':>5}  {'rank':>4}  {'parts':<12}  {'events':>12}  {'nodes':>10}  {'memory MiB':>10}"]
    for e in p["epochs"]:
        for r in e["ranks"]:
            lines.append(f"{e['epoch']:>5}  {r['rank']:>4}  {','.join(map(str, r['parts'])):<12}  {r['events']:>12,}  "
                         f"{r['nodes']:>10,}  {r['memory_bytes'] / mib:>10.1f}")
        lines.append(f"{'':>5}  work inflation {e['work_inflation']:.3f}, largest rank {100 * e['largest_share']:.1f}% "
                     f"of the training events")
    return "\n".join(lines)


def _add_config_options(t: argparse.ArgumentParser, unset: bool = False) -> None:
    """``speed train`` options: one per :class:`TrainConfig` field, with its default and choices."""
    import typing
    from dataclasses import MISSING, fields

    from .train.config import TrainConfig, cli_flag

    hints = typing.get_type_hints(TrainConfig)
    groups = {"train": t, "pac": t.add_argument_group("parallel training (PAC) on a shards directory")}
    for f in fields(TrainConfig):
        meta = f.metadata
        if not meta["cli"]:
            continue
        g, flag, default = groups[meta["group"]], cli_flag(f), f.default
        assert default is not MISSING
        if hints[f.name] is bool:
            action = "store_false" if flag.startswith("--no-") else "store_true"
            g.add_argument(flag, dest=f.name, action=action, help=meta["help"])
            if unset:
                g.set_defaults(**{f.name: _UNSET})
            continue
        typ = next(a for a in typing.get_args(hints[f.name]) if a is not type(None)) \
            if typing.get_origin(hints[f.name]) is typing.Union else hints[f.name]
        shown = "" if default is None else f" (default {default})"
        g.add_argument(flag, dest=f.name, type=typ, default=_UNSET if unset else default, choices=meta["choices"],
                       metavar=meta["metavar"], help=meta["help"] + shown)


def format_train_summary(m: dict, out: Path) -> str:
    """A human-readable summary of a training run (or of a baseline's evaluation)."""
    lines = []
    if m.get("edgebank"):
        head = f"{m['model']} ({m['edgebank']['mode']} memory, not trained)"
        files = "metrics.json, negatives.npz"
    else:
        lines.append(f"{'epoch':>5}  {'loss':>7}  {'val AP':>7}  {'val AUC':>7}  {'events/s':>9}  {'seconds':>7}")
        for e in m["epochs"]:
            v = e["val"]["transductive"] if e.get("val") else None
            val = f"{v['ap']:>7.4f}  {v['auc']:>7.4f}" if v else f"{'-':>7}  {'-':>7}"
            lines.append(f"{e['epoch']:>5}  {e['loss']:>7.4f}  {val}  "
                         f"{e['train_events_per_s']:>9,.0f}  {e['train_seconds']:>7.1f}")
        lines.append("")
        head = f"best epoch {m['best_epoch']} ({m['model']})"
        files = "metrics.json, curves.png, checkpoint.pt, negatives.npz"
    tt, ti = m["test"]["transductive"], m["test"]["inductive"]
    inductive = f"AP {ti['ap']:.4f}, AUC {ti['auc']:.4f} (inductive)" if ti.get("count") else "no inductive events"
    lines.append(f"{head}: test AP {tt['ap']:.4f}, AUC {tt['auc']:.4f} (transductive); {inductive}; "
                 f"{m['config']['eval_negatives']} negatives")
    if "mrr" in tt:
        against = "the log's stored negatives (TGB)" if m["data"].get("ranking_candidates") == "stored" else \
            f"{m['config']['mrr_negatives']} negatives per event, filtered"
        lines.append(f"test MRR {tt['mrr']:.4f}, Hits@10 {tt['hits@10']:.4f} ({against})")
    if "node_classification" in m:
        lines.append(f"node classification AUROC {m['node_classification']['auroc']:.4f} (test)")
    lines.append(f"wrote {out}/{files}")
    return "\n".join(lines)


# -------------------------------------------------------------------------------- main
_UNSET = object()  # the default of every training option when finding the flags given explicitly


def build_parser(unset: bool = False) -> argparse.ArgumentParser:
    """The ``speed`` parser; with ``unset`` every training option defaults to a marker, so a
    parse tells which ones were given (they override a ``--config`` file)."""
    parser = _Parser(prog="speed", description="Partition temporal interaction logs (SEP) and train temporal "
                                                "GNNs on the shards (PAC).")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"speed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("partition", help="split an event log chronologically and partition it into shards")
    p.add_argument("input", help="event log: CSV/TSV/SNAP/JODIE/TGL text (optionally .gz) or Parquet")
    p.add_argument("-o", "--output", required=True, help="shards directory to create")
    from .partition.api import DEFAULTS as PD, METHODS

    p.add_argument("--parts", type=int, default=PD["num_parts"], help=f"number of parts P (default {PD['num_parts']})")
    p.add_argument("--method", choices=METHODS, default=PD["method"],
                   help=f"{PD['method']} (default); baselines: hdrf, greedy (vertex-cut), random, kl, metis (edge-cut)")
    p.add_argument("--topk", type=float, default=100 * PD["topk"],
                   help=f"percent of nodes that may be replicated (default {100 * PD['topk']:g})")
    p.add_argument("--beta", type=float, default=PD["beta"], help=f"centrality time decay (default {PD['beta']})")
    p.add_argument("--lam", type=float, default=PD["lam"], help=f"load-balance weight λ (default {PD['lam']})")
    p.add_argument("--eps", type=float, default=PD["eps"], help=f"load-balance smoothing ε (default {PD['eps']})")
    p.add_argument("--seed", type=int, default=PD["seed"],
                   help=f"seed of the split's inductive node mask (default {PD['seed']})")
    p.add_argument("--val", type=float, default=DEFAULT_VAL, help=f"validation fraction (default {DEFAULT_VAL})")
    p.add_argument("--test", type=float, default=DEFAULT_TEST, help=f"test fraction (default {DEFAULT_TEST})")
    _add_split_times(p)
    p.add_argument("--json", action="store_true", help="print the manifest as JSON instead of the table")
    p.add_argument("--dgl", action="store_true", help="also write OUT/dgl/part{p}.bin (DGL graphs; dgl extra)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="partition out of core within SIZE (e.g. 3G): the log streams from disk, memory is per-node "
                        "state plus one chunk; needs integer node ids and time-sorted input (default: in memory)")
    _add_reader_options(p)
    p.set_defaults(func=_cmd_partition)

    t = sub.add_parser("train", help="train a temporal GNN on an event log or a shards directory")
    t.add_argument("input", help="event log (same formats as partition) or a shards directory")
    t.add_argument("--out", required=True, help="run directory for metrics.json, curves.png, checkpoint.pt, last.pt")
    t.add_argument("--overwrite", action="store_true", help="reuse an existing run directory")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_split_times(t)
    t.add_argument("--config", default=None, metavar="FILE",
                   help="settings from a TOML or YAML file (keys as the options below, e.g. batch_size = 200); "
                        "flags given here override it; the run writes its resolved settings to RUN/config.toml")
    _add_config_options(t, unset=unset)
    _add_reader_options(t)
    t.set_defaults(func=_cmd_train)

    from dataclasses import fields

    from .train.config import SUBGRAPH_MODES, TrainConfig

    d = {f.name: f.default for f in fields(TrainConfig)}
    pl = sub.add_parser("plan", help="dry run of a parallel run: events, nodes and memory per rank, work inflation")
    pl.add_argument("input", help="shards directory from `speed partition`")
    pl.add_argument("--nproc", type=int, required=True, help="number of ranks")
    pl.add_argument("--subgraph", choices=SUBGRAPH_MODES, default=d["subgraph"],
                    help=f"what a rank trains on (default {d['subgraph']})")
    pl.add_argument("--epochs", type=int, default=1, help="epochs to plan (groups are reshuffled each; default 1)")
    pl.add_argument("--seed", type=int, default=d["seed"])
    pl.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="the same groups every epoch")
    from .train.config import MODELS

    pl.add_argument("--model", choices=MODELS, default=d["model"], help=f"model (default {d['model']})")
    for name in ("memory_dim", "time_dim", "embedding_dim"):
        pl.add_argument("--" + name.replace("_", "-"), type=int, default=d[name], help=f"default {d[name]}")
    pl.add_argument("--json", action="store_true", help="print JSON instead of the table")
    pl.set_defaults(func=_cmd_plan)

    e = sub.add_parser("embed", help="node embeddings from a trained run, optionally continued on new events")
    e.add_argument("run", help="run directory from `speed train`")
    e.add_argument("-o", "--output", required=True, help="embeddings to write (.npy, float32, one row per node; "
                                                         "the node ids go to OUTPUT.nodes.csv)")
    e.add_argument("--events", default=None, metavar="FILE",
                   help="new events to continue the memory with first (time-sorted, none older than the log)")
    e.add_argument("--at", type=_split_time, default=None, metavar="T",
                   help="time of the embeddings, a number or an ISO-8601 date-time (default: the latest event)")
    e.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    e.add_argument("--no-progress", action="store_true")
    e.set_defaults(func=_cmd_embed)

    sc = sub.add_parser("score", help="link probabilities of (src, dst, t) pairs from a trained run")
    sc.add_argument("run", help="run directory from `speed train`")
    sc.add_argument("pairs", help="src,dst,t records (any format `speed train` reads; any order)")
    sc.add_argument("-o", "--output", required=True, help="CSV to write: src,dst,t,score in the pairs' order")
    sc.add_argument("--events", default=None, metavar="FILE", help="new events to continue the memory with first")
    sc.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    sc.add_argument("--no-progress", action="store_true")
    sc.set_defaults(func=_cmd_score)

    g = sub.add_parser("generate", help="write a synthetic power-law event log (CSV, .gz to compress)")
    g.add_argument("output", help="CSV file to write")
    g.add_argument("--nodes", type=int, default=100_000, help="number of nodes (default 100000)")
    g.add_argument("--events", type=int, default=1_000_000, help="number of events (default 1000000)")
    g.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent of popularity (default 1)")
    g.add_argument("--communities", type=int, default=None, help="communities (default nodes/1000)")
    g.add_argument("--locality", type=float, default=0.8, help="chance of an in-community event (default 0.8)")
    g.add_argument("--bipartite", action="store_true", help="users -> items log")
    g.add_argument("--items", type=int, default=None, help="items in a bipartite log (default nodes/10)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-progress", action="store_true")
    g.set_defaults(func=_cmd_generate)
    return parser


def _flag_hint(exc: Exception) -> str:
    """`` (--flag)`` for an error about a training parameter the command line exposes."""
    from .train.config import ConfigError, flag_of

    if isinstance(exc, ConfigError) and flag_of(exc.param):
        return f" ({flag_of(exc.param)})"
    return ""


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train" and args.config is not None:
            _apply_config_file(args, argv)
        return args.func(args)
    except (InputError, MissingDependencyError) as exc:
        print(f"speed {args.command}: error: {exc}{_flag_hint(exc)}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(f"speed {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
