"""``python -m benchmarks quality``: how well speed learns, at DyGLib's budget, alone and under PAC.

For each log and seed, TGN trains twice on the same split, with ``deterministic=True``:

* ``single`` -- one process (2 threads) on the merged graph of the log's shards;
* ``pac``    -- PAC with N=2 ranks (1 thread each) on the same shards (SEP, P=4, top-5% hubs).

The budget is DyGLib's (Yu et al., NeurIPS 2023): up to 100 epochs, patience 20, lr 1e-4, its
protocol (``protocol="dyglib"``: 70/15/15 chronological split, 10% of the nodes held out for the
inductive figures, random negatives for selection).  The figure read is the test AP against random
negatives (transductive), mean +- std over the seeds, beside DyGLib's published TGN figure where
the log is one of DyGLib's.  ``--quick`` stops every run at 20 epochs (so patience never ends a
run early) and leaves Wikipedia out: about 15 minutes on 2 cores.

Logs: ``collegemsg`` (SNAP CollegeMsg, DyGLib's UCI) and ``wikipedia`` (JODIE's) from
``../shared/data``; ``generated`` from ``speed generate`` with the recipe below, cached in
``benchmarks/.cache``.  A log whose file is missing is skipped, and the result says so.

Writes ``benchmarks/results/<machine>/quality[-quick].json`` (stamped), a table beside it
(``.md``) and ``quality[-quick].png`` (test AP per log and setting).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _trees import ROOT, results_dir, stamp  # noqa: E402
from suite import RECIPES, SHARED, cached  # noqa: E402

GENERATED = "quality_g100k_seed11.csv"  # the generated log: its recipe (speed generate's arguments) in suite.py
# DyGLib's published TGN test AP, transductive, random negatives (its paper's table of AP; UCI is
# the network SNAP ships as CollegeMsg)
PUBLISHED = {"collegemsg": 0.9234, "wikipedia": 0.9845}
BUDGET = {"epochs": 100, "patience": 20, "lr": 1e-4}
QUICK_EPOCHS = 20
PARTS, TOPK, NPROC = 4, 0.05, 2
LOGS = ("collegemsg", "generated", "wikipedia")


EXTRA: dict = {}  # logs of the user's, given to --logs as paths: name (the file's stem) -> path


def log_path(name: str) -> Path:
    """The log ``name`` (``../shared/data``, generated once into the cache, or a path given)."""
    if name in EXTRA:
        return EXTRA[name]
    if name == "collegemsg":
        return SHARED / "CollegeMsg.txt"
    if name == "wikipedia":
        return SHARED / "wikipedia.csv"
    return cached(GENERATED)


def shards_for(name: str, seed: int, work: Path):
    """The log's shards (SEP, P=4, top-5%) with the split of ``seed``: both settings train on them."""
    import speed

    path = work / f"{name}_p{PARTS}_seed{seed}"
    if not (path / "manifest.json").exists():
        ev = speed.read_events(log_path(name), progress=False)
        split = speed.chronological_split(ev, seed=seed)
        speed.partition(split.train(ev), PARTS, topk=TOPK, progress=False).save(path, events=ev, split=split)
    return speed.load_shards(path)


def run_one(name: str, setting: str, seed: int, epochs: int, work: Path) -> dict:
    import speed

    shards = shards_for(name, seed, work)
    kw = dict(model="tgn", protocol="dyglib", epochs=epochs, patience=BUDGET["patience"], lr=BUDGET["lr"],
              seed=seed, deterministic=True, progress=False)
    t0 = time.perf_counter()
    if setting == "single":
        m = speed.train(shards, num_threads=2, **kw)
    else:
        m = speed.train(shards, nproc=NPROC, num_threads=1, out=work / f"run_{name}_{seed}", overwrite=True, **kw)
    return {"log": name, "setting": setting, "seed": seed, "epochs_run": len(m["epochs"]),
            "best_epoch": m["best_epoch"], "val_ap": [e["val"]["transductive"]["ap"] for e in m["epochs"]],
            "test_ap": m["test"]["transductive"]["ap"], "test_ap_inductive": m["test"]["inductive"]["ap"],
            "seconds": time.perf_counter() - t0}


def summarise(runs: list) -> list:
    """Mean +- std of the test AP per log and setting, with the published figure beside it."""
    rows = []
    for name in dict.fromkeys(r["log"] for r in runs):
        for setting in ("single", "pac"):
            aps = [r["test_ap"] for r in runs if r["log"] == name and r["setting"] == setting]
            if not aps:
                continue
            ind = [r["test_ap_inductive"] for r in runs if r["log"] == name and r["setting"] == setting]
            rows.append({"log": name, "setting": setting, "seeds": len(aps), "test_ap_mean": statistics.fmean(aps),
                         "test_ap_std": statistics.stdev(aps) if len(aps) > 1 else 0.0,
                         "inductive_ap_mean": statistics.fmean(ind), "published": PUBLISHED.get(name)})
    return rows


def table(result: dict, path: Path) -> str:
    st = result["stamp"]
    lines = [f"# {result['suite']}: {st['cpu']}, {st['cores']} cores", "",
             f"Commit {(st['commit'] or '?')[:10]}{' (with changes)' if st['dirty'] else ''}, {st['date']}; "
             f"torch {st['torch']}. Command: `{result['command']}`; "
             f"result: `{path.name}`. TGN, DyGLib's protocol, at most {result['epochs']} epochs, patience "
             f"{BUDGET['patience']}, lr {BUDGET['lr']:g}, `--deterministic`; PAC: P={PARTS}, N={NPROC}.", "",
             "| log | setting | seeds | test AP (random), mean ± std | inductive AP | DyGLib's TGN |",
             "|---|---|---|---|---|---|"]
    for r in result["summary"]:
        pub = "" if r["published"] is None else f"{r['published']:.4f}"
        lines.append(f"| {r['log']} | {r['setting']} | {r['seeds']} | {r['test_ap_mean']:.4f} ± {r['test_ap_std']:.4f} "
                     f"| {r['inductive_ap_mean']:.4f} | {pub} |")
    lines += ["", "| log | setting | seed | epochs run | best epoch | test AP | seconds |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['log']} | {r['setting']} | {r['seed']} | {r['epochs_run']} | {r['best_epoch']} | "
              f"{r['test_ap']:.4f} | {r['seconds']:.0f} |" for r in result["runs"]]
    if result["skipped"]:
        lines += ["", "Skipped (file missing): " + ", ".join(result["skipped"]) + "."]
    return "\n".join(lines) + "\n"


def chart(result: dict, path: Path) -> None:
    """Test AP per log: one bar per setting (mean, the seeds' std as its error bar), DyGLib's figure
    as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = list(dict.fromkeys(r["log"] for r in result["summary"]))
    fig, ax = plt.subplots(figsize=(max(4.6, 1.8 + 1.6 * len(logs)), 3.4))
    for j, setting in enumerate(("single", "pac")):
        rows = [next((r for r in result["summary"] if r["log"] == g and r["setting"] == setting), None) for g in logs]
        xs = [i + (j - 0.5) * 0.36 for i, r in enumerate(rows) if r]
        ax.bar(xs, [r["test_ap_mean"] for r in rows if r], 0.34, yerr=[r["test_ap_std"] for r in rows if r],
               capsize=3, label="one process" if setting == "single" else f"PAC, P={PARTS}, N={NPROC}")
    for i, g in enumerate(logs):
        if PUBLISHED.get(g):
            ax.plot([i - 0.4, i + 0.4], [PUBLISHED[g]] * 2, "k--", lw=1, label="DyGLib's TGN" if i == 0 else None)
    ax.set_xticks(range(len(logs)), logs)
    lo = min(r["test_ap_mean"] - r["test_ap_std"] for r in result["summary"])
    ax.set_ylim(max(0.0, lo - 0.05), 1.0)
    ax.set_ylabel("test AP (random negatives)")
    ax.set_title(f"TGN, DyGLib's budget, at most {result['epochs']} epochs, {len(result['seeds'])} seeds", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_EPOCHS} epochs at most, no Wikipedia")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--logs", help=f"comma-separated, of: {', '.join(LOGS)}, or paths of logs of yours (default: the "
                                   "three; --quick: no wikipedia)")
    ap.add_argument("--settings", default="single,pac", help="single, pac or both (default)")
    ap.add_argument("--epochs", type=int, help="override the epoch budget (a measuring aid)")
    ap.add_argument("--out", help="result file (default: benchmarks/results/<machine>/quality[-quick].json)")
    a = ap.parse_args(argv)
    logs = a.logs.split(",") if a.logs else [g for g in LOGS if not (a.quick and g == "wikipedia")]
    for i, g in enumerate(logs):
        if g not in LOGS and Path(g).is_file():
            EXTRA[Path(g).stem] = Path(g).resolve()
            logs[i] = Path(g).stem
    settings = a.settings.split(",")
    bad = [g for g in logs if g not in LOGS and g not in EXTRA] + [s for s in settings if s not in ("single", "pac")]
    if bad:
        ap.error(f"unknown log or setting: {', '.join(bad)}")
    epochs = a.epochs or (QUICK_EPOCHS if a.quick else BUDGET["epochs"])
    suite_name = "quality-quick" if a.quick else "quality"
    out = Path(a.out) if a.out else results_dir() / f"{suite_name}.json"
    skipped = [g for g in logs if g != "generated" and not log_path(g).exists()]
    if not a.out and EXTRA:  # a log of the user's: its own file, the stored figures stay as they are
        out = out.with_name(f"{suite_name}-{'-'.join(EXTRA)}.json")
    runs = []
    with tempfile.TemporaryDirectory(prefix="speed-quality-") as tmp:
        for name in (g for g in logs if g not in skipped):
            for seed in a.seeds:
                for setting in settings:
                    r = run_one(name, setting, seed, epochs, Path(tmp))
                    runs.append(r)
                    print(f"{name:<10} {setting:<6} seed {seed}: {r['epochs_run']} epochs, best {r['best_epoch']}, "
                          f"test AP {r['test_ap']:.4f} ({r['seconds']:.0f} s)", flush=True)
    command = "python -m benchmarks quality " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"suite": suite_name, "command": command.strip(), "stamp": stamp(ROOT), "epochs": epochs, **{k: v for k, v in BUDGET.items() if k != "epochs"},
              "parts": PARTS, "topk": TOPK, "nproc": NPROC, "seeds": a.seeds, "generated_recipe": RECIPES[GENERATED],
              "skipped": skipped, "runs": runs, "summary": summarise(runs)}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, indent=1) + "\n")
    tmp_out.rename(out)
    out.with_suffix(".md").write_text(table(result, out))
    if result["summary"]:
        chart(result, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md').name}" + (", .png" if result["summary"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
