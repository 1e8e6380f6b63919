"""Updating a trained run with new events: ``speed update RUN NEW_EVENTS --out RUN2`` and
:func:`update`.

The run's weights, node state and optimiser state are loaded, and the new events are taken in
a batch at a time (the run's batch size), prequentially ("test then train", as GNNFlow's
continual protocol): each batch is first scored -- against one random negative destination per
event (AP, AUC), and, when asked, against ``mrr_negatives`` more (MRR) -- from the state and
weights as they are before it; then it is trained on (one optimiser step on the loss of
:mod:`speed.train.step.engine`, from the same forward pass: updates run without dropout), and the
memory takes it in.  No event is scored by weights or a
memory that have seen it.

Options: ``passes`` over the increment (the later passes train again from the node state at the
increment's start, as an epoch starts over: the memory takes each event in once), a ``replay``
fraction of earlier interactions added to each step's loss against forgetting (pairs from a
reservoir the run keeps: the neighbours the run ended with, then the updates' own events; they
are scored at the step's time from today's memory and never written to it, so no event sees
its future), or ``train=False``: memory only, the weights fixed (what
:meth:`~speed.train.run.predictor.Predictor.advance` does, scored the same way).

The result is a complete run: ``best.json`` (weights, node state, optimiser, the predictor
payload, so :func:`load_run`, ``embed``, ``score`` and a further update work), ``metrics.json``
(the run's, plus ``updates``: one entry per increment, with the scores of ``windows`` slices of
it) and ``updates.png`` (the scores over time).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from ..._util import atomic_dir, full_time, progress_bar
from ...data.events import Events
from ...errors import InputError
from ..run import checkpoint as ckpt
from ..run import folder
from ..run.folder import RunFolder
from ..run.report import write_metrics
from ..step.engine import Engine, link_loss
from ..model.queries import QueryLayout
from ..step.loader import Step
from ..eval.metrics import batch_link_metrics, ranking_metrics
from ..run.predictor import Predictor, open_checkpoint, payload_of, predictor_from
from ..config import UpdateConfig
from ..step.optim import make_optimizer
from ..step.runtime import seed_everything

REPLAY_CAPACITY = 100_000  # interactions the reservoir keeps (about 1.6 MB)
# The updates' default learning rate, over the run's: an update sees each event once where
# training saw it every epoch.  Measured (benchmarks/online.py, retired: git show f837953:benchmarks/online.py; TGN, seed 0, three increments):
# CollegeMsg AP 0.8535 at the run's rate (1e-4; memory only 0.8546) and 0.8668 at 10x;
# Wikipedia 0.9552 and 0.9561.
LR_SCALE = 10.0


# ------------------------------------------------------------------------------ the reservoir
class Reservoir:
    """A uniform sample of the interactions seen so far (Vitter's algorithm R), as node rows."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, seen: int, capacity: int = REPLAY_CAPACITY):
        self.src, self.dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        self.seen, self.capacity = int(seen), int(capacity)

    def add(self, src: np.ndarray, dst: np.ndarray, rng: np.random.Generator) -> None:
        n = src.size
        room = max(0, self.capacity - self.src.size)
        if room:
            self.src = np.concatenate([self.src, src[:room]])
            self.dst = np.concatenate([self.dst, dst[:room]])
        rest = np.arange(room, n)
        if rest.size:
            slot = (rng.random(rest.size) * (self.seen + rest + 1)).astype(np.int64)  # uniform in [0, seen + k]
            keep = slot < self.capacity
            self.src[slot[keep]] = src[rest[keep]]  # later events win ties, as a sequential pass would
            self.dst[slot[keep]] = dst[rest[keep]]
        self.seen += n

    def draw(self, m: int, rng: np.random.Generator):
        k = rng.integers(0, self.src.size, size=m)
        return self.src[k], self.dst[k]

    def state(self) -> Dict:
        return {"src": self.src, "dst": self.dst, "seen": self.seen}

    @classmethod
    def seeded(cls, src: np.ndarray, dst: np.ndarray, dst_mask: Optional[np.ndarray]) -> "Reservoir":
        """Seeded with the interactions ``(src, dst)`` (node rows: those the neighbour rings hold,
        :meth:`~speed.train.state.rows.RowExchange.recent_interactions`), oriented source to destination where the log
        is bipartite."""
        a, b = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if dst_mask is not None:
            flip = dst_mask[a] & ~dst_mask[b]
            a, b = np.where(flip, b, a), np.where(flip, a, b)
        if a.size > REPLAY_CAPACITY:
            keep = np.random.default_rng(0).choice(a.size, REPLAY_CAPACITY, replace=False)
            a, b = a[keep], b[keep]
        return cls(a, b, seen=a.size)


# ------------------------------------------------------------------------------ loading
def _grow_optimizer_state(optimizer) -> None:
    """Optimiser moments of a table that grew (new nodes' static rows) padded with zeros."""
    for opt in getattr(optimizer, "dense", None), getattr(optimizer, "sparse", None), optimizer:
        if opt is None or not hasattr(opt, "state"):
            continue
        for group in opt.param_groups:
            for p in group["params"]:
                st = opt.state.get(p)
                if not st:
                    continue
                for key, value in list(st.items()):
                    if torch.is_tensor(value) and value.dim() and value.shape != p.shape and \
                            value.shape[1:] == p.shape[1:] and value.shape[0] < p.shape[0]:
                        pad = torch.zeros((p.shape[0] - value.shape[0],) + tuple(value.shape[1:]), dtype=value.dtype,
                                          device=value.device)
                        st[key] = torch.cat([value, pad])


def new_events(data, run_metrics: Dict, reader: Optional[dict], progress, t_last: Optional[float] = None) -> Events:
    """The new events: Events, a file, or a shards folder: its events from the run's last time
    ``t_last`` on (by time, not by count: the run may have taken in other files meanwhile; those
    at ``t_last`` it holds already are then left out by :meth:`Intake.already_held`)."""
    from ...data.readers import read_events
    from ...data.readers.read import check_same_columns
    from ...partition.shards import Shards

    if isinstance(data, Events):
        return data
    from ...data.tgb import check_input

    path = check_input(data)
    if path.is_dir():
        shards = Shards(path)
        if t_last is None:
            t_last = float(run_metrics.get("data", {}).get("t_max", -np.inf))
        # the appended segments alone when the run is past the partitioned log (not the whole log)
        ev = shards.events("appended") if len(shards.segments) > 1 and t_last >= _split_end(shards) \
            else shards.events("all")
        ev = ev.select(np.flatnonzero(ev.t_float() >= t_last))
        if len(ev) == 0:
            raise InputError(f"the shards hold no event from the run's last time ({full_time(t_last)}) on: nothing "
                             "new to update with (append to them first: speed partition MORE -o SHARDS --append)", path)
        return ev
    events = read_events(path, progress=progress, **(reader or {}))
    check_same_columns(_recorded_columns(run_metrics), events.meta.columns, path, "the run's log")
    return events


def _split_end(shards) -> float:
    """The last time of a shards folder's partitioned log (each bucket keeps its events in time
    order: the largest of the buckets' last times)."""
    seg = shards.segments[0]
    ends = np.asarray(seg.offsets[1:], dtype=np.int64)
    ends = ends[ends > np.asarray(seg.offsets[:-1])] - 1
    return float(np.max(np.asarray(seg.arrays["t"])[ends])) if ends.size else -np.inf


def _recorded_columns(run_metrics: Dict) -> Optional[Dict]:
    """The columns of the log a run took in: as it recorded them, or as its shards did."""
    data = run_metrics.get("data", {})
    if data.get("columns"):
        return data["columns"]
    manifest = Path(str(data.get("source", ""))) / "manifest.json"
    try:
        return json.loads(manifest.read_text()).get("input", {}).get("columns")
    except (OSError, ValueError, AttributeError):
        return None


# ------------------------------------------------------------------------------ the update
class OnlineUpdater:
    """Prequential updates of one loaded run (see the module docstring)."""

    def __init__(self, pred: Predictor, saved: ckpt.Checkpoint, payload: Dict, config: UpdateConfig,
                 forward=None):
        self.pred, self.config, self.payload = pred, config, payload
        self.model = pred.stateful
        self.run_config = dict(saved.config)
        self.rng = np.random.default_rng(config.seed)
        self.increments = 0
        lr = config.lr if config.lr is not None else LR_SCALE * float(self.run_config.get("lr", 1e-4))
        self.optimizer = None
        if config.train:
            self.optimizer = make_optimizer(self.model.net, lr, self.run_config.get("static_lr"))
            try:
                self.optimizer.load_state_dict(saved.optimizer)
            except (ValueError, KeyError, RuntimeError):
                pass  # a run whose optimiser does not match (e.g. another static table): fresh moments
            _grow_optimizer_state(self.optimizer)
            # the update's rate is the weights'; a learned static table keeps its own (static_lr:
            # its rows step only when their node is in a batch, so it needs a larger one)
            dense = getattr(self.optimizer, "dense", self.optimizer)
            for group in dense.param_groups:
                group["lr"] = lr
        # one step for every run: the forward pass is the weights', or their DDP wrapper in a
        # parallel update (:mod:`speed.train.online.parallel`), which averages the gradients
        self.engine = Engine(self.model, self.optimizer, forward=forward)
        self._last_batch: Optional[Step] = None
        n = len(pred.index)
        pool = payload.get("negative_pool")
        if pool is None:  # a run written before the pool was kept: every known node (a side's, per side)
            pool = np.flatnonzero(np.ones(n, dtype=bool) if not pred.index.per_side else pred.index.sides == "dst")
        pool = np.asarray(pool, dtype=np.int64)
        # a buffer that doubles when full: adding a batch's nodes costs O(batch), not O(pool)
        self._pool = np.empty(max(1024, 2 * pool.size), dtype=np.int64)
        self._pool[:pool.size] = pool
        self._pool_size = pool.size
        self.pool_mask = np.zeros(n, dtype=bool)
        self.pool_mask[pool] = True
        self.bipartite = bool(payload.get("bipartite", False))
        res = payload.get("replay")
        if res is not None:
            self.reservoir = Reservoir(res["src"], res["dst"], int(res["seen"]))
        else:
            self.reservoir = Reservoir.seeded(*pred.state.rows.recent_interactions(),
                                              self.pool_mask if self.bipartite else None)

    def _grow_pool(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Add a batch's destinations (bipartite) or endpoints to the negative pool, in order of
        first appearance: a batch's negatives come from the nodes seen up to it, never later."""
        cand = dst if self.bipartite else np.stack([src, dst], 1).ravel()
        cand = cand[~self.pool_mask[cand]]
        if cand.size:
            _, first = np.unique(cand, return_index=True)
            new = cand[np.sort(first)]
            self.pool_mask[new] = True
            end = self._pool_size + new.size
            if end > self._pool.size:
                grown = np.empty(2 * end, dtype=np.int64)
                grown[:self._pool_size] = self._pool[:self._pool_size]
                self._pool = grown
            self._pool[self._pool_size:end] = new
            self._pool_size = end

    @property
    def pool(self) -> np.ndarray:
        """The negative pool so far (node rows; a view)."""
        return self._pool[:self._pool_size]

    def run(self, events: Events, mine: Optional[np.ndarray] = None, steps: Optional[int] = None) -> Dict:
        """Take in ``events`` (one increment); returns its entry of ``metrics.json``.

        ``mine`` (bool, shape (E,)) and ``steps``: one rank of a parallel update
        (:mod:`speed.train.online.parallel`): every event is mapped to its row (so new nodes get
        the same rows on every rank), the rank scores and trains the events of ``mine``, and
        takes ``steps`` optimiser steps per pass in all, idle ones after its own, so that every
        rank's gradient averaging (the DDP wrapper given as ``forward``) lines up."""
        cfg, pred, model = self.config, self.pred, self.model
        started = time.perf_counter()
        seed_everything(cfg.seed + self.increments)  # dropout's draws: the same update gives the same scores
        self.increments += 1
        known = len(pred.index)
        s, d, t, eid = pred.intake.admit(events)  # rows (new nodes added), event ids; t_last moves past them
        if self.optimizer is not None:
            _grow_optimizer_state(self.optimizer)
        if self.pool_mask.size < len(pred.index):
            self.pool_mask = np.concatenate([self.pool_mask, np.zeros(len(pred.index) - self.pool_mask.size, bool)])
        if mine is not None:
            s, d, t, eid = s[mine], d[mine], t[mine], eid[mine]
        n = int(s.size)
        B = pred.batch_size
        idle = 0 if steps is None else steps - (-(-n // B))
        pos, neg, cand, losses = [], [], [], []
        backup = model.state.snapshots.backup() if cfg.passes > 1 else None
        with progress_bar(n * cfg.passes, "update", progress=cfg.progress) as bar:
            for i in range(0, n, B):
                j = min(n, i + B)
                self._grow_pool(s[i:j], d[i:j])
                p, q, c, loss = self._step(s[i:j], d[i:j], t[i:j], eid[i:j], self.pool, score=True)
                pos.append(p)
                neg.append(q)
                if c is not None:
                    cand.append(c)
                if loss is not None:
                    losses.append(loss)
                bar.update(j - i)
            self._idle(idle)
            for _ in range(1, cfg.passes):  # again from the increment's start: the memory takes each event once
                model.state.snapshots.restore(backup)
                for i in range(0, n, B):
                    j = min(n, i + B)
                    losses.append(self._step(s[i:j], d[i:j], t[i:j], eid[i:j], self.pool, score=False)[3])
                    bar.update(j - i)
                self._idle(idle)
        self.reservoir.add(s, d, self.rng)
        self.taken = (s, d, t, eid)  # the events this updater took in (a rank's share in parallel)
        pos = np.concatenate(pos) if pos else np.empty(0, dtype=np.float32)
        neg = np.concatenate(neg) if neg else np.empty(0, dtype=np.float32)
        self.last_scores = (pos, neg)  # logits of the increment's events and negatives, in event order
        self.last_candidates = np.concatenate(cand) if cand else None
        if n == 0:  # a rank with no events of its own
            return {"events": 0, "loss": float(np.mean(losses)) if losses else None}
        entry = {"new_nodes": len(pred.index) - known, "mode": "train" if cfg.train else "memory",
                 "passes": cfg.passes, "replay": cfg.replay, "loss": float(np.mean(losses)) if losses else None,
                 **score_entry(pos, neg, self.last_candidates, t, B, cfg.windows)}
        entry["seconds"] = time.perf_counter() - started
        return entry

    def _step(self, src, dst, t, eid, pool, score: bool):
        """One batch through the engine's step in score-first mode: its scores from the state
        and weights before it (when ``score``), then one optimiser step on it (or, memory only,
        none), and the memory takes it in.

        Updates run with dropout off, so the forward pass that scores a batch is the one its
        loss is taken from: scoring costs nothing beyond the training step."""
        cfg, model = self.config, self.model
        m = src.size
        neg = pool[self.rng.integers(0, pool.size, size=m)]
        k = cfg.mrr_negatives if (cfg.mrr and score) else 0
        lay = QueryLayout(m, k=k)
        # each event's k candidates at its own time, as the evaluator queries them (the layout's times)
        nodes = [lay.nodes(src, dst, neg, candidates=pool[self.rng.integers(0, pool.size, size=m * k)] if k else None)]
        times = [lay.times(t)]
        r = 0
        if self.optimizer is not None and cfg.replay and self.reservoir.src.size:
            r = max(1, int(round(cfg.replay * m)))
            rs, rd = self.reservoir.draw(r, self.rng)
            nodes += [rs, rd, pool[self.rng.integers(0, pool.size, size=r)]]
            times.append(np.full(3 * r, t[-1]))
        plan = model.plan(np.concatenate(nodes), np.concatenate(times), events=(src, dst, t, eid))
        model.eval()
        batch = Step(0, np.arange(m), False, (src, dst, t, eid), None, neg, plan)
        self._last_batch = batch  # what an idle step runs its forward pass on

        def ranked(z):  # each event against its k candidates, before the weights change
            return lay.score(model.score, z, which=("cand",))[2]

        def replayed(z):  # earlier interactions after the step's queries, at its time, never written to memory
            at = lay.end
            zs, zd, zn = z[at:at + r], z[at + r:at + 2 * r], z[at + 2 * r:at + 3 * r]
            return cfg.replay * link_loss(model.score(zs, zd), model.score(zs, zn))

        out = self.engine.step(batch, score=score, ranked=ranked if k else None,
                               extra_loss=replayed if r else None)
        return out.pos, out.neg, out.ranked, None if out.loss is None else float(out.loss)

    def _idle(self, steps: int) -> None:
        """Optimiser steps without events of this rank's own (zero gradients into the average)."""
        if self.optimizer is None or steps <= 0:
            return
        batch = self._last_batch if self._last_batch is not None else self._query_batch()
        for _ in range(steps):
            self.engine.idle_step(batch)

    def _query_batch(self) -> Step:
        """A batch that only queries (one node at the memory's last time): a rank with no events
        of its own runs its idle steps' forward passes on it, changing no state."""
        t = np.full(3, self.pred.t_last if np.isfinite(self.pred.t_last) else 0.0)
        plan = self.model.plan(np.zeros(3, dtype=np.int64), t)
        return Step(0, np.arange(1), False, None, None, None, plan)


def score_entry(pos, neg, cand, t, batch: int, windows: int) -> Dict:
    """The scores of an increment (its events' and negatives' logits in event order, their times)
    and of ``windows`` slices of it."""
    n = int(pos.size)
    out = {"events": n, "t_min": float(t[0]), "t_max": float(t[-1]), **_scores(pos, neg, cand, batch)}
    out["windows"] = [{"t_end": float(t[b - 1]), "events": b - a,
                       **_scores(pos[a:b], neg[a:b], None if cand is None else cand[a:b], batch)}
                      for a, b in _slices(n, windows, batch)]
    return out


def _slices(n: int, windows: int, batch: int):
    """``windows`` consecutive slices of ``range(n)`` on batch boundaries (fewer when short)."""
    batches = -(-n // batch)
    cuts = np.unique(np.linspace(0, batches, min(windows, batches) + 1).round().astype(int)) * batch
    cuts[-1] = n
    return [(int(a), int(min(b, n))) for a, b in zip(cuts[:-1], cuts[1:]) if a < n]


def _scores(pos, neg, cand, batch: int) -> Dict:
    m = batch_link_metrics(pos, neg, batch)
    out = {"ap": m["ap"], "auc": m["auc"], "pooled_ap": m["pooled"]["ap"]}
    if cand is not None:
        r = ranking_metrics(pos, cand)
        out.update({"mrr": r["mrr"], "hits@10": r["hits@10"]})
    return out


# ------------------------------------------------------------------------------ the entry point
def update(run, data, out, reader: Optional[dict] = None, overwrite: bool = False, **kwargs) -> Dict:
    """Update the run at ``run`` with new events and write the updated run to ``out``.

    Parameters
    ----------
    run : path-like
        A run directory (``speed train``, or an earlier ``update``).
    data : Events, path-like
        The new events (time-sorted, none older than the run's last event; original node ids),
        a file :func:`speed.read_events` reads, or a shards folder (its events after those the
        run has taken in: what ``speed partition ... --append`` added).
    out : path-like
        The new run directory (``run`` is left as it was).
    reader : dict, optional
        Options of :func:`speed.read_events` for a file.
    overwrite : bool
        Replace an existing ``out`` run folder.
    **kwargs
        Fields of :class:`UpdateConfig` (``passes``, ``replay``, ``train``, ``mrr``, ``lr``, ...).

    Returns
    -------
    dict
        ``metrics.json`` of the new run; its ``updates`` list ends with this increment's scores
        (``ap``, ``auc``, ``mrr`` when asked, per-window figures, seconds).
    """
    config = UpdateConfig(**kwargs).validate()
    run, out = Path(run), Path(out)
    source = RunFolder(run)
    RunFolder(out).check_update_output(source, overwrite)
    saved, payload = open_checkpoint(run)
    metrics = source.metrics()
    events = new_events(data, metrics, reader, config.progress, float(payload["t_end"]))
    if len(events) == 0:
        raise InputError("no new events", events.meta.source)
    pred = predictor_from(saved, payload, "end", config.device, run)
    again = pred.intake.already_held(events)  # the run's last events, sent again: not taken in twice
    if again.all():
        raise InputError(f"all {len(events):,} events were taken in already (at the run's last time, "
                         f"{full_time(pred.t_last)}): nothing new", events.meta.source)
    if again.any():
        events = events.select(np.flatnonzero(~again))
    updater = OnlineUpdater(pred, saved, payload, config)
    entry = updater.run(events)
    entry["already_taken"] = int(again.sum())
    return write_updated(run, out, metrics, events, entry, updater, saved, payload, overwrite)


# metrics.json entries of a training run that describe the model as trained (its best epoch's
# validation and test figures): an updated run keeps them under "before_updates"
TRAINED_KEYS = ("val", "test", "best_epoch", "epochs")


def write_updated(run: Path, out: Path, metrics: Dict, events: Events, entry: Dict, updater: OnlineUpdater,
                  saved: ckpt.Checkpoint, payload: Dict, overwrite: bool) -> Dict:
    """Write the updated run to ``out`` (atomically): ``best.json`` from ``updater``, the
    run's ``metrics.json`` with ``entry`` added to its ``updates``, and ``updates.png``."""
    history = list(metrics.get("updates", []))
    entry["increment"] = len(history) + 1
    entry["source"] = events.meta.source
    history.append(entry)
    data_info = dict(metrics.get("data", {}))
    data_info["num_events"] = int(data_info.get("num_events", 0)) + len(events)
    data_info["num_nodes"] = len(updater.pred.index)
    if len(events):
        data_info["t_max"] = float(events.t_float()[-1])
    # the figures of the training run describe the model before its updates: kept, under their name
    trained = {k: metrics[k] for k in TRAINED_KEYS if k in metrics}
    new_metrics = {**{k: v for k, v in metrics.items() if k not in TRAINED_KEYS}, "data": data_info,
                   "updates": history, "updated_from": str(run)}
    if trained:
        new_metrics["before_updates"] = {**metrics.get("before_updates", {}), **trained}
    with atomic_dir(out, overwrite=overwrite, markers=folder.MARKERS, kind=folder.KIND, owned=folder.OWNED) as tmp:
        _save_updated(tmp, updater, saved, payload)
        write_metrics(tmp / folder.METRICS, new_metrics)
        plot_updates(new_metrics, tmp / folder.UPDATES_PLOT)
        if (run / folder.CONFIG).exists():  # (curves.png, the training's epochs, stays with the run trained)
            shutil.copy2(run / folder.CONFIG, tmp / folder.CONFIG)
    return new_metrics


def _save_updated(target: Path, updater: OnlineUpdater, saved: ckpt.Checkpoint, payload: Dict) -> None:
    """``best.json`` of the updated run: weights and node state now, the optimiser, and the
    predictor payload (with the negative pool and the replay reservoir)."""
    pred, model = updater.pred, updater.model
    new_payload = payload_of(pred, test_start=payload.get("test_start"))
    new_payload["negative_pool"] = updater.pool.copy()
    new_payload["bipartite"] = updater.bipartite
    new_payload["replay"] = updater.reservoir.state()
    record = saved.record(optimizer=updater.optimizer.state_dict() if updater.optimizer is not None
                          else saved.optimizer, rng=[ckpt.rng_state()], num_nodes=model.num_nodes)
    ckpt.write_checkpoint(target / folder.BEST, "best", record, model=model, predictor=new_payload)


def plot_updates(metrics: Dict, path: Path) -> None:
    """AP (and MRR when scored) of every window of every increment over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ups = metrics.get("updates") or []
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for key, style in (("ap", "o-"), ("mrr", "s--")):
        xs = [w["t_end"] for u in ups for w in u["windows"] if w.get(key) is not None]
        ys = [w[key] for u in ups for w in u["windows"] if w.get(key) is not None]
        if xs:
            ax.plot(xs, ys, style, ms=3, label=f"{key.upper()} (test then train)")
    for u in ups[1:]:
        ax.axvline(u["t_min"], color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel("time of the window's last event")
    ax.set_ylabel("score before training on the events")
    modes = sorted({u["mode"] for u in ups})
    ax.set_title(f"{metrics.get('model', '')}: {len(ups)} increment(s), {', '.join(modes)}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
