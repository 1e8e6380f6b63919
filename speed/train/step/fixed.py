"""Fixed shapes: a batch plan padded to sizes that depend on the batch, not on the data.

A plan's tensors (:class:`~speed.train.state.batch_plan.BatchPlan`) have sizes that change from
step to step: the distinct queries, their neighbours' distinct memory keys, the keys, the rows
read, the pending events.  A step captured once and replayed (:mod:`.captured`) needs the same
sizes every time, so each is padded to a bound.  The worst case of a batch (:meth:`Bounds.of`)
is:

=================  ===================================================================
distinct queries   ``Q``, the plan's queries (``3 B`` for sources, destinations, negatives)
neighbour keys     ``Q k`` (at least 1)
batch endpoints    ``2 B``
memory keys        ``Q + Q k + 2 B``, plus one scratch key (the last)
pending events     the memory keys (the last aggregator applies at most one a key)
rows read          the memory keys and two rows per pending event
=================  ===================================================================

A captured run pads to sizes fitted to its plans instead (:class:`FittedBounds`): the worst
case holds every neighbour slot filled and every key with a pending event, which a real batch
is far from, and the padded rows cost the device as much as real ones.

Padding is chosen so that the real rows compute what they compute unpadded:

* a padded query reads key 0 and has no neighbour (its mask is empty, its attention weights 0);
  nothing reads its embedding (``q_inv`` names the real ones only);
* a padded key reads row 0; a padded pending event reads row 0 at time 0 and stores its update
  in the scratch key, which nothing reads;
* a padded row reads node 0 (rows are only read);
* a padded batch endpoint repeats endpoint 0 with its key, so the memory write stores the same
  row twice: the same bits whichever copy lands last.

The gradients of the padded rows are zero (nothing in the loss reads them), so they add exact
zeros to the weights' gradients; a matrix product of another height may still round a real
row differently in its last bit (tested: within 1e-6 of the unpadded step).

Only models whose plans carry nothing else are padded (:func:`unsupported`): the last
aggregator, no DyRep message embedding, no state component (TIGE), no static memory.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Optional

import numpy as np
import torch

from ..state.batch_plan import TENSOR_FIELDS, BatchPlan, place


@dataclass(frozen=True)
class Bounds:
    """The padded sizes of a plan's tensors (see the module docstring): its distinct queries,
    neighbour keys, batch endpoints, memory keys (the scratch key, the last, included), pending
    events and rows read.  :meth:`of` gives the worst case of a plan's batch; :class:`FittedBounds`
    sizes fitted to the plans seen."""

    distinct: int
    nb_keys: int
    endpoints: int
    keys: int
    pending: int
    rows: int

    @classmethod
    def worst(cls, queries: int, events: int, k: int) -> "Bounds":
        """The largest plan of ``queries`` queries, ``events`` events and ``k`` neighbour slots."""
        nb_keys = queries * k
        keys = queries + nb_keys + 2 * events + 1
        return cls(distinct=queries, nb_keys=max(nb_keys, 1),  # (a plan without neighbours holds one, unread)
                   endpoints=2 * events, keys=keys, pending=keys - 1, rows=keys - 1 + 2 * (keys - 1))

    @classmethod
    def of(cls, plan: BatchPlan) -> "Bounds":
        """The worst case of ``plan``'s batch: every size any plan of its queries, events and
        neighbour slots can have."""
        return cls.worst(int(plan.q_inv.shape[0]), int(plan.ev_src.shape[0]), int(plan.nb_mask.shape[1]))

    @classmethod
    def needed(cls, plan: BatchPlan) -> "Bounds":
        """The least sizes that hold ``plan`` (and its scratch key)."""
        return cls(distinct=int(plan.uq_t.shape[0]), nb_keys=max(int(plan.nb_keys.shape[0]), 1),
                   endpoints=int(plan.ob_node.shape[0]), keys=int(plan.key_row.shape[0]) + 1,
                   pending=int(plan.pe_row.shape[0]), rows=int(plan.rows.shape[0]))

    def covers(self, other: "Bounds") -> bool:
        return all(getattr(self, f) >= getattr(other, f) for f in _SIZES)

    def cells(self) -> int:
        """Rows over every size (a measure of the padded step's work)."""
        return sum(getattr(self, f) for f in _SIZES)


_SIZES = tuple(f.name for f in fields(Bounds))


class FittedBounds:
    """Bounds fitted to the plans of a run, one set per batch shape (queries, events, neighbour
    slots): each size is the largest seen times :attr:`HEADROOM`, rounded up to
    :attr:`QUANTUM` rows and never above the worst case; a plan that outgrows any size has
    every size refit, the outgrown one growing by at least :attr:`GROWTH`.  So a run records a
    handful of shapes (geometric growth: a size that starts at s and ends at S is outgrown
    log(S/s)/log(1.5) times at most; 9 growths on the generated 2M-event log), and a step
    computes about what its plans hold rather than the worst case -- on the generated 2M-event
    log at batch 1000 the worst case is several times the real plan (most of a batch's
    neighbour slots and pending events are empty).

    Called by the one thread that plans (the loader's): not thread-safe.
    """

    HEADROOM = 1.25
    GROWTH = 1.5
    QUANTUM = 64

    def __init__(self):
        self._by: dict = {}
        #: times a size grew (each a new shape, recorded after its warm-up)
        self.grown = 0

    def __call__(self, plan: BatchPlan) -> Bounds:
        worst = Bounds.of(plan)
        key = (int(plan.q_inv.shape[0]), int(plan.ev_src.shape[0]), int(plan.nb_mask.shape[1]))
        need = Bounds.needed(plan)
        cur = self._by.get(key)
        if cur is not None and cur.covers(need):
            return cur
        sizes = {}
        for f in _SIZES:
            n, have, cap = getattr(need, f), 0 if cur is None else getattr(cur, f), getattr(worst, f)
            # every size is refit when one is outgrown: they grow together as the graph fills (a
            # size outgrown, n > have, grows by at least GROWTH; the others to n times HEADROOM
            # where that is more), so one new shape serves them all
            want = max(n * self.HEADROOM, have * self.GROWTH) if n > have else max(n * self.HEADROOM, have)
            sizes[f] = min(cap, max(n, -(-int(want) // self.QUANTUM) * self.QUANTUM))
        fitted = Bounds(**sizes)
        if cur is not None:
            self.grown += 1
        self._by[key] = fitted
        return fitted

    def as_dict(self) -> dict:
        """Each batch shape's fitted sizes against its worst case (``metrics.json``)."""
        return {"grown": self.grown,
                "shapes": [{"queries": q, "events": e, "k": k, **b.__dict__,
                            "of_worst_case": round(b.cells() / Bounds.worst(q, e, k).cells(), 4)}
                           for (q, e, k), b in self._by.items()]}


def unsupported(net, state) -> Optional[str]:
    """Why the plans of ``net`` on ``state`` cannot be padded (None: they can)."""
    needs = net.plan_needs()
    if needs.mean:
        return "the mean aggregator (a key applies several pending events)"
    if needs.other_embedding:
        return "DyRep's message embedding (its own queries)"
    if getattr(state, "components", None):
        return "a state component (TIGE's second memory)"
    if net.static is not None:
        return "a static memory"
    return None


#: how each padded field is filled past its real rows: a value, ``FIRST`` (copies of row 0) or
#: ``ARANGE`` (the row indices go on); the bound is a :class:`Bounds` attribute.  The fields not
#: named (the queries' ``q_inv``, the batch's ``ev_*``) keep their sizes.
FIRST, ARANGE, SCRATCH = "first", "arange", "scratch"
PADDING = {
    "uq_t": ("distinct", 0.0), "uq_key": ("distinct", 0), "nb_keys": ("nb_keys", 0), "nb_key": ("distinct", 0),
    "nb_mask": ("distinct", False), "nb_dt": ("distinct", 0.0), "nb_feat": ("distinct", 0.0), "rows": ("rows", 0),
    "key_row": ("keys", 0), "pe_row": ("pending", 0), "pe_other_row": ("pending", 0), "pe_node": ("pending", 0),
    "pe_other": ("pending", 0), "pe_t": ("pending", 0.0), "pe_eid": ("pending", -1), "pe_feat": ("pending", 0.0),
    "agg_entry": ("pending", ARANGE), "agg_local": ("pending", ARANGE), "agg_sel": ("pending", SCRATCH),
    "ob_node": ("endpoints", FIRST), "ob_key": ("endpoints", FIRST), "ob_latest": ("endpoints", FIRST),
}


def pack_padded(plan: BatchPlan, bounds: Optional[Bounds] = None, pin: bool = False):
    """``plan`` (on the host, the last aggregator's: ``agg_identity``) padded to ``bounds``
    (default: its own, :meth:`Bounds.of`), written once, straight into one buffer laid out as
    :func:`~speed.train.state.batch_plan.pack` lays a plan's tensors (page-locked with ``pin``).
    The real rows keep their indices, so every index of the plan stays valid; see the module
    docstring for what the padding reads and writes.

    Returns
    -------
    padded : BatchPlan
        Its tensors are views of the buffer.
    packed : tuple
        ``(buffer, spans, like)`` for :func:`~speed.train.state.batch_plan.unpack` (``like``:
        meta tensors of the padded shapes).
    """
    if not plan.agg_identity:
        raise ValueError("only plans of the last aggregator are padded")
    if plan.dyrep is not None or plan.stale is not None:
        raise ValueError("plans with DyRep's queries or rows read ahead are not padded")
    if plan.ob_node.shape[0] == 0:
        raise ValueError("a padded plan takes a batch in (it has events)")
    b = bounds or Bounds.of(plan)
    # in numpy: a plan's 24 tensors copied and padded take about 50 small operations, each a
    # few times cheaper than torch's dispatch (and the planning thread's time is the step's)
    real = [getattr(plan, name).numpy() for name in TENSOR_FIELDS]
    rows = []
    for name, x in zip(TENSOR_FIELDS, real):
        n = getattr(b, PADDING[name][0]) if name in PADDING else x.shape[0]
        if x.shape[0] > n:
            raise ValueError(f"a plan's {x.shape[0]} rows of {name} exceed their bound {n}")
        rows.append(n)
    like = _like(tuple((n,) + x.shape[1:] for n, x in zip(rows, real)), tuple(x.dtype for x in real))
    buf, spans = place(like, pin)
    raw = buf.numpy()
    views = []
    for name, x, (off, nbytes), n in zip(TENSOR_FIELDS, real, spans, rows):
        v = raw[off:off + nbytes].view(x.dtype).reshape((n,) + x.shape[1:])
        m = x.shape[0]
        v[:m] = x
        if m < n:
            fill = PADDING[name][1]
            if fill == FIRST:
                v[m:] = x[:1]
            elif fill == ARANGE:
                v[m:] = np.arange(m, n)
            elif fill == SCRATCH:
                v[m:] = b.keys - 1
            else:
                v[m:] = fill
        views.append(torch.from_numpy(v))
    padded = BatchPlan(**dict(zip(TENSOR_FIELDS, views)), agg_identity=True)
    return padded, (buf, spans, like)


@lru_cache(maxsize=64)
def _like(shapes: tuple, dtypes: tuple) -> tuple:
    """Meta tensors of these shapes and numpy dtypes (a padded plan's layout; the fitted sizes
    make a run's plans a handful of shapes, so they are made once each)."""
    return tuple(torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype=dt)).dtype, device="meta")
                 for shape, dt in zip(shapes, dtypes))


def pad_plan(plan: BatchPlan, bounds: Optional[Bounds] = None) -> BatchPlan:
    """``plan`` padded to ``bounds`` (:func:`pack_padded`'s plan, in ordinary host memory)."""
    return pack_padded(plan, bounds)[0]
