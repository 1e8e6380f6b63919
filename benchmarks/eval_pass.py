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

Each row also gives the memory keys computed an event, by the training steps and by each pass,
and the ratio per key (the events/s ratio times the pass's keys an event over training's): the
keys set most of a step's model work, and a pass over the log's last events reads more
neighbours, so more keys an event, than its first training steps (on the held-out 2M-event log,
1M node ids, about 1.75x as many).  Prints a row per tree, width and round, and saves them (JSON)
to ``--out``.
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
    counted = _count_training_keys()
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
        # the same ratio per memory key computed: a pass late in the log reads more neighbours,
        # so more keys an event, than the log's first training steps (an older tree: None)
        keys = work.get(p["pass"], {}).get("keys")
        p["keys_per_event"] = keys / p["events"] if keys and p["events"] else None
        p["ratio_per_key"] = (p["ratio_to_training"] * p["keys_per_event"] / counted["keys_per_event"]
                              if p["keys_per_event"] and counted.get("keys_per_event") else None)
    return {"width": width, "train_events_per_s": train, "train_steps_counted": counted["steps"],
            "train_keys_per_event": counted.get("keys_per_event"), "passes": passes}


def _count_training_keys() -> dict:
    """Count the memory keys of every training step's plan (``Engine.step``, which the
    evaluation's steps do not take): ``{"steps", "keys_per_event"}``, filled as the run goes.
    The keys a step computes set most of its model's work, and they grow with the log's density:
    a pass over the log's last events computes more of them an event than its first steps."""
    got = {"steps": 0, "events": 0, "keys": 0}
    try:  # (an older tree, with --tree, may have its engine elsewhere: then nothing is counted)
        from speed.train.step import engine

        inner = engine.Engine.step
    except (ImportError, AttributeError):
        return got

    def step(self, st, *args, **kw):
        got["steps"] += 1
        got["events"] += len(st)
        got["keys"] += int(st.plan.key_row.shape[0])
        got["keys_per_event"] = got["keys"] / max(got["events"], 1)
        return inner(self, st, *args, **kw)

    engine.Engine.step = step
    return got


def _how(p: dict) -> str:
    """How a pass planned its steps, for its printed row: the pass that measured, and its choice;
    a pass planned ahead; nothing for one planned in its steps (or an older tree's)."""
    if p.get("pacing"):
        return ", measured: " + ("ahead" if p["pacing"]["ahead"] else "in the step")
    return ", ahead" if p.get("planned_ahead") else ""


def _keys(per_event, ratio=None) -> str:
    """Memory keys an event (and the ratio per key) for a printed row; nothing where unknown."""
    if not per_event:
        return ""
    return f" [{per_event:.1f} keys/event" + (f", {ratio:.2f}x per key]" if ratio else "]")


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
                print(f"round {r}  width {width:>3}  {tree}: training {got['train_events_per_s']:,.0f} ev/s"
                      + _keys(got.get("train_keys_per_event")) + "; "
                      + "; ".join(f"{p['pass']} {p['events_per_s']:,.0f} ({p['ratio_to_training']:.2f}x{_how(p)})"
                                  + _keys(p.get("keys_per_event"), p.get("ratio_per_key"))
                                  for p in got["passes"]), flush=True)
    save(a.out, log=log, recipe=None if a.log else RECIPES[LOG_NAME], threads=a.threads, steps=a.steps,
         eval_steps=a.eval_steps, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
