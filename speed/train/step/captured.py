"""A training step captured once per shape and replayed: one CUDA graph a step.

A GPU step of a small temporal model is a few hundred small kernels; dispatching them costs the
host more than the device spends running them (on an H100, TGN at batch 200: a 9.2 ms step whose
kernels keep the device busy 0.8 ms).  With the plan padded to fixed shapes (:mod:`.fixed`), the
whole step -- the memory rows read, the forward pass, the loss, the state writes, the backward
pass and the optimiser step (:class:`~speed.train.step.optim.FlatAdam`'s fused Adam over one
flat buffer) -- has the same tensors every time, so it is recorded once as a CUDA graph
(``torch.cuda.graphs``) and replayed: the host's work a step is one copy of the plan into the
graph's input buffer and one launch.

Why ``torch.cuda.graphs`` and not ``torch.compile(mode="reduce-overhead")``: the step's state
writes and optimiser run in place on buffers the graph must keep (the node memory, the flat
weights), which is what a hand-placed graph holds by construction; compiling first costs a
minute a shape, and graph breaks in the plan's dataclasses would split the graph.

The plan reaches the graph in one copy: the loader's thread pads it and lays its tensors end to
end in one page-locked buffer (:meth:`CapturedStep.fix`), which is copied into the graph's
input buffer without the host waiting.

Where no GPU is present the same code runs the step eagerly on the same input buffer (no graph):
what the tests on a CPU check.  A step is recorded after :attr:`CapturedStep.WARMUP` eager steps
of its shape (CUDA's libraries set their workspaces up in those; :attr:`CapturedStep.REWARM`
for the shapes after the first), and recorded again when a
buffer it holds is replaced (the memory resized, the weights reloaded) or the learning rate
changes.

Under PAC (``reduce``) there is no DDP wrapper to average the gradients inside the backward
pass: the step is recorded up to its gradients, the optimiser step in a graph of its own (one
for every shape: it reads only the flat buffers), and between the two replays one collective
averages the flat gradient buffer over the ranks in place.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import torch

from ..state.batch_plan import BatchPlan, unpack
from .fixed import FittedBounds, pack_padded, unsupported
from .losses import link_loss


def eager_aside(device: torch.device, body):
    """``body()`` eagerly on a side stream, the current one waiting for it (what torch's graphs
    ask of the steps before a capture: CUDA's libraries set their workspaces up there)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        out = body()
    torch.cuda.current_stream(device).wait_stream(side)
    return out


def record(device: torch.device, pool, body):
    """``body()`` recorded as a CUDA graph into the memory pool ``pool`` (None: a new one);
    recording runs nothing (the caller replays).  Returns ``(graph, what body returned)``, the
    latter tensors the replays write; raises what recording raised."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize(device)
    # thread_local: the planning thread's page-locked allocations may go on meanwhile
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        out = body()
    return graph, out


class Recorded:
    """One shape's graph, its input buffer, the buffers it was recorded on and what its replays
    write (``out``)."""

    def __init__(self, buf: torch.Tensor, plan: BatchPlan, holds: Tuple, lr: float):
        self.buf = buf
        self.plan = plan  # views of buf: the graph's inputs
        self.holds = holds
        self.lr = lr
        self.graph = None
        self.out = None  # the tensors the replays write (a training step's: its loss)


class ShapeGraphs:
    """One CUDA graph per plan shape, shared by the training step (:class:`CapturedStep`) and
    evaluation (:class:`~speed.train.eval.captured.CapturedEval`): the fitted sizes plans are
    padded to, each shape's input buffer and graph (the least recently replayed let go past
    :attr:`KEEP`), the eager steps before a shape is recorded, and one memory pool for all.

    Parameters
    ----------
    device : torch.device
    """

    #: eager steps of the first shape before it is recorded (CUDA's libraries set up their
    #: handles and workspaces in them)
    WARMUP = 3
    #: eager steps of each later shape (the fitted bounds grow a few times early in a run): the
    #: libraries are set up by then, and every eager step is a step not replayed
    REWARM = 1
    #: graphs kept (the least recently replayed is let go): an epoch's full batches and its
    #: last, smaller one; a shape outgrown by the fitted bounds is not replayed again
    KEEP = 2

    def __init__(self, device: torch.device):
        self.device = device
        self.graphs: "OrderedDict[tuple, Recorded]" = OrderedDict()
        #: the padded sizes, fitted to the plans seen (used in the planning thread)
        self.bounds = FittedBounds()
        self.seen: Dict[tuple, int] = {}
        self.replays = 0
        self.recorded = 0
        #: one memory pool for every shape's graph: a graph's intermediates are dead once it has
        #: replayed, so the next shape's recording reuses them, and a let-go graph's return to it
        self._pool = None
        #: why recording failed, if it did (the steps then run eagerly on the padded plans)
        self.failed: Optional[str] = None

    def fix(self, plan: BatchPlan, step=None) -> BatchPlan:
        """The host plan padded to its fixed shape, its tensors packed in one (page-locked)
        buffer (``plan.packed``): run by the loader, in its thread (``step``, the loader's, is
        not needed)."""
        plan, plan.packed = pack_padded(plan, self.bounds(plan), pin=self.device.type == "cuda")
        return plan

    @staticmethod
    def shape_of(plan: BatchPlan) -> tuple:
        """The shapes and dtypes of a padded plan's tensors."""
        return tuple((tuple(t.shape), t.dtype) for t in plan.packed[2])

    def entry(self, plan: BatchPlan, key: tuple, holds: Tuple, lr: Optional[float] = None) -> Recorded:
        """The graph entry of shape ``key`` with ``plan`` copied into its input buffer (without
        the host waiting); a new one where there is none or its buffers (``holds``) or learning
        rate changed."""
        buf, spans, like = plan.packed
        rec = self.graphs.get(key)
        if rec is None or rec.holds != holds or rec.lr != lr:
            dev_buf = torch.empty(buf.shape, dtype=buf.dtype, device=self.device)
            rec = Recorded(dev_buf, plan.with_device_tensors(unpack(dev_buf, like, spans)), holds, lr)
            self.graphs[key] = rec
            while len(self.graphs) > self.KEEP:  # its graph and input buffer go (their memory to the pool)
                self.graphs.popitem(last=False)
        self.graphs.move_to_end(key)
        rec.buf.copy_(buf, non_blocking=True)
        return rec

    def warming(self, key: tuple) -> bool:
        """Whether this step of the unrecorded shape ``key`` runs eagerly first (its warm-up)."""
        self.seen[key] = self.seen.get(key, 0) + 1
        return self.seen[key] <= (self.WARMUP if self.recorded == 0 else self.REWARM)

    def record_into(self, rec: Recorded, body, what: str) -> bool:
        """Record ``body`` as ``rec``'s graph (its outputs ``rec.out``).  Where recording fails,
        say why once (``what`` failed) and return False: the steps go on eagerly."""
        try:
            rec.graph, rec.out = record(self.device, self._pool, body)
        except Exception as exc:  # noqa: BLE001 -- any failure of recording: step eagerly instead
            self.failed = f"{type(exc).__name__}: {exc}".splitlines()[0]
            warnings.warn(f"--cuda-graph: {what} could not be recorded ({self.failed}); it goes on with eager "
                          "steps on the padded plans", RuntimeWarning, stacklevel=4)
            return False
        if self._pool is None:
            self._pool = rec.graph.pool()
        self.recorded += 1
        return True

    def metrics(self) -> Dict:
        """What ``metrics.json`` records: shapes recorded, steps replayed, why recording failed
        if it did (the steps then ran eagerly), the eager steps before each shape's recording,
        and the fitted sizes."""
        return {"recorded": self.recorded, "replays": self.replays, "failed": self.failed, "warmup": self.WARMUP,
                "rewarm": self.REWARM, "bounds": self.bounds.as_dict()}


class CapturedStep(ShapeGraphs):
    """Training steps of ``model`` replayed from a CUDA graph per plan shape.

    Parameters
    ----------
    model : StatefulModel
    optimizer : FlatAdam
    forward : callable
        The forward pass (``model.net``).
    reduce : callable, optional
        ``reduce(flat_grad)``: averages the flat gradient buffer over PAC's ranks, in place, one
        collective between the step's backward pass and its optimiser step (then recorded as two
        graphs: the step's, per shape, and the optimiser's, one for every shape, with the
        collective between their replays).  None: this process alone.
    """

    def __init__(self, model, optimizer, forward, reduce=None):
        super().__init__(model.device)
        self.model, self.optimizer, self.forward = model, optimizer, forward
        self.reduce = reduce
        #: the optimiser step's own graph, with ``reduce`` (one for every shape): its graph, and
        #: the buffers and learning rate it was recorded on
        self._opt_graph = None
        self._opt_holds: Optional[Tuple] = None
        self._opt_failed: Optional[str] = None

    def metrics(self) -> Dict:
        """:meth:`ShapeGraphs.metrics`, and under PAC whether the optimiser step's own graph was
        recorded."""
        return {**super().metrics(),
                **({"optimizer_graph": self._opt_graph is not None, "optimizer_failed": self._opt_failed}
                   if self.reduce is not None else {})}

    @staticmethod
    def why_not(model, optimizer, config=None) -> Optional[str]:
        """Why steps of ``model`` with ``optimizer`` cannot be captured (None: they can)."""
        from .optim import FlatAdam

        why = unsupported(model.net, model.state)
        if why is not None:
            return why
        if not isinstance(optimizer, FlatAdam):
            return "its optimiser is not one flat Adam"
        if model.state.memory_device() != model.device:
            # a graph replays the copies of host rows it recorded, not the gathers that filled them
            return "the node state is in host memory (--state-device device keeps it on the GPU)"
        if config is not None and config.deterministic:
            return "--deterministic (the eager step is its path)"
        if config is not None and config.staleness:
            return "--staleness (rows read ahead)"
        return None

    # ------------------------------------------------------------------ the step
    def _key(self, plan: BatchPlan) -> tuple:
        return self.shape_of(plan)

    def _holds(self) -> Tuple:
        """The buffers a graph reads and writes in place: when one is replaced, record again."""
        return self.model.state.buffer_ids() + (self.optimizer.flat.data_ptr(), self.optimizer.flat_grad.data_ptr())

    def _body(self, plan: BatchPlan, n: int) -> torch.Tensor:
        """The step on the device plan ``plan`` (what is recorded); with ``reduce``, up to the
        gradients (the collective and the optimiser step follow, :meth:`_update`)."""
        model, opt = self.model, self.optimizer
        opt.zero_grad()
        pos, neg, z, states, lasts = self.forward(plan, *model.inputs(plan), n)
        loss = link_loss(pos, neg)
        model.absorb(plan, states, lasts, z)  # stored states come from the weights of this loss
        loss.backward()
        if self.reduce is None:
            opt.step()
        return loss.detach()

    def _update(self) -> None:
        """With ``reduce``: the ranks' gradients averaged, then the optimiser step (eagerly)."""
        self.reduce(self.optimizer.flat_grad)
        self.optimizer.step()

    def _eager(self, plan: BatchPlan, n: int) -> torch.Tensor:
        loss = self._body(plan, n)
        if self.reduce is not None:
            self._update()
        return loss

    def run(self, plan: BatchPlan, n: int) -> torch.Tensor:
        """One training step of ``n`` events on the fixed host plan ``plan`` (from :meth:`fix`);
        returns its loss, on the device."""
        key = self._key(plan)
        lr = self.optimizer.param_groups[0]["lr"]
        rec = self.entry(plan, key, self._holds(), lr)
        if self.device.type != "cuda" or self.failed is not None:  # the same step, eagerly, on the same buffer
            return self._eager(rec.plan, n)
        if rec.graph is None:
            if self.warming(key):
                return eager_aside(self.device, lambda: self._eager(rec.plan, n))
            if not self._record(rec, n):
                return self._eager(rec.plan, n)
        if self.reduce is not None and self._opt_holds != (self._holds(), lr) and self._opt_failed is None:
            self._record_update(lr)
        rec.graph.replay()
        if self.reduce is None:
            self.optimizer.replayed()
        else:  # the collective between the two graphs, on the same stream
            self.reduce(self.optimizer.flat_grad)
            if self._opt_graph is not None:
                self._opt_graph.replay()
                self.optimizer.replayed()
            else:
                self.optimizer.step()
        self.replays += 1
        return rec.out.clone()

    def _record(self, rec: Recorded, n: int) -> bool:
        """Record the step on ``rec``'s buffers (recording runs nothing: the caller replays).
        Where recording fails, say why once and return False: the run goes on eagerly."""
        opt = self.optimizer
        steps = opt.steps  # recording calls the optimiser's step without running it
        opt.capturable(True)
        try:
            return self.record_into(rec, lambda: self._body(rec.plan, n), "the training step")
        finally:
            opt.steps = steps

    def _record_update(self, lr: float) -> bool:
        """Record the optimiser step alone (with ``reduce``: one graph for every shape, on the
        flat buffers, replayed after the ranks' gradients are averaged).  False where recording
        fails: the optimiser then steps eagerly."""
        opt = self.optimizer
        steps = opt.steps
        opt.capturable(True)
        try:
            graph, _ = record(self.device, self._pool, opt.step)
        except Exception as exc:  # noqa: BLE001 -- the step's graph replays; the optimiser steps eagerly
            self._opt_failed = f"{type(exc).__name__}: {exc}".splitlines()[0]
            warnings.warn(f"--cuda-graph: the optimiser step could not be recorded ({self._opt_failed}); it runs "
                          "eagerly after each replay", RuntimeWarning, stacklevel=3)
            self._opt_graph, self._opt_holds = None, None
            return False
        finally:
            opt.steps = steps
        self._opt_graph, self._opt_holds = graph, (self._holds(), lr)
        return True
