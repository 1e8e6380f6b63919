"""Batch plans: the host work of a step, done before the step and apart from the model's weights.

A model computes embeddings for *queries*, ``(node, time)`` pairs (a batch's sources,
destinations and negatives at the events' times).  Everything that does not depend on the
weights or on the stored memory is planned here, on the host, in numpy and numba:

* the distinct queries (two queries of one node at one time see the same memory and the same
  neighbours, so their embeddings are equal and are computed once);
* their recent neighbours (:class:`~speed.train.state.sampler.RecentNeighborSampler`);
* the memory *keys*: a node's memory as seen at time ``t`` is its stored memory with its
  pending events before ``t`` applied (:mod:`speed.train.state.store`), so it is determined by the
  node and how many of its pending events are earlier -- one key per distinct pair;
* the pending events those keys apply, each once, with their edge features;
* for the batch's own events, the keys their endpoints store (the memory at the batch's last
  time) and the update of the sampler and the pending store.

:func:`build_plan` makes a :class:`BatchPlan`; :meth:`TemporalGNN.compute` reads the memory
rows it names and runs the modules.  A plan can be built ahead of its step, in another thread
(:mod:`speed.train.step.loader`), which is how host work overlaps the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Tuple

import numpy as np
import torch

from ._kernels import unique_first_inverse


@dataclass(frozen=True)
class PlanNeeds:
    """What a model's plans must gather, declared by the model
    (:meth:`~speed.train.model.network.TemporalGNN.plan_needs`).

    Attributes
    ----------
    neighbors : bool
        The embedding reads recent neighbours (graph attention).
    mean : bool
        A key applies all its pending events (the mean aggregator), not only the latest.
    other_embedding : bool
        A message carries its other endpoint as a graph-attention embedding (DyRep).
    msg_dim : int
        Edge features per event.
    """

    neighbors: bool
    mean: bool
    other_embedding: bool
    msg_dim: int


@dataclass
class DyRepPlan:
    """DyRep's messages carry the other endpoint as a graph-attention embedding at the message's
    time, from stored memories: one query per distinct ``(other, t)`` of the pending events.

    Attributes
    ----------
    inv : int64 (P,)
        Each pending event's query.
    own_row : int64 (D,)
        The queried node's row in ``BatchPlan.rows``.
    t : float64 (D,)
    nb_row : int64 (D, k)
        Each neighbour's row in ``BatchPlan.rows`` (0 in empty slots).
    nb_mask : bool (D, k)
    nb_dt : float64 (D, k)
    nb_feat : float32 (D, k, msg_dim)
    """

    inv: torch.Tensor
    own_row: torch.Tensor
    t: torch.Tensor
    nb_row: torch.Tensor
    nb_mask: torch.Tensor
    nb_dt: torch.Tensor
    nb_feat: torch.Tensor
    orig: Optional[object] = None  # each query's index in the whole step's (a divided step's part; array or RowLayout)

    def to(self, device, non_blocking: bool = False) -> "DyRepPlan":
        return DyRepPlan(**{f.name: (getattr(self, f.name).to(device, non_blocking=non_blocking) if f.name != "orig"
                                     else self.orig) for f in fields(self)})


@dataclass
class BatchPlan:
    """What one step computes, minus the memory rows (all tensors; see the module docstring).

    Attributes
    ----------
    q_inv : int64 (Q,)
        Each query's distinct query.
    uq_t : float64 (m,)
        Time of each distinct query.
    uq_key : int64 (m,)
        The memory key of each distinct query's own node.
    nb_keys : int64 (u,)
        The distinct memory keys of the neighbours.
    nb_key : int64 (m, k)
        Each neighbour's memory key, as a position in ``nb_keys`` (0 in empty slots); empty
        without neighbours.
    nb_mask : bool (m, k)
    nb_dt : float64 (m, k)
        Query time minus the neighbour event's time (0 in empty slots).
    nb_feat : float32 (m, k, msg_dim)
    rows : int64 (R,)
        Node ids whose stored memory the step reads.
    key_row : int64 (r,)
        Each key's node, as a position in ``rows``.
    pe_row : int64 (P,), pe_other_row : int64 (P,)
        The pending events' node and other endpoint, as positions in ``rows``.
    pe_node : int64 (P,), pe_other : int64 (P,)
        The same as node ids (TIGE reads its second memory by id).
    pe_t : float64 (P,)
    pe_eid : int64 (P,)
    pe_feat : float32 (P, msg_dim)
    agg_entry : int64 (L,), agg_local : int64 (L,), agg_sel : int64 (K,)
        Which pending events each key applies: ``agg_sel`` are the keys that apply any (the
        others keep their stored state), and member ``l`` is pending event ``agg_entry[l]`` of key
        ``agg_sel[agg_local[l]]``: for the ``last`` aggregator each key's latest one, for
        ``mean`` all of them.
    ob_node : int64 (n,)
        The batch's distinct endpoints (observed after the step).
    ob_key : int64 (n,)
        Their memory at the batch's last time: what they store.
    ob_latest : int64 (n,)
        The query row of each endpoint's latest event in the batch.
    ev_eid : int64 (B,), ev_src : int64 (B,), ev_dst : int64 (B,)
        The batch's events (TIGE keeps the values their messages carry).
    dyrep : DyRepPlan, optional
    """

    q_inv: torch.Tensor
    uq_t: torch.Tensor
    uq_key: torch.Tensor
    nb_keys: torch.Tensor
    nb_key: torch.Tensor
    nb_mask: torch.Tensor
    nb_dt: torch.Tensor
    nb_feat: torch.Tensor
    rows: torch.Tensor
    key_row: torch.Tensor
    pe_row: torch.Tensor
    pe_other_row: torch.Tensor
    pe_node: torch.Tensor
    pe_other: torch.Tensor
    pe_t: torch.Tensor
    pe_eid: torch.Tensor
    pe_feat: torch.Tensor
    agg_entry: torch.Tensor
    agg_local: torch.Tensor
    agg_sel: torch.Tensor
    ob_node: torch.Tensor
    ob_key: torch.Tensor
    ob_latest: torch.Tensor
    ev_eid: torch.Tensor
    ev_src: torch.Tensor
    ev_dst: torch.Tensor
    dyrep: Optional[DyRepPlan] = None
    stale: Optional[Tuple] = None  # memory rows read ahead (staleness > 0), see speed.train.step.loader
    #: each key applies exactly one pending event and the pending events are in key order
    #: (``agg_entry`` is ``arange``): the last aggregator, which then needs no gather
    agg_identity: bool = False
    #: a part of a whole step's plan (:mod:`speed.train.eval.divided`): each pending event's,
    #: updated key's and row's index in the whole plan (int64 arrays, or their RowLayouts);
    #: None: the whole plan
    orig_pe: Optional[object] = None
    orig_sel: Optional[object] = None
    orig_rows: Optional[object] = None
    #: the padded plan's tensors in one page-locked buffer, ``(buffer, spans, tensors)``, for a
    #: captured step (:mod:`speed.train.step.captured`); None otherwise
    packed: Optional[tuple] = None

    @property
    def num_keys(self) -> int:
        return int(self.key_row.shape[0])

    def to(self, device, non_blocking: bool = False) -> "BatchPlan":
        """The plan on ``device``.  To a GPU its tensors travel in one copy from page-locked
        memory that the host does not wait for (:func:`to_device`): a copy per tensor from
        pageable memory would be about 27 copies a step, each one waiting for the device's
        queue to drain."""
        device = torch.device(device)
        if device.type == "cpu":  # plans are built on the host
            return self
        return self.with_device_tensors(to_device(self.device_tensors(), device))

    def _device_names(self):
        names = [f.name for f in fields(self) if f.name not in _HOST_FIELDS and getattr(self, f.name) is not None]
        dy = [f.name for f in fields(DyRepPlan) if f.name != "orig"] if self.dyrep is not None else []
        return names, dy

    def device_tensors(self) -> list:
        """The plan's tensors that go to a device, in a fixed order (:meth:`with_device_tensors`
        takes them back, moved), so one copy can carry them beside others."""
        names, dy = self._device_names()
        return [getattr(self, n) for n in names] + [getattr(self.dyrep, n) for n in dy]

    def with_device_tensors(self, tensors) -> "BatchPlan":
        """This plan with :meth:`device_tensors` replaced by ``tensors`` (the same order)."""
        names, dy = self._device_names()
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(zip(names, tensors[:len(names)]))
        if dy:
            out["dyrep"] = DyRepPlan(**dict(zip(dy, tensors[len(names):])), orig=self.dyrep.orig)
        return BatchPlan(**out)


_HOST_FIELDS = ("stale", "agg_identity", "dyrep", "orig_pe", "orig_sel", "orig_rows", "packed")  # not device tensors
#: a plan's tensor fields, in the order :meth:`BatchPlan.device_tensors` gives them (all of them set)
TENSOR_FIELDS = tuple(f.name for f in fields(BatchPlan) if f.name not in _HOST_FIELDS)
_ALIGN = 64  # bytes between the tensors packed into one copy (vectorised kernels' alignment)


def to_device(tensors, device: torch.device):
    """Host tensors to ``device`` in one copy: packed into one page-locked buffer, copied without
    the host waiting (the device's stream orders the copy before the kernels that read it, and
    torch's page-locked allocator keeps the buffer until the copy is done), and cut there into
    views of the original shapes and dtypes.

    Parameters
    ----------
    tensors : list of host tensors
    device : torch.device
        A CUDA device (elsewhere each tensor is moved on its own).

    Returns
    -------
    list of tensors on ``device``
    """
    if device.type != "cuda":
        return [t.to(device) for t in tensors]
    host, spans = pack(tensors, pin=True)
    return unpack(host.to(device, non_blocking=True), tensors, spans)


def place(tensors, pin: bool = False):
    """An empty uint8 buffer (page-locked with ``pin``) for ``tensors`` laid end to end, each at
    a multiple of 64 bytes (only their shapes and dtypes are read: meta tensors will do); returns
    ``(buffer, [(offset, nbytes), ...])``."""
    spans, total = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        spans.append((total, nbytes))
        total += -(-nbytes // _ALIGN) * _ALIGN
    return torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=pin), spans


def pack(tensors, pin: bool = False):
    """``tensors`` laid end to end (each at a multiple of 64 bytes) in one uint8 buffer,
    page-locked with ``pin``; returns ``(buffer, [(offset, nbytes), ...])``."""
    buf, spans = place(tensors, pin)
    for t, (off, nbytes) in zip(tensors, spans):
        if nbytes:
            buf[off:off + nbytes].view(t.dtype).view(t.shape).copy_(t)
    return buf, spans


def unpack(buf: torch.Tensor, like, spans):
    """Views of ``buf`` (from :func:`pack`, wherever it now is) with the shapes and dtypes of ``like``."""
    return [buf[off:off + nbytes].view(t.dtype).view(t.shape) if nbytes
            else torch.empty(t.shape, dtype=t.dtype, device=buf.device) for t, (off, nbytes) in zip(like, spans)]


def _unique(keys: np.ndarray):
    """``np.unique(keys, return_index=True, return_inverse=True)`` of int64 ``keys``, the same
    arrays, by hashing (:func:`~._kernels.unique_first_inverse`: 5-10x faster on a step's keys,
    and it leaves the GIL to the step while a pipeline thread plans)."""
    return unique_first_inverse(np.ascontiguousarray(keys, dtype=np.int64))


def time_ranks(t: np.ndarray) -> np.ndarray:
    """Each float64 time's rank among the distinct ones, ascending: ``np.unique(t,
    return_inverse=True)[1]``, by hashing an order-keeping int64 image of each time (its bits,
    the negatives' magnitude bits flipped; ``-0.0`` taken as ``0.0``).  Times are never NaN
    (the readers refuse them)."""
    bits = (np.ascontiguousarray(t, dtype=np.float64) + 0.0).view(np.int64)
    return _unique(np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits))[2]


def _distinct(node: np.ndarray, t: np.ndarray, dedup: bool):
    """Distinct ``(node, t)`` pairs and the inverse (or every pair its own without ``dedup``)."""
    if not dedup or node.size == 0:
        return np.arange(node.size, dtype=np.int64), node, t
    t_rank = time_ranks(t)
    key = node * np.int64(t_rank.max() + 1) + t_rank
    _, first, inv = _unique(key)
    return inv, node[first], t[first]


def _gaps(t: np.ndarray, nb_t: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``t[:, None] - nb_t`` in real slots, 0 in empty ones (float64, shape of ``nb_t``)."""
    return np.where(mask, t[:, None] - nb_t, 0.0)


def _features(features: Optional[torch.Tensor], eid: np.ndarray, msg_dim: int) -> torch.Tensor:
    """Edge features of events ``eid`` (any shape; zeros where -1), float32 (..., msg_dim)."""
    if features is None or msg_dim == 0:
        return torch.zeros(*eid.shape, 0)
    flat = torch.from_numpy(np.ascontiguousarray(eid.reshape(-1)))
    out = features.index_select(0, flat.clamp(min=0)).masked_fill((flat < 0).unsqueeze(-1), 0.0)
    return out.reshape(*eid.shape, msg_dim)


def build_plan(state, nodes: np.ndarray, times: np.ndarray, events=None, dedup: bool = True,
               neighbors: bool = True, push: bool = True) -> BatchPlan:
    """Plan the step that embeds ``(nodes[i], times[i])`` and, with ``events``, observes them.

    The plan is built in three stages (:class:`PlanDraft`): :func:`plan_neighbors` advances the
    sampler, :func:`plan_memory` the pending store, :func:`assemble_plan` reads neither.  Here
    they run one after the other; a pipeline may run each in a thread of its own, on three
    consecutive batches at once (:func:`stage_groups`).

    Parameters
    ----------
    state : NodeStates
        Its sampler and pending store are read and, with ``events``, advanced; its memories
        are not touched.
    nodes : int64 ndarray, shape (Q,)
    times : float64 ndarray, shape (Q,)
    events : tuple of 4 int64/float64 ndarrays ``(src, dst, t, eid)``, optional
        The batch (time-sorted).  Its events are pushed into the sampler before the queries are
        answered (an earlier event of the batch is a neighbour of a later one, as in TGN's and
        DyGLib's finders; a simultaneous one is not), and after planning they become the
        pending events of their endpoints.  Queries must then include the batch's sources and
        destinations, in that order, first (``nodes[:2B] = cat(src, dst)``).
    dedup : bool
        Compute each distinct query and memory key once (default).  Without it every query and
        every memory read is computed on its own; the results are the same (tested).
    neighbors : bool
        Sample neighbours (default, when the embedding uses them); without, the plan serves
        the memory keys only (e.g. to settle nodes' pending events).
    push : bool
        Give ``events`` to the sampler (default); off when its graph holds them already.

    Returns
    -------
    BatchPlan
        On the host; :meth:`BatchPlan.to` moves it.
    """
    draft = PlanDraft(nodes, times, events, dedup, neighbors, push)
    for stage in STAGES:
        stage(state, draft)
    return draft.plan


class PlanDraft:
    """A plan between its stages: :func:`build_plan`'s arguments, then the arrays each stage
    computes for the next (host arrays; see :class:`BatchPlan` for their meaning), and at the
    end the plan (``plan``)."""

    __slots__ = ("nodes", "times", "events", "dedup", "neighbors", "push", "q_inv", "uq_node", "uq_t", "k",
                 "nb_node", "nb_t", "nb_eid", "nb_mask", "answers", "ob_node", "ob_latest", "ob_t", "keys", "dy", "plan")

    def __init__(self, nodes, times, events=None, dedup: bool = True, neighbors: bool = True, push: bool = True):
        self.nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        self.times = np.ascontiguousarray(times, dtype=np.float64)
        self.events = None if events is None else tuple(np.asarray(x) for x in events)
        self.dedup, self.neighbors, self.push = bool(dedup), bool(neighbors), bool(push)
        self.answers = None
        self.plan = None

    def answered(self) -> None:
        """The neighbours in place: the sampler's answers waited for where the first stage began
        gathering them from other processes (:meth:`RecentNeighborSampler.sample_later`)."""
        if self.answers is not None:
            self.nb_node, self.nb_t, self.nb_eid, self.nb_mask = self.answers()
            self.answers = None


def plan_neighbors(state, d: PlanDraft) -> None:
    """The first stage: the batch's events given to the sampler, the distinct queries, their
    neighbours and the batch's endpoints.  Advances the sampler, reads nothing else of
    ``state``."""
    sampler, needs = state.sampler, state.needs
    if d.events is not None and d.push:
        sampler.push(*d.events)
    d.q_inv, d.uq_node, d.uq_t = _distinct(d.nodes, d.times, d.dedup)
    m, d.k = d.uq_node.size, sampler.k

    # neighbours of the distinct queries: read now, handed over where the next stage needs them
    # (a sharded sampler gathers them from their owners meanwhile: PlanDraft.answered)
    if d.neighbors and needs.neighbors:
        d.answers = sampler.sample_later(d.uq_node, d.uq_t)
    else:
        d.nb_node = np.zeros((m, 0), dtype=np.int64)
        d.nb_t = np.zeros((m, 0))
        d.nb_eid = np.full((m, 0), -1, dtype=np.int64)
        d.nb_mask = np.zeros((m, 0), dtype=bool)

    # observed endpoints and the time their stored memory is taken at
    if d.events is not None:
        src, dst, t_ev, _ = d.events
        b = src.shape[0]
        ends = np.concatenate([src, dst])
        # each endpoint's latest event (by event order, either side): its row among the 2B queries
        order = np.lexsort((np.tile(np.arange(b), 2), ends))
        last_of_node = np.flatnonzero(np.r_[ends[order][1:] != ends[order][:-1], True])
        d.ob_node, d.ob_latest = ends[order][last_of_node], order[last_of_node].astype(np.int64)
        d.ob_t = float(t_ev[-1]) if b else np.inf
    else:
        d.ob_node = d.ob_latest = np.empty(0, dtype=np.int64)
        d.ob_t = np.inf


def plan_memory(state, d: PlanDraft) -> None:
    """The second stage: the memory keys of ``d``'s reads and the pending events they apply,
    then the batch's events made pending.  Advances the pending store (and, for DyRep, the
    sampler: see :func:`stage_groups`)."""
    sampler, store, needs = state.sampler, state.store, state.needs
    d.answered()
    # memory reads (each distinct query's node, each neighbour slot, each observed endpoint),
    # their keys, and the pending events the keys apply, each once: numba kernels, off the lock
    d.keys = store.plan_keys(d.uq_node, d.uq_t, d.nb_node, d.nb_mask, d.k, d.ob_node, d.ob_t, d.dedup, needs.mean)
    pe_node, pe_other, pe_t = d.keys[8], d.keys[9], d.keys[10]

    # DyRep: the other endpoint of each pending event as an attention embedding at its time
    d.dy = None
    if needs.other_embedding and pe_node.size:
        d_inv, d_node, d_t = _distinct(pe_other, pe_t, d.dedup)
        dn_node, dn_t, dn_eid, dn_mask = sampler.sample_arrays(d_node, d_t)
        d.dy = (d_inv, d_node, d_t, dn_node, dn_t, dn_eid, dn_mask)
    if d.events is not None:  # the batch's events become pending; earlier ones were folded in
        src, dst, t_ev, eid = d.events
        store.merge(np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t_ev, t_ev]),
                    np.concatenate([eid, eid]), before=d.ob_t)


def assemble_plan(state, d: PlanDraft) -> None:
    """The last stage: the memory rows read, the neighbours' gaps and features, and the
    :class:`BatchPlan` of ``d`` (``d.plan``).  Reads only ``state``'s edge features (which do not
    change)."""
    (uq_key, nb_keys, nb_key, ob_key, key_node, has, agg_local, agg_entry, pe_node, pe_other, pe_t,
     pe_eid) = d.keys
    m, k = d.uq_node.size, d.k
    dy_nodes = np.empty(0, dtype=np.int64)
    if d.dy is not None:
        dn_node, dn_mask = d.dy[3], d.dy[6]
        dy_nodes = np.concatenate([d.dy[1], dn_node[dn_mask]])

    # the memory rows read: keys' nodes, messages' other endpoints, DyRep's nodes
    rows, _, rows_inv = _unique(np.concatenate([key_node, pe_node, pe_other, dy_nodes]))
    r, p = key_node.size, pe_node.size
    key_row = rows_inv[:r]
    pe_row = rows_inv[r:r + p]
    pe_other_row = rows_inv[r + p:r + 2 * p]

    feats, msg_dim = state.edge_features, state.needs.msg_dim
    empty = np.empty(0, dtype=np.int64)
    ev = d.events
    plan = BatchPlan(
        q_inv=torch.from_numpy(d.q_inv), uq_t=torch.from_numpy(d.uq_t), uq_key=torch.from_numpy(uq_key),
        nb_keys=torch.from_numpy(nb_keys), nb_key=torch.from_numpy(nb_key.reshape(m, k)),
        nb_mask=torch.from_numpy(d.nb_mask),
        nb_dt=torch.from_numpy(_gaps(d.uq_t, d.nb_t, d.nb_mask)), nb_feat=_features(feats, d.nb_eid, msg_dim),
        rows=torch.from_numpy(rows), key_row=torch.from_numpy(key_row), pe_row=torch.from_numpy(pe_row),
        pe_other_row=torch.from_numpy(pe_other_row), pe_node=torch.from_numpy(pe_node),
        pe_other=torch.from_numpy(pe_other), pe_t=torch.from_numpy(pe_t), pe_eid=torch.from_numpy(pe_eid),
        pe_feat=_features(feats, pe_eid, msg_dim),
        agg_entry=torch.from_numpy(agg_entry), agg_local=torch.from_numpy(agg_local),
        agg_sel=torch.from_numpy(has), agg_identity=not state.needs.mean,
        ob_node=torch.from_numpy(d.ob_node), ob_key=torch.from_numpy(ob_key),
        ob_latest=torch.from_numpy(d.ob_latest),
        ev_eid=torch.from_numpy(np.ascontiguousarray(ev[3], dtype=np.int64) if ev is not None else empty),
        ev_src=torch.from_numpy(np.ascontiguousarray(ev[0], dtype=np.int64) if ev is not None else empty),
        ev_dst=torch.from_numpy(np.ascontiguousarray(ev[1], dtype=np.int64) if ev is not None else empty))
    if d.dy is not None:
        d_inv, d_node, d_t, dn_node, dn_t, dn_eid, dn_mask = d.dy
        base = r + 2 * p
        own = rows_inv[base:base + d_node.size]
        nb_row = np.zeros(dn_node.shape, dtype=np.int64)
        nb_row[dn_mask] = rows_inv[base + d_node.size:]
        plan.dyrep = DyRepPlan(inv=torch.from_numpy(d_inv), own_row=torch.from_numpy(own), t=torch.from_numpy(d_t),
                               nb_row=torch.from_numpy(nb_row), nb_mask=torch.from_numpy(dn_mask),
                               nb_dt=torch.from_numpy(_gaps(d_t, dn_t, dn_mask)), nb_feat=_features(feats, dn_eid, msg_dim))
    d.plan = plan


#: the stages of a plan, in order (see :func:`build_plan`)
STAGES = (plan_neighbors, plan_memory, assemble_plan)


def stage_groups(state) -> list:
    """The stages of ``state``'s plans grouped as threads may run them, one group a thread, each
    on another batch (a pipeline, :class:`~speed.train.step.loader.PlanLoader`): the sampler is
    advanced by the first stage only and the pending store by the second only, each in batch
    order, and the third reads neither, so three batches can be under way at once.  DyRep's
    plans sample the other endpoints of the pending events in the memory stage: there the
    first two share the sampler, and one thread."""
    if state.needs.other_embedding:
        return [(plan_neighbors, plan_memory), (assemble_plan,)]
    return [(plan_neighbors,), (plan_memory,), (assemble_plan,)]
