"""A step's queries, in the one order every run lays them out, and how they are scored.

A step of ``m`` events asks for the embeddings of, in this order::

    [src (m), dst (m), neg_dst (m, when drawn), neg_src (m, when drawn), candidates (m * k), more...]

at the events' times: the events' sources and destinations, the negatives (a destination for
each event, and a source where the protocol draws one; otherwise the event's own source is
the negative pair's), ``k`` ranking candidates per event (each event's ``k`` one after another)
and whatever rows a caller appends after them (an update's replayed interactions).  Training
(:meth:`TemporalGNN.forward`), the evaluator's steps (:mod:`speed.train.eval.divided`, EdgeBank),
the predictor's scoring and the online updater all lay them out and score them through
:class:`QueryLayout`.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import numpy as np


class QueryLayout:
    """Where each group of a step's queries sits (see the module docstring).

    Parameters
    ----------
    m : int
        Events in the step.
    neg_dst, neg_src : bool
        Whether negative destinations, and negative sources, are drawn.
    k : int
        Ranking candidates per event.
    """

    # No __slots__: torch 2.2's dynamo cannot read a property of a slotted object
    # (``QueryLayout.end``) and broke the graph of every compiled forward there (138 graphs a
    # step); without them TemporalGNN.forward traces whole (tests/test_fixed_shapes.py).

    def __init__(self, m: int, neg_dst: bool = True, neg_src: bool = False, k: int = 0):
        if neg_src and not neg_dst:
            raise ValueError("negative sources come with negative destinations")
        self.m, self.has_neg_dst, self.has_neg_src, self.k = int(m), bool(neg_dst), bool(neg_src), int(k)

    @classmethod
    def of_groups(cls, m: int, groups: int, k: int = 0) -> "QueryLayout":
        """The layout of ``groups`` groups of ``m`` (2: the events; 3: and a negative
        destination each; 4: and a negative source each) and ``k`` candidates per event."""
        if not 2 <= groups <= 4:
            raise ValueError(f"a step has 2 to 4 groups of queries, got {groups}")
        return cls(m, neg_dst=groups >= 3, neg_src=groups == 4, k=k)

    def __repr__(self) -> str:
        return f"QueryLayout(m={self.m}, neg_dst={self.has_neg_dst}, neg_src={self.has_neg_src}, k={self.k})"

    @property
    def groups(self) -> int:
        """Groups of ``m`` queries before the candidates."""
        return 2 + self.has_neg_dst + self.has_neg_src

    def _group(self, g: int) -> slice:
        return slice(g * self.m, (g + 1) * self.m)

    @property
    def src(self) -> slice:
        return self._group(0)

    @property
    def dst(self) -> slice:
        return self._group(1)

    @property
    def neg_dst(self) -> slice:
        if not self.has_neg_dst:
            raise ValueError("this step drew no negatives")
        return self._group(2)

    @property
    def neg_src(self) -> slice:
        """The negative pairs' sources: drawn ones, or the events' own."""
        return self._group(3) if self.has_neg_src else self.src

    @property
    def candidates(self) -> slice:
        start = self.groups * self.m
        return slice(start, start + self.m * self.k)

    @property
    def end(self) -> int:
        """Where rows a caller appends begin (the layout's own queries end)."""
        return self.groups * self.m + self.m * self.k

    def share(self, m: int) -> "QueryLayout":
        """The same groups for ``m`` events (a share of this step's, its queries taken at
        :meth:`positions`)."""
        return QueryLayout(m, self.has_neg_dst, self.has_neg_src, self.k)

    def positions(self, lo: int, hi: int) -> np.ndarray:
        """int64 positions among the queries of the events ``[lo, hi)``: theirs in each group of
        ``m``, then their candidates (the queries a share of the events reads)."""
        pos = [g * self.m + np.arange(lo, hi) for g in range(self.groups)]
        if self.k:
            pos.append(self.groups * self.m + np.arange(lo * self.k, hi * self.k))
        return np.concatenate(pos)

    # ------------------------------------------------------------------ building
    @staticmethod
    def nodes(src: np.ndarray, dst: np.ndarray, neg_dst: Optional[np.ndarray] = None,
              neg_src: Optional[np.ndarray] = None, candidates: Optional[np.ndarray] = None) -> np.ndarray:
        """The queries' node ids in layout order (``candidates``: (m, k) or flat, event by event)."""
        if neg_src is not None and neg_dst is None:
            raise ValueError("negative sources come with negative destinations")
        groups = [src, dst] + [g for g in (neg_dst, neg_src) if g is not None]
        if candidates is not None:
            groups.append(np.asarray(candidates).reshape(-1))
        return np.concatenate(groups)

    def times(self, t: np.ndarray) -> np.ndarray:
        """float64 (end,): each query's time, its event's."""
        t = np.asarray(t, dtype=np.float64)
        parts = [np.tile(t, self.groups)]
        if self.k:
            parts.append(np.repeat(t, self.k))
        return np.concatenate(parts)

    def after_events(self, t: np.ndarray, neg_dst: Optional[np.ndarray] = None, neg_src: Optional[np.ndarray] = None,
                     candidates: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """``(nodes, times)`` of the queries after the events' own ``[src, dst]`` (a step that
        places the events first itself: :meth:`StatefulModel.step_events`)."""
        empty = np.empty(0, dtype=np.int64)
        nodes = QueryLayout.nodes(empty, empty, neg_dst, neg_src, candidates)
        return nodes, self.times(t)[2 * self.m:]

    # ------------------------------------------------------------------ scoring
    def score(self, score: Callable, z, pairs=None, candidates=None, which: Sequence[str] = ("pos", "neg", "cand")
              ) -> Tuple:
        """``(pos, neg, cand)`` logits from the queries' embeddings ``z`` (rows in layout order):
        the events' pairs (m,), the negative pairs' (m,) when drawn, and each event against its
        candidates (m, k) when there are any; None where absent or not in ``which``.

        ``score(z_src, z_dst[, layout])`` is the decoder (``TemporalGNN.score``, EdgeBank's);
        ``pairs`` and ``candidates`` are the row layouts it is given for the pairs and the
        candidates (:class:`~speed.train.model.network.RowLayout`; None: not passed)."""
        def call(a, b, layout):
            return score(a, b) if layout is None else score(a, b, layout)

        rest = z.shape[0] - self.end
        if rest < 0:
            raise ValueError(f"{self} needs {self.end} embeddings, got {z.shape[0]}")
        # one split, not a slice per group: its backward is one cat, where each slice's pads
        # its gradient to the whole of z and the engine adds the padded copies
        parts = z.split([self.m] * self.groups + [self.m * self.k, rest])
        z_src = parts[0]
        pos = call(z_src, parts[1], pairs) if "pos" in which else None
        neg = None
        if self.has_neg_dst and "neg" in which:
            neg = call(parts[3] if self.has_neg_src else z_src, parts[2], pairs)
        cand = None
        if self.k and "cand" in which:
            cand = call(z_src.repeat_interleave(self.k, dim=0), parts[self.groups], candidates).reshape(self.m, self.k)
        return pos, neg, cand
