"""Memory-based temporal GNNs as compositions of :mod:`speed.train.modules`.

One class, :class:`TemporalGNN`, runs every model; :func:`build_model` picks its parts from
the recipes of :mod:`speed.train.recipes`:

========  ==========  ===============  ==================  ===========
model     updater     message          embedding           memories
========  ==========  ===============  ==================  ===========
jodie     RNN         identity         time projection     one
dyrep     RNN         identity, other  identity            one
                      side = its graph
                      attention emb.
tgn       GRU         identity         graph attention     one
tige      GRU         identity from    graph attention     two (TIGER)
                      the embedding
                      memory h(t-)
========  ==========  ===============  ==================  ===========

Memory semantics (TGN's, as in PyG's ``TGNMemory``; every result depends on them):

* Each node has *pending* events: those of its batches not yet applied to its stored memory
  (:class:`~speed.train.store.MessageStore`).
* A node's memory *as seen at time t* is its stored memory with its pending events strictly
  earlier than ``t`` applied: one message per event, ``msg(s_i, s_j, Φ(t_e - last_update_i),
  e_ij)`` from the currently stored states, aggregated (the latest event, or the mean) and
  passed through the updater.  In training this runs inside the step, so every node a batch
  touches -- endpoints, negatives and sampled neighbours -- carries gradient into the message
  and updater weights.
* Simultaneous events never see each other: a read at ``t`` applies nothing at ``t``, and the
  neighbour sampler returns nothing at ``t`` (:mod:`speed.train.sampler`), whatever the
  batching.

Per batch (the host work is planned apart, :mod:`speed.train.plan`):

1. :meth:`TemporalGNN.compute` embeds the batch's queries ``z_i(t)`` from the memory as seen
   at ``t`` and from the neighbours strictly before ``t``;
2. the decoder scores the batch;
3. :meth:`TemporalGNN.observe` stores, for the batch's endpoints, their memory as seen at the
   batch's last time (detached); the batch's events are then their pending events;
4. the optimiser steps.

So an event never sees itself, a simultaneous event, or any later event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import nn

from .memory import NodeMemory
from .modules import (
    GRUUpdater,
    GraphAttentionEmbedding,
    IdentityEmbedding,
    IdentityMessage,
    LastAggregator,
    LinkPredictor,
    MeanAggregator,
    MLPMessage,
    RNNUpdater,
    TimeEncoder,
    TimeProjectionEmbedding,
)
from .plan import BatchPlan, build_plan
from .recipes import AGGREGATORS, MESSAGES, RECIPES, STATIC_KINDS
from .sampler import RecentNeighborSampler
from .static import StaticMemory
from .store import MessageStore
from .values import EventValues


@dataclass
class NodeState:
    """Rows of a model's node state, detached: what PAC synchronises, gathers and checkpoints.

    Attributes
    ----------
    memories : dict of str to (float32 tensor (n, d), float64 tensor (n,))
        For each memory of the model (:meth:`TemporalGNN.memories`), the states and
        ``last_update`` of the rows, in the order of the ids they were read for.
    pending : tuple of 4 tensors, each shape (M,)
        ``(node, other, t, eid)``: the rows' pending events (int64, int64, float64, int64),
        ``node`` and ``other`` in the same id space as the ids.
    values : tuple of 3 tensors, optional
        TIGE: ``(eid, src, values)`` of the pending events' endpoint embeddings
        (:class:`~speed.train.values.EventValues`), ``src`` in the same id space.
    """

    memories: Dict[str, Tuple[torch.Tensor, torch.Tensor]]
    pending: Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
    values: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None

    def to(self, device) -> "NodeState":
        return NodeState({k: (s.to(device), t.to(device)) for k, (s, t) in self.memories.items()},
                         tuple(x.to(device) for x in self.pending),
                         None if self.values is None else tuple(x.to(device) for x in self.values))


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class TemporalGNN(nn.Module):
    """Encoder (memory + message + aggregator + updater + embedding) and link decoder.

    Parameters
    ----------
    num_nodes : int
    memory_dim, time_dim, msg_dim : int
    message, aggregator, updater, embedding, decoder : nn.Module
    neighbors : int
        k of the recent-neighbour sampler.
    message_embedding : nn.Module, optional
        DyRep: the other endpoint of a message is represented by this embedding (graph
        attention over its neighbours) instead of its raw memory.
    dual_memory : bool
        TIGE (TIGER's dual memory): keep a second memory ``h(t-)`` of each node's embedding at
        its latest event; an event's message is built from its endpoints' ``h(t'-)`` as they
        were when the event was taken in, kept with the pending event
        (:class:`~speed.train.values.EventValues`), while the GRU updates ``h(t+)``.
    static : StaticMemory, optional
        DistTGL's static node memory, added to the dynamic memory before an attention
        embedding, after a memory-only one (JODIE, DyRep) (:mod:`speed.train.static`).

    Attributes
    ----------
    sampler : RecentNeighborSampler
        The neighbour rings (host memory).
    store : MessageStore
        The pending events (host memory).
    edge_features : float32 tensor, shape (E_total, msg_dim), optional
        Edge features of the whole log by event id, in host memory (plans gather the rows a
        step needs).
    """

    def __init__(self, num_nodes: int, memory_dim: int, time_dim: int, msg_dim: int, message: nn.Module,
                 aggregator: nn.Module, updater: nn.Module, embedding: nn.Module, decoder: nn.Module,
                 neighbors: int = 10, message_embedding: Optional[nn.Module] = None, dual_memory: bool = False,
                 name: str = "custom", static: Optional[StaticMemory] = None):
        super().__init__()
        self.name = name
        self.num_nodes = int(num_nodes)
        self.msg_dim = int(msg_dim)
        self.memory = NodeMemory(num_nodes, memory_dim)
        self.event_values = EventValues(embedding.out_dim) if dual_memory else None
        self.left_memory = NodeMemory(num_nodes, embedding.out_dim) if dual_memory else None
        self.time_enc = TimeEncoder(time_dim)
        self.message = message
        self.aggregator = aggregator
        self.updater = updater
        self.embedding = embedding
        self.message_embedding = message_embedding
        self.decoder = decoder
        self.static = static
        self.sampler = RecentNeighborSampler(num_nodes, neighbors)
        self.store = MessageStore(num_nodes)
        self._state_device: Optional[torch.device] = None  # see keep_node_state_on
        self.edge_features: Optional[torch.Tensor] = None
        self.spec: Optional[dict] = None  # build_model's arguments, when it built this model
        self.dedup = True  # compute each distinct query and memory key once (see speed.train.plan)

    @property
    def device(self) -> torch.device:
        """Where the weights compute."""
        return self.time_enc.lin.weight.device

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        if self._state_device is not None:  # node state pinned to host memory stays there
            self.keep_node_state_on(self._state_device)
        if self.event_values is not None:  # plain tensors, not buffers: they follow the memory
            ev, dev = self.event_values, self.memory.memory.device
            ev.eid, ev.src, ev.values = ev.eid.to(dev), ev.src.to(dev), ev.values.to(dev)
        return out

    def keep_node_state_on(self, device) -> "TemporalGNN":
        """Hold the memories on ``device`` (e.g. ``"cpu"``) while the weights compute elsewhere:
        each step moves only the rows it reads or writes.  PAC's full-graph evaluation model does
        this, so evaluating on a GPU never needs the device to hold every node.  (Pending events,
        neighbour rings and edge features always live in host memory.)"""
        self._state_device = torch.device(device)
        for mem in self.memories().values():
            mem.memory = mem.memory.to(self._state_device)
            mem.last_update = mem.last_update.to(self._state_device)
        if self.event_values is not None:
            ev = self.event_values
            ev.eid, ev.src, ev.values = (x.to(self._state_device) for x in (ev.eid, ev.src, ev.values))
        return self

    # ------------------------------------------------------------------------ state
    def set_edge_features(self, msg) -> None:
        """Edge features of the whole log, indexed by event id (kept out of checkpoints)."""
        self.edge_features = None if msg is None else torch.as_tensor(msg, dtype=torch.float32).cpu()

    def reset_state(self) -> None:
        """Start of a pass: zero memory, forget pending messages and neighbours."""
        self.reset_memories()
        self.reset_structures()

    def reset_memories(self) -> None:
        """Zero the memories (what the steps write; see :meth:`reset_structures`)."""
        for mem in self.memories().values():
            mem.reset_state()
        if self.event_values is not None:
            self.event_values.reset()

    def reset_structures(self) -> None:
        """Forget pending messages and neighbours (what the plans advance)."""
        self.sampler.reset()
        self.store.reset()

    def detach(self) -> None:
        for mem in self.memories().values():
            mem.detach()

    def memories(self) -> Dict[str, NodeMemory]:
        """The node memories by name: ``memory``, and TIGE's ``left_memory`` (``h(t-)``)."""
        out = {"memory": self.memory}
        if self.left_memory is not None:
            out["left_memory"] = self.left_memory
        return out

    def node_state(self, n_id: torch.Tensor) -> NodeState:
        """Stored states and pending events of the distinct nodes ``n_id`` (detached)."""
        ids = _np(n_id)
        row, other, t, eid = self.store.gather(ids)
        pending = tuple(torch.from_numpy(x) for x in (ids[row], other, t, eid))
        values = None if self.event_values is None else self.event_values.select(pending[3])
        return NodeState({k: tuple(x.detach().clone() for x in m.read(n_id)) for k, m in self.memories().items()},
                         pending, values)

    def load_node_state(self, n_id: torch.Tensor, state: NodeState) -> None:
        """Overwrite the rows ``n_id`` with ``state`` (as returned by :meth:`node_state`);
        their pending events become exactly ``state.pending``."""
        for k, mem in self.memories().items():
            values, last = state.memories[k]
            mem.write(n_id, values.to(mem.memory.device), last.to(mem.last_update.device))
        self.store.clear(_np(n_id))
        node, other, t, eid = (_np(x) for x in state.pending)
        if node.size:
            self.store.replace(node, other, t, eid)
        if self.event_values is not None and state.values is not None:
            self.event_values.merge(*state.values)

    @torch.no_grad()
    def settle(self, n_id: torch.Tensor, before: float = np.inf) -> None:
        """Apply the pending events of the distinct nodes ``n_id`` earlier than ``before`` (all by
        default) to their stored memory, so the stored rows are complete states, e.g. before
        they are synchronised.  Events at ``before`` or later stay pending."""
        ids = _np(n_id).astype(np.int64)
        if ids.size == 0:
            return
        t = np.full(ids.size, before, dtype=np.float64)
        plan = build_plan(self, ids, t, dedup=self.dedup, neighbors=False).to(self.device)
        states, lasts = self.key_states(plan)
        keys = plan.uq_key.index_select(0, plan.q_inv)
        self.memory.write(n_id, states.index_select(0, keys), lasts.index_select(0, keys))
        self.store.clear(ids, before)

    def insert_neighbors(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """Record events in the neighbour sampler without touching memory (e.g. the training
        events before evaluation continues from a gathered memory)."""
        self.sampler.insert(src, dst, t, eid)

    def state_prefixes(self) -> Tuple[str, ...]:
        return tuple(f"{k}." for k in self.memories())

    def params_state_dict(self) -> Dict[str, torch.Tensor]:
        """``state_dict()`` without the node state: what ranks share and checkpoints restore."""
        prefixes = self.state_prefixes()
        return {k: v for k, v in self.state_dict().items() if not k.startswith(prefixes)}

    def load_params(self, params: Dict[str, torch.Tensor]) -> None:
        """Load weights from a state dict, ignoring any node-state entries in it."""
        prefixes = self.state_prefixes()
        self.load_state_dict({k: v for k, v in params.items() if not k.startswith(prefixes)}, strict=False)

    def node_state_bytes(self, num_nodes: Optional[int] = None) -> int:
        """Bytes of memories and timestamps for ``num_nodes`` rows (default: as held)."""
        n = self.num_nodes if num_nodes is None else int(num_nodes)
        return int(sum(n * (m.memory_dim * m.memory.element_size() + m.last_update.element_size())
                       for m in self.memories().values()))

    def backup(self) -> dict:
        """Memory, pending messages and neighbours, detached (see :meth:`restore`)."""
        out = {"memories": {k: m.backup() for k, m in self.memories().items()},
               "store": self.store.state_dict(), "sampler": self.sampler.state_dict()}
        if self.event_values is not None:  # the values of the pending events (the store is compacted)
            self.event_values.prune(out["store"]["eid"])
            out["values"] = self.event_values.state_dict()
        return out

    def restore(self, state: dict) -> None:
        for k, mem in self.memories().items():
            mem.restore(state["memories"][k])
        self.store.load_state_dict(state["store"])
        self.sampler.load_state_dict(state["sampler"])
        if self.event_values is not None:
            self.event_values.load_state_dict(state["values"])

    def resize(self, num_nodes: int) -> None:
        """Size memory, pending messages and neighbour rings to ``num_nodes`` fresh rows
        (a PAC rank's local nodes); parameters are untouched."""
        self.num_nodes = int(num_nodes)
        for mem in self.memories().values():
            mem.resize(self.num_nodes)
        self.sampler = RecentNeighborSampler(self.num_nodes, self.sampler.k, self.sampler.undirected)
        self.store = MessageStore(self.num_nodes)
        if self.event_values is not None:
            self.event_values.reset()

    def grow(self, num_nodes: int) -> None:
        """Make room for nodes up to ``num_nodes``, keeping every existing row: new nodes
        start with zero memory, no pending events and no neighbours (a trained model
        meeting nodes it never saw)."""
        if int(num_nodes) <= self.num_nodes:
            return
        self.num_nodes = int(num_nodes)
        for mem in self.memories().values():
            mem.grow(self.num_nodes)
        if self.static is not None:
            self.static.grow(self.num_nodes)
        self.sampler.grow(self.num_nodes)
        self.store.grow(self.num_nodes)

    # ---------------------------------------------------------------------- stages
    def plan(self, nodes, times, events=None, neighbors: bool = True, push: bool = True) -> BatchPlan:
        """The plan of a step on this model's sampler and store (see :func:`build_plan`), on the
        model's device."""
        return build_plan(self, _np(nodes), _np(times).astype(np.float64),
                          None if events is None else tuple(_np(x) for x in events), dedup=self.dedup,
                          neighbors=neighbors, push=push).to(self.device)

    def key_states(self, plan: BatchPlan, rows=None):
        """The memory of every key of ``plan``: stored states with the keys' pending events
        applied (message -> aggregator -> updater).  ``rows`` are the stored ``(states,
        last_update)`` of ``plan.rows`` when read ahead (staleness); read now by default.

        Returns
        -------
        states : float32 tensor, shape (num_keys, memory_dim)
        last_update : float64 tensor, shape (num_keys,)
        """
        s_rows, last_rows = rows if rows is not None else self.memory.read(plan.rows)
        s_key = s_rows.index_select(0, plan.key_row)
        last_key = last_rows.index_select(0, plan.key_row)
        if self.event_values is not None:  # TIGE: messages carry h(t-) of the event's endpoints
            s_self, s_other = self.event_values.lookup(plan.pe_eid, plan.pe_node)
        else:
            s_self = s_rows.index_select(0, plan.pe_row)
            s_other = self._dyrep_other(plan, s_rows, last_rows) if self.message_embedding is not None \
                else s_rows.index_select(0, plan.pe_other_row)
        dt = plan.pe_t - last_rows.index_select(0, plan.pe_row)
        raw = self.message(s_self, s_other, self.time_enc(dt), plan.pe_feat)
        agg, t_agg = self.aggregator(raw.index_select(0, plan.agg_entry), plan.agg_local,
                                     plan.pe_t.index_select(0, plan.agg_entry), plan.agg_sel.shape[0])
        new = self.updater(agg, s_key.index_select(0, plan.agg_sel))
        return s_key.index_copy(0, plan.agg_sel, new), last_key.index_copy(0, plan.agg_sel, t_agg)

    def _dyrep_other(self, plan: BatchPlan, s_rows, last_rows):
        """DyRep: each pending event's other endpoint as a graph-attention embedding at the
        event's time, from stored memories."""
        d = plan.dyrep
        if d is None:
            # no pending events: an empty pass through the embedding still puts its weights in
            # the graph (zero gradients), so DDP needs no search for unused parameters
            k, m = 1, self.message_embedding.msg_dim
            return self.message_embedding(s_rows[:0], last_rows[:0], time_enc=self.time_enc, nbr_s=s_rows[:1],
                                          nbr_index=torch.zeros(0, k, dtype=torch.long, device=s_rows.device),
                                          nbr_e=s_rows.new_zeros(0, k, m), nbr_dt=last_rows.new_zeros(0, k),
                                          nbr_mask=torch.zeros(0, k, dtype=torch.bool, device=s_rows.device))
        own = s_rows.index_select(0, d.own_row)
        z = self.message_embedding(own, d.t - last_rows.index_select(0, d.own_row), time_enc=self.time_enc,
                                   nbr_s=s_rows, nbr_index=d.nb_row, nbr_e=d.nb_feat, nbr_dt=d.nb_dt,
                                   nbr_mask=d.nb_mask)
        return z.index_select(0, d.inv)

    def compute(self, plan: BatchPlan, rows=None):
        """Embeddings of the plan's queries: ``(z, states, last_update)``, ``z`` float32 of shape
        (Q, embedding dim) in query order, and the key states :meth:`observe` stores from."""
        states, lasts = self.key_states(plan, rows if rows is not None else plan.stale)
        h = states  # what the embedding reads: the dynamic memory, plus the static one
        static = None
        if self.static is not None:
            # one lookup per distinct node of the step (a node has several keys at several times)
            static = self.static(plan.rows).index_select(0, plan.key_row)
            if self.embedding.needs_neighbors:  # DistTGL: before the attention, neighbours included
                h = states + static
        own = h.index_select(0, plan.uq_key)
        own_dt = plan.uq_t - lasts.index_select(0, plan.uq_key)
        if self.embedding.needs_neighbors:
            z = self.embedding(own, own_dt, time_enc=self.time_enc, nbr_s=h.index_select(0, plan.nb_keys),
                               nbr_index=plan.nb_key,
                               nbr_e=plan.nb_feat, nbr_dt=plan.nb_dt, nbr_mask=plan.nb_mask)
        else:
            z = self.embedding(own, own_dt)
            if static is not None:
                # A memory-only embedding (JODIE's time projection, DyRep's identity) gets the static
                # part after it, as JODIE joins its static embeddings to the projected one: inside
                # the projection, (1 + w dt) scales the unbounded static rows and training diverged
                # (CollegeMsg: epoch-2 loss rose 1.32 -> 1.64; test AP 0.859 against 0.876 after).
                z = z + static.index_select(0, plan.uq_key)
        return z.index_select(0, plan.q_inv), states, lasts

    def forward(self, plan: BatchPlan, num_events: int):
        """Score a batch planned with queries ``[src, dst, neg]``: ``(pos_logits, neg_logits, z,
        states, last_update)``.  Steps 1-2 above; what DDP wraps."""
        n = int(num_events)
        z, states, lasts = self.compute(plan)
        return self.score(z[:n], z[n:2 * n]), self.score(z[:n], z[2 * n:3 * n]), z, states, lasts

    def score(self, z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
        return self.decoder(z_src, z_dst)

    @torch.no_grad()
    def observe(self, plan: BatchPlan, states: torch.Tensor, lasts: torch.Tensor,
                z: Optional[torch.Tensor] = None) -> None:
        """The batch has been scored: its endpoints store their memory as seen at the batch's
        last time (step 3 above).  ``z`` are the embeddings of the plan's queries: TIGE keeps each
        endpoint's latest one as ``h(t-)``, after keeping the values the batch's messages carry.
        (The plan already made the batch's events pending and gave them to the sampler.)"""
        if plan.ob_node.numel() == 0:
            return
        self.memory.write(plan.ob_node, states.index_select(0, plan.ob_key), lasts.index_select(0, plan.ob_key))
        if self.event_values is not None and z is not None:
            # TIGER: an event's message carries its endpoints' h(t'-) as known before the batch ...
            self.event_values.add(plan.ev_eid, plan.ev_src, self.left_memory.read(plan.ev_src)[0],
                                  self.left_memory.read(plan.ev_dst)[0])
            # ... and each endpoint's h(t-) becomes its embedding at its latest event of the batch
            t_new = plan.uq_t.index_select(0, plan.q_inv.index_select(0, plan.ob_latest))
            self.left_memory.write(plan.ob_node, z.index_select(0, plan.ob_latest), t_new)
            if len(self.event_values) > 4 * self.store.alive + 4096:  # drop the events no longer pending
                self.event_values.prune(np.unique(self.store.eid))

    # ------------------------------------------------------------ convenience
    @torch.no_grad()
    def embed(self, nodes, t) -> torch.Tensor:
        """Embeddings ``z_i(t)`` of ``nodes`` at times ``t`` from the current state, changing no
        state (a query, not an event)."""
        return self.compute(self.plan(nodes, t))[0]

    @torch.no_grad()
    def step_events(self, src, dst, t, eid, extra=None) -> torch.Tensor:
        """Embed a batch of events (and ``extra`` queries, a list of ``(nodes, times)``: negatives,
        ranking candidates), then take the batch in: the evaluation's and the predictor's step
        without a loss.  Returns the embeddings of ``cat([src, dst, *extra nodes])``."""
        t = _np(t).astype(np.float64)
        groups = [(_np(src), t), (_np(dst), t)] + [(_np(n), _np(q).astype(np.float64)) for n, q in (extra or [])]
        plan = self.plan(np.concatenate([g[0] for g in groups]), np.concatenate([g[1] for g in groups]),
                         events=(src, dst, t, eid))
        z, states, lasts = self.compute(plan)
        self.observe(plan, states, lasts, z)
        return z


def build_model(name: str, num_nodes: int, msg_dim: int = 0, memory_dim: int = 100, time_dim: int = 100,
                embedding_dim: int = 100, neighbors: int = 10, time_scale: float = 1.0,
                dropout: float = 0.1, message: str = "identity", aggregator: str = "last",
                static_memory: str = "none", static_nodes: Optional[int] = None) -> TemporalGNN:
    """A model assembled from the modules by its recipe (:data:`speed.train.recipes.RECIPES`).

    Parameters
    ----------
    name : {"jodie", "dyrep", "tgn", "tige"}
    num_nodes : int
    msg_dim : int
        Edge feature size (0 without features).
    memory_dim, time_dim, embedding_dim : int
    neighbors : int
        Sampled neighbours for graph attention.
    time_scale : float
        JODIE's Δt normaliser.
    message : {"identity", "mlp"}
        The message function: the raw ``[s_self || s_other || Φ(Δt) || e]`` (the papers'), or an
        MLP over it to ``memory_dim`` features (TGN's alternative).
    aggregator : {"last", "mean"}
        How a node's pending events become one message: the latest one (the papers'), or the
        mean of them.
    static_memory : {"none", "learned", "pretrained"}
        DistTGL's static node memory (:mod:`speed.train.static`), of ``memory_dim`` features.
    static_nodes : int, optional
        Rows of the static table: every node of the log (default ``num_nodes``; a PAC rank's
        model holds fewer dynamic rows).
    """
    name = name.lower()
    if name not in RECIPES:
        raise ValueError(f"unknown model '{name}' (choose from {', '.join(RECIPES)})")
    if static_memory not in STATIC_KINDS:
        raise ValueError(f"unknown static memory {static_memory!r} (choose from {', '.join(STATIC_KINDS)})")
    if message not in MESSAGES or aggregator not in AGGREGATORS:
        raise ValueError(f"unknown message {message!r} or aggregator {aggregator!r} (choose from "
                         f"{', '.join(MESSAGES)} and {', '.join(AGGREGATORS)})")
    recipe = RECIPES[name]
    if recipe.embedding == "attention":
        embedding = GraphAttentionEmbedding(memory_dim, time_dim, msg_dim, embedding_dim, dropout=dropout)
    elif recipe.embedding == "time_projection":
        embedding = TimeProjectionEmbedding(memory_dim, time_scale)
    else:
        embedding = IdentityEmbedding(memory_dim)
    # messages are built from h(t-), the embedding memory, under TIGER's dual memory
    state_dim = embedding.out_dim if recipe.dual_memory else memory_dim
    msg_fn = IdentityMessage(state_dim, time_dim, msg_dim) if message == "identity" else \
        MLPMessage(state_dim, time_dim, msg_dim, out_dim=memory_dim)
    updater = (GRUUpdater if recipe.updater == "gru" else RNNUpdater)(msg_fn.out_dim, memory_dim)
    extra = {"dual_memory": recipe.dual_memory}
    if recipe.message_other == "attention":  # the other side as an attention embedding of the memory's width
        extra["message_embedding"] = GraphAttentionEmbedding(memory_dim, time_dim, msg_dim, memory_dim,
                                                             dropout=dropout)
    agg = LastAggregator() if aggregator == "last" else MeanAggregator()
    # (modules are created in this order, embedding, message, updater, the rest, so the weights a
    # seed gives stay those of earlier versions)
    decoder = LinkPredictor(embedding.out_dim)
    if static_memory != "none":  # created last: a seed gives the other weights as without it
        extra["static"] = StaticMemory(num_nodes if static_nodes is None else static_nodes, memory_dim, memory_dim,
                                       trainable=static_memory == "learned")
    model = TemporalGNN(num_nodes, memory_dim, time_dim, msg_dim, msg_fn, agg, updater, embedding,
                        decoder, neighbors=neighbors, name=name, **extra)
    # what rebuilds this model from a checkpoint (speed.load_run)
    model.spec = dict(name=name, num_nodes=int(num_nodes), msg_dim=int(msg_dim), memory_dim=int(memory_dim),
                      time_dim=int(time_dim), embedding_dim=int(embedding_dim), neighbors=int(neighbors),
                      time_scale=float(time_scale), dropout=float(dropout), message=message, aggregator=aggregator,
                      static_memory=static_memory)
    return model
