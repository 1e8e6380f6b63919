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

from typing import Optional, Tuple

import torch

from ..state.batch_plan import BatchPlan
from ..step.captured import ShapeGraphs, eager_aside
from ..step.fixed import unsupported
from .divided import whole_step


class CapturedEval(ShapeGraphs):
    """Evaluation steps of ``model`` replayed from a CUDA graph per plan shape (eagerly, on the
    same padded plans, without a GPU).

    Parameters
    ----------
    model : StatefulModel
    """

    def __init__(self, model):
        super().__init__(model.device)
        self.model = model

    @staticmethod
    def why_not(model) -> Optional[str]:
        """Why evaluation steps of ``model`` cannot be captured (None: they can)."""
        why = unsupported(model.net, model.state)
        if why is not None:
            return why
        if model.state.memory_device() != model.device:
            return "the node state is in host memory"
        return None

    def _holds(self) -> Tuple:
        """What a graph reads and writes in place: the node state's buffers and the weights."""
        return self.model.state.buffer_ids() + tuple(p.data_ptr() for p in self.model.net.parameters())

    def run(self, model, plan: BatchPlan, step, score: bool) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """One evaluation step on the padded host plan ``plan`` (from :meth:`fix`), its queries
        laid out by ``step`` (a :class:`~speed.train.model.queries.QueryLayout` without
        candidates); returns the ``(pos, neg)`` logits (None without ``score``), on the device."""
        if model is not self.model:
            raise ValueError("a captured evaluation replays the steps of the model it was made for")
        key = (self.shape_of(plan), step.m, step.has_neg_dst, step.has_neg_src, bool(score))
        rec = self.entry(plan, key, self._holds())

        def body():
            return whole_step(model, rec.plan, step, score)[:2]

        if self.device.type != "cuda" or self.failed is not None:  # the same step, eagerly, on the same buffer
            return body()
        if rec.graph is None:
            if self.warming(key):
                return eager_aside(self.device, body)
            if not self.record_into(rec, body, "an evaluation step"):
                return body()
        rec.graph.replay()
        self.replays += 1
        return tuple(None if t is None else t.clone() for t in rec.out)
