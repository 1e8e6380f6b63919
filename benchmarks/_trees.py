"""What the benchmark scripts share: the stamp every result carries and where results go; a
worker run in its own process for one checkout (``--tree``), its JSON answer read back, and the
rows written out.

A stamp says what was measured and on what: the commit and whether the tree had changes, the
versions of Python, torch, numpy and numba, the CPU, its cores, the threads a run used, the GPU
(if any) and the date.  Results go under ``benchmarks/results/<machine>/``, ``<machine>`` a
name made from the CPU model and its cores (and the GPU), so figures of different machines never
overwrite or mix with each other.

A worker is the benchmark script itself with ``--worker``; it puts its ``--tree`` first on
``sys.path`` (so an earlier commit's ``git worktree`` is measured with today's script) and prints
its result as the last line of its output.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, tree: Path = ROOT) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpu_name() -> Optional[str]:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # a broken CUDA install must not stop a CPU benchmark
        return None


def stamp(tree: Path = ROOT, threads: Optional[int] = None) -> Dict:
    """The stamp of a result measured on checkout ``tree`` now."""
    import numba
    import numpy
    import torch

    status = _git("status", "--porcelain", "--untracked-files=no", tree=tree)
    return {"commit": _git("rev-parse", "HEAD", tree=tree), "dirty": bool(status) if status is not None else None,
            "tree": str(tree), "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "numba": numba.__version__, "cpu": cpu_model(), "cores": cores(),
            "threads": threads, "gpu": gpu_name(), "date": _dt.datetime.now().isoformat(timespec="seconds")}


def machine_name() -> str:
    """``<cpu model>-<cores>c[-<gpu>]``, lower case, safe for a folder name."""
    name = f"{cpu_model()}-{cores()}c" + (f"-{gpu_name()}" if gpu_name() else "")
    name = re.sub(r"\((r|tm)\)|cpu|processor|@.*?ghz", "", name, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def results_dir() -> Path:
    """``benchmarks/results/<machine>/`` (made)."""
    d = ROOT / "benchmarks" / "results" / machine_name()
    d.mkdir(parents=True, exist_ok=True)
    return d



def default_out(name: str) -> str:
    """``benchmarks/results/<machine>/NAME``: where a script's result goes unless told (the folder
    is made when the result is saved)."""
    return str(ROOT / "benchmarks" / "results" / machine_name() / name)


def tree_options(ap, name: str, what: str = "measure") -> None:
    """``--tree`` (repeatable), ``--out`` (default :func:`default_out` of ``name``) and the hidden
    ``--worker`` flag."""
    ap.add_argument("--tree", action="append", default=None, help=f"checkout to {what} (repeatable; default this one)")
    ap.add_argument("--out", default=default_out(name))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)


def answered_as_worker(a, worker, single=("tree",)) -> bool:
    """With ``--worker``: take the one value of each option in ``single`` (repeatable on the
    command line, one per worker), print ``worker(a)`` as JSON, and say so; else False."""
    if not a.worker:
        return False
    for name in single:
        setattr(a, name, getattr(a, name)[0])
    print(json.dumps(worker(a)))
    return True


def trees(given) -> list:
    """The checkouts to measure: those given, else this one."""
    return list(given or [str(ROOT)])


def run_worker(script: str, *args) -> object:
    """Run ``script --worker args...`` in a new interpreter; its last output line, parsed as JSON.

    Raises RuntimeError with the end of its error output when it fails."""
    proc = subprocess.run([sys.executable, str(script), "--worker", *map(str, args)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def save(out, **fields) -> Path:
    """Write ``fields`` as JSON to ``out`` (its folder made), stamped, and say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"stamp": stamp(), **fields}, indent=2) + "\n")
    print(f"saved {out}")
    return out


def local_trainer(events, split, config):
    """A single-process trainer on whichever checkout is imported: ``Trainer.local`` where the
    trainer takes its parts only, ``Trainer(events, split, config)`` on earlier checkouts (so
    today's scripts measure a ``--tree`` of an earlier commit)."""
    from speed.train.loop.trainer import Trainer

    return getattr(Trainer, "local", Trainer)(events, split, config)
