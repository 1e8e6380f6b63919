"""Full-graph evaluation of a model: continue its state through the val and test events.

:class:`Evaluator` owns the evaluation protocol (:mod:`speed.train.protocols`): the periods of
the split, the neighbour graph evaluation sees, the seeded negatives of each period
(:func:`~speed.train.eval.negatives.eval_seed`), the new-node pass, the scores (AP/AUC per batch and
pooled, MRR), the count of negatives that are real edges, dynamic node classification, and
:meth:`Evaluator.replay`.

The protocols *continue* the stream: after an epoch's training pass the model's memory goes
on through the validation events, and through the test events after those.  The
single-process trainer evaluates its own model this way; a PAC rank 0 first loads the memory
gathered from the ranks into a full-graph model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np
import torch

from ..._util import TRIM_EVERY, places, progress_bar, trim_heap
from ...data.events import Events
from ...data.split import Split
from ...partition.ordered import release_pages
from ..step.engine import Batches
from ..state.spill import Spill
from ..step.loader import EventStream, PlanLoader
from .divided import DividedStep, Work, gather_scores
from .pacing import PlanPacing
from .metrics import batch_link_metrics, node_classification_auroc, ranking_metrics
from .negatives import STRATEGIES, FixedNegatives, NegativeSampler, Period, eval_seed, hist_rnd_candidates, \
    random_candidates
from ..protocols import PROTOCOLS

PERIODS = ("val", "test")


@dataclass
class StreamResult:
    """Scores of one evaluation pass over a period."""

    pos: Optional[np.ndarray]
    neg: Optional[np.ndarray]
    mrr_neg: Optional[np.ndarray] = None
    z_src: Optional[np.ndarray] = None
    work: Optional[dict] = None  # what this process computed, sent and received (Work.as_dict)


# events a pass streams between two releases of a mapped log's pages (speed.partition.ordered)
# and of the heap's free pages (trim_heap): 65,536 events of 32 bytes, so a rank streaming a
# mapped log holds about 2 MB of it
RELEASE_EVERY = TRIM_EVERY
# training-period events inserted into the neighbour rings at a time before an evaluation
PREPARE_WINDOW = 1 << 20


@torch.no_grad()
def stream_scores(model, stream: EventStream, index: np.ndarray, batch_size: int,
                  negatives: Optional[NegativeSampler] = None, mrr_candidates: Optional[np.ndarray] = None,
                  collect_z: bool = False, desc: str = "eval", progress: Optional[bool] = None,
                  pipeline: int = 0, graph: Optional[np.ndarray] = None,
                  release: Optional[Callable[[], None]] = None, captured=None,
                  pacing: Optional[PlanPacing] = None) -> StreamResult:
    """Stream the events ``index`` of ``stream`` through ``model`` without gradients,
    continuing from its state, scoring each against a negative edge from ``negatives``
    (its own source and a negative destination, or a whole negative edge) and, with
    ``mrr_candidates`` (int64, shape (len(index), K)), against K negative destinations.

    Negatives and candidates are queried in the step's own plan, at the event's time, so they
    see exactly what the event's endpoints see.  Without ``negatives`` nothing is scored (the
    pass only rebuilds memory).  ``graph`` (positions, a superset of ``index``) are the events the
    neighbour sampler sees, when they are more than the scored ones (TGN's and DyGLib's new-node
    pass: the model takes in the new-node events only, its neighbour finder holds all).
    ``release``, called every :data:`RELEASE_EVERY` events and at the end, lets the pages of a
    mapped log go; the heap's free pages go back to the system as often.  ``pipeline``: build
    the next steps' plans in this many background threads while this one computes, as training
    does (:class:`~speed.train.step.loader.PlanLoader`; a pass divided among processes too,
    where their world has a planning group, :meth:`~speed.train.world.World.planning`).  ``captured`` (a
    :class:`~speed.train.eval.captured.CapturedEval` of ``model``): pad each plan to a fixed
    shape and replay its step from a CUDA graph (one process, no candidates, no embeddings
    collected; otherwise the steps run eagerly).  ``pacing`` (a
    :class:`~speed.train.eval.pacing.PlanPacing`, for a pass one process computes on a CPU
    with ``pipeline`` 0): plan ahead or in the step, whichever it measured faster, measuring on
    stretches of this pass's own steps while it has not decided.
    """
    model.eval()
    extra, k = None, 0
    if mrr_candidates is not None:
        k = mrr_candidates.shape[1]
        first = int(index[0]) if index.size else 0
        where = places(index - first, int(index.max()) + 1 - first if index.size else 0)

        def candidates(positions, t):  # each event's K candidates at its time
            rows = mrr_candidates[where[positions - first]]
            return rows.reshape(-1), np.repeat(t, k)

        extra = candidates

    # one step: this process alone, or its share of the work (speed.train.eval.divided)
    divider = model.divider if model.divider is not None else DividedStep()
    if hasattr(divider, "work"):
        divider.work = Work()  # this pass's
    # a world of one computes each plan as built, on the model's device (the loader moves it in
    # its thread); divided among processes, each cuts its part out on the host, where the plan
    # is built (DividedStep.cut).  Divided plans are built ahead only where the world has a
    # group for the planning thread: a sharded sampler answers each plan's queries with a
    # collective, which must not interleave with the step's
    whole = divider.size == 1
    replay = captured is not None and whole and k == 0 and not collect_z
    divider.captured = captured if replay else None
    if whole:
        fix = captured.fix if replay else None
    else:
        fix = lambda plan, step: divider.cut(plan, step.layout(k))  # noqa: E731
        # one thread at most: a divided step is eager, and an eager step dispatches its
        # operators under the interpreter lock that a plan's stages in threads of their own
        # want too (TrainConfig.pipeline_threads)
        pipeline = min(int(pipeline), 1) if divider.world.plans_ahead else 0
    if pacing is None or not whole or replay or pipeline:
        pacing = None
    loaders = _Stretches(model, stream, index, batch_size, pacing, pipeline,
                         negatives.next_edges if negatives is not None else None,
                         dict(extra_queries=extra, push=graph is None, on_device=whole, fix=fix,
                              overlap=not whole))
    if graph is not None:  # the neighbour graph holds more events than the scored ones
        # a window at a time (the same as one push: nothing enters the rings in between), so the
        # sampler's working copies are a window's, not the period's (2.5 GB on a 10^8-event log)
        for lo in range(0, graph.size, PREPARE_WINDOW):
            part = graph[lo:lo + PREPARE_WINDOW]
            model.state.push_events(*(x[part] for x in (stream.src, stream.dst, stream.t, stream.eid)))
        trim_heap()
    done = released = 0
    parts, sizes = [], []
    gathering = model.state.seconds_gathering  # (the sampler's collectives, a part of planning)
    t_pass = time.perf_counter()
    # a divided step whose exchange carries the next step's rows is given the next step's cut
    # (so the loop holds one step ahead: the loader has built it already where it plans ahead)
    ahead = not whole and divider.merges(model)
    with progress_bar(index.size, desc, progress=progress) as bar:
        for step, after in _with_next(loaders, ahead):
            n = len(step)
            more = {"after": after.plan} if after is not None else {}
            # (a divided step may hand its scores over with the next step's: DividedStep.__call__)
            parts.extend(divider(model, step.plan, step.layout(k), collect=collect_z, score=negatives is not None,
                                 **more))
            sizes.append(n)
            bar.update(n)
            done += n
            if done - released >= RELEASE_EVERY:
                if release is not None:
                    release()  # the mapped log's pages read so far go: a pass holds a window of them
                trim_heap()  # and what the steps freed, kept by the heap below its high-water mark
                released = done
        parts.extend(divider.flush())
    if release is not None:
        release()
    trim_heap()
    if hasattr(divider, "work"):  # (the loaders' seconds include the cuts, counted apart)
        work = divider.work
        work.seconds_planning += loaders.plan_seconds - work.seconds_dividing
        work.seconds_planning_gathers = model.state.seconds_gathering - gathering
        work.plan_threads = loaders.threads
        work.planned_ahead = loaders.planned_ahead
        work.step_threads = loaders.step_threads
        if loaders.probe is not None:
            work.pacing = loaders.probe
        work.seconds_pass = time.perf_counter() - t_pass
    # every process's shares, in event order (the scores stayed where they were computed)
    pos, neg, mrr, zs = gather_scores(divider.world, parts, sizes)
    work = divider.work.as_dict() if hasattr(divider, "work") else None
    return StreamResult(pos=pos, neg=neg, mrr_neg=mrr, z_src=zs, work=work)


class _Stretches:
    """A pass's steps with their plans, from one :class:`PlanLoader` per stretch of batches:
    one stretch, planned as ``pipeline`` says, without ``pacing``; with it, the stretches
    :meth:`PlanPacing.segments` gives, each measured where labelled, torch's threads lowered by
    one in those planned ahead (:meth:`PlanPacing.step_threads`).  Consecutive loaders continue
    one another exactly: the state the plans advance, the negatives and the candidates are
    taken in step order whichever loader takes them."""

    def __init__(self, model, stream, index, batch_size: int, pacing, pipeline: int, negatives, options: dict):
        self.model, self.stream, self.index, self.batch_size = model, stream, index, int(batch_size)
        self.pacing, self.pipeline, self.negatives, self.options = pacing, int(pipeline), negatives, options
        self.plan_seconds = 0.0
        self.threads = 0  # the most threads that planned ahead in a stretch
        self.planned_ahead = 0  # steps planned ahead
        self.step_threads = torch.get_num_threads()  # the fewest torch threads a stretch's steps had
        self.probe = None  # what pacing measured in this pass, if it measured

    def _loader(self, first: int, stop: int, threads: int) -> PlanLoader:
        bs = self.batch_size
        return PlanLoader(self.model, self.stream, Batches(self.index[first * bs:stop * bs], bs), self.negatives,
                          pipeline=threads, **self.options)

    def __iter__(self):
        num = -(-self.index.size // self.batch_size)
        if self.pacing is None:
            yield from self._run(self._loader(0, num, self.pipeline), num)
            return
        for first, stop, ahead, label in self.pacing.segments(num):
            if ahead is None:  # the rest of the pass, the way just measured faster
                ahead = self.pacing.decide()
                self.probe = self.pacing.probe
            with self.pacing.step_threads(ahead) as threads:
                self.step_threads = min(self.step_threads, threads)
                steps = self._run(self._loader(first, stop, 1 if ahead else 0), stop - first)
                if label is None:
                    yield from steps
                    continue
                seconds, t0 = [], time.perf_counter()
                for step in steps:  # each step's wall: its plan (or the wait for it) and its compute
                    yield step
                    t1 = time.perf_counter()
                    seconds.append(t1 - t0)
                    t0 = t1
                self.pacing.record(label, seconds)

    def _run(self, loader: PlanLoader, steps: int):
        yield from loader
        self.plan_seconds += loader.plan_seconds
        self.threads = max(self.threads, loader.threads)
        if loader.threads:
            self.planned_ahead += steps


def _with_next(steps, ahead: bool):
    """``(step, next step or None)`` of ``steps``; ``(step, None)`` throughout unless ``ahead``."""
    if not ahead:
        for step in steps:
            yield step, None
        return
    it = iter(steps)
    step = next(it, None)
    while step is not None:
        after = next(it, None)
        yield step, after
        step = after


class Evaluator:
    """Evaluate models on the full event log, by a protocol.

    Parameters
    ----------
    events : Events
        The whole log, global node ids.
    split : Split
    batch_size : int
        Events per evaluation batch (the protocols evaluate in the training batch size).
    seed : int
        Base seed of the evaluation negatives.
    mrr_negatives : int
        Ranking candidates per event (0: the protocol's default; TGB ranks against 100).
    device : torch.device
    node_classification : bool
        Report dynamic node classification where the log has labels.
    progress : bool, optional
    stream : EventStream, optional
        ``events`` as host arrays, when the caller already holds them.
    strategy : {"random", "historical", "inductive"}
        How the evaluation negatives are drawn; the protocol must define it.
    keep_test_start : bool
        Keep the model's state as the test period begins (:attr:`test_start`), for the
        checkpoint that :func:`speed.load_run` reads.
    protocol : {"tgn", "dyglib", "tgb"}
        See :mod:`speed.train.protocols`.
    max_steps : int, optional
        Score only the first ``max_steps`` batches of each pass (a measuring aid, see
        ``TrainConfig.eval_max_steps``): the back-ups, negatives and neighbour graph stay the
        whole period's.
    pipeline : bool or int
        Plan each pass's next steps while this one computes, in this many threads
        (``TrainConfig.pipeline_threads``; a pass divided among processes takes one at most,
        and none where its world has no planning group).
    scores_here : bool
        Compute the figures in this process (a PAC rank other than 0 streams its share of every
        pass but reports nothing: its :meth:`evaluate` returns no scores).
    cuda_graph : bool
        Replay the steps of a pass one process computes from a CUDA graph per plan shape, their
        plans padded to fixed sizes (:class:`~speed.train.eval.captured.CapturedEval`; eagerly on
        the same padded plans without a GPU), where the model's steps can be.
    pace : bool
        Without ``pipeline``: let the first long pass this process computes whole measure
        planning ahead (a planning thread, the steps one torch thread fewer) against planning in
        the step, and plan every later one the faster way (:mod:`speed.train.eval.pacing`;
        ``TrainConfig.paces_evaluation``).  The figures are the same either way.

    Attributes
    ----------
    test_start : dict or None
        ``{"t": time of the last event before the test period, "state": model.state.snapshots.backup(nodes=...)}``
        (the rows the test period changes; :meth:`~speed.train.state.snapshots.Snapshots.whole_backup` gives the whole
        state), from the latest test pass (with ``keep_test_start``).
    """

    @classmethod
    def for_run(cls, events: Events, split: Split, config, device=torch.device("cpu"), **given) -> "Evaluator":
        """The evaluator of a run of ``config`` (a :class:`~speed.train.config.TrainConfig`): its
        batch size, seed, ranking candidates, negatives, protocol, bounds and pipeline, on
        ``device``; ``given`` sets the rest, or overrides (a PAC rank: no node classification, its
        own progress)."""
        device = torch.device(device)
        settings = dict(node_classification=config.node_classification, progress=config.progress,
                        strategy=config.eval_negatives, protocol=config.protocol_name, max_steps=config.eval_max_steps,
                        pipeline=config.pipeline_threads(device, captured=config.cuda_graph),
                        cuda_graph=config.cuda_graph, pace=config.paces_evaluation(device))
        return cls(events, split, config.batch_size, config.seed, config.mrr_negatives, device, **{**settings, **given})

    def __init__(self, events: Events, split: Split, batch_size: int, seed: int, mrr_negatives: int = 0,
                 device: torch.device = torch.device("cpu"), node_classification: bool = True,
                 progress: Optional[bool] = None, stream: Optional[EventStream] = None,
                 strategy: str = "random", keep_test_start: bool = False, protocol: str = "tgn",
                 max_steps: Optional[int] = None, pipeline: int = 0, scores_here: bool = True,
                 cuda_graph: bool = False, pace: bool = False):
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r} (choose from {', '.join(PROTOCOLS)})")
        self.protocol = PROTOCOLS[protocol]
        if strategy not in self.protocol.strategies:
            raise ValueError(f"the {protocol} protocol has no {strategy!r} negatives (it has "
                             f"{', '.join(self.protocol.strategies)})")
        self.keep_test_start = bool(keep_test_start)
        self.max_steps = int(max_steps) if max_steps else None
        self.pipeline = int(pipeline)
        self.cuda_graph = bool(cuda_graph)
        #: with ``pace`` (and ``pipeline`` 0): whether passes this process computes whole plan
        #: ahead, measured by the first long one and kept for the run's others
        self.pacing = PlanPacing() if pace and not self.pipeline else None
        #: the captured evaluation (with ``cuda_graph``, :meth:`_captured_for`), once made
        self.captured = None
        self.scores_here = bool(scores_here)
        self.test_start: Optional[dict] = None
        self.strategy = strategy
        self._negatives: Dict[str, tuple] = {}
        self._candidates: Dict[str, tuple] = {}
        self.events, self.split = events, split
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.mrr_negatives = int(mrr_negatives) or self.protocol.default_candidates
        self.device, self.progress = device, progress
        self.with_node_classification = bool(node_classification) and events.label is not None
        self._train_index: Optional[np.ndarray] = None
        self.event_stream = stream if stream is not None else EventStream(events)
        #: each evaluation pass's work in this process (keys and embeddings computed, rows and
        #: bytes received and sent, seconds computing and in collectives), in pass order
        self.work: list = []
        # TGN's and DyGLib's samplers draw from the distinct sources and destinations of the whole log
        self.src_pool = np.flatnonzero(events.node_mask(("src",)))
        self.dst_pool = np.flatnonzero(events.node_mask(("dst",)))

    # ------------------------------------------------------------------ periods
    @property
    def train_index(self) -> np.ndarray:
        """Positions of the masked training events (made when first asked: a PAC rank's
        evaluation never asks, and on a 10^8-event log they are 0.5 GB)."""
        if self._train_index is None:
            self._train_index = np.flatnonzero(self.split.train_mask)
        return self._train_index

    def period(self, name: str) -> np.ndarray:
        """Event positions of ``"train"`` (masked training events), ``"val"`` or ``"test"``."""
        sp = self.split
        if name == "train":
            return self.train_index
        if name == "val":
            return np.arange(sp.num_train, sp.num_train + sp.num_val)
        if name == "test":
            return np.arange(sp.num_train + sp.num_val, sp.num_train + sp.num_val + sp.num_test)
        raise ValueError(f"unknown period {name!r}")

    def inductive(self, period: str) -> np.ndarray:
        """bool, one per event of ``period``: touches a node unseen in the (masked) training events."""
        return self.split.val_inductive if period == "val" else self.split.test_inductive

    @property
    def new_node_pass(self) -> bool:
        """The inductive metric is a pass of its own (TGN, DyGLib), when nodes are held out."""
        return self.protocol.new_node_pass and self.split.new_node_fraction > 0

    def _last_observed(self, period: str) -> float:
        """DyGLib's ``last_observed_time``: for validation the time of the last *trained* event
        (``train_data.node_interact_times[-1]``, after the new-node mask: a training period
        whose last events all touch held-out nodes ends earlier), for the test the end of
        validation (``val_data.node_interact_times[-1]``, unmasked)."""
        sp, t = self.split, self.events.t_float()
        if period == "val":
            mask = self.split.train_mask
            last = mask.size - 1 - int(np.argmax(mask[::-1])) if mask.any() else -1  # the last trained event
            return float(t[last]) if last >= 0 else -np.inf
        end = sp.num_train + sp.num_val
        return float(t[end - 1]) if end else -np.inf

    # ---------------------------------------------------------------- negatives
    @property
    def selects_apart(self) -> bool:
        """The best epoch is chosen on other negatives than the reported figures' (DyGLib's
        protocol with historical or inductive negatives: its training script selects on
        random ones)."""
        sel = self.protocol.select_negatives
        return sel is not None and sel != self.strategy

    def negative_edges(self, period: str, new_nodes: bool = False, strategy: Optional[str] = None):
        """The negatives of ``period``'s events (or of its new-node events): ``(src or None, dst)``,
        int64 (n,) each.

        ``random``: each event's own source and a destination drawn from the distinct
        destinations of the sampler's data; ``historical`` / ``inductive``: whole edges
        (:func:`~speed.train.eval.negatives.edge_negatives`).  The sampler's data is the whole log,
        or, for the new-node pass, the period's new-node events (DyGLib; TGN validates new nodes
        with its whole-log sampler).  Seeded by the evaluation seed, so every model and run on
        the same data gets the same ones.  ``strategy`` overrides the evaluator's.
        """
        strategy = strategy or self.strategy
        key = (period, new_nodes, strategy)
        if key not in self._negatives:
            idx = self.period(period)
            if new_nodes:
                idx = idx[self.inductive(period)]
            ev = self.events
            n = idx.size
            seed = [eval_seed(self.seed, period), int(new_nodes)]
            use_log = not new_nodes or (period == "val" and self.protocol.new_node_val_pool == "log")
            ref = (ev.src, ev.dst, ev.t_float()) if use_log else (ev.src[idx], ev.dst[idx], ev.t_float()[idx])
            src_pool = self.src_pool if use_log else np.unique(ev.src[idx])
            dst_pool = self.dst_pool if use_log else np.unique(ev.dst[idx])
            if n == 0:
                self._negatives[key] = (None, np.empty(0, dtype=np.int64))
            else:
                self._negatives[key] = STRATEGIES[strategy](Period(
                    ev.src[idx], ev.dst[idx], ev.t_float()[idx], self.batch_size, seed, src_pool, dst_pool, ref,
                    self._last_observed(period)))
        return self._negatives[key]

    def negatives(self, period: str, new_nodes: bool = False, strategy: Optional[str] = None) -> FixedNegatives:
        """The negatives of ``period`` as a stream handed out in event order."""
        src, dst = self.negative_edges(period, new_nodes, strategy)
        return FixedNegatives(dst, src)

    @property
    def stored_candidates(self) -> bool:
        """The log brought its own ranking negatives (e.g. TGB's, :func:`speed.read_tgb`)."""
        return self.events.meta.eval_candidates is not None

    def ranks(self, period: str) -> bool:
        """Whether ``period``'s events are ranked: the test with ranking candidates, and
        validation too under a protocol that selects on MRR (TGB)."""
        if not (self.mrr_negatives or self.stored_candidates):
            return False
        return period == "test" or self.protocol.select_on == "mrr"

    @property
    def ranking_pool(self) -> np.ndarray:
        """Where random ranking candidates come from: under TGB's protocol every id from the
        smallest destination to the largest (TGB's ``arange(first_dst_id, last_dst_id + 1)``,
        on the ids as ``speed`` holds them: the file's integer ids, or string ids in order of
        first appearance), otherwise the log's distinct destinations."""
        if self.protocol.ranking_pool == "id_range" and self.dst_pool.size:
            return np.arange(int(self.dst_pool[0]), int(self.dst_pool[-1]) + 1, dtype=np.int64)
        return self.dst_pool

    def ranking_candidates(self, period: str):
        """Up to ``mrr_negatives`` distinct destinations per event of ``period``, none a true
        destination of the event's source at its time: uniformly random, or TGB's ``hist_rnd``
        (its history: the training events).  ``(cand, valid)``, shapes (n, K); ``valid`` marks
        the real candidates (a row has fewer when fewer remain, as in TGB; a log with stored
        candidates, e.g. TGB's, pads them too)."""
        if self.stored_candidates:  # already filtered by whoever made them (TGB does), used as they are
            return self.events.meta.eval_candidates[period]
        if period not in self._candidates:
            idx, k, ev = self.period(period), self.mrr_negatives, self.events
            seed = [eval_seed(self.seed, period), k]
            src, dst, t = ev.src[idx], ev.dst[idx], ev.t_float()[idx]
            if self.protocol.ranking == "hist_rnd":
                tr = slice(0, self.split.num_train)
                self._candidates[period] = hist_rnd_candidates(src, dst, t, self.ranking_pool, k, seed,
                                                               (ev.src[tr], ev.dst[tr]))
            else:
                self._candidates[period] = random_candidates(src, dst, t, self.ranking_pool, k, seed)
        return self._candidates[period]

    def save_negatives(self, path) -> None:
        """Write the evaluation negatives to ``path`` (``.npz``) for other tools to reuse:
        ``{period}_src`` (-1: the event's own source), ``{period}_dst``, the event positions
        ``{period}_eid``; for the new-node pass the same with ``{period}_new_``; with ranking
        ``{period}_candidates`` / ``{period}_valid``."""
        out = {"strategy": np.array(self.strategy), "seed": np.array(self.seed),
               "protocol": np.array(self.protocol.name)}
        for p in PERIODS:
            idx = self.period(p)
            for tag, new in (("", False), ("new_", True)):
                if new and not self.new_node_pass:
                    continue
                src, dst = self.negative_edges(p, new)
                out[f"{p}_{tag}eid"] = self.events.eid[idx[self.inductive(p)] if new else idx]
                out[f"{p}_{tag}src"] = np.full(dst.size, -1, dtype=np.int64) if src is None else src
                out[f"{p}_{tag}dst"] = dst
            if self.ranks(p):
                out[f"{p}_candidates"], out[f"{p}_valid"] = self.ranking_candidates(p)
        np.savez(path, **out)

    # -------------------------------------------------------------------- passes
    def stream(self, model, index: np.ndarray, negatives: Optional[NegativeSampler] = None,
               mrr_candidates: Optional[np.ndarray] = None, collect_z: bool = False, desc: str = "eval",
               graph: Optional[np.ndarray] = None) -> StreamResult:
        """Stream events of the log through ``model`` (see :func:`stream_scores`); with
        ``max_steps``, its first batches only."""
        if self.max_steps is not None:
            index = index[:self.max_steps * self.batch_size]
        res = stream_scores(model, self.event_stream, index, self.batch_size, negatives, mrr_candidates, collect_z,
                            desc, self.progress, pipeline=self.pipeline, graph=graph,
                            release=lambda: release_pages(self.events), captured=self._captured_for(model),
                            pacing=self.pacing)
        if res.work is not None:
            self.work.append({"pass": desc, "events": int(index.size), **res.work})
        return res

    def _captured_for(self, model):
        """With ``cuda_graph``: the captured evaluation of ``model`` (made at its first pass, kept
        for the next: its graphs and fitted sizes), or None where its steps cannot be captured."""
        if not self.cuda_graph:
            return None
        from .captured import CapturedEval

        if self.captured is None or self.captured.model is not model:
            if CapturedEval.why_not(model) is not None:
                return None
            self.captured = CapturedEval(model)
        return self.captured

    def prepare(self, model) -> None:
        """Give the model the neighbour graph evaluation sees at the end of training: every
        training-period event, the held-out nodes' included (TGN and DyGLib evaluate with a
        neighbour finder over the whole log; the memory stays what training made it)."""
        e, n = self.events, self.split.num_train
        model.state.reset_neighbors()
        # a window at a time (the same rings: events enter them in log order either way), so the
        # sampler's working copies are a window's, not the training period's
        for lo in range(0, n, PREPARE_WINDOW):
            hi = min(lo + PREPARE_WINDOW, n)
            t = e.t[lo:hi]
            model.state.insert_neighbors(e.src[lo:hi], e.dst[lo:hi], t.astype(np.float64, copy=False), e.eid[lo:hi])
        release_pages(e)  # the mapped log's training period: not read again in this evaluation
        trim_heap()

    def evaluate(self, model, period: str, collect_z: bool = False, selection: bool = False):
        """Continue ``model`` through ``period`` ("val" or "test") with its seeded negatives;
        under TGN's and DyGLib's protocols, then score the period's new-node events in a pass of
        their own from the state at the period's start (the model ends in the state after the
        whole period).

        With ``selection`` (an epoch's validation) and a protocol that selects on other
        negatives (:attr:`selects_apart`), the period is also scored with those, in one more
        pass from its start: ``scores["selection"]``.  Negatives never change the state, so
        every pass ends in the same one.

        Returns
        -------
        scores : dict
            ``{"transductive": {...}, "inductive": {...}}`` (see :func:`batch_link_metrics`;
            MRR and Hits@k where ranked).  No ``inductive`` entry without held-out nodes.
            ``"selection": {"negatives": str, "transductive": {...}}`` as above.
        result : StreamResult
            Of the pass over the whole period.
        """
        ranked = self.ranks(period)
        cand, valid = self.ranking_candidates(period) if ranked else (None, None)
        keep = period == "test" and self.keep_test_start
        apart = selection and self.selects_apart
        # one back-up of the period's start serves both the new-node pass and the checkpoint; it
        # copies only the rows the period's events can change (their endpoints')
        idx = self.period(period)
        touched = np.unique(np.concatenate([self.events.src[idx], self.events.dst[idx]]))
        # spilled to disk: on a large log it is most of a rank's rows, held beside them all pass
        start = (model.state.snapshots.backup(nodes=touched, keep=Spill()) if self.new_node_pass or keep or apart
                 else None)
        if keep:
            first = self.split.num_train + self.split.num_val
            t = float(self.events.t_float()[first - 1]) if first else -np.inf
            self.test_start = {"t": t, "state": start}
        inductive = None
        if self.new_node_pass:  # first, from the start: then the model ends after the whole period
            new = idx[self.inductive(period)]
            nn = self.stream(model, new, self.negatives(period, new_nodes=True), desc=f"{period} new nodes",
                             graph=idx) if new.size else StreamResult(np.empty(0), np.empty(0))
            inductive = self._scores(nn.pos, nn.neg)
            model.state.snapshots.restore(start)
            trim_heap()  # the rows the restore replaced
        chosen_on = None
        if apart:
            how = self.protocol.select_negatives
            sel = self.stream(model, idx, self.negatives(period, strategy=how), desc=f"{period} ({how} negatives)")
            chosen_on = {"negatives": how, "transductive": self._scores(sel.pos, sel.neg)}
            model.state.snapshots.restore(start)
            trim_heap()
        res = self.stream(model, idx, self.negatives(period), mrr_candidates=cand, collect_z=collect_z, desc=period)
        if not self.scores_here:
            return None, res
        scores = {"transductive": self._scores(res.pos, res.neg)}
        if res.mrr_neg is not None:
            scores["transductive"].update({k: v for k, v in ranking_metrics(res.pos, res.mrr_neg, valid).items()
                                           if k != "count"}, candidates=int(res.mrr_neg.shape[1]),
                                          candidates_mean=float(valid.sum(axis=1).mean()) if valid.size else 0.0)
        if inductive is not None:
            scores["inductive"] = inductive
        if chosen_on is not None:
            scores["selection"] = chosen_on
        return scores, res

    def _scores(self, pos: np.ndarray, neg: np.ndarray) -> Optional[Dict]:
        """A pass's figures (None where this process reports none); the heap the metrics' arrays
        took goes back to the system at once, not after the next phase has added to it."""
        if not self.scores_here:
            return None
        # TGN's and DyGLib's figures are computed on float32 probabilities: reported beside ours
        out = batch_link_metrics(pos, neg, self.batch_size, self.protocol.aggregate,
                                 reference=self.protocol.reference_figures)
        trim_heap()
        return out

    def replay(self, model) -> Dict:
        """Rebuild ``model``'s state from scratch on the training events with its current
        weights, then score val and test (and node classification where labels exist)."""
        model.state.reset()
        collect = self.with_node_classification
        tr = self.stream(model, self.train_index, collect_z=collect, desc="replay train")
        self.prepare(model)
        val, val_res = self.evaluate(model, "val", collect_z=collect)
        test, test_res = self.evaluate(model, "test", collect_z=collect)
        out = {"val": val, "test": test}
        if collect:
            nc = self.node_classification(tr.z_src, val_res.z_src, test_res.z_src)
            if nc is not None:
                out["node_classification"] = nc
        return out

    # ---------------------------------------------------------------- extras
    def true_negative_counts(self) -> Dict[str, int]:
        """Evaluation negatives of each period that are real edges of the log (same pair, any
        time).  One pass over the log, a window at a time, against the periods' negative pairs
        sorted: it holds those pairs and a window, not every pair of the log (which, on a
        10^8-event log, was the largest thing rank 0 ever held)."""
        ev = self.events
        n = np.int64(ev.num_nodes)
        queries = {}
        for p in PERIODS:
            idx = self.period(p)
            src, neg = self.negative_edges(p)
            src = ev.src[idx] if src is None else src
            queries[p] = np.asarray(src, dtype=np.int64) * n + neg
        pairs = np.unique(np.concatenate(list(queries.values())))
        found = np.zeros(pairs.size, dtype=bool)
        if pairs.size:
            for lo in range(0, len(ev), PREPARE_WINDOW):
                hi = min(lo + PREPARE_WINDOW, len(ev))
                # sorted, the window's look-ups walk the pairs in order (cache-friendly)
                keys = np.sort(np.asarray(ev.src[lo:hi], dtype=np.int64) * n + ev.dst[lo:hi])
                pos = np.searchsorted(pairs, keys).clip(max=pairs.size - 1)
                found[pos[pairs[pos] == keys]] = True
            release_pages(ev)
        return {p: int(found[np.searchsorted(pairs, q)].sum()) for p, q in queries.items()}

    def node_classification(self, z_train, z_val, z_test) -> Optional[Dict]:
        """AUROC of a classifier on frozen source embeddings of train/val/test events (None
        when a pass was cut short, by ``--max-steps`` or a bounded evaluation: its embeddings
        are not every event's)."""
        if (len(z_train), len(z_val), len(z_test)) != (self.train_index.size, self.split.num_val, self.split.num_test):
            return None
        idx = np.concatenate([self.train_index, self.period("val"), self.period("test")])
        z = np.concatenate([z_train, z_val, z_test])
        n_tr, n_val = self.train_index.size, self.split.num_val
        masks = [np.zeros(idx.size, bool) for _ in range(3)]
        masks[0][:n_tr] = True
        masks[1][n_tr:n_tr + n_val] = True
        masks[2][n_tr + n_val:] = True
        return node_classification_auroc(z, self.events.label[idx], *masks, seed=self.seed, device=str(self.device))
