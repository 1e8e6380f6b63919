"""Evaluation steps replayed from a CUDA graph: the training step's fixed shapes, forward only.

An evaluation step of a world of one (:func:`~speed.train.eval.divided.whole_step`: the key
states, the queries' embeddings, the scores and the batch taken into the state) is a few hundred
small kernels, as a training step is, and a GPU spends most of it waiting for the host to
dispatch them.  With ``--cuda-graph`` a pass's plans are padded to sizes fitted to them
(:class:`~speed.train.step.fixed.FittedBounds`, in the planning thread) and each shape's step is
recorded once and replayed, as the training step is (:mod:`speed.train.step.captured`): the host's
work a step is one copy of the plan and one launch, and the scores stay on the device until the
pass ends.

The padding changes no real row's figures beyond the rounding of matrix products of another
height (tested on the CPU, where the same padded step runs eagerly: the scores within 1e-5 of
the plain pass's, and the state after it).  Passes that rank candidates or collect embeddings
(node classification) keep the eager step.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import torch

from ..state.batch_plan import BatchPlan, unpack
from ..step.captured import CapturedStep, Recorded, eager_aside, record
from ..step.fixed import FittedBounds, pack_padded, unsupported
from .divided import whole_step


class CapturedEval:
    """Evaluation steps of ``model`` replayed from a CUDA graph per plan shape (eagerly, on the
    same padded plans, without a GPU).

    Parameters
    ----------
    model : StatefulModel
    """

    WARMUP, REWARM, KEEP = CapturedStep.WARMUP, CapturedStep.REWARM, CapturedStep.KEEP

    def __init__(self, model):
        self.model = model
        self.device = model.device
        self.graphs: "OrderedDict[tuple, Recorded]" = OrderedDict()
        #: the padded sizes, fitted to the plans seen (used in the planning thread)
        self.bounds = FittedBounds()
        self.seen: Dict[tuple, int] = {}
        self.replays = 0
        self.recorded = 0
        self._pool = None  # one memory pool for every shape's graph (as the training step's)
        #: why recording failed, if it did (the steps then run eagerly on the padded plans)
        self.failed: Optional[str] = None

    @staticmethod
    def why_not(model) -> Optional[str]:
        """Why evaluation steps of ``model`` cannot be captured (None: they can)."""
        why = unsupported(model.net, model.state)
        if why is not None:
            return why
        if model.state.memory_device() != model.device:
            return "the node state is in host memory"
        return None

    def fix(self, plan: BatchPlan) -> BatchPlan:
        """The host plan padded to its fixed shape and packed in one (page-locked) buffer: run by
        the loader, in its thread."""
        plan, plan.packed = pack_padded(plan, self.bounds(plan), pin=self.device.type == "cuda")
        return plan

    def _holds(self) -> Tuple:
        """What a graph reads and writes in place: the node state's buffers and the weights."""
        return self.model.state.buffer_ids() + tuple(p.data_ptr() for p in self.model.net.parameters())

    def run(self, model, plan: BatchPlan, step, score: bool) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """One evaluation step on the padded host plan ``plan`` (from :meth:`fix`), its queries
        laid out by ``step`` (a :class:`~speed.train.model.queries.QueryLayout` without
        candidates); returns the ``(pos, neg)`` logits (None without ``score``), on the device."""
        if model is not self.model:
            raise ValueError("a captured evaluation replays the steps of the model it was made for")
        buf, spans, like = plan.packed
        key = (tuple((tuple(t.shape), t.dtype) for t in like), step.m, step.has_neg_dst, step.has_neg_src,
               bool(score))
        rec = self.graphs.get(key)
        holds = self._holds()
        if rec is None or rec.holds != holds:
            dev_buf = torch.empty(buf.shape, dtype=buf.dtype, device=self.device)
            rec = Recorded(dev_buf, plan.with_device_tensors(unpack(dev_buf, like, spans)), holds, None)
            self.graphs[key] = rec
            while len(self.graphs) > self.KEEP:  # its graph and buffer go (their memory to the pool)
                self.graphs.popitem(last=False)
        self.graphs.move_to_end(key)
        rec.buf.copy_(buf, non_blocking=True)

        def body():
            return whole_step(model, rec.plan, step, score)[:2]

        if self.device.type != "cuda" or self.failed is not None:  # the same step, eagerly, on the same buffer
            return body()
        if rec.graph is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] <= (self.WARMUP if self.recorded == 0 else self.REWARM):
                return eager_aside(self.device, body)
            try:
                rec.graph, rec.out = record(self.device, self._pool, body)
            except Exception as exc:  # noqa: BLE001 -- any failure of recording: evaluate eagerly instead
                self.failed = f"{type(exc).__name__}: {exc}".splitlines()[0]
                warnings.warn(f"--cuda-graph: an evaluation step could not be recorded ({self.failed}); evaluation "
                              "goes on with eager steps on the padded plans", RuntimeWarning, stacklevel=3)
                return body()
            if self._pool is None:
                self._pool = rec.graph.pool()
            self.recorded += 1
        rec.graph.replay()
        self.replays += 1
        return tuple(None if t is None else t.clone() for t in rec.out)

    def metrics(self) -> Dict:
        """Shapes recorded, steps replayed, why recording failed if it did, the fitted sizes."""
        return {"recorded": self.recorded, "replays": self.replays, "failed": self.failed,
                "bounds": self.bounds.as_dict()}
