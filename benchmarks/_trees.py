"""What the side-by-side benchmarks share: a worker run in its own process for one checkout
(``--tree``), its JSON answer read back, and the rows written out.

A worker is the benchmark script itself with ``--worker``; it puts its ``--tree`` first on
``sys.path`` (so an earlier commit's ``git worktree`` is measured with today's script) and prints
its result as the last line of its output.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tree_options(ap, out: Path, what: str = "measure") -> None:
    """``--tree`` (repeatable), ``--out`` (default ``out``) and the hidden ``--worker`` flag."""
    ap.add_argument("--tree", action="append", default=None, help=f"checkout to {what} (repeatable; default this one)")
    ap.add_argument("--out", default=str(out))
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
    """Write ``fields`` as JSON to ``out`` (its folder made), say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fields, indent=2) + "\n")
    print(f"saved {out}")
    return out


def local_trainer(events, split, config):
    """A single-process trainer on whichever checkout is imported: ``Trainer.local`` where the
    trainer takes its parts only, ``Trainer(events, split, config)`` on earlier checkouts (so
    today's scripts measure a ``--tree`` of an earlier commit)."""
    from speed.train.loop.trainer import Trainer

    return getattr(Trainer, "local", Trainer)(events, split, config)
