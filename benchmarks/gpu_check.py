"""The GPU path verified in one command: correctness against the CPU, then speed and memory.

Run it first whenever a GPU is at hand::

    python -m benchmarks gpu        # or python benchmarks/gpu_check.py; results in benchmarks/results/<machine>/

Without a CUDA device it prints one line saying that nothing was verified, and why, and exits 0.
With one, the sections below run in order, each in its own process (a CUDA error in one does
not take the others with it), and ``DIR/gpu_check.json`` is rewritten after each, so what ran
survives a cut-off:

correctness (``ok`` true or false each, with the figures compared)
    ``single``     every model trained one epoch with ``--deterministic`` on ``data/sample.csv``,
                   on the CPU and on the GPU: training loss and test AP compared (tolerances
                   below);
    ``state``      TGN on the GPU with ``--state-device device`` and ``host`` (the same numbers
                   up to float rounding), the pinned staging buffer against plain indexing, and
                   ``auto`` choosing each side of the stated free memory;
    ``pac``        ``speed train --nproc 1`` on NCCL, ``--nproc N`` over every GPU present, and
                   two ranks on one GPU (gloo, as the launcher does when ranks outnumber GPUs),
                   against two CPU ranks on gloo; each rank's peak GPU memory against
                   ``speed plan``'s node-state bytes;
    ``predictor``  a run trained on the GPU, then ``speed embed``, ``score`` and ``update`` on
                   the CPU and on the GPU: the same embeddings, scores and update metrics;
speed and memory
    ``throughput`` events/s per GPU where it is launch-bound: a generated log of 2M events over
                   1M node ids, TGN, the first 300,000 training events (after a few untimed
                   warm-up steps), at batches of 200, 1000 and 4000, by speed (with and without
                   ``--pipeline``) and by PyG's TGN on the same GPU, one process each; each run
                   records events/s, peak GPU memory and test AP with evaluation bounded (the
                   first 50 batches of val, then of test); then ``benchmarks/step_cost.py`` on
                   the same log: kernel launches, host-device syncs and operators per step,
                   the kernels' busy time a step against the step's time (the device-busy fraction),
                   ``benchmarks/sampler_cost.py``: neighbour sampling's µs a step on 1, 4
                   and all the host's cores, and ``benchmarks/plan_rate.py``: how often 1 and 3
                   planning threads hand out plans (a plan's stages in threads; a plan beside a
                   dispatching thread was measured by ``git show 8817d54:benchmarks/plan_beside_step.py``);
    ``pac_speed``  PAC's ranks sharing one GPU against one rank: a generated log (1M events over
                   500k node ids), P=8, top-5%, TGN, batch 200, one epoch, ``--nproc`` 1, 2 and 4
                   (gloo between ranks on one GPU) training the same events (``--max-steps``
                   divided by N) with each evaluation pass bounded alike: training events/s,
                   sync and validation seconds, the whole run's wall time;
    ``pyg``        ``benchmarks/train_vs_pyg.py --device cuda`` on Wikipedia (speed's TGN
                   against PyG's on the same GPU, one after the other);
    ``profile``    ``benchmarks/profile_step.py --device cuda``: where a step's time goes, with the
                   memories on the device, in host memory with pinned staging, and without it;
    ``sweep``      ``benchmarks/scale.py``'s node sweep (10^4 to 10^6 nodes) on the GPU.

Tolerances.  The same weights on the two devices compute the same function up to float32
rounding, with one amplifier: the time encoding ``cos(w dt + b)`` takes arguments as large as
the log's time gaps (up to 4e4 on the sample), and there one unit in the last place of the
argument (the CPU rounds ``w dt`` and then adds ``b``; cuBLAS fuses the two) moves the feature
by up to ``eps32 * |w dt|``, 2e-3 (measured on an H200: every module's output agrees to 1.5e-4
except the time encoding's, 1.95e-3).  So embeddings compare at ``VALUE_ATOL`` (1e-2, that bound
for gaps up to 2e5) and link probabilities at ``SCORE_ATOL`` (1e-3).  A training epoch cannot
repeat the CPU's exactly: besides that rounding, dropout draws its masks from each device's own
generator, so the GPU run is another draw of the same training.  Its mean loss must stay within
``LOSS_RTOL`` (1e-2) of the CPU's and its test AP within ``AP_ATOL`` (0.01; the seed-to-seed
spread on this log is several times that); a wrong kernel or a lost update moves both by more.

Usage::

    python benchmarks/gpu_check.py --out DIR [--sections single pac ...] [--budget-s 480]
                                   [--wikipedia PATH] [--keep EARLIER/gpu_check.json]

``--wikipedia`` names the log where ``../shared/data`` is not beside the checkout (a lent GPU
machine gets the repository alone); ``--budget-s`` stops starting sections once spent, and
``--keep`` reruns some sections of an earlier check and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from speed.train.recipes import RECIPES  # (no torch: the table alone)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLE = ROOT / "data" / "sample.csv"
MODELS = tuple(RECIPES)  # every model
SECTIONS = ("env", "throughput", "single", "state", "pac", "pac_speed", "predictor", "pyg", "profile", "sweep")
LOSS_RTOL = 1e-2
AP_ATOL = 0.01
VALUE_ATOL = 1e-2
SCORE_ATOL = 1e-3
# seconds each section may take at most (the whole check also stops at --budget-s)
SECTION_CAP_S = {"env": 60, "throughput": 560, "pac_speed": 560, "single": 240, "state": 180, "pac": 300, "predictor": 180, "pyg": 300,
                 "profile": 300, "sweep": 400}


# ---------------------------------------------------------------- helpers
def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _start(args, log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([str(a) for a in args], stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env=_env())


def _wait(proc: subprocess.Popen, log: Path, timeout: float) -> dict:
    try:
        rc = proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "timeout"
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    return {"rc": rc, "ok": rc == 0, **({} if rc == 0 else {"output_tail": tail})}


def _run_all(jobs: dict, work: Path, timeout: float) -> dict:
    """Start every ``name: argv`` at once (they are checked, not timed), wait for all."""
    procs = {k: _start(v, work / f"{k}.log") for k, v in jobs.items()}
    end = time.monotonic() + timeout
    return {k: _wait(p, work / f"{k}.log", end - time.monotonic()) for k, p in procs.items()}


def _call(args, timeout=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(x) for x in args], capture_output=True, text=True, cwd=ROOT, env=_env(),
                          timeout=timeout)


def _speed(*args) -> list:
    return [sys.executable, "-m", "speed", *args]


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def _summary(m: dict) -> dict:
    """The figures compared between devices, from a run's metrics.json."""
    test = (m.get("test") or {}).get("transductive", {})
    return {"losses": [e["loss"] for e in m["epochs"]], "test_ap": test.get("ap"),
            "train_events_per_s": [e["train_events_per_s"] for e in m["epochs"]],
            "node_state_on": m.get("node_state_on"), "rank_peak_device_bytes": m.get("rank_peak_device_bytes"),
            "rank_peak_rss_bytes": m.get("rank_peak_rss_bytes")}


def _same_run(a: dict, b: dict) -> dict:
    loss = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a["losses"], b["losses"]))
    ap = abs(a["test_ap"] - b["test_ap"])
    return {"loss_rel_diff": loss, "test_ap_diff": ap, "ok": bool(loss <= LOSS_RTOL and ap <= AP_ATOL)}


def _free_memory() -> dict:
    import torch

    free, total = torch.cuda.mem_get_info()
    return {"free_bytes": int(free), "total_bytes": int(total)}


def _nccl_version():
    import torch.distributed as dist

    if not dist.is_nccl_available():
        return None
    import torch.cuda.nccl

    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


# ---------------------------------------------------------------- sections
def section_env(a, work: Path) -> dict:
    import numba
    import numpy
    import torch

    import speed

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "numpy": numpy.__version__,
           "numba": numba.__version__, "speed": getattr(speed, "__version__", None), "python": sys.version.split()[0],
           "gpus": [{"name": torch.cuda.get_device_name(i), "capability": list(torch.cuda.get_device_capability(i)),
                     "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                    for i in range(torch.cuda.device_count())],
           "nccl": _nccl_version(),
           "gloo": torch.distributed.is_gloo_available(),
           **(_free_memory() if torch.cuda.is_available() else {})}
    try:
        import torch_geometric

        out["torch_geometric"] = torch_geometric.__version__
    except ImportError:
        out["torch_geometric"] = None
    out["ok"] = True
    return out


def section_single(a, work: Path) -> dict:
    jobs = {}
    for model in MODELS:
        for dev in ("cpu", a.device):
            run = work / f"{model}-{dev.replace(':', '')}"
            jobs[run.name] = _speed("train", SAMPLE, "--model", model, "--epochs", 1, "--deterministic", "--device",
                                    dev, "--out", run, "--overwrite", "--no-progress", "--threads", a.threads)
    status = _run_all(jobs, work, a.timeout)
    out = {"log": SAMPLE.name, "epochs": 1, "deterministic": True, "models": {}}
    for model in MODELS:
        names = [f"{model}-{d.replace(':', '')}" for d in ("cpu", a.device)]
        if not all(status[n]["ok"] for n in names):
            out["models"][model] = {"ok": False, **{n: status[n] for n in names}}
            continue
        cpu, gpu = (_summary(_metrics(work / n)) for n in names)
        out["models"][model] = {"cpu": cpu, "gpu": gpu, **_same_run(cpu, gpu)}
    out["ok"] = all(m["ok"] for m in out["models"].values())
    return out


def section_state(a, work: Path) -> dict:
    import torch

    from speed.train.model.build import state_placement

    jobs = {}
    for where in ("device", "host", "auto"):
        run = work / f"tgn-{where}"
        jobs[run.name] = _speed("train", SAMPLE, "--model", "tgn", "--epochs", 1, "--deterministic", "--device",
                                a.device, "--state-device", where, "--out", run, "--overwrite", "--no-progress",
                                "--threads", a.threads)
    status = _run_all(jobs, work, a.timeout)
    out = {"runs": {}}
    for name, st in status.items():
        out["runs"][name] = {**_summary(_metrics(work / name)), "ok": True} if st["ok"] else st
    ok = all(r["ok"] for r in out["runs"].values())
    if ok:
        dev, host, auto = (out["runs"][f"tgn-{w}"] for w in ("device", "host", "auto"))
        out["device_vs_host"] = _same_run(dev, host)
        out["placed"] = {"device": dev["node_state_on"], "host": host["node_state_on"], "auto": auto["node_state_on"]}
        want = {"device": "device", "host": "host", "auto": "device"}
        ok = out["device_vs_host"]["ok"] and (out["placed"] == want or not a.device.startswith("cuda"))
    gpu = torch.device(a.device)
    if gpu.type != "cuda":  # a rehearsal on the CPU: nothing more to place
        out["ok"] = ok
        return out
    # auto on either side of the stated free memory (half of it for the state)
    free = torch.cuda.mem_get_info(gpu)[0]
    out["auto"] = {"free_bytes": int(free),
                   "state_of_free_over_2": state_placement("auto", gpu, free // 2),
                   "state_of_free_over_2_plus_1": state_placement("auto", gpu, free // 2 + 1),
                   "stated_1_GiB_free_state_600_MiB": state_placement("auto", gpu, 600 << 20, free_bytes=1 << 30)}
    auto_ok = (out["auto"]["state_of_free_over_2"] == "device" and out["auto"]["state_of_free_over_2_plus_1"] == "host"
               and out["auto"]["stated_1_GiB_free_state_600_MiB"] == "host")
    out["staging"] = _staging_check(gpu)
    out["ok"] = bool(ok and auto_ok and out["staging"]["ok"])
    return out


def _staging_check(gpu) -> dict:
    """Host memories read and written from the GPU through the pinned buffers: the same rows
    as plain indexing, and the buffers really page-locked."""
    import torch

    from speed.train.state import staging
    from speed.train.state.memory import NodeMemory

    staging.PIN_STAGING = True  # off by default (measured slower): checked here all the same
    torch.manual_seed(0)
    mem = NodeMemory(50_000, 100, device="cpu")
    mem.memory.normal_()
    mem.last_update.uniform_()
    ok, reads = True, 0
    for k in (10, 1000, 300, 4000):  # growing and shrinking batches reuse the buffers
        ids = torch.randint(0, 50_000, (k,), device=gpu).unique()
        got, last = mem.read(ids)
        want = mem.memory[ids.cpu()], mem.last_update[ids.cpu()]
        ok &= bool(torch.equal(got.cpu(), want[0]) and torch.equal(last.cpu(), want[1]))
        new = torch.randn(ids.numel(), 100, device=gpu)
        mem.write(ids, new, torch.full((ids.numel(),), 2.0, dtype=torch.float64, device=gpu))
        ok &= bool(torch.equal(mem.memory[ids.cpu()], new.cpu()))
        reads += 1
    stage = mem._staging.get(ids.device)
    pinned = bool(stage is not None and stage.rows.is_pinned())
    return {"reads": reads, "pinned": pinned, "ok": bool(ok and pinned)}


def section_pac(a, work: Path) -> dict:
    import torch

    shards = work / "shards"
    part = _call(_speed("partition", SAMPLE, "-o", shards, "--parts", 4, "--overwrite", "--no-progress"))
    if part.returncode:
        return {"ok": False, "partition": part.stderr[-1500:]}
    gpus = torch.cuda.device_count()
    runs = {"nccl-1": (1, a.device), "gloo-2-on-1-gpu": (2, a.device), "cpu-gloo-2": (2, "cpu")}
    if gpus > 1:
        runs[f"nccl-{min(gpus, 4)}"] = (min(gpus, 4), a.device)
    jobs = {name: _speed("train", shards, "--nproc", n, "--model", "tgn", "--epochs", 1, "--device", dev,
                         "--out", work / name, "--overwrite", "--no-progress", "--threads", a.threads)
            for name, (n, dev) in runs.items()}
    env_one_gpu = dict(_env(), CUDA_VISIBLE_DEVICES="0")  # two ranks on one GPU even where more are present
    procs = {}
    for name, argv in jobs.items():
        log = work / f"{name}.log"
        procs[name] = subprocess.Popen([str(x) for x in argv], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                       cwd=ROOT, env=env_one_gpu if name == "gloo-2-on-1-gpu" else _env())
    end = time.monotonic() + a.timeout
    status = {k: _wait(p, work / f"{k}.log", end - time.monotonic()) for k, p in procs.items()}
    out = {"gpus": gpus, "runs": {}}
    for name, (n, dev) in runs.items():
        if not status[name]["ok"]:
            out["runs"][name] = {"nproc": n, "device": dev, **status[name]}
            continue
        m = _metrics(work / name)
        plan = json.loads(_call(_speed("plan", shards, "--nproc", n, "--json")).stdout)
        planned = {r["rank"]: r for r in plan["epochs"][0]["ranks"]}
        ranks = m["epochs"][0].get("ranks", [])
        out["runs"][name] = {
            "nproc": n, "device": dev, "ok": True, **_summary(m),
            "ranks": [{"rank": r["rank"], "events": r["events"], "nodes": r["nodes"],
                       "peak_device_bytes": r.get("peak_device_bytes"),
                       "planned_state_bytes": planned[r["rank"]]["memory_bytes"],
                       "planned_peak_host_bytes": planned[r["rank"]]["peak_bytes"],
                       "peak_rss_bytes": r.get("peak_rss_bytes")} for r in ranks]}
    ref = out["runs"].get("cpu-gloo-2", {})
    for name, r in out["runs"].items():
        if name != "cpu-gloo-2" and r.get("ok") and ref.get("ok"):
            # not deterministic across devices and rank counts: the AP only, at the seed spread
            r["test_ap_vs_cpu"] = r["test_ap"] - ref["test_ap"]
    out["ok"] = all(r.get("ok") for r in out["runs"].values())
    return out


def section_predictor(a, work: Path) -> dict:
    import numpy as np

    head, tail = work / "first.csv", work / "rest.csv"
    lines = SAMPLE.read_text().splitlines()
    cut = 1 + (len(lines) - 1) * 4 // 5
    head.write_text("\n".join(lines[:cut]) + "\n")
    tail.write_text("\n".join([lines[0]] + lines[cut:]) + "\n")
    run = work / "run-gpu"
    train = _call(_speed("train", head, "--model", "tgn", "--epochs", 1, "--device", a.device, "--out", run,
                                  "--overwrite", "--no-progress", "--threads", a.threads), a.timeout)
    if train.returncode:
        return {"ok": False, "train": train.stdout[-800:] + train.stderr[-1500:]}
    jobs = {}
    for dev in ("cpu", a.device):
        d = dev.replace(":", "")
        jobs[f"embed-{d}"] = _speed("embed", run, "-o", work / f"emb-{d}.npy", "--device", dev, "--overwrite",
                                    "--no-progress")
        jobs[f"score-{d}"] = _speed("score", run, tail, "-o", work / f"score-{d}.csv", "--device", dev,
                                    "--overwrite", "--no-progress")
        jobs[f"update-{d}"] = _speed("update", run, tail, "--out", work / f"upd-{d}", "--device", dev, "--overwrite",
                                     "--no-progress", "--json")
    status = _run_all(jobs, work, a.timeout)
    out = {"trained_on": a.device, "runs": status}
    if all(s["ok"] for s in status.values()):
        g = a.device.replace(":", "")
        e_cpu, e_gpu = np.load(work / "emb-cpu.npy"), np.load(work / f"emb-{g}.npy")
        s_cpu = np.genfromtxt(work / "score-cpu.csv", delimiter=",", names=True)["score"]
        s_gpu = np.genfromtxt(work / f"score-{g}.csv", delimiter=",", names=True)["score"]
        u_cpu, u_gpu = (_metrics(work / f"upd-{d}") for d in ("cpu", g))
        out["embed_max_abs_diff"] = float(np.abs(e_cpu - e_gpu).max())
        out["score_max_abs_diff"] = float(np.abs(s_cpu - s_gpu).max())
        out["update"] = {"cpu": _update_summary(u_cpu), "gpu": _update_summary(u_gpu)}
        ap_diff = abs(out["update"]["cpu"]["ap"] - out["update"]["gpu"]["ap"])
        out["update_ap_diff"] = ap_diff
        out["ok"] = bool(out["embed_max_abs_diff"] <= VALUE_ATOL and out["score_max_abs_diff"] <= SCORE_ATOL
                         and ap_diff <= AP_ATOL)
    else:
        out["ok"] = False
    return out


def _update_summary(m: dict) -> dict:
    """How an update scored the new events before training on each batch, and its loss."""
    last = m["updates"][-1]
    return {"ap": last["ap"], "loss": last.get("loss")}


def section_throughput(a, work: Path) -> dict:
    log = work / f"gen-{a.tp_log_events}-{a.tp_log_nodes}.csv"
    if not log.exists():
        gen = _call(_speed("generate", log, "--events", a.tp_log_events, "--nodes", a.tp_log_nodes, "--seed", 0,
                           "--no-progress"), a.timeout)
        if gen.returncode:
            return {"ok": False, "generate": gen.stderr[-1500:]}
    end = time.monotonic() + a.timeout
    out = {"log": {"events": a.tp_log_events, "node_ids": a.tp_log_nodes, "generator_seed": 0},
           "train_events": a.tp_events, "eval_max_steps": a.tp_eval_steps, "warmup_steps": 10, "runs": []}
    partial = work / "partial.json"
    for batch in a.tp_batches:
        for fw in a.tp_frameworks:
            left = end - time.monotonic()
            if left < 15:
                out["runs"].append({"framework": fw, "batch": batch, "ok": None, "skipped": "out of time"})
                continue
            worker = "pyg" if fw == "pyg" else "speed"
            cmd = [sys.executable, HERE / "train_vs_pyg.py", "--worker", worker, "--log", log, "--epochs", 1,
                   "--batch-size", batch, "--max-events", a.tp_events, "--eval-max-steps", a.tp_eval_steps,
                   "--warmup-steps", 10, "--device", a.device, "--threads", a.threads]
            if fw == "speed-pipeline":
                cmd.append("--pipeline")
            elif fw == "speed-no-pipeline":
                cmd.append("--no-pipeline")
            elif fw == "speed-cuda-graph":
                cmd.append("--cuda-graph")
            t0 = time.monotonic()
            try:
                proc = _call(cmd, left - 5)
                ok = proc.returncode == 0
            except subprocess.TimeoutExpired:
                proc, ok = None, False
            row = {"framework": fw, "batch": batch, "ok": ok, "wall_s": time.monotonic() - t0}
            if ok:
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                ep = r["epochs"][0]
                row.update(events=ep["events"], seconds=ep["seconds"], events_per_s=ep["events_per_s"],
                           loss=ep["loss"], test_ap=r["test"]["ap"], peak_device_bytes=r.get("peak_device_bytes"),
                           num_nodes=r.get("num_nodes"), captured=r.get("captured"))
            else:
                row["output_tail"] = "timeout" if proc is None else proc.stderr[-1500:]
            out["runs"].append(row)
            partial.write_text(json.dumps(out))
    left = end - time.monotonic()
    if left > 30 and a.tp_step_batches:
        dst = work / "step_cost.json"
        try:
            proc = _call([sys.executable, HERE / "step_cost.py", "--log", log, "--device", a.device, "--batch",
                          *a.tp_step_batches, "--skip", 20, "--steps", 40, "--threads", a.threads, "--out", dst],
                         left - 5)
            out["step_cost"] = (json.loads(dst.read_text())["runs"] if proc.returncode == 0
                                else {"ok": False, "output_tail": proc.stderr[-1500:]})
        except subprocess.TimeoutExpired:
            out["step_cost"] = {"ok": False, "output_tail": "timeout"}
    left = end - time.monotonic()
    if left > 30:  # neighbour sampling by thread count: the host's cores are what it scales with
        dst = work / "sampler_cost.json"
        cores = sorted({1, 4, len(os.sched_getaffinity(0))})
        try:
            proc = _call([sys.executable, HERE / "sampler_cost.py", "--log", log, "--batch", 200, 1000, 4000,
                          "--threads", *cores, "--out", dst], left - 5)
            out["sampler_cost"] = (json.loads(dst.read_text())["runs"] if proc.returncode == 0
                                   else {"ok": False, "output_tail": proc.stderr[-1500:]})
        except subprocess.TimeoutExpired:
            out["sampler_cost"] = {"ok": False, "output_tail": "timeout"}
    left = end - time.monotonic()
    if left > 30:  # plans a second by planning threads (a plan's stages in threads of their own)
        dst = work / "plan_rate.json"
        try:
            proc = _call([sys.executable, HERE / "plan_rate.py", "--log", log, "--batch", 200, 1000, "--threads", 1, 3,
                          "--torch-threads", a.threads, "--repeat", 1, "--out", dst], left - 5)
            out["plan_rate"] = (json.loads(dst.read_text())["runs"] if proc.returncode == 0
                                else {"ok": False, "output_tail": proc.stderr[-1500:]})
        except subprocess.TimeoutExpired:
            out["plan_rate"] = {"ok": False, "output_tail": "timeout"}
    out["ok"] = all(r["ok"] is not False for r in out["runs"]) and bool(out["runs"])
    return out


def section_pac_speed(a, work: Path) -> dict:
    log = work / f"gen-{a.pac_log_events}-{a.pac_log_nodes}.csv"
    shards = work / "pac-shards"
    end = time.monotonic() + a.timeout
    if not log.exists():
        gen = _call(_speed("generate", log, "--events", a.pac_log_events, "--nodes", a.pac_log_nodes, "--seed", 0,
                           "--no-progress"), a.timeout)
        if gen.returncode:
            return {"ok": False, "generate": gen.stderr[-1500:]}
    part = _call(_speed("partition", log, "-o", shards, "--parts", 8, "--topk", 5, "--overwrite", "--no-progress"),
                 max(end - time.monotonic(), 10))
    if part.returncode:
        return {"ok": False, "partition": part.stderr[-1500:]}
    out = {"log": {"events": a.pac_log_events, "node_ids": a.pac_log_nodes}, "parts": 8, "topk": 5,
           "max_steps_one_rank": a.pac_max_steps, "eval_max_steps": a.pac_eval_steps, "runs": []}
    partial = work / "partial.json"
    for n in a.pac_nprocs:
        left = end - time.monotonic()
        if left < 20:
            out["runs"].append({"nproc": n, "ok": None, "skipped": "out of time"})
            continue
        run = work / f"pac-{n}"
        cmd = _speed("train", shards, "--nproc", n, "--model", "tgn", "--epochs", 1, "--device", a.device,
                     "--batch-size", 200, "--out", run, "--overwrite", "--no-progress", "--threads", a.threads)
        if a.pac_max_steps:
            cmd += ["--max-steps", max(1, a.pac_max_steps // n)]
        if a.pac_eval_steps:
            cmd += ["--eval-max-steps", a.pac_eval_steps]
        env = dict(_env(), CUDA_VISIBLE_DEVICES="0")  # N ranks on one GPU
        t0 = time.monotonic()
        try:
            proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=ROOT, env=env,
                                  timeout=left - 5)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            proc, ok = None, False
        row = {"nproc": n, "ok": ok, "wall_s": time.monotonic() - t0}
        if ok:
            m = _metrics(run)
            e = m["epochs"][0]
            row.update(train_s=e["seconds"].get("train"), train_events_per_s=e["train_events_per_s"],
                       train_events=e["train_events"], sync_s=e["seconds"].get("sync"),
                       validate_s=e["seconds"].get("validate"), validate_exchange_s=e["seconds"].get("validate_exchange"),
                       test_ap=(m.get("test") or {}).get("transductive", {}).get("ap"),
                       rank_peak_device_bytes=m.get("rank_peak_device_bytes"),
                       work=[{k: w.get(k) for k in ("pass", "events", "steps", "keys", "embeddings", "rows_received",
                                                     "seconds_total", "seconds_collectives", "seconds_planning",
                                                     "seconds_dividing", "seconds_pass", "plan_threads", "exchanges")}
                             for w in (m.get("evaluation_work") or [[]])[0]])
        else:
            row["output_tail"] = "timeout" if proc is None else proc.stderr[-1500:]
        out["runs"].append(row)
        partial.write_text(json.dumps(out))
    out["ok"] = all(r["ok"] is not False for r in out["runs"]) and bool(out["runs"])
    return out


def section_pyg(a, work: Path) -> dict:
    dst = work / "train_vs_pyg_gpu.json"
    proc = _call([sys.executable, HERE / "train_vs_pyg.py", "--device", a.device, "--epochs", 2,
                           "--threads", a.threads, "--log", a.wikipedia, "--out", dst], a.timeout)
    if proc.returncode:
        return {"ok": False, "output_tail": proc.stderr[-1500:]}
    r = json.loads(dst.read_text())
    return {"ok": True, **r["summary"][0], "runs": r["runs"]}


def section_profile(a, work: Path) -> dict:
    rows = {}
    for name, extra in {"state-on-device": ["--state-device", "device"],
                        "state-on-host-pinned": ["--state-device", "host", "--pin"],
                        "state-on-host-pageable": ["--state-device", "host", "--no-pin"]}.items():
        dst = work / f"{name}.json"
        proc = _call([sys.executable, HERE / "profile_step.py", "--device", a.device, "--log", a.wikipedia,
                               "--threads", a.threads, "--out", dst, *extra], a.timeout)
        if proc.returncode:
            rows[name] = {"ok": False, "output_tail": proc.stderr[-1500:]}
            continue
        r = json.loads(dst.read_text())["runs"][0]
        rows[name] = {"ok": True, "events_per_s": r["events_per_s"], "seconds": r["seconds"],
                      "state_device": r["state_device"], "stages": r["stages"]}
    out = {"log": Path(a.wikipedia).name, "runs": rows, "ok": all(r["ok"] for r in rows.values())}
    if out["ok"]:
        out["pinned_over_pageable"] = (rows["state-on-host-pinned"]["events_per_s"]
                                       / rows["state-on-host-pageable"]["events_per_s"])
    return out


def section_sweep(a, work: Path) -> dict:
    dst = work / "scale_gpu.json"
    proc = _call([sys.executable, HERE / "scale.py", "--nodes", *a.sweep_nodes, "--events", a.sweep_events,
                           "--pac-events", "--device", a.device, "--threads", a.threads, "--work", work,
                           "--out", dst], a.timeout)
    if proc.returncode:
        return {"ok": False, "output_tail": proc.stderr[-1500:]}
    return {"ok": True, "events": a.sweep_events, "rows": json.loads(dst.read_text())["node_sweep"]}


# ---------------------------------------------------------------- driver
def _save(result: dict, out: Path) -> None:
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out)


def _line(name: str, r: dict) -> str:
    if name == "single" and "models" in r:
        return ", ".join(f"{m} {'ok' if v['ok'] else 'FAIL'}" + (f" (loss {v['loss_rel_diff']:.1e}, AP "
                                                                  f"{v['test_ap_diff']:.4f})" if "loss_rel_diff" in v else "")
                         for m, v in r["models"].items())
    if name == "pyg" and r.get("ok"):
        return (f"speed {r['speed_events_per_s']:,.0f} ev/s AP {r['speed_test_ap']:.4f} | PyG "
                f"{r['pyg_events_per_s']:,.0f} ev/s AP {r['pyg_test_ap']:.4f} | {r['speedup']:.2f}x")
    if name == "pac" and "runs" in r:
        return ", ".join(f"{k} {'ok' if v.get('ok') else 'FAIL'}" for k, v in r["runs"].items())
    if name == "profile" and r.get("ok"):
        return ", ".join(f"{k} {v['events_per_s']:,.0f} ev/s" for k, v in r["runs"].items())
    if name == "throughput" and "runs" in r:
        return "; ".join(f"{x['framework']} b{x['batch']} " + (f"{x['events_per_s']:,.0f} ev/s" if x.get("ok")
                                                             else "FAIL") for x in r["runs"])
    if name == "pac_speed" and "runs" in r:
        return "; ".join(f"N={x['nproc']} " + (f"train {x['train_events_per_s']:,.0f} ev/s, val {x['validate_s']:.1f} s, "
                                               f"wall {x['wall_s']:.0f} s" if x.get("ok") else "FAIL") for x in r["runs"])
    if name == "sweep" and r.get("ok"):
        return ", ".join(f"{x['distinct_nodes']:,} nodes {x['speed_events_per_s']:,.0f} ev/s" for x in r["rows"])
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None,
                    help="folder for gpu_check.json (default: benchmarks/results/<machine>/, the GPU in its name)")
    ap.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--budget-s", type=float, default=1800, help="stop starting sections after this many seconds")
    ap.add_argument("--threads", type=int, default=4, help="torch threads of each CPU process")
    ap.add_argument("--wikipedia", default=str(ROOT.parent / "shared" / "data" / "wikipedia.csv"))
    ap.add_argument("--work", default=None, help="scratch folder (default OUT/work)")
    ap.add_argument("--sweep-nodes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--sweep-events", type=int, default=200_000)
    ap.add_argument("--tp-batches", type=int, nargs="+", default=[200, 1000, 4000], help="throughput: batch sizes")
    ap.add_argument("--tp-frameworks", nargs="+", default=["speed", "speed-cuda-graph", "speed-no-pipeline", "pyg"],
                    choices=["speed", "speed-pipeline", "speed-no-pipeline", "speed-cuda-graph", "pyg"],
                    help="throughput: what runs at each batch size (speed: its defaults, the pipeline on with a GPU; "
                         "speed-cuda-graph: --cuda-graph)")
    ap.add_argument("--tp-events", type=int, default=300_000, help="throughput: training events a run")
    ap.add_argument("--tp-eval-steps", type=int, default=50, help="throughput: evaluation batches of val and test")
    ap.add_argument("--tp-log-events", type=int, default=2_000_000, help="throughput: events of the generated log")
    ap.add_argument("--tp-log-nodes", type=int, default=1_000_000, help="throughput: node ids of the generated log")
    ap.add_argument("--tp-step-batches", type=int, nargs="*", default=[200, 1000],
                    help="throughput: batch sizes of the per-step cost count (none: skip it)")
    ap.add_argument("--pac-log-events", type=int, default=1_000_000, help="pac_speed: events of the generated log")
    ap.add_argument("--pac-log-nodes", type=int, default=500_000, help="pac_speed: node ids of the generated log")
    ap.add_argument("--pac-nprocs", type=int, nargs="+", default=[1, 2, 4], help="pac_speed: ranks on the one GPU")
    ap.add_argument("--pac-max-steps", type=int, default=0,
                    help="pac_speed: training steps of one rank (N ranks take this / N each; 0: whole epochs)")
    ap.add_argument("--pac-eval-steps", type=int, default=0, help="pac_speed: batches of each evaluation pass (0: all)")
    ap.add_argument("--keep", default=None, metavar="JSON",
                    help="an earlier gpu_check.json whose other sections this one keeps (rerun a few sections only)")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # "cpu": rehearse the driver
    ap.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=600, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.out is None:
        from _trees import machine_name

        a.out = str(HERE / "results" / machine_name())  # (made once a device is found)
    out_dir = Path(a.out)
    work = Path(a.work) if a.work else out_dir / "work"
    if a.section:  # one section, in this process: its result as the last line
        sub = work / a.section
        sub.mkdir(parents=True, exist_ok=True)
        print(json.dumps(globals()[f"section_{a.section}"](a, sub)))
        return 0

    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_check: nothing verified: no CUDA device (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda or 'none'}, torch.cuda.is_available() is False)")
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "gpu_check.json"
    from _trees import stamp

    result = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "stamp": stamp(ROOT, a.threads), "device": a.device,
              "device_name": torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else "cpu",
              "tolerances": {"loss_rtol": LOSS_RTOL, "ap_atol": AP_ATOL, "value_atol": VALUE_ATOL,
                             "score_atol": SCORE_ATOL},
              "sections": {}}
    if a.keep:  # sections of an earlier check that this one does not rerun
        kept = json.loads(Path(a.keep).read_text())
        result["sections"] = {k: dict(v, kept_from=kept.get("started")) for k, v in kept["sections"].items()
                              if k not in a.sections}
    t_start = time.monotonic()
    for name in a.sections:
        left = a.budget_s - (time.monotonic() - t_start)
        if left < 20:
            result["sections"][name] = {"ok": None, "skipped": f"the budget of {a.budget_s:.0f} s was spent"}
            print(f"{name:<10} skipped (budget)", flush=True)
            continue
        timeout = min(SECTION_CAP_S[name], left)
        t0 = time.monotonic()
        cmd = [sys.executable, __file__, "--section", name, "--out", out_dir, "--work", work, "--device", a.device,
               "--threads", a.threads, "--wikipedia", a.wikipedia, "--timeout", timeout - 5,
               "--sweep-events", a.sweep_events, "--sweep-nodes", *a.sweep_nodes,
               "--tp-batches", *a.tp_batches, "--tp-frameworks", *a.tp_frameworks, "--tp-events", a.tp_events,
               "--tp-eval-steps", a.tp_eval_steps, "--tp-log-events", a.tp_log_events,
               "--pac-log-events", a.pac_log_events, "--pac-log-nodes", a.pac_log_nodes,
               "--pac-nprocs", *a.pac_nprocs, "--pac-max-steps", a.pac_max_steps, "--pac-eval-steps", a.pac_eval_steps,
               "--tp-log-nodes", a.tp_log_nodes, "--tp-step-batches", *a.tp_step_batches]
        try:
            proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=ROOT, env=_env(),
                                  timeout=timeout)
            if proc.returncode == 0:
                r = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                r = {"ok": False, "rc": proc.returncode, "output_tail": proc.stderr[-2500:]}
        except subprocess.TimeoutExpired:
            r = {"ok": False, "rc": "timeout", "output_tail": f"section stopped after {timeout:.0f} s"}
            partial = work / name / "partial.json"  # what a section saved before it was stopped
            if partial.exists():
                r["partial"] = json.loads(partial.read_text())
        r["seconds"] = time.monotonic() - t0
        result["sections"][name] = r
        result["seconds"] = time.monotonic() - t_start
        _save(result, out)
        verdict = {True: "ok", False: "FAIL", None: "-"}[r.get("ok")]
        print(f"{name:<10} {verdict:<5} {r['seconds']:6.1f} s  {_line(name, r)}", flush=True)
    result["sections"] = {k: result["sections"][k] for k in SECTIONS if k in result["sections"]}
    result["ok"] = all(r.get("ok") is not False for r in result["sections"].values())
    _save(result, out)
    print(f"saved {out}: {'every section ran ok' if result['ok'] else 'FAILURES (see the JSON)'}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
