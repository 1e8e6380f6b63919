"""Plans of a stream's batches, built on the host while the model computes (after MSPipe).

A step's host work -- negatives, distinct queries, neighbour sampling, the pending events and
edge features it applies, the copies to the device -- depends on the event stream and not on
the weights (:mod:`speed.train.state.batch_plan`).  :class:`PlanLoader` builds the plan of batch ``i + 1``
in a background thread while batch ``i`` computes.  The sampler and pending store advance as
plans are built, so the thread owns them while a pass runs; the model only reads its memory.

* ``staleness = 0`` (default): the memory rows are read when the step computes, so results are
  exactly those of building each plan just before its step (tested).
* ``staleness = K > 0``: the thread also reads the memory rows of the plans it builds.  It
  reads step ``j``'s rows once step ``j - K - 1`` has finished, so a step misses the memory
  updates of at most its ``K`` predecessors (MSPipe's bounded staleness; tested).  This changes
  results; it hides the memory reads too.

Some steps need the sampler and store as they are after the step, not one batch further:
the end of a pass (the engine backs the state up and resets it) and PAC's in-epoch syncs (they
apply and clear pending events).  The thread stops after building such a step's plan and
waits until the consumer has finished the step.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Callable, Iterator, Optional, Tuple

import numpy as np
import torch

from ..._threads import for_new_thread
from ...data.events import Events
from ..model.queries import QueryLayout
from ..state._kernels import pending_counts


def concurrent_kernels() -> bool:
    """Whether numba's threading layer runs parallel kernels launched from several threads at
    once (OpenMP's and TBB's do; the workqueue layer, numba's fallback where neither is
    installed, aborts the process when it sees it)."""
    try:
        import numba
    except ImportError:
        return False
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet: run one, then the layer is chosen
        empty = np.empty(0, dtype=np.int64)
        pending_counts(empty, np.empty(0), empty, empty, np.empty(0))
        layer = numba.threading_layer()
    return layer != "workqueue"


class EventStream:
    """``src, dst, t, eid`` of an event stream as host arrays, indexed by batch.

    Parameters
    ----------
    events : Events
    """

    def __init__(self, events: Events):
        # the log's own arrays where they already have these types (no second copy of a large
        # log): a stream is only read, and :meth:`batch` hands out fresh (writable) arrays
        self.src = np.ascontiguousarray(events.src, dtype=np.int64)
        self.dst = np.ascontiguousarray(events.dst, dtype=np.int64)
        self.t = np.ascontiguousarray(events.t_float(), dtype=np.float64)
        self.eid = np.ascontiguousarray(events.eid, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def batch(self, idx: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, t, eid)`` of the events at positions ``idx`` (int64, shape (B,))."""
        return self.src[idx], self.dst[idx], self.t[idx], self.eid[idx]


class Step:
    """One planned step: its position, batch, negatives and plan.

    Attributes
    ----------
    index : int
        Step number in the pass sequence (0-based).
    positions : int64 ndarray, shape (B,)
        The events' positions in the stream.
    ended : bool
        The last batch of a pass over the stream.
    events : tuple of 4 ndarrays
        ``(src, dst, t, eid)``.
    neg_src, neg_dst : int64 ndarray or None
        The negatives (``neg_src`` None: the events' own sources).
    plan : BatchPlan
        On the device; queries ``[src, dst, neg_dst(, neg_src)]`` at the events' times.
    """

    __slots__ = ("index", "positions", "ended", "events", "neg_src", "neg_dst", "plan")

    def __init__(self, index, positions, ended, events, neg_src, neg_dst, plan):
        self.index, self.positions, self.ended = index, positions, ended
        self.events, self.neg_src, self.neg_dst, self.plan = events, neg_src, neg_dst, plan

    def layout(self, k: int = 0) -> QueryLayout:
        """Where the step's queries sit (``k``: ranking candidates per event after them)."""
        return QueryLayout(len(self), self.neg_dst is not None, self.neg_src is not None, k)

    def __len__(self) -> int:
        return int(self.positions.size)

    def tensors(self, device) -> Tuple[torch.Tensor, ...]:
        return tuple(torch.from_numpy(x).to(device) for x in self.events)


_DONE = object()

#: the interpreter's switch interval (seconds) while a plan's stages run in threads of their own
#: (None: leave Python's, 5 ms): a stage leaves the lock for each kernel and waits for it after,
#: and the thread that took it meanwhile keeps it until it blocks or the interval ends
SWITCH_INTERVAL: Optional[float] = 2e-4


class PlanLoader:
    """Iterate the steps of ``batches`` over ``stream`` with their plans.

    Parameters
    ----------
    model : StatefulModel
        Whose node state the plans advance (and whose memory they read, with staleness).
    stream : EventStream
    batches : iterable of (positions, pass_ended)
        :class:`~speed.train.step.engine.Batches` or :class:`~speed.train.step.engine.CyclingBatches`.
    negatives : callable, optional
        ``negatives(n) -> (neg_src or None, neg_dst)``, int64 (n,): drawn in step order.
    pipeline : bool or int
        Build the next plans in background threads while the current step computes: ``True``
        or 1, one thread; ``n > 1``, the plan's stages (:func:`~speed.train.state.batch_plan.stage_groups`)
        each in a thread of its own, up to ``n``, each on another batch (where the model's plans
        have stages, and numba's threading layer runs kernels from several threads at once).
    staleness : int
        With the pipeline, read memory rows when planning, up to this many batches ahead.
    barrier : callable, optional
        ``barrier(step_index, pass_ended) -> bool``: after such a step the thread waits until
        the consumer is done with it (the state must then be exactly the step's).
    on_pass_start : callable, optional
        Called (in the planning thread, with the thread waiting on nothing) before planning the
        first batch of every pass but the first: resets the sampler and the store.
    extra_queries : callable, optional
        ``extra_queries(positions, t) -> (nodes, times)``: more queries in each step's plan
        after the negatives (e.g. ranking candidates), seeing what the step's events see.
    push : bool
        Give each batch's events to the neighbour sampler (default); off when the caller gave
        the sampler its graph already.
    observed : callable, optional
        ``observed(positions) -> (src, dst, t, eid)`` or None: events taken in with the step
        besides its own (pending for their endpoints, given to the sampler) but neither queried
        nor scored.  PAC's ``--observe shared``; not for TIGE, whose messages need each event's
        embeddings.
    on_device : bool
        Move each plan to the model's device (default); False keeps it on the host (an
        evaluation that divides its steps, :mod:`speed.train.eval.divided`, cuts it first).
    fix : callable, optional
        ``fix(host_plan, step) -> plan``, run on each plan in the planning thread (``step`` its
        :class:`Step`, without the plan): a captured step's padding and packing
        (:meth:`speed.train.step.captured.CapturedStep.fix`), or a divided evaluation step's
        cut (:meth:`speed.train.eval.divided.DividedStep.cut`); the plan then stays on the host.
    overlap : bool
        Without the pipeline: begin each plan (its first stage, :func:`~speed.train.state.batch_plan.plan_neighbors`)
        as soon as the plan before it is done, before that one's step is handed out, and end it
        when it is asked for.  A sampler sharded among processes then gathers the plan's
        neighbour answers while the step ahead of it computes, and no process waits on the
        others for them afterwards: the ranks met in that step's exchange after posting theirs
        (a divided evaluation, :mod:`speed.train.eval.divided`).  The plans are the same.
    """

    def __init__(self, model, stream: EventStream, batches, negatives: Optional[Callable] = None,
                 pipeline: bool = False, staleness: int = 0, barrier: Optional[Callable[[int, bool], bool]] = None,
                 on_pass_start: Optional[Callable[[], None]] = None, extra_queries: Optional[Callable] = None,
                 push: bool = True, observed: Optional[Callable] = None, on_device: bool = True,
                 fix: Optional[Callable] = None, overlap: bool = False):
        self.model, self.stream, self.batches, self.negatives = model, stream, batches, negatives
        self.pipeline = bool(pipeline)
        self.threads = (max(1, int(pipeline)) if self.pipeline else 0)
        self.staleness = int(staleness)
        if self.staleness and not self.pipeline:
            raise ValueError("staleness needs the pipeline")
        self.barrier = barrier or (lambda index, ended: False)
        self.on_pass_start = on_pass_start
        self.extra_queries = extra_queries
        self.push = bool(push)
        if observed is not None and not model.state.takes_unscored_events:
            raise ValueError("observed events need messages without event values (not TIGE)")
        self.observed = observed
        self.on_device = bool(on_device)
        #: pads each host plan to its fixed shape and packs it for a captured step, in the
        #: planning thread (:meth:`speed.train.step.captured.CapturedStep.fix`); None: no padding
        self.fix = fix
        # (a model without plan stages, EdgeBank, builds each plan whole)
        self.overlap = bool(overlap) and hasattr(model.state, "plan_stages")
        self.device = model.device
        #: seconds spent building plans, by thread (their sum: :attr:`plan_seconds`)
        self._seconds = [0.0]

    @property
    def plan_seconds(self) -> float:
        """Seconds spent building plans, in whichever threads built them (summed)."""
        return float(sum(self._seconds))

    def _make(self, index: int, positions: np.ndarray, ended: bool,
              before_read: Optional[Callable[[int], None]] = None) -> Step:
        t0 = time.perf_counter()
        step, nodes, times, events = self._queries(index, positions, ended)
        plan = self.model.plan(nodes, times, events=events, push=self.push,
                               on_device=self.on_device and self.fix is None)
        step = self._finish(step, plan, before_read)
        self._seconds[0] += time.perf_counter() - t0
        return step

    def _queries(self, index: int, positions: np.ndarray, ended: bool):
        """The step of batch ``positions`` without its plan (its negatives drawn: in step order),
        and what its plan is built from: ``(step, nodes, times, events)``."""
        src, dst, t, eid = self.stream.batch(positions)
        n = positions.size
        neg_src, neg_dst = self.negatives(n) if self.negatives is not None else (None, None)
        nodes = QueryLayout.nodes(src, dst, neg_dst, neg_src)
        times = QueryLayout(n, neg_dst is not None, neg_src is not None).times(t)
        if self.extra_queries is not None:
            more_nodes, more_times = self.extra_queries(positions, t)
            nodes, times = np.concatenate([nodes, more_nodes]), np.concatenate([times, more_times])
        events = (src, dst, t, eid)
        more = self.observed(positions) if self.observed is not None else None
        if more is not None and more[0].size:  # one time-ordered batch of both (ties: the step's own first)
            order = np.argsort(np.concatenate([t, more[2]]), kind="stable")
            events = tuple(np.concatenate([a, b])[order] for a, b in zip(events, more))
        return Step(index, positions, ended, (src, dst, t, eid), neg_src, neg_dst, None), nodes, times, events

    def _draft(self, index: int, positions: np.ndarray, ended: bool):
        """``(step, draft)``: the step of batch ``positions`` without its plan (:meth:`_queries`)
        and its plan's draft, for the plan's stages run one by one."""
        step, nodes, times, events = self._queries(index, positions, ended)
        return step, self.model.state.plan_draft(nodes, times, events, push=self.push)

    def _finish(self, step: Step, plan, before_read: Optional[Callable[[int], None]] = None) -> Step:
        """``step`` with its host ``plan`` padded (``fix``) or moved to the device, and its rows
        read ahead under staleness."""
        if self.fix is not None:
            plan = self.fix(plan, step)
        if self.staleness:
            if before_read is not None:
                before_read(step.index)
            plan.stale = self.model.state.read_ahead(plan)
        step.plan = plan
        return step

    def __iter__(self) -> Iterator[Step]:
        if not self.pipeline and self.overlap:
            yield from self._overlapped()
            return
        if not self.pipeline:
            previous_ended = False
            for index, (positions, ended) in enumerate(self.batches):
                if previous_ended and self.on_pass_start is not None:
                    self.on_pass_start()
                yield self._make(index, positions, ended)
                previous_ended = ended
            return
        yield from self._pipelined()

    def _overlapped(self) -> Iterator[Step]:
        """The steps with each plan begun before the step ahead of it is handed out (``overlap``):
        the state advances in the same order as :meth:`_make`'s, one plan after another, and a
        step after which the state must be the step's own (the end of a pass, a barrier) is
        handed out before the next plan begins."""
        state = self.model.state
        stages = [stage for group in state.plan_stages() for stage in group]

        def begin(index: int, positions: np.ndarray, ended: bool):
            t0 = time.perf_counter()
            step, draft = self._draft(index, positions, ended)
            stages[0](state, draft)
            self._seconds[0] += time.perf_counter() - t0
            return step, draft

        batches = enumerate(self.batches)
        upcoming = next(batches, None)
        begun = begin(upcoming[0], *upcoming[1]) if upcoming is not None else None
        while begun is not None:
            step, draft = begun
            t0 = time.perf_counter()
            for stage in stages[1:]:
                stage(state, draft)
            plan = draft.plan
            if self.on_device and self.fix is None:
                plan = plan.to(self.device)
            step = self._finish(step, plan)
            self._seconds[0] += time.perf_counter() - t0
            upcoming = next(batches, None)
            if upcoming is None:
                yield step
                return
            if step.ended or self.barrier(step.index, step.ended):
                yield step
                if step.ended and self.on_pass_start is not None:
                    self.on_pass_start()
                begun = begin(upcoming[0], *upcoming[1])
            else:
                begun = begin(upcoming[0], *upcoming[1])
                yield step

    def _stages(self) -> list:
        """The groups of plan stages the pipeline's threads run, one a thread (see
        :func:`~speed.train.state.batch_plan.stage_groups`); one group, the whole plan, where
        ``threads`` is 1, the model's plans have no stages, or numba's threading layer cannot
        run kernels from two threads at once."""
        groups = getattr(self.model.state, "plan_stages", None)
        if self.threads < 2 or groups is None or not concurrent_kernels():
            return [None]
        groups = list(groups())
        while len(groups) > self.threads:  # fewer threads: the last groups share one
            groups[-2:] = [groups[-2] + groups[-1]]
        return groups

    def _pipelined(self) -> Iterator[Step]:
        groups = self._stages()
        last = len(groups) - 1
        # a queue after each thread; the last one's holds the steps ready for the consumer
        queues = [queue.Queue(maxsize=1) for _ in range(last)] + [queue.Queue(maxsize=max(1, self.staleness))]
        ready = queues[-1]
        self._seconds = [0.0] * len(groups)
        resume = threading.Event()
        stop = threading.Event()
        finished = threading.Condition()
        done = [0]  # steps the consumer has finished

        def before_read(index: int) -> None:
            # the bound: step `index` may miss the updates of steps index-K .. index-1 only
            with finished:
                finished.wait_for(lambda: done[0] >= index - self.staleness or stop.is_set())

        # the step's thread keeps a core of this process's share; the threads whose stages run
        # parallel kernels (neighbours, pending counts) divide the rest (see for_new_thread)
        same_threads = for_new_thread(leave=1, among=min(2, len(groups)))

        def put(q: "queue.Queue", item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False

        def build(g: int, item):
            """Group ``g``'s stages on ``item``: ``(index, positions, ended)`` into the first,
            ``(step, draft)`` between threads, the step out of the last."""
            if groups[g] is None:  # the whole plan, in one thread
                return self._make(*item, before_read)
            t0 = time.perf_counter()
            if g == 0:
                item = self._draft(*item)
            step, draft = item
            for stage in groups[g]:
                stage(self.model.state, draft)
            if g == last:
                plan = draft.plan
                if self.on_device and self.fix is None:
                    plan = plan.to(self.device)
                item = self._finish(step, plan, before_read)
            self._seconds[g] += time.perf_counter() - t0
            return item

        def first():
            try:
                same_threads()
                previous_ended = False
                for index, (positions, ended) in enumerate(self.batches):
                    if stop.is_set():
                        return
                    if previous_ended and self.on_pass_start is not None:
                        self.on_pass_start()
                    if not put(queues[0], build(0, (index, positions, ended))):
                        return
                    if self.barrier(index, ended):
                        # the state must be exactly this step's: the threads after this one
                        # finish it, the consumer takes it, and only then does this go on
                        resume.wait()
                        resume.clear()
                    previous_ended = ended
                put(queues[0], _DONE)
            except BaseException as exc:  # handed on to the consumer, raised there
                put(queues[0], exc)

        def later(g: int):
            def work():
                try:
                    same_threads()
                    while not stop.is_set():
                        try:
                            item = queues[g - 1].get(timeout=0.05)
                        except queue.Empty:
                            continue
                        if item is _DONE or isinstance(item, BaseException):
                            put(queues[g], item)
                            return
                        if not put(queues[g], build(g, item)):
                            return
                except BaseException as exc:
                    put(queues[g], exc)
            return work

        switch = sys.getswitchinterval()
        if len(groups) > 1 and SWITCH_INTERVAL is not None:
            sys.setswitchinterval(min(switch, SWITCH_INTERVAL))
        threads = [threading.Thread(target=first, name="speed-plan-loader", daemon=True)]
        threads += [threading.Thread(target=later(g), name=f"speed-plan-loader-{g}", daemon=True)
                    for g in range(1, len(groups))]
        for th in threads:
            th.start()
        try:
            while True:
                item = ready.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
                with finished:
                    done[0] = item.index + 1
                    finished.notify()
                if self.barrier(item.index, item.ended):
                    resume.set()
        finally:
            stop.set()
            resume.set()
            with finished:
                finished.notify_all()
            for th in threads:  # each ends once it sees stop (its puts and gets wait 50 ms at most)
                th.join()
            sys.setswitchinterval(switch)
