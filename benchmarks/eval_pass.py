"""An evaluation pass against a training step, one process: events a second of each.

An evaluation step is a forward pass: no backward, no optimiser.  This measures how much faster
than training it streams, as the evaluation issue states it: one process, TGN, ``--threads``
threads, ``--steps`` training steps (``max_steps``) and ``--eval-steps`` batches a pass
(``eval_max_steps``), on a generated log (``speed generate --events 2000000 --nodes 1000000
--seed 7`` unless ``--log`` names one), at model widths 100 (the default) and 4 (a model too small
to compute: a step is its host work).  Each pass's wall seconds are timed around
:func:`speed.train.eval.evaluator.stream_scores`; its planning seconds come from
``evaluation_work``, with the steps each pass planned ahead (on a CPU the first long pass measures
whether to, :mod:`speed.train.eval.pacing`).  With ``--tree`` (repeatable) each checkout runs in a fresh interpreter, the
trees alternating ``--rounds`` times::

    git worktree add /tmp/before HEAD~3
    python benchmarks/eval_pass.py --tree /tmp/before --tree . --rounds 2

Prints a row per tree, width and round, and saves them (JSON) to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trees import answered_as_worker, run_worker, save, tree_options, trees  # noqa: E402
from suite import RECIPES, cached  # noqa: E402

LOG_NAME = "g2m_seed7.csv"  # the default log: suite.py's recipe of that name, made once into its cache


def worker(a) -> dict:
    sys.path.insert(0, a.tree)
    import speed
    from speed.train.eval import evaluator as ev

    passes = []
    inner = ev.stream_scores

    def timed(model, stream, index, *args, **kw):
        t0 = time.perf_counter()
        out = inner(model, stream, index, *args, **kw)
        passes.append({"pass": kw.get("desc", args[4] if len(args) > 4 else "?"), "events": int(len(index)),
                       "seconds": time.perf_counter() - t0})
        return out

    ev.stream_scores = timed
    width = int(a.width)
    dims = {} if width == 100 else dict(memory_dim=width, time_dim=width, embedding_dim=width)
    m = speed.train(a.log, model="tgn", epochs=1, num_threads=a.threads, max_steps=a.steps,
                    eval_max_steps=a.eval_steps, progress=False, seed=0, **dims)
    train = m["epochs"][0]["train_events_per_s"]
    work = {w["pass"]: w for w in m["evaluation_work"][0]}
    for p in passes:
        p["events_per_s"] = p["events"] / p["seconds"]
        p["ratio_to_training"] = p["events_per_s"] / train
        p["seconds_planning"] = work.get(p["pass"], {}).get("seconds_planning")
        # how the pass planned its steps (an older tree records neither): steps planned ahead,
        # and on the pass that measured it, what it saw (speed.train.eval.pacing)
        p["planned_ahead"] = work.get(p["pass"], {}).get("planned_ahead")
        p["pacing"] = work.get(p["pass"], {}).get("pacing")
    return {"width": width, "train_events_per_s": train, "passes": passes}


def _how(p: dict) -> str:
    """How a pass planned its steps, for its printed row: the pass that measured, and its choice;
    a pass planned ahead; nothing for one planned in its steps (or an older tree's)."""
    if p.get("pacing"):
        return ", measured: " + ("ahead" if p["pacing"]["ahead"] else "in the step")
    return ", ahead" if p.get("planned_ahead") else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", default=None, help="event log (default: the generated recipe, cached)")
    ap.add_argument("--widths", type=int, nargs="+", default=[100, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=600, help="training steps")
    ap.add_argument("--eval-steps", type=int, default=300, help="batches a pass")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--width", type=int, help=argparse.SUPPRESS)
    tree_options(ap, "eval_pass.json")
    a = ap.parse_args()
    if answered_as_worker(a, worker):
        return 0
    if a.log is not None and not Path(a.log).is_file():
        print(f"eval_pass.py: {a.log}: no such file (--log names an event log speed can read)", file=sys.stderr)
        return 2
    log = a.log or str(cached(LOG_NAME))
    rows = []
    for r in range(a.rounds):
        for width in a.widths:
            for tree in trees(a.tree):
                try:
                    got = run_worker(__file__, "--log", log, "--tree", tree, "--width", width, "--threads", a.threads,
                                     "--steps", a.steps, "--eval-steps", a.eval_steps)
                except RuntimeError as exc:  # the worker's own last line says what went wrong
                    last = str(exc).strip().splitlines()[-1:] or ["(no output)"]
                    print(f"eval_pass.py: {tree}: {last[0]}", file=sys.stderr)
                    return 1
                row = {"round": r, "tree": tree, **got}
                rows.append(row)
                print(f"round {r}  width {width:>3}  {tree}: training {got['train_events_per_s']:,.0f} ev/s; "
                      + "; ".join(f"{p['pass']} {p['events_per_s']:,.0f} ({p['ratio_to_training']:.2f}x{_how(p)})"
                                  for p in got["passes"]), flush=True)
    save(a.out, log=log, recipe=None if a.log else RECIPES[LOG_NAME], threads=a.threads, steps=a.steps,
         eval_steps=a.eval_steps, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
