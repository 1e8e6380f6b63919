"""``python -m benchmarks docs``: docs/benchmarks.md, its charts and the README's figures, made
from the stored results.

Nothing on the page is typed by hand: every table is read from a result file under
``benchmarks/results/<machine>/`` (the suite's ``cpu-quick.json`` / ``cpu.json``, ``quality-quick.json``
/ ``quality.json``, and ``gpu_check.json`` of ``python -m benchmarks gpu``), names the command
that makes it and the file it was read from, and the charts are drawn from the same files into
``benchmarks/results/<machine>/``.  Where a suite has run twice on a machine, the page says how far
the two runs' figures lie apart: the noise a reader should expect when rerunning a command.  A
question whose result is missing on every machine says which command answers it.

The README's figures sit between ``<!-- suite:start -->`` and ``<!-- suite:end -->``: made here too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import suite  # noqa: E402
from _trees import ROOT  # noqa: E402

RESULTS = HERE / "results"
DOC = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
MARKS = ("<!-- suite:start -->", "<!-- suite:end -->")
SCRIPTS = [  # every script of benchmarks/, and what it is for (the page lists them all)
    ("__main__.py", "the entry point: `python -m benchmarks {cpu,quality,gpu,docs}`"),
    ("suite.py", "the CPU suite's sections, their inputs (recipes, seeds) and tables"),
    ("quality.py", "learning quality at DyGLib's budget, one process and PAC, 3 seeds"),
    ("report.py", "this page, its charts and the README's figures, from the results"),
    ("_trees.py", "the stamp of a result, where results go, side-by-side runs of two checkouts"),
    ("train_vs_pyg.py", "speed's TGN against PyG's TGN: same data, split, batches, negatives"),
    ("eval_pass.py", "an evaluation pass against training, one process, widths 100 and 4"),
    ("step_cost.py", "operators, host-device syncs and planning µs per training step"),
    ("scale.py", "events/s against the node count; one PAC epoch on a 10^7-event log"),
    ("partition_quality.py", "SEP against HDRF, greedy, random, KL and METIS (the paper's Tables VI, VIII)"),
    ("behaviour.py", "the golden record: 14 deterministic runs, compared exactly (a `slow` test)"),
    ("gpu_check.py", "`python -m benchmarks gpu`: the GPU path against the CPU, then speed and memory"),
    ("profile_step.py", "where a step's time goes, stage by stage (gpu_check's `profile`)"),
    ("sampler_cost.py", "neighbour sampling's µs per step by thread count (gpu_check's `throughput`)"),
    ("plan_rate.py", "how often the pipeline hands out plans, by planning threads (a plan's stages in threads)"),
]


# ----------------------------------------------------------------------------- reading
def machines() -> List[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_dir())


def newest(*names: str) -> Tuple[Optional[dict], Optional[Path]]:
    """The first of ``names`` found (in that order) on any machine, newest first: (result, path)."""
    for name in names:
        found = sorted((m / name for m in machines() if (m / name).exists()),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        if found:
            return json.loads(found[0].read_text()), found[0]
    return None, None


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and abs(v) >= 1000):
        return f"{v:,.0f}"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def machine_line(st: dict) -> str:
    gpu = f", {st['gpu']}" if st.get("gpu") else ""
    return (f"{st['cpu']}, {st['cores']} cores{gpu}; commit {(st.get('commit') or '?')[:10]}"
            f"{' with changes' if st.get('dirty') else ''}; torch {st['torch']}; {st['date'][:10]}")


def noise(result: dict, path: Path) -> Optional[float]:
    """The largest relative difference of a headline figure between this run and the one before it
    on the same machine and commit (None without such a pair)."""
    prev_path = path.with_suffix(".previous.json")
    if not prev_path.exists():
        return None
    prev = json.loads(prev_path.read_text())
    worst = None
    for name, got in result["sections"].items():
        old = prev.get("sections", {}).get(name, {})
        if "error" in got or "error" in old or (got.get("ran") or {}).get("commit") != (old.get("ran") or {}).get("commit"):
            continue
        for k, r in suite.ratios({name: got}, {name: old})[name].items():
            if "sync_calls" not in k:
                worst = max(worst or 0.0, abs(r - 1.0))
    return worst


# ----------------------------------------------------------------------------- charts
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_batches(cpu: Optional[dict], gpu: Optional[dict], out: Path) -> Optional[Path]:
    """Training events/s against batch size: speed and PyG, CPU and GPU, log scales."""
    cpu_rows = ((cpu or {}).get("sections", {}).get("train_pyg") or {}).get("batches") or []
    gpu_runs = (((gpu or {}).get("sections", {}).get("throughput") or {}).get("runs")) or []
    if not cpu_rows and not gpu_runs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    if cpu_rows:
        b = [r["batch"] for r in cpu_rows]
        ax.plot(b, [r["speed_events_per_s"] for r in cpu_rows], "o-", label="speed, CPU (2 threads)")
        ax.plot(b, [r["pyg_events_per_s"] for r in cpu_rows], "s--", label="PyG's TGN, CPU (2 threads)")
    for fw, style in (("speed", "o-"), ("pyg", "s--")):
        rows = sorted((r for r in gpu_runs if r.get("framework") == fw and r.get("ok")), key=lambda r: r["batch"])
        if rows:
            ax.plot([r["batch"] for r in rows], [r["events_per_s"] for r in rows], style,
                    label=f"{'speed' if fw == 'speed' else 'PyG' + chr(39) + 's TGN'}, {gpu['device_name']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted({r["batch"] for r in cpu_rows} | {r["batch"] for r in gpu_runs})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("batch size (events)")
    ax.set_ylabel("training events / s")
    ax.set_title("TGN on a generated 2M-event log (10^6 node ids)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def chart_pac(pac: dict, out_phases: Path, out_memory: Path) -> Tuple[Path, Path]:
    """Seconds per phase against the ranks; each rank's peak RSS against ``speed plan``'s."""
    plt = _plt()
    runs = [(int(k[1:]), v) for k, v in pac.items() if k[:1] == "n" and k[1:].isdigit()]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    names = [p for p in ("train", "sync", "exchange", "validate", "test", "other")
             if any(v["phases"].get(p) for _, v in runs)]
    left = [0.0] * len(runs)
    for p in names:
        widths = [v["phases"].get(p, 0.0) for _, v in runs]
        ax.barh([f"N={n}" for n, _ in runs], widths, left=left, label=p)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("seconds (wall, the whole run)")
    ax.set_title(f"PAC, {pac['training_steps']} training steps in all, {pac['eval_batches']} batches a pass",
                 fontsize=9)
    ax.set_ylim(-0.6, len(runs) + 0.2)  # room above the bars for the legend
    ax.legend(fontsize=7, ncol=len(names), loc="upper center", frameon=False, handlelength=1.2)
    fig.tight_layout()
    fig.savefig(out_phases, dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    labels, measured, planned = [], [], []
    for n, v in runs:
        for r, (m, p) in enumerate(zip(v["rank_peak_rss_bytes"], v["planned_peak_bytes"])):
            labels.append(f"N={n}\nrank {r}")
            measured.append(m / 1e9)
            planned.append(p / 1e9)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], measured, 0.38, label="measured peak RSS")
    ax.bar([x + 0.2 for x in xs], planned, 0.38, label="speed plan")
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("GB per rank")
    ax.set_title("Memory per rank against the ranks", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_memory, dpi=110)
    plt.close(fig)
    return out_phases, out_memory


# ----------------------------------------------------------------------------- the page
def command_line(result: dict, path: Path, section: Optional[str] = None) -> str:
    suite_name = result["suite"]
    cmd = "python -m benchmarks " + suite_name.replace("-quick", " --quick")
    if section:
        cmd += f" --sections {section}"
    return f"Command: `{cmd}`; result: [`{rel(path)}`](../{rel(path)})."


def section_table(name: str, r: dict, before: Optional[dict] = None) -> List[str]:
    """The section's headline figures; with ``before`` (the same section's previous run, of the
    same commit), that run's figures beside them: the spread a rerun shows."""
    if "error" in r:
        return [f"This section failed in that run: {r['error']}"]
    rows = suite.headline(name, r)
    old = suite.headline(name, before) if before and (before.get("ran") or {}).get("commit") == \
        (r.get("ran") or {}).get("commit") else {}
    if old:
        return ["| figure | value | the run before |", "|---|---|---|"] + [
            f"| {k} | {fmt(v)} | {fmt(old.get(k, ''))} |" for k, v in rows.items()]
    return ["| figure | value |", "|---|---|"] + [f"| {k} | {fmt(v)} |" for k, v in rows.items()]


def missing(question: str, command: str) -> List[str]:
    return [f"No result on any machine yet: `{command}` answers it ({question}).", ""]


def cpu_sections(cpu: Optional[dict], path: Optional[Path], gpu, gpu_path) -> List[str]:
    L: List[str] = []
    sec = (cpu or {}).get("sections", {})
    prev_path = path.with_suffix(".previous.json") if path else None
    prev = json.loads(prev_path.read_text()).get("sections", {}) if prev_path and prev_path.exists() else {}
    log = (f"`{cpu['log']}`" if (cpu or {}).get("log") else
           "the generated log (`speed generate --events 2000000 --nodes 1000000 --seed 7`)")
    head = {"partition": "## Partitioning speed (SEP, 10^7 events, P=8, top-5%)",
            "train_pyg": "## Training speed against PyG's TGN",
            "eval_pass": "## Evaluation against training, one process",
            "pac": "## PAC: one rank against two",
            "step_ops": "## A training step's host cost (CPU, 1 thread)"}
    what = {"partition": "Reading the CSV, then `speed.partition` on the events in memory (numba kernels warmed first).",
            "train_pyg": ("TGN, 2 threads, 2 epochs; events/s of the epochs after the first. Speed's TGN and PyG's "
                          "(`TGNMemory`, `LastNeighborLoader`, `TransformerConv`) on the same split, batches and "
                          f"negatives. The batch rows use {log}. Speed embeds every query at its own event's time "
                          "(each event sees exactly its past); PyG's example embeds each distinct node once a batch, "
                          "so at large batches on a CPU speed does more arithmetic (at batch 4000 the time "
                          "encoding's cos and sin and the attention's products are most of a step: torch.profiler)."),
            "eval_pass": ("A validation pass's events/s over training's, TGN, 2 threads; width 4 is a model too small "
                          "to compute, so a step is its host work (the evaluation issue's target: 2.0 at width 100, "
                          "2.5 at width 4)."),
            "pac": (f"N=1 with 2 threads against N=2 ranks of 1 thread (gloo) on SEP shards of {log} "
                    "(P=8, top-5%), TGN, the same training steps in all, each evaluation pass bounded alike. "
                    "The ratios are N=2 over N=1; the peak is each rank's over the whole run."),
            "step_ops": ("TGN, batch 200: `aten::` leaf operators a step, calls that force a host-device sync, and "
                         "the µs of building a batch's plan (torch.profiler over a window mid-epoch).")}
    for name in ("partition", "train_pyg", "eval_pass", "pac", "step_ops"):
        L += [head[name], "", what[name], ""]
        if name not in sec:
            L += missing(name, f"python -m benchmarks cpu --quick --sections {name}")
            continue
        L += section_table(name, sec[name], prev.get(name)) + ["", command_line(cpu, path, name), ""]
        if name == "train_pyg":
            png = chart_batches(cpu, gpu, path.parent / "throughput_batch.png")
            if png:
                L += [f"![training events/s against batch size](../{rel(png)})", ""]
        if name == "pac" and all("phases" in v and "planned_peak_bytes" in v for k, v in sec[name].items()
                                 if k[:1] == "n" and k[1:].isdigit()):
            a, b = chart_pac(sec[name], path.parent / "pac_phases.png", path.parent / "pac_memory.png")
            L += [f"![seconds per phase, N=1 and N=2](../{rel(a)}) ![memory per rank](../{rel(b)})", ""]
    return L


def gpu_section(gpu: Optional[dict], path: Optional[Path]) -> List[str]:
    L = ["## On a GPU", ""]
    if gpu is None:
        return L + missing("speed on a GPU", "python -m benchmarks gpu")
    t = gpu["sections"].get("throughput") or {}
    L += [f"`gpu_check.py`'s `throughput` section on {gpu['device_name']} ({gpu['started'][:10]}): TGN on a generated "
          f"log of 2M events over 10^6 node ids, {fmt(t.get('train_events'))} training events, one process.", "",
          "| batch | framework | events/s | test AP (bounded) | peak GPU MB |", "|---|---|---|---|---|"]
    for r in sorted((r for r in t.get("runs", []) if r.get("ok")), key=lambda r: (r["batch"], r["framework"])):
        L.append(f"| {r['batch']} | {r['framework']} | {fmt(r['events_per_s'])} | {r['test_ap']:.4f} | "
                 f"{r['peak_device_bytes'] / 1e6:,.0f} |")
    for r in t.get("step_cost", [])[:2]:
        L.append(f"\nBatch {r['batch']}: {fmt(r['leaf_ops'])} operators and {fmt(r.get('kernel_launches'))} kernel "
                 f"launches a step, {fmt(r['sync_calls'])} host syncs, step {r['step_ms']:.1f} ms, plan "
                 f"{r['plan_us'] / 1000:.1f} ms"
                 + (f", kernels {r['kernel_ms']:.2f} ms a step ({100 * r['kernel_over_step']:.0f}% of the step)"
                    if "kernel_over_step" in r else "") + ".")
    p = gpu["sections"].get("pac_speed") or {}
    if p.get("runs"):
        L += ["", f"PAC ranks sharing the GPU (`pac_speed`: {fmt(p['log']['events'])} events, P={p['parts']}, the same "
              "training events in all, evaluation passes bounded alike):", "",
              "| N | training events/s | sync s | validate s | run s |", "|---|---|---|---|---|"]
        for r in p["runs"]:
            if r.get("ok"):
                L.append(f"| {r['nproc']} | {fmt(r['train_events_per_s'])} | {fmt(r['sync_s'])} | "
                         f"{fmt(r['validate_s'])} | {fmt(r['wall_s'])} |")
    L += ["", f"Command: `python -m benchmarks gpu --sections throughput`; result: [`{rel(path)}`](../{rel(path)}). "
          "(Stored before results carried the host's CPU in their stamp.)", ""]
    return L + cuda_graph_section(*newest("cuda_graph.json")) + plan_stages_section(*newest("plan_stages.json"))


def cuda_graph_section(cg: Optional[dict], path: Optional[Path]) -> List[str]:
    """``--cuda-graph`` against the eager step, measured side by side on one machine."""
    if cg is None:
        return []
    L = ["### The captured step (`--cuda-graph`)", "",
         f"On {cg['device_name']} ({cg['started']}): {cg['what']}.", "",
         "| batch | eager events/s | `--cuda-graph` events/s | speed-up | test AP eager / captured |",
         "|---|---|---|---|---|"]
    by = {}
    for r in cg["throughput"]:
        by.setdefault(r["batch"], {})[r["framework"]] = r
    for b, two in sorted(by.items()):
        e, c = two.get("speed"), two.get("speed-cuda-graph")
        if e and c:
            L.append(f"| {b} | {fmt(e['events_per_s'])} | {fmt(c['events_per_s'])} | "
                     f"{c['events_per_s'] / e['events_per_s']:.2f}× | {e['test_ap']:.4f} / {c['test_ap']:.4f} |")
    for r in cg.get("step_cost_cuda_graph", []):
        L.append(f"\nBatch {r['batch']}, captured: step {r['step_ms']:.2f} ms, {r['kernel_launches']:.0f} kernels "
                 f"in one graph launch, kernels {r['kernel_ms']:.2f} ms a step (the device busy "
                 f"{100 * r['device_busy_fraction']:.0f}% of the profiled window), plan and padding "
                 f"{r['plan_us'] / 1000:.1f} ms in the pipeline's thread (wall time there, waits for the interpreter lock included).")
    L += ["", f"{cg['gpu_test']['summary']}. {cg.get('note', '')}.", ""]
    for later in LATER_CUDA_GRAPH_RUNS:  # later device runs of the same commands, after changes
        run = cg.get(later)
        if not run:
            continue
        rows = sorted(run.get("throughput", []), key=lambda r: (r["batch"], r["framework"]))
        said = "; ".join(f"batch {r['batch']} {r['framework']} {fmt(r['events_per_s'])} events/s (test AP "
                         f"{r['test_ap']:.4f}, peak {r['peak_device_bytes'] / 1e9:.2f} GB)" for r in rows)
        L += [f"Later, at {run['commit']} ({run['started']}): {said}.", ""]
    L += [f"Commands: {'; '.join(f'`{c}`' for c in cg['commands'])}; result: [`{rel(path)}`](../{rel(path)}).", ""]
    return L


def plan_stages_section(ps: Optional[dict], path: Optional[Path]) -> List[str]:
    """A plan's stages in threads of their own (``--plan-threads``), against one planning thread."""
    if ps is None:
        return []
    last = ps["stages_switch_interval"]
    L = ["### A plan in stages (`--plan-threads`)", "", f"On {ps['device_name']} ({ps['started']}): {ps['what']}.", "",
         "| run | training events/s | val pass events/s | test AP |", "|---|---|---|---|"]
    for r in last["throughput"]:
        w = r["eval_work"][0] if r["eval_work"] else None
        L.append(f"| `{r['run']}` | {fmt(r['epoch']['events_per_s'])} | "
                 f"{fmt(w['events'] / w['seconds_total']) if w else ''} | {r['test_ap']:.4f} |")
    for r in last.get("step_cost_cuda_graph_3_threads", []):
        L.append(f"\nBatch {r['batch']}, captured, 3 planning threads: step {r['step_ms']:.2f} ms, kernels "
                 f"{r['kernel_ms']:.2f} ms a step ({100 * r['kernel_over_step']:.0f}% of the step).")
    L += ["", "`b`: batch, `cg`: `--cuda-graph`, `pt`: planning threads, `si`: the switch interval while stages "
          f"run (0: Python's 5 ms). {ps['note']}", "",
          f"Commands: {'; '.join(f'`{c}`' for c in ps['commands'].values())}; result: [`{rel(path)}`](../{rel(path)}).",
          ""]
    return L


#: the keys of cuda_graph.json that hold later device runs, oldest first
LATER_CUDA_GRAPH_RUNS = ("fitted_bounds", "shared_pool")


def latest_cuda_graph(cg: dict) -> List[tuple]:
    """``(batch, captured events/s, speed-up or None)`` of the latest device run with each batch
    captured; the speed-up where the eager step ran beside it in that run."""
    out = {}
    for run in [cg] + [cg[k] for k in LATER_CUDA_GRAPH_RUNS if cg.get(k)]:
        by = {}
        for r in run.get("throughput", []):
            by.setdefault(r["batch"], {})[r["framework"]] = r["events_per_s"]
        for b, d in by.items():
            if "speed-cuda-graph" in d:
                out[b] = (b, d["speed-cuda-graph"], d["speed-cuda-graph"] / d["speed"] if "speed" in d else None)
    return [out[b] for b in sorted(out)]


def quality_section(q: Optional[dict], path: Optional[Path]) -> List[str]:
    L = ["## Learning quality", ""]
    if q is None:
        return L + missing("test AP at DyGLib's budget", "python -m benchmarks quality --quick")
    L += [f"TGN, DyGLib's protocol (70/15/15, 10% of nodes held out), at most {q['epochs']} epochs, patience "
          f"{q['patience']}, lr {q['lr']:g}, `--deterministic`, seeds {', '.join(map(str, q['seeds']))}; one process "
          f"(2 threads) and PAC (P={q['parts']}, N={q['nproc']}, 1 thread each) on the same shards. DyGLib's figure is "
          "its published TGN test AP (random negatives).", "",
          "| log | setting | seeds | test AP, mean ± std | inductive AP | DyGLib's TGN |", "|---|---|---|---|---|---|"]
    for r in q["summary"]:
        L.append(f"| {r['log']} | {r['setting']} | {r['seeds']} | {r['test_ap_mean']:.4f} ± {r['test_ap_std']:.4f} | "
                 f"{r['inductive_ap_mean']:.4f} | {'' if r['published'] is None else format(r['published'], '.4f')} |")
    seed0 = [r for r in q["runs"] if r["seed"] == 0 and r["log"] == "collegemsg"]
    if seed0:
        L += ["", "Seed 0 on CollegeMsg, run by run (rerunning the command gives these within ±0.002): "
              + "; ".join(f"{r['setting']} {r['test_ap']:.4f} (best epoch {r['best_epoch']})" for r in seed0) + "."]
    png = path.with_suffix(".png")
    L += ["", f"Command: `{q.get('command') or 'python -m benchmarks ' + q['suite'].replace('-quick', ' --quick')}`; result: "
          f"[`{rel(path)}`](../{rel(path)}).", ""]
    if png.exists():
        L += [f"![test AP per log and setting](../{rel(png)})", ""]
    return L


def partition_quality_section() -> List[str]:
    L = ["## Partition quality (SEP against the baselines)", "",
         "The training events (first 70% by time) of each log, P=4 and 8: SEP at top-k 0/1/5/10% against HDRF, "
         "greedy, random, KL and METIS; edge cut, replication factor, balance and the partitioner's seconds.", ""]
    r, path = newest("partition_quality.json")
    if r is None:
        return L + missing("edge cut and replication against the baselines", "python benchmarks/partition_quality.py")
    table = path.with_suffix(".md")
    L += [table.read_text().strip(), "", f"Command: `{r.get('command', 'python benchmarks/partition_quality.py')}`; "
          f"result: [`{rel(path)}`](../{rel(path)}).", ""]
    png = path.with_suffix(".png")
    if png.exists():
        L += [f"![edge cut against replication factor](../{rel(png)})", ""]
    return L


def scale_section(cpu_full: Optional[dict], path: Optional[Path]) -> List[str]:
    L = ["## Scaling with the graph (the full suite)", "",
         "At the same 300k events, training events/s as the node ids grow (a step must cost O(its batch)), and one "
         "PAC epoch (N=2, P=8) on a generated 10^7-event log with full evaluation.", ""]
    r = (cpu_full or {}).get("sections", {}).get("scale")
    if not r:
        return L + missing("the scaling curve and the 10M-event run", "python -m benchmarks cpu --sections scale")
    L += section_table("scale", r) + ["", command_line(cpu_full, path, "scale"), ""]
    png = path.parent / "scale.png"  # scale.py's chart of the node sweep, beside its result
    if png.exists():
        L += [f"![training events/s against the node count](../{rel(png)})", ""]
    return L


def page() -> str:
    cpu, cpu_path = newest("cpu-quick.json", "cpu.json")
    full, full_path = newest("cpu.json")
    q, q_path = newest("quality-quick.json", "quality.json")
    qf, qf_path = newest("quality.json")
    gpu, gpu_path = newest("gpu_check.json")
    if gpu is not None and "throughput" not in gpu.get("sections", {}):
        gpu, gpu_path = None, None
    L = ["# Benchmarks", "",
         "<!-- made by `python -m benchmarks docs` from benchmarks/results/: edit benchmarks/report.py, not this page -->",
         "",
         "Today's figures, one table per question. Each names the command that makes it and the result file it was "
         "read from; every result file carries its stamp (commit, whether the tree had changes, Python, torch, "
         "numpy, numba, CPU, cores, threads, GPU, date). Design history lives in git and, where it explains a "
         "choice, in [parallel.md](parallel.md) and [training.md](training.md).", "",
         "## Running it", "",
         "From the repository's root, installed with `pip install -e '.[all]'` (the `bench` extra brings PyG's "
         "TGN for the comparison, and psutil).", "",
         "| command | what it measures | time |", "|---|---|---|",
         "| `python -m benchmarks cpu --quick` | SEP speed, TGN against PyG's, PAC N=1 against N=2 and `speed plan`, "
         "evaluation against training, operators per step | about 4 min on 2 cores |",
         "| `python -m benchmarks cpu` | the same at larger bounds, plus the scaling curve and a 10^7-event PAC epoch "
         "| about an hour |",
         "| `python -m benchmarks quality --quick` | test AP at DyGLib's budget (20 epochs at most), 3 seeds, one "
         "process and PAC, CollegeMsg and a generated log | about 15 min |",
         "| `python -m benchmarks quality` | up to 100 epochs, Wikipedia too | hours |",
         "| `python -m benchmarks gpu` | `gpu_check.py`: the GPU path against the CPU, then speed and memory | "
         "about 10 min |",
         "| `python -m benchmarks cpu --quick --tree ../other` | the same sections on another checkout, interleaved, "
         "and the ratios | twice the above |",
         "| `python -m benchmarks docs` | this page, its charts and the README's figures, from the results | seconds |",
         "", "Inputs are shipped (`data/`), read from `../shared/data`, or made by `speed generate` with the seeds "
         "named in `benchmarks/suite.py` and `benchmarks/quality.py`, cached in `benchmarks/.cache`. A section whose "
         "input is missing says so. Results go to `benchmarks/results/<machine>/`.", ""]
    if cpu is not None:
        n = noise(cpu, cpu_path)
        L += ["**Noise.** " + ("Timings on a shared 2-core machine move between runs. "
              + (f"The last two runs of this suite on this machine and commit differed by at most "
                 f"{100 * n:.0f}% in any figure (`{rel(cpu_path.with_suffix('.previous.json'))}` against "
                 f"`{rel(cpu_path)}`); expect that much when rerunning a command, and compare two "
                 "checkouts with `--tree`, interleaved, rather than against this page." if n is not None else
                 "Run the suite twice to see its spread on your machine (the page then states it)."))
              + " Counts (operators, syncs, bytes) and deterministic accuracy do not move.", "",
              "Machine: " + machine_line(cpu["stamps"][next(iter(cpu["stamps"]))]) + ".", ""]
    L += cpu_sections(cpu, cpu_path, gpu, gpu_path)
    L += gpu_section(gpu, gpu_path)
    L += quality_section(qf or q, qf_path or q_path)
    L += partition_quality_section()
    L += scale_section(full, full_path)
    L += ["## Exactness: the golden record", "",
          "`benchmarks/behaviour.py` trains every recipe single-process and under PAC, and the online updates, with "
          "`--deterministic`: 14 runs whose every loss, score and count is compared exactly with "
          "the machine's record, `benchmarks/results/<machine>/behaviour.json` (the bits depend on the CPU). "
          "`pytest -m slow tests/test_behaviour_record.py` runs it; a record changes only on purpose, by a commit "
          "that says why.", "",
          "## The scripts", "", "| script | what it is for |", "|---|---|"]
    L += [f"| `benchmarks/{f}` | {w} |" for f, w in SCRIPTS]
    L += ["", "`tests/reference_check.py` runs DyGLib's, TGN's and TGB's own evaluation code on the conformance "
          "logs (see [training.md](training.md#evaluation-protocols)).", ""]
    return "\n".join(L)


def readme_block() -> str:
    cpu, path = newest("cpu-quick.json", "cpu.json")
    q, qpath = newest("quality-quick.json", "quality.json")
    gpu, gpath = newest("gpu_check.json")
    L = [MARKS[0], "",
         "Every figure here is made by `python -m benchmarks docs` from a stored result, with the command that "
         "measures it; [docs/benchmarks.md](docs/benchmarks.md) has the tables, charts and noise.", ""]
    sec = (cpu or {}).get("sections", {})
    said = f"(`python -m benchmarks cpu --quick`, `{rel(path)}`)" if sec else ""
    for x in sec.get("train_pyg", {}).get("logs", []):
        L.append(f"- TGN training, one process, 2 threads, {x['log']}: {x['speed_events_per_s']:,.0f} events/s, "
                 f"{x['speedup']:.2f}× PyG's TGN {said}.")
    r = sec.get("pac", {}).get("ratios")
    if r:
        L.append(f"- PAC, N=2 ranks against N=1 on 2 cores: training {1 / r['train']:.2f}× as fast, validation "
                 f"{r['validate']:.2f}× the seconds, the whole run {r['run']:.2f}× {said}.")
    for w in sec.get("eval_pass", {}).get("widths", []):
        per_key = w.get("passes_per_key", {}).get("val")
        L.append(f"- A validation pass streams {w['passes'].get('val', float('nan')):.2f}× training's events/s at "
                 f"width {w['width']}" + (f" ({per_key:.2f}× per memory key computed)" if per_key else "")
                 + f" {said}.")
    part = sec.get("partition", {})
    if "events_per_s" in part:
        L.append(f"- SEP partitions {fmt(part['events'])} events into 8 parts at {fmt(part['events_per_s'])} "
                 f"events/s {said}.")
    if gpu and "throughput" in gpu.get("sections", {}):
        runs = [r for r in gpu["sections"]["throughput"]["runs"] if r.get("ok") and r["framework"] == "speed"]
        L.append(f"- On one {gpu['device_name']}: " + ", ".join(f"{fmt(r['events_per_s'])} events/s at batch {r['batch']}"
                                                            for r in runs)
                 + f" (`python -m benchmarks gpu --sections throughput`, `{rel(gpath)}`).")
    cg, cgpath = newest("cuda_graph.json")
    if cg:
        L.append(f"- With `--cuda-graph` on one {cg['device_name']} (its latest run): "
                 + ", ".join(f"{fmt(e)} events/s at batch {b}" + (f" ({x:.2f}× the eager step beside it)" if x else "")
                             for b, e, x in latest_cuda_graph(cg))
                 + f" (docs/benchmarks.md, `{rel(cgpath)}`).")
    ps, pspath = newest("plan_stages.json")
    if ps:
        best = [r for r in ps["stages_switch_interval"]["throughput"] if r["run"].startswith("tp_b1000_cg_pt")]
        if best:
            one = [r for r in best if "_pt1_" in r["run"]]
            three = [r for r in best if "_pt3_si2e-4" in r["run"]]
            if one and three:
                L.append(f"- With `--cuda-graph` and a plan's stages in 3 threads (`--plan-threads`, its default there) "
                         f"on one {ps['device_name']}: {fmt(three[0]['epoch']['events_per_s'])} events/s at batch 1000, "
                         f"against {fmt(one[0]['epoch']['events_per_s'])} with one planning thread in the same device call "
                         f"(`{rel(pspath)}`).")
    if q:
        rows = [r for r in q["summary"] if r["log"] == "collegemsg"]
        if rows:
            L.append("- TGN on CollegeMsg at DyGLib's protocol (" + f"at most {q['epochs']} epochs, "
                     f"{len(q['seeds'])} seeds): test AP " + ", ".join(
                         f"{r['setting']} {r['test_ap_mean']:.3f} ± {r['test_ap_std']:.3f}" for r in rows)
                     + (f" (DyGLib publishes {rows[0]['published']:.3f})" if rows[0]["published"] else "")
                     + f" (`python -m benchmarks {q['suite'].replace('-quick', ' --quick')}`, `{rel(qpath)}`).")
    L += ["", MARKS[1]]
    return "\n".join(L)


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv=None) -> int:
    text = page()
    write(DOC, text)
    readme = README.read_text()
    if MARKS[0] in readme and MARKS[1] in readme:
        head, rest = readme.split(MARKS[0], 1)
        _, tail = rest.split(MARKS[1], 1)
        write(README, head + readme_block() + tail)
    print(f"wrote {rel(DOC)} ({len(text.splitlines())} lines) and the README's figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
