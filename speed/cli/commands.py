"""The ``speed`` subcommands: each builds the arguments of a library call from the parsed
command line and prints what it returns (tables in :mod:`.summaries`)."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

from .._util import check_output_path, full_time
from ..errors import InputError
from ..data.tgb import TGB_FORMAT, check_input
from .summaries import format_plan, format_summary, format_train_summary


def _output(path, kind: str, what: str, command: str) -> None:
    """Check an output path before any work (:func:`speed._util.check_output_path`); say which
    missing folders will be created."""
    made = check_output_path(path, kind, what)
    if made:  # (created as the output is written: `mkdir -p`, as other tools do for an output path)
        print(f"speed {command}: {made[-1]} does not exist: creating it for the {what}", file=sys.stderr)


def _read(args):
    from ..data.readers import read_events
    from ..data.tgb import check_input, read_tgb

    if args.format == TGB_FORMAT:  # a TGB dataset folder: its tables are pickles, read only when asked
        return read_tgb(args.input)
    check_input(args.input)
    return read_events(args.input, sort=not args.no_sort, progress=None if not args.no_progress else False,
                       **_reader_kwargs(args))


def _reader_kwargs(args) -> dict:
    sep = {"\\t": "\t", "tab": "\t", "space": " "}.get(args.sep, args.sep)
    kw = dict(fmt=None if args.format == TGB_FORMAT else args.format, src_col=args.src_col, dst_col=args.dst_col,
              time_col=args.time_col,
              label_col=args.label_col, sep=sep, time_format=args.time_format)
    if hasattr(args, "split_col"):
        kw["split_col"] = args.split_col
    return kw


# --------------------------------------------------------------------------- partition
def partition_command(args) -> int:
    if args.parts < 1:
        raise InputError(f"--parts must be >= 1, got {args.parts}")
    if not 0.0 <= args.topk <= 100.0:
        raise InputError(f"--topk is a percent in [0, 100], got {args.topk}")
    if 0.0 < args.topk < 1.0:
        # the Python API takes a fraction (topk=0.05 is 5%); the flag takes a percent
        warnings.warn(f"--topk {args.topk:g} is a percent: at most {args.topk:g}% of the nodes may be replicated; "
                      f"for {100 * args.topk:g}% pass --topk {100 * args.topk:g}", UserWarning, stacklevel=2)
    from .._util import check_output_dir
    from ..partition.shards import SHARDS_MARKERS

    out = Path(args.output)
    if args.append:
        return _append(args, out)
    _output(out, "folder", "shards folder", "partition")
    check_output_dir(out, args.overwrite, SHARDS_MARKERS, "shards folder")  # before any work
    progress = False if args.no_progress else None
    if args.max_memory is not None:
        _partition_out_of_core(args, out, progress)
    else:
        _partition_in_memory(args, out, progress)
    if args.dgl:
        from ..interop import save_dgl_parts

        save_dgl_parts(out, out / "dgl", overwrite=True)
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(format_summary(manifest))
    return 0


def _append(args, out: Path) -> int:
    from ..partition.append_file import append_file

    if args.overwrite or args.dgl:
        raise InputError(f"--append adds to OUTPUT; it does not take {'--overwrite' if args.overwrite else '--dgl'}")
    progress = False if args.no_progress else None
    manifest = append_file(args.input, out, progress=progress, max_memory=args.max_memory, sort=not args.no_sort,
                           reader=_reader_kwargs(args))
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(format_summary(manifest))
    return 0


def _partition_out_of_core(args, out: Path, progress) -> None:
    from ..partition.outofcore import partition_file

    partition_file(args.input, out, args.max_memory, num_parts=args.parts, topk=args.topk / 100.0, beta=args.beta,
                   lam=args.lam, eps=args.eps, seed=args.seed, method=args.method, val=args.val, test=args.test,
                   balance=args.balance,
                   new_node_fraction=args.new_node_fraction,
                   split_times=args.split_times, overwrite=args.overwrite, progress=progress,
                   reader=_reader_kwargs(args))


def _partition_in_memory(args, out: Path, progress) -> None:
    from ..data.split import chronological_split
    from ..partition.api import partition

    t0 = time.perf_counter()
    events = _read(args)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    # TGL's ext_roll or a --split-col
    times = args.split_times if args.split_times is not None else events.meta.split_times
    split = chronological_split(events, val=args.val, test=args.test, seed=args.seed, times=times,
                                new_node_fraction=args.new_node_fraction)
    t_split = time.perf_counter() - t0
    result = partition(split.train(events), args.parts, topk=args.topk / 100.0, beta=args.beta, lam=args.lam,
                       eps=args.eps, seed=args.seed, method=args.method, progress=progress, balance=args.balance)
    result.stats["seconds"] = {"read": round(t_read, 4), "split": round(t_split, 4), **result.stats["seconds"]}
    result.save(out, events=events, split=split, overwrite=args.overwrite, progress=progress)


# ---------------------------------------------------------------------------- generate
def generate_command(args) -> int:
    from ..data.generate import write_generated

    if args.events < 1 or args.nodes < 2:
        raise InputError(f"--events must be >= 1 and --nodes >= 2, got {args.events} and {args.nodes}")
    _output(args.output, "file", "output", "generate")
    t0 = time.perf_counter()
    write_generated(args.output, args.nodes, args.events, alpha=args.alpha, communities=args.communities,
                    locality=args.locality, bipartite=args.bipartite, num_items=args.items, seed=args.seed,
                    fanout=args.fanout,
                    progress=False if args.no_progress else None)
    print(f"wrote {args.events:,} events over {args.nodes:,} nodes to {args.output} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


# ------------------------------------------------------------------------------- train
def train_command(args) -> int:
    from dataclasses import fields

    from ..train.api import train
    from ..train.config import TrainConfig
    from ..train.run.folder import RunFolder
    from ..train.pac.launch import RankFailedError, under_torchrun
    from ..train.pac.validate import TransferWarning

    out = Path(args.out)
    _output(out, "folder", "run folder", "train")
    if not under_torchrun():  # before the log is read (speed.train checks it again, as the rank that writes)
        RunFolder(out).check_new_training(args.overwrite, args.resume)
    inp = Path(args.input) if args.format == TGB_FORMAT else check_input(args.input)
    # every option, and settings a --config file gave that have no flag (val, test, ...)
    config = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    if config.get("split_times") is None:
        config.pop("split_times", None)
    config["progress"] = False if args.no_progress else None
    parallel = args.nproc is not None or under_torchrun()
    # an event log is read here, with the reader options; shards (and parallel runs) by path
    data = inp if ((inp.is_dir() and args.format != TGB_FORMAT) or parallel) else _read(args)
    try:
        with warnings.catch_warnings():  # the summary prints a run's warnings, once, in its own words
            warnings.simplefilter("ignore", TransferWarning)
            metrics = train(data, out=out, overwrite=args.overwrite, **config)
    except RankFailedError as exc:
        print(f"speed train: error: {exc}", file=sys.stderr)
        return 1
    if metrics is None:  # a non-zero rank under torchrun
        return 0
    RunFolder(out).write_config(metrics["config"])
    print(format_train_summary(metrics, out))
    return 0


def embed_command(args) -> int:
    from ..train.run.apply import embed_file

    _output(args.output, "file", "output", "embed")
    r = embed_file(args.run, args.output, events=args.events, at=args.at, device=args.device,
                   progress=False if args.no_progress else None, overwrite=args.overwrite,
                   reader=_reader_kwargs(args))
    more = f" after {r['new_events']:,} new events" if args.events else ""
    print(f"{r['nodes']:,} node embeddings ({r['dim']} dims) at t={full_time(r['t'])}{more} -> {r['out']} "
          f"(row ids in {r['ids']})")
    return 0


def score_command(args) -> int:
    from ..train.run.apply import score_file

    _output(args.output, "file", "output", "score")
    r = score_file(args.run, args.pairs, args.output, events=args.events, device=args.device,
                   progress=False if args.no_progress else None, overwrite=args.overwrite,
                   reader=_reader_kwargs(args))
    more = f" after {r['new_events']:,} new events" if args.events else ""
    unseen = f"; {r['unseen']:,} involve nodes the run never saw (empty memory)" if r["unseen"] else ""
    when = (f" at the run's last time {full_time(r['at_last_time'])} (the pairs have no time column; a third "
            "column, or --time-col, gives each pair its time)" if r.get("at_last_time") is not None else "")
    print(f"scored {r['pairs']:,} pairs{more}{when} -> {r['out']}{unseen}")
    return 0


def update_command(args) -> int:
    from ..train.api import update

    _output(args.out, "folder", "run folder", "update")
    metrics = update(args.run, args.events, args.out, reader=_reader_kwargs(args), overwrite=args.overwrite,
                     passes=args.passes, replay=args.replay, train=not args.memory_only, mrr=args.mrr,
                     mrr_negatives=args.mrr_negatives, lr=args.lr, windows=args.windows, seed=args.seed,
                     device=args.device, progress=False if args.no_progress else None, nproc=args.nproc)
    u = metrics["updates"][-1]
    if args.json:
        print(json.dumps(u, indent=2))
        return 0
    mrr = f", MRR {u['mrr']:.4f}" if "mrr" in u else ""
    loss = f", loss {u['loss']:.4f}" if u.get("loss") is not None else ""
    mode = "memory only" if u["mode"] == "memory" else f"trained, {u['passes']} pass(es)"
    print(f"increment {u['increment']}: {u['events']:,} events ({u['new_nodes']:,} new nodes), scored before "
          f"training on them: AP {u['ap']:.4f}, AUC {u['auc']:.4f}{mrr}; {mode}{loss}; {u['seconds']:.1f} s "
          f"-> {args.out}")
    if u.get("already_taken"):
        print(f"already taken in: {u['already_taken']:,} event(s) of the file at the run's last time, sent again "
              "(not taken twice)")
    return 0


def plan_command(args) -> int:
    from ..partition.shards import Shards
    from ..train.config import BASELINES, PLAN_FIELDS, TrainConfig
    from ..train.pac.budget import plan

    config = TrainConfig(**{k: getattr(args, k) for k in PLAN_FIELDS}).validate()
    if config.model in BASELINES:
        raise InputError(f"{config.model} is a baseline that trains nothing: there is no parallel run to plan")
    inp = check_input(args.input)
    p = plan(Shards(inp), config, args.nproc)
    print(json.dumps(p, indent=2) if args.json else format_plan(p))
    return 0


def convert_run_command(args) -> int:
    from ..train.run.checkpoint import convert_run

    _output(args.new, "folder", "converted run folder", "convert-run")
    out = convert_run(args.old, args.new, trust_pickle=args.trust_pickle)
    print(f"converted {args.old} -> {out} (best.json, last.json and their safetensors files; no pickle)")
    return 0


# the subcommand -> its function (``speed.cli.main`` dispatches on the parsed command name)
COMMANDS = {"partition": partition_command, "train": train_command, "plan": plan_command,
            "embed": embed_command, "score": score_command, "generate": generate_command, "update": update_command,
            "convert-run": convert_run_command}
