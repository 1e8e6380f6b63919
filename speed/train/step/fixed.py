"""Fixed shapes: a batch plan padded to sizes that depend on the batch, not on the data.

A plan's tensors (:class:`~speed.train.state.batch_plan.BatchPlan`) have sizes that change from
step to step: the distinct queries, their neighbours' distinct memory keys, the keys, the rows
read, the pending events.  A step captured once and replayed (:mod:`.captured`) needs the same
sizes every time, so each is padded to its bound:

=================  ===================================================================
distinct queries   ``Q``, the plan's queries (``3 B`` for sources, destinations, negatives)
neighbour keys     ``Q k`` (at least 1)
batch endpoints    ``2 B``
memory keys        ``Q + Q k + 2 B``, plus one scratch key (the last)
pending events     the memory keys (the last aggregator applies at most one a key)
rows read          the memory keys and two rows per pending event
=================  ===================================================================

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

from dataclasses import dataclass
from typing import Optional

import torch

from ..state.batch_plan import BatchPlan


@dataclass(frozen=True)
class Bounds:
    """The padded sizes of a plan of ``queries`` queries, ``events`` events and ``k`` neighbour
    slots (see the module docstring)."""

    queries: int
    events: int
    k: int

    @property
    def distinct(self) -> int:
        return self.queries

    @property
    def nb_keys(self) -> int:
        return max(self.queries * self.k, 1)  # (a plan without neighbours holds one, unread)

    @property
    def endpoints(self) -> int:
        return 2 * self.events

    @property
    def keys(self) -> int:
        """Memory keys, the scratch key (the last) included."""
        return self.distinct + self.queries * self.k + self.endpoints + 1

    @property
    def pending(self) -> int:
        return self.keys - 1

    @property
    def rows(self) -> int:
        return self.keys - 1 + 2 * self.pending

    @classmethod
    def of(cls, plan: BatchPlan) -> "Bounds":
        return cls(int(plan.q_inv.shape[0]), int(plan.ev_src.shape[0]), int(plan.nb_mask.shape[1]))


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


def _pad(x: torch.Tensor, n: int, value=0) -> torch.Tensor:
    """``x`` with rows appended up to ``n`` (each ``value``, or a copy of row ``value`` when
    ``value`` is the string ``"first"``)."""
    extra = n - x.shape[0]
    if extra < 0:
        raise ValueError(f"a plan's {x.shape[0]} rows exceed their bound {n}")
    if extra == 0:
        return x
    if isinstance(value, str):
        fill = x[:1].expand(extra, *x.shape[1:])
    else:
        fill = x.new_full((extra,) + tuple(x.shape[1:]), value)
    return torch.cat([x, fill])


def pad_plan(plan: BatchPlan, bounds: Optional[Bounds] = None) -> BatchPlan:
    """``plan`` (on the host, the last aggregator's: ``agg_identity``) padded to ``bounds``
    (default: its own, :meth:`Bounds.of`).  The real rows keep their indices, so every index of
    the plan stays valid; see the module docstring for what the padding reads and writes."""
    if not plan.agg_identity:
        raise ValueError("only plans of the last aggregator are padded")
    if plan.dyrep is not None or plan.stale is not None:
        raise ValueError("plans with DyRep's queries or rows read ahead are not padded")
    b = bounds or Bounds.of(plan)
    if plan.ob_node.shape[0] == 0:
        raise ValueError("a padded plan takes a batch in (it has events)")
    if plan.uq_t.shape[0] > b.distinct:
        raise ValueError(f"a plan's {plan.uq_t.shape[0]} distinct queries exceed their bound {b.distinct}")
    scratch = b.keys - 1
    return BatchPlan(
        q_inv=plan.q_inv,
        uq_t=_pad(plan.uq_t, b.distinct, 0.0),
        uq_key=_pad(plan.uq_key, b.distinct, 0),
        nb_keys=_pad(plan.nb_keys, b.nb_keys, 0),
        nb_key=_pad(plan.nb_key, b.distinct, 0),
        nb_mask=_pad(plan.nb_mask, b.distinct, False),
        nb_dt=_pad(plan.nb_dt, b.distinct, 0.0),
        nb_feat=_pad(plan.nb_feat, b.distinct, 0.0),
        rows=_pad(plan.rows, b.rows, 0),
        key_row=_pad(plan.key_row, b.keys, 0),
        pe_row=_pad(plan.pe_row, b.pending, 0),
        pe_other_row=_pad(plan.pe_other_row, b.pending, 0),
        pe_node=_pad(plan.pe_node, b.pending, 0),
        pe_other=_pad(plan.pe_other, b.pending, 0),
        pe_t=_pad(plan.pe_t, b.pending, 0.0),
        pe_eid=_pad(plan.pe_eid, b.pending, -1),
        pe_feat=_pad(plan.pe_feat, b.pending, 0.0),
        agg_entry=torch.arange(b.pending, dtype=torch.long),
        agg_local=torch.arange(b.pending, dtype=torch.long),
        agg_sel=_pad(plan.agg_sel, b.pending, scratch),
        ob_node=_pad(plan.ob_node, b.endpoints, "first"),
        ob_key=_pad(plan.ob_key, b.endpoints, "first"),
        ob_latest=_pad(plan.ob_latest, b.endpoints, "first"),
        ev_eid=plan.ev_eid, ev_src=plan.ev_src, ev_dst=plan.ev_dst,
        agg_identity=True)
