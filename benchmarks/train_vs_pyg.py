"""speed's TGN against PyTorch Geometric's TGN on the same data, split, batches and negatives.

PyG side: ``TGNMemory`` + ``IdentityMessage`` + ``LastAggregator`` + ``LastNeighborLoader`` +
``TransformerConv`` graph attention + the link predictor of PyG's ``examples/tgn.py``, all as
installed from the registry.  Both sides:

* any log (``--log``, repeatable; default JODIE Wikipedia, ``../shared/data/wikipedia.csv``); edge
  features are not used (PyG gets one constant zero feature because its ``TGNMemory`` fails on
  0-dimensional messages); the same chronological 70/15/15 split with no hold-out
  (transductive, as PyG's example and TGB train: ``new_node_fraction=0`` on both sides), so both
  train on every training event;
* ``--device`` (default cpu) for both: data, weights, memories and neighbour tables on it;
* batch 200, memory/time/embedding dim 100, 10 neighbours, Adam lr 1e-4, 2 torch threads;
* training negatives from ``numpy.random.default_rng([seed, epoch, 0])`` over the training
  pool (speed's trainer's stream); evaluation: after the last epoch, val then test are
  streamed (continuing from the trained state).  speed scores with its evaluator (TGN protocol:
  random negatives from the whole log's destinations, AP per batch of 200 averaged); the PyG
  side draws its negatives from the same pool (``default_rng(seed + 1)``, ``seed + 2``) and
  averages AP per batch the same way, so the protocols match though the draws differ.

Each framework runs in its own subprocess, one after the other, per log and seed.  Prints a
table and writes ``benchmarks/results/train_vs_pyg.json``.

Usage::

    python benchmarks/train_vs_pyg.py [--epochs 5] [--log LOG ...] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # (_trees: what the side-by-side scripts share)
DATA = HERE.parent.parent / "shared" / "data" / "wikipedia.csv"


def _device_name(device: str) -> str:
    """``device`` in words: the GPU's name for a CUDA device."""
    import torch

    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


def _setup(threads: int, log):
    import torch

    torch.set_num_threads(threads)
    import speed

    events = speed.read_events(log, progress=False)
    split = speed.chronological_split(events, seed=0, new_node_fraction=0.0)
    return events, split


def _peak_device(device: str) -> dict:
    """The process's peak GPU memory (``torch.cuda.max_memory_allocated``), on a GPU."""
    import torch

    return {"peak_device_bytes": int(torch.cuda.max_memory_allocated(device))} if device.startswith("cuda") else {}


def run_speed(a) -> dict:
    from dataclasses import replace

    from speed.train import TrainConfig
    from _trees import local_trainer

    events, split = _setup(a.threads, a.log[0])
    if a.switch_interval is not None:
        from speed.train.step import loader

        loader.SWITCH_INTERVAL = a.switch_interval or None
    bounded = (a.max_events // a.batch_size) if a.max_events else None
    cfg = TrainConfig(model="tgn", batch_size=a.batch_size, lr=1e-4, memory_dim=100, time_dim=100,
                      embedding_dim=100, neighbors=10, device=a.device, seed=a.seed, progress=False,
                      num_threads=a.threads, new_node_fraction=0.0, pipeline=a.pipeline, max_steps=bounded,
                      eval_max_steps=a.eval_max_steps,
                      # (named only when asked: an older checkout's config, run with --tree, lacks it)
                      **({"cuda_graph": True} if a.cuda_graph else {}),
                      **({"plan_threads": a.plan_threads} if a.plan_threads else {})).validate()
    tr = local_trainer(events, split, cfg)
    if a.warmup_steps:  # CUDA context, cuBLAS handles, allocator pools, numba's cache: not timed
        tr.config = replace(cfg, max_steps=a.warmup_steps)
        tr.training.train_epoch(0)
        tr.config = cfg
    epochs = []
    for e in range(1, a.epochs + 1):
        log = tr.training.train_epoch(e)
        epochs.append({"seconds": log.train_seconds, "events_per_s": log.train_events_per_s, "loss": log.loss,
                       "events": log.train_events})
    cap = getattr(tr.training.engine, "captured", None)
    captured = ({"replays": cap.replays, "recorded": cap.recorded, "failed": cap.failed, "bounds": cap.bounds.as_dict()}
                if cap is not None else None)
    if a.train_only:
        return {"epochs": epochs, "num_nodes": int(events.num_nodes), "captured": captured, **_peak_device(a.device)}
    t0 = time.perf_counter()
    tr.evaluator.evaluate(tr.model, "val")
    val_s = time.perf_counter() - t0
    test, _ = tr.evaluator.evaluate(tr.model, "test")
    # each pass's events and seconds (one process: every pass, val's then test's)
    work = [{k: w.get(k) for k in ("pass", "events", "steps", "seconds_total", "seconds_planning")}
            for w in getattr(tr.evaluator, "work", [])]
    return {"epochs": epochs, "test": test["transductive"], "num_nodes": int(events.num_nodes),
            "captured": captured, "val_seconds": val_s, "eval_work": work, **_peak_device(a.device)}


def run_pyg(a) -> dict:
    import torch
    from torch.nn import Linear
    from torch_geometric.nn import TGNMemory, TransformerConv
    from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator, LastNeighborLoader

    from speed.train.eval.metrics import link_metrics

    events, split = _setup(a.threads, a.log[0])
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    num_nodes = events.num_nodes
    src = torch.tensor(events.src, device=dev)
    dst = torch.tensor(events.dst, device=dev)
    t = torch.tensor(events.t_float(), device=dev).long()  # PyG's TGN keeps integer timestamps
    # PyG's TGNMemory fails with 0-dimensional messages (its empty message store has the
    # wrong width), so it gets one constant zero feature: no information, one extra input.
    msg = torch.zeros(len(events), 1, device=dev)

    class GraphAttentionEmbedding(torch.nn.Module):  # as in PyG's examples/tgn.py
        def __init__(self, in_channels, out_channels, msg_dim, time_enc):
            super().__init__()
            self.time_enc = time_enc
            edge_dim = msg_dim + time_enc.out_channels
            self.conv = TransformerConv(in_channels, out_channels // 2, heads=2, dropout=0.1, edge_dim=edge_dim)

        def forward(self, x, last_update, edge_index, t, msg):
            rel_t = last_update[edge_index[0]] - t
            rel_t_enc = self.time_enc(rel_t.to(x.dtype))
            edge_attr = torch.cat([rel_t_enc, msg], dim=-1)
            return self.conv(x, edge_index, edge_attr)

    class LinkPredictor(torch.nn.Module):
        def __init__(self, in_channels):
            super().__init__()
            self.lin_src = Linear(in_channels, in_channels)
            self.lin_dst = Linear(in_channels, in_channels)
            self.lin_final = Linear(in_channels, 1)

        def forward(self, z_src, z_dst):
            return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu())

    memory = TGNMemory(num_nodes, 1, 100, 100, message_module=IdentityMessage(1, 100, 100),
                       aggregator_module=LastAggregator()).to(dev)
    gnn = GraphAttentionEmbedding(100, 100, 1, memory.time_enc).to(dev)
    link_pred = LinkPredictor(100).to(dev)
    params = set(memory.parameters()) | set(gnn.parameters()) | set(link_pred.parameters())
    optimizer = torch.optim.Adam(params, lr=1e-4)
    criterion = torch.nn.BCEWithLogitsLoss()
    neighbor_loader = LastNeighborLoader(num_nodes, size=10, device=dev)
    assoc = torch.empty(num_nodes, dtype=torch.long, device=dev)

    train_index = np.flatnonzero(split.train_mask)
    tr_src, tr_dst = events.src[train_index], events.dst[train_index]  # the trainer's pool
    pool = np.unique(tr_dst if events.bipartite else np.concatenate([tr_src, tr_dst]))
    eval_pool = np.unique(events.dst)  # TGN's protocol: random destinations of the whole log

    bs = a.batch_size

    def batches(index):
        for s in range(0, index.size, bs):
            yield torch.from_numpy(index[s:s + bs]).to(dev)

    def step(idx, neg):
        b_src, b_dst, b_t, b_msg = src[idx], dst[idx], t[idx], msg[idx]
        n_id = torch.cat([b_src, b_dst, neg]).unique()
        n_id, edge_index, e_id = neighbor_loader(n_id)
        assoc[n_id] = torch.arange(n_id.size(0), device=dev)
        z, last_update = memory(n_id)
        z = gnn(z, last_update, edge_index, t[e_id], msg[e_id])
        pos = link_pred(z[assoc[b_src]], z[assoc[b_dst]]).squeeze(-1)
        neg_out = link_pred(z[assoc[b_src]], z[assoc[neg]]).squeeze(-1)
        memory.update_state(b_src, b_dst, b_t, b_msg)
        neighbor_loader.insert(b_src, b_dst)
        return pos, neg_out

    if a.max_events:
        train_index = train_index[:a.max_events // bs * bs]
    epochs = []
    for e in range(0 if a.warmup_steps else 1, a.epochs + 1):
        memory.train(); gnn.train(); link_pred.train()
        memory.reset_state(); neighbor_loader.reset_state()
        rng = np.random.default_rng([a.seed, e, 0])  # the stream speed's trainer uses
        losses = []
        # epoch 0: a few untimed warm-up steps (CUDA context, cuBLAS handles, allocator pools)
        index = train_index[:a.warmup_steps * bs] if e == 0 else train_index
        if a.device.startswith("cuda"):
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        for idx in batches(index):
            neg = torch.from_numpy(pool[rng.integers(0, pool.size, size=(idx.numel(), 1))][:, 0]).to(dev)
            optimizer.zero_grad()
            pos, neg_out = step(idx, neg)
            loss = criterion(pos, torch.ones_like(pos)) + criterion(neg_out, torch.zeros_like(neg_out))
            loss.backward()
            optimizer.step()
            memory.detach()
            losses.append(float(loss))
        sec = time.perf_counter() - start
        if e:
            epochs.append({"seconds": sec, "events_per_s": index.size / sec, "loss": float(np.mean(losses)),
                           "events": int(index.size)})

    if a.train_only:
        return {"epochs": epochs, "num_nodes": int(num_nodes), **_peak_device(a.device)}

    @torch.no_grad()
    def stream(index, seed):
        memory.eval(); gnn.eval(); link_pred.eval()
        rng = np.random.default_rng(seed)
        ps, ns = [], []
        if a.eval_max_steps:  # bounded as speed's --eval-max-steps: the period's first batches
            index = index[:a.eval_max_steps * bs]
        for idx in batches(index):
            neg = torch.from_numpy(eval_pool[rng.integers(0, eval_pool.size, size=(idx.numel(), 1))][:, 0]).to(dev)
            pos, neg_out = step(idx, neg)
            ps.append(pos.cpu().numpy())
            ns.append(neg_out.cpu().numpy())
        return ps, ns

    stream(np.arange(split.num_train, split.num_train + split.num_val), a.seed + 1)
    ps, ns = stream(np.arange(split.num_train + split.num_val, len(events)), a.seed + 2)
    per_batch = [link_metrics(p, n) for p, n in zip(ps, ns)]
    test = {"ap": float(np.mean([m["ap"] for m in per_batch])), "auc": float(np.mean([m["auc"] for m in per_batch])),
            "pooled": link_metrics(np.concatenate(ps), np.concatenate(ns))}
    return {"epochs": epochs, "test": test, "num_nodes": int(num_nodes), **_peak_device(a.device)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both frameworks; default cpu)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--log", action="append", default=None)
    ap.add_argument("--out", default=None, help="result file (default: benchmarks/results/<machine>/train_vs_pyg.json)")
    ap.add_argument("--worker", choices=["speed", "pyg"], help=argparse.SUPPRESS)
    ap.add_argument("--train-only", action="store_true", help="time training alone (no val/test; benchmarks/scale.py)")
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--max-events", type=int, default=None,
                    help="train on the first N training events of each epoch only (whole batches)")
    ap.add_argument("--eval-max-steps", type=int, default=None,
                    help="score only the first N batches of val and of test (both frameworks)")
    ap.add_argument("--warmup-steps", type=int, default=0,
                    help="untimed training steps before the first epoch (a fresh model and state follow)")
    ap.add_argument("--pipeline", action=argparse.BooleanOptionalAction, default=None,
                    help="speed: plan the next batch in a background thread (default: speed's, on with a GPU)")
    ap.add_argument("--plan-threads", type=int, default=None,
                    help="speed: threads that build the pipeline's plans, a stage each (default: speed's)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="speed: the interpreter's switch interval while plan stages run in threads (0: Python's)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="speed: fixed-shape steps replayed from a CUDA graph (eagerly without a GPU)")
    a = ap.parse_args()
    a.log = a.log or [str(DATA)]
    if a.worker:
        print(json.dumps(run_speed(a) if a.worker == "speed" else run_pyg(a)))
        return 0

    def eps(r):  # mean over the epochs after the first (numba compilation, warm-up)
        return float(np.mean([e["events_per_s"] for e in r["epochs"][1:] or r["epochs"]]))

    runs, summary = [], []
    for log in a.log:
        per_log = {"pyg": [], "speed": []}
        for seed in a.seeds:
            for name in ("pyg", "speed"):
                print(f"{Path(log).name}: training {name}, seed {seed} ({a.epochs} epochs) ...", file=sys.stderr)
                proc = subprocess.run([sys.executable, __file__, "--worker", name, "--epochs", str(a.epochs),
                                       "--threads", str(a.threads), "--seed", str(seed), "--log", log,
                                       "--device", a.device, "--batch-size", str(a.batch_size)]
                                      + (["--max-events", str(a.max_events)] if a.max_events else [])
                                      + (["--eval-max-steps", str(a.eval_max_steps)] if a.eval_max_steps else [])
                                      + (["--warmup-steps", str(a.warmup_steps)] if a.warmup_steps else [])
                                      + ([f"--{'' if a.pipeline else 'no-'}pipeline"] if a.pipeline is not None
                                         and name == "speed" else []),
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} failed:\n{proc.stderr}")
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                runs.append({"log": Path(log).name, "seed": seed, "framework": name, **r})
                per_log[name].append(r)
        row = {"log": Path(log).name, "epochs": a.epochs, "threads": a.threads, "seeds": a.seeds,
               "device": _device_name(a.device)}
        for name in ("pyg", "speed"):
            row[f"{name}_events_per_s"] = float(np.mean([eps(r) for r in per_log[name]]))
            row[f"{name}_test_ap"] = float(np.mean([r["test"]["ap"] for r in per_log[name]]))
        row["speedup"] = row["speed_events_per_s"] / row["pyg_events_per_s"]
        summary.append(row)
        print(f"{row['log']:<16} PyG {row['pyg_events_per_s']:>8,.0f} ev/s AP {row['pyg_test_ap']:.4f} | speed "
              f"{row['speed_events_per_s']:>8,.0f} ev/s AP {row['speed_test_ap']:.4f} | {row['speedup']:.2f}x",
              flush=True)
    from _trees import default_out, stamp

    out = Path(a.out or default_out("train_vs_pyg.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"stamp": stamp(threads=a.threads), "summary": summary, "runs": runs}, indent=2) + "\n")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
