"""Do a PAC run's weights hold on the full graph?  Its best weights, streamed over views of the
training period.

A PAC rank trains on a part of the stream: its parts' events, in which a shared node has only
its share of events.  Evaluation then runs the same weights over the full graph.  This script
takes a finished run and its shards and, for each view of the training events (after the
inductive hold-out), starts from empty memory, streams the first half of the view without
scoring, then scores the second half against one random destination per event drawn from the
view's own endpoints (TGN's protocol, batches of the run's size):

* ``full``: every training event (what evaluation sees);
* ``random half``: each event kept with probability 1/2 (full-graph structure at half the
  density);
* ``parts ...``: the events each group of parts trains in ``assigned`` mode (what ranks saw).

Reported: AP and the mean positive and negative logits per view; written to
``benchmarks/results/pac_transfer.json``::

    python benchmarks/pac_transfer.py RUN --shards SHARDS --groups 0,3 1,2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a finished `speed train` run directory (PAC or not)")
    p.add_argument("--shards", required=True, help="the shards directory the run trained on")
    p.add_argument("--groups", nargs="*", default=[], help="groups of parts to stream, e.g. 0,3 1,2")
    p.add_argument("--seed", type=int, default=0, help="seed of the random half and the negatives")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "pac_transfer.json"))
    a = p.parse_args(argv)

    import torch

    import speed
    from speed.train.run import checkpoint as ckpt
    from speed.train.eval.metrics import link_metrics
    from speed.train.eval.evaluator import stream_scores
    from speed.train.step.loader import EventStream
    from speed.train.model.network import build_model
    from speed.train.step.negatives import RandomNegatives, negative_pool

    torch.set_num_threads(a.threads)
    try:
        state = ckpt.load_checkpoint(Path(a.run) / ckpt.BEST)
        shards = speed.load_shards(a.shards)
    except speed.InputError as exc:
        raise SystemExit(f"pac_transfer.py: error: {exc}")
    payload = state.extra["predictor"]
    batch = int(state.config["batch_size"])
    events = shards.events()
    split = shards.split(events)
    stream = EventStream(events)
    train = np.flatnonzero(split.train_mask)  # positions of the events a model may train on

    def score(positions: np.ndarray) -> dict:
        model = build_model(**payload["spec"])
        model.load_weights_and_memories(state.model)
        model.state.set_edge_features(payload["edge_features"])
        model.state.reset()
        positions = np.sort(positions)
        pool = negative_pool(events.src[positions], events.dst[positions], events.bipartite)
        half = positions.size // 2
        stream_scores(model, stream, positions[:half], batch, progress=False)  # memory only
        r = stream_scores(model, stream, positions[half:], batch, negatives=RandomNegatives(pool, a.seed),
                          progress=False)
        return {"events": int(positions.size), "ap": link_metrics(r.pos, r.neg)["ap"],
                "pos_logit": float(r.pos.mean()), "neg_logit": float(r.neg.mean())}

    views = {"full": train,
             "random half": train[np.random.default_rng(a.seed).random(train.size) < 0.5]}
    for g in a.groups:
        parts = np.array([int(x) for x in g.split(",")])
        ev = shards.merge(parts, period="train", subgraph="assigned")
        keep = ~(split.new_nodes[ev.src] | split.new_nodes[ev.dst])
        views[f"parts {g}"] = np.asarray(ev.eid)[keep]  # event ids are positions in the log
    rows = []
    for name, positions in views.items():
        rows.append({"view": name, **score(positions)})
        r = rows[-1]
        print(f"{name:<14} {r['events']:>8,} events  AP {r['ap']:.4f}  logits: positive {r['pos_logit']:+.2f}, "
              f"negative {r['neg_logit']:+.2f}", flush=True)
    out = {"args": vars(a), "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
