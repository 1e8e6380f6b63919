"""Memory-based temporal GNNs as compositions of :mod:`speed.train.model.modules`.

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
  (:class:`~speed.train.state.store.MessageStore`).
* A node's memory *as seen at time t* is its stored memory with its pending events strictly
  earlier than ``t`` applied: one message per event, ``msg(s_i, s_j, Φ(t_e - last_update_i),
  e_ij)`` from the currently stored states, aggregated (the latest event, or the mean) and
  passed through the updater.  In training this runs inside the step, so every node a batch
  touches -- endpoints, negatives and sampled neighbours -- carries gradient into the message
  and updater weights.
* Simultaneous events never see each other: a read at ``t`` applies nothing at ``t``, and the
  neighbour sampler returns nothing at ``t`` (:mod:`speed.train.state.sampler`), whatever the
  batching.

Per batch (the host work is planned apart, :mod:`speed.train.state.batch_plan`):

1. :meth:`TemporalGNN.compute` embeds the batch's queries ``z_i(t)`` from the memory as seen
   at ``t`` and from the neighbours strictly before ``t``;
2. the decoder scores the batch;
3. :meth:`StatefulModel.absorb` stores, for the batch's endpoints, their memory as seen at the
   batch's last time (detached); the batch's events are then their pending events;
4. the optimiser steps.

So an event never sees itself, a simultaneous event, or any later event.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch
from torch import nn

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
from ..config import TrainConfig
from ..recipes import AGGREGATORS, MESSAGES, RECIPES, STATIC_KINDS
from ..state._plan_kernels import residue_positions
from ..state.batch_plan import BatchPlan, PlanNeeds
from ..state.components import COMPONENTS
from ..state.nodes import NodeStates, as_numpy
from .queries import QueryLayout
from .static import StaticMemory


class TemporalGNN(nn.Module):
    """Encoder (message + aggregator + updater + embedding) and link decoder: weights only.

    The per-node state the modules read and write (memories, pending events, neighbours,
    edge features, TIGE's event values) is owned by a
    :class:`~speed.train.state.nodes.NodeStates`; :class:`StatefulModel` pairs the two.

    Parameters
    ----------
    memory_dim, time_dim, msg_dim : int
    message, aggregator, updater, embedding, decoder : nn.Module
    message_embedding : nn.Module, optional
        DyRep: the other endpoint of a message is represented by this embedding (graph
        attention over its neighbours) instead of its raw memory.
    static : StaticMemory, optional
        DistTGL's static node memory, added to the dynamic memory before an attention
        embedding, after a memory-only one (JODIE, DyRep) (:mod:`speed.train.model.static`).  A
        learned table is weights (an optimiser steps it), so it lives here.
    """

    def __init__(self, memory_dim: int, time_dim: int, msg_dim: int, message: nn.Module,
                 aggregator: nn.Module, updater: nn.Module, embedding: nn.Module, decoder: nn.Module,
                 message_embedding: Optional[nn.Module] = None, name: str = "custom",
                 static: Optional[StaticMemory] = None):
        super().__init__()
        self.name = name
        self.memory_dim = int(memory_dim)
        self.msg_dim = int(msg_dim)
        self.time_enc = TimeEncoder(time_dim)
        self.message = message
        self.aggregator = aggregator
        self.updater = updater
        self.embedding = embedding
        self.message_embedding = message_embedding
        self.decoder = decoder
        self.static = static
        self.spec: Optional[dict] = None  # build_model's arguments, when it built this model

    @property
    def device(self) -> torch.device:
        """Where the weights compute."""
        return self.time_enc.lin.weight.device

    def plan_needs(self) -> PlanNeeds:
        """What this model's batch plans must gather."""
        return PlanNeeds(neighbors=bool(self.embedding.needs_neighbors),
                         mean=getattr(self.aggregator, "kind", "last") == "mean",
                         other_embedding=self.message_embedding is not None, msg_dim=self.msg_dim)

    def local_parameters(self):
        """Names of parameters each PAC rank keeps to itself, out of DDP (a learned static
        table: only the rows a step touches change, merged at the end of an epoch)."""
        return ["static.table"] if self.static is not None and self.static.trainable else []

    # ---------------------------------------------------------------------- stages
    def key_states(self, plan: BatchPlan, rows, message_inputs=None, invariant: bool = False):
        """The memory of every key of ``plan``: stored states with the keys' pending events
        applied (message -> aggregator -> updater).  ``rows`` are the stored ``(states,
        last_update)`` of ``plan.rows`` (:meth:`NodeStates.read`); ``message_inputs``, when a
        state component supplies them (TIGE), the ``(s_self, s_other)`` of the pending events.

        ``invariant``: compute each key's state so that it does not depend on which other keys
        are computed with it (:class:`RowLayout`): an evaluation divided among processes
        then gives every key the bits one process holding them all gives it.

        Returns
        -------
        states : float32 tensor, shape (num_keys, memory_dim)
        last_update : float64 tensor, shape (num_keys,)
        """
        s_rows, last_rows = rows
        s_key = s_rows.index_select(0, plan.key_row)
        last_key = last_rows.index_select(0, plan.key_row)
        if invariant:
            return self._key_states_placed(plan, s_rows, last_rows, s_key, last_key, message_inputs)
        if message_inputs is not None:  # TIGE: messages carry h(t-) of the event's endpoints
            s_self, s_other = message_inputs
        else:
            s_self = s_rows.index_select(0, plan.pe_row)
            s_other = self._dyrep_other(plan, s_rows, last_rows) if self.message_embedding is not None \
                else s_rows.index_select(0, plan.pe_other_row)
        dt = plan.pe_t - last_rows.index_select(0, plan.pe_row)
        raw = self.message(s_self, s_other, self.time_enc(dt), plan.pe_feat)
        if plan.agg_identity:  # one pending event per key, in key order (the last aggregator)
            agg, t_agg = raw, plan.pe_t
        else:
            agg, t_agg = self.aggregator(raw.index_select(0, plan.agg_entry), plan.agg_local,
                                         plan.pe_t.index_select(0, plan.agg_entry), plan.agg_sel.shape[0])
        new = self.updater(agg, s_key.index_select(0, plan.agg_sel))
        return s_key.index_copy(0, plan.agg_sel, new), last_key.index_copy(0, plan.agg_sel, t_agg)

    def _key_states_placed(self, plan: BatchPlan, s_rows, last_rows, s_key, last_key, message_inputs):
        """:meth:`key_states` with ``invariant``: each pending event, then each updated key, at
        its place in the whole step (:class:`RowLayout`).  Rows gathered from a larger tensor are
        gathered straight into their places (:meth:`RowLayout.gather`: one copy, not a gather and
        a placing copy), and the last aggregator's messages, whose pending events are the updated
        keys one for one, stay where they were placed."""
        lay = RowLayout.of(plan.orig_pe) if plan.orig_pe is not None else RowLayout.leading(plan.pe_t.shape[0])
        if message_inputs is not None:  # TIGE: messages carry h(t-) of the event's endpoints
            s_self, s_other = lay.place(*message_inputs)
        else:
            s_self = lay.gather(s_rows, plan.pe_row)
            s_other = lay.place(self._dyrep_other(plan, s_rows, last_rows, True)) \
                if self.message_embedding is not None else lay.gather(s_rows, plan.pe_other_row)
        dt = plan.pe_t - last_rows.index_select(0, plan.pe_row)
        raw = self.message(s_self, s_other, self.time_enc(lay.place(dt)), lay.place(plan.pe_feat))
        sel = RowLayout.of(plan.orig_sel) if plan.orig_sel is not None else RowLayout.leading(plan.agg_sel.shape[0])
        if plan.agg_identity:  # one pending event per key, in key order (the last aggregator)
            t_agg = plan.pe_t
            agg = raw if sel.same(lay) else sel.place(lay.take(raw))
        else:
            agg, t_agg = self.aggregator(lay.take(raw).index_select(0, plan.agg_entry), plan.agg_local,
                                         plan.pe_t.index_select(0, plan.agg_entry), plan.agg_sel.shape[0])
            agg = sel.place(agg)
        new = sel.take(self.updater(agg, sel.gather(s_key, plan.agg_sel)))
        return s_key.index_copy(0, plan.agg_sel, new), last_key.index_copy(0, plan.agg_sel, t_agg)

    def _dyrep_other(self, plan: BatchPlan, s_rows, last_rows, invariant: bool = False):
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
        dt = d.t - last_rows.index_select(0, d.own_row)
        if not invariant:
            z = self.message_embedding(own, dt, time_enc=self.time_enc, nbr_s=s_rows, nbr_index=d.nb_row,
                                       nbr_e=d.nb_feat, nbr_dt=d.nb_dt, nbr_mask=d.nb_mask)
        else:
            z = self._attend(self.message_embedding, own, dt, s_rows, d.nb_row, d.nb_feat, d.nb_dt, d.nb_mask,
                             (RowLayout.of(d.orig) if d.orig is not None else RowLayout.leading(own.shape[0]),
                              RowLayout.of(plan.orig_rows) if plan.orig_rows is not None
                              else RowLayout.leading(s_rows.shape[0])))
        return z.index_select(0, d.inv)

    def _attend(self, embedding, own, own_dt, nbr_s, nbr_index, nbr_e, nbr_dt, nbr_mask, layouts=None):
        """A graph-attention embedding; ``layouts`` (of the queries and of ``nbr_s``'s rows,
        :class:`RowLayout`): each query's result whatever the others computed with it (slot by
        slot, each row at its place).  With ``layouts``, ``own`` and ``nbr_s`` may each be a
        ``(source, index)`` pair: the rows ``source[index]``, gathered into their places
        (:meth:`RowLayout.gather`)."""
        if layouts is None:
            return embedding(own, own_dt, time_enc=self.time_enc, nbr_s=nbr_s, nbr_index=nbr_index, nbr_e=nbr_e,
                             nbr_dt=nbr_dt, nbr_mask=nbr_mask)
        queries, rows = layouts
        index = nbr_index if rows.first else \
            rows.positions(nbr_index.device).index_select(0, nbr_index.reshape(-1)).view_as(nbr_index)
        own = queries.gather(*own) if isinstance(own, tuple) else queries.place(own)
        nbr_s = rows.gather(*nbr_s) if isinstance(nbr_s, tuple) else rows.place(nbr_s)
        own_dt, index, nbr_e, nbr_dt, nbr_mask = queries.place(own_dt, index, nbr_e, nbr_dt, nbr_mask)
        return queries.take(embedding(own, own_dt, time_enc=self.time_enc, nbr_s=nbr_s, nbr_index=index,
                                      nbr_e=nbr_e, nbr_dt=nbr_dt, nbr_mask=nbr_mask, dense=False))

    def embed_keys(self, q, states, lasts, static=None, invariant: bool = False) -> torch.Tensor:
        """Embeddings of distinct queries from key states.

        Parameters
        ----------
        q : BatchPlan or QueryPlan
            Its ``uq_key`` and ``uq_t`` (each query's own key and time), ``nb_keys``, ``nb_key``,
            ``nb_feat``, ``nb_dt``, ``nb_mask`` (its neighbours' keys and slots), the keys as
            positions in ``states``.
        states, lasts : tensors (K, memory_dim), (K,)
            Key states and their times (:meth:`key_states`).
        static : tensor (K, memory_dim), optional
            The static memory of each key's node.
        invariant : bool
            Each query's embedding whatever the others computed with it (see :meth:`key_states`).

        Returns
        -------
        float32 tensor, shape (m, embedding dim)
        """
        h = states  # what the embedding reads: the dynamic memory, plus the static one
        if static is not None and self.embedding.needs_neighbors:  # DistTGL: before the attention
            h = states + static
        own_dt = q.uq_t - lasts.index_select(0, q.uq_key)
        orig = getattr(q, "orig_uq", None)
        queries = (RowLayout.of(orig) if orig is not None else RowLayout.leading(own_dt.shape[0])) if invariant else None
        if self.embedding.needs_neighbors:
            if not invariant:
                return self._attend(self.embedding, h.index_select(0, q.uq_key), own_dt, h.index_select(0, q.nb_keys),
                                    q.nb_key, q.nb_feat, q.nb_dt, q.nb_mask)
            # (the rows are gathered straight into their places)
            orig = getattr(q, "orig_nbk", None)
            layouts = (queries, RowLayout.of(orig) if orig is not None else RowLayout.leading(q.nb_keys.shape[0]))
            return self._attend(self.embedding, (h, q.uq_key), own_dt, (h, q.nb_keys), q.nb_key, q.nb_feat, q.nb_dt,
                                q.nb_mask, layouts)
        if invariant:
            z = queries.take(self.embedding(queries.gather(h, q.uq_key), queries.place(own_dt)))
        else:
            z = self.embedding(h.index_select(0, q.uq_key), own_dt)
        if static is not None:
            # A memory-only embedding (JODIE's time projection, DyRep's identity) gets the static
            # part after it, as JODIE joins its static embeddings to the projected one: inside
            # the projection, (1 + w dt) scales the unbounded static rows and training diverged
            # (CollegeMsg: epoch-2 loss rose 1.32 -> 1.64; test AP 0.859 against 0.876 after).
            z = z + static.index_select(0, q.uq_key)
        return z

    def key_static(self, key_nodes: torch.Tensor) -> Optional[torch.Tensor]:
        """The static memory of each key's node (``key_nodes`` the keys' node ids), or None."""
        return None if self.static is None else self.static(key_nodes)

    def compute(self, plan: BatchPlan, rows, message_inputs=None):
        """Embeddings of the plan's queries: ``(z, states, last_update)``, ``z`` float32 of shape
        (Q, embedding dim) in query order, and the key states the node state stores from
        (:meth:`NodeStates.absorb`).  ``rows`` and ``message_inputs`` as for :meth:`key_states`."""
        states, lasts = self.key_states(plan, rows, message_inputs)
        static = None
        if self.static is not None:
            # one lookup per distinct node of the step (a node has several keys at several times)
            static = self.static(plan.rows).index_select(0, plan.key_row)
        z = self.embed_keys(plan, states, lasts, static)
        return z.index_select(0, plan.q_inv), states, lasts

    def forward(self, plan: BatchPlan, rows, message_inputs, num_events: int):
        """Score a batch planned with queries ``[src, dst, neg]``: ``(pos_logits, neg_logits, z,
        states, last_update)``.  Steps 1-2 above; what DDP wraps.  (The positives and the
        negatives go through the decoder apart: one pass over both would be fewer operators, but
        matrix products of another height round differently, and every figure would move.)"""
        z, states, lasts = self.compute(plan, rows, message_inputs)
        pos, neg, _ = QueryLayout(int(num_events)).score(self.score, z)
        return pos, neg, z, states, lasts

    def score(self, z_src: torch.Tensor, z_dst: torch.Tensor, layout: Optional["RowLayout"] = None) -> torch.Tensor:
        """Logits of the pairs ``(z_src[i], z_dst[i])``; ``layout`` (:class:`RowLayout`): each
        at its place, whatever the others computed with it."""
        if layout is None:
            return self.decoder(z_src, z_dst)
        return layout.take(self.decoder(*layout.place(z_src, z_dst)))


class StatefulModel:
    """A model's weights (:class:`TemporalGNN`) and its node state
    (:class:`~speed.train.state.nodes.NodeStates`), side by side, with the stages of a step
    that need both.  Not a module: DDP and optimisers see ``net`` alone.

    Parameters
    ----------
    net : TemporalGNN
    state : NodeStates
    """

    def __init__(self, net: TemporalGNN, state: NodeStates):
        self.net = net
        self.state = state
        self._state_device: Optional[torch.device] = None  # see keep_state_on
        self.divider = None  # see divide

    @classmethod
    def around(cls, net: TemporalGNN, num_nodes: int, neighbors: int = 10, components=()) -> "StatefulModel":
        """``net`` with a fresh node state of ``num_nodes`` rows (a model assembled by hand)."""
        return cls(net, NodeStates(num_nodes, net.memory_dim, net.embedding.out_dim, neighbors, net.plan_needs(),
                                   components))

    @property
    def name(self) -> str:
        return self.net.name

    @property
    def device(self) -> torch.device:
        """Where the weights compute."""
        return self.net.device

    @property
    def num_nodes(self) -> int:
        return self.state.num_nodes

    def grow(self, num_nodes: int) -> None:
        """Room for nodes up to ``num_nodes`` (new ones start empty): the state's rows, and a
        static table's."""
        self.state.grow(num_nodes)
        if self.net.static is not None:
            self.net.static.grow(num_nodes)

    def to(self, device) -> "StatefulModel":
        """Weights and memories to ``device`` (memories stay where :meth:`keep_state_on` put them)."""
        self.net.to(device)
        self.state.to(self._state_device if self._state_device is not None else device)
        return self

    def keep_state_on(self, device) -> "StatefulModel":
        """Hold the node state on ``device`` (e.g. ``"cpu"``) while the weights compute
        elsewhere: each step moves only the rows it reads or writes.  PAC's full-graph
        evaluation model does this, so evaluating on a GPU never needs the device to hold
        every node."""
        self._state_device = torch.device(device)
        self.state.to(self._state_device)
        return self

    def divide(self, divider) -> "StatefulModel":
        """Run evaluation steps with their work divided among processes
        (:class:`speed.train.eval.divided.DividedStep`; None: this process does all of it)."""
        self.divider = divider
        return self

    def train(self, mode: bool = True) -> "StatefulModel":
        self.net.train(mode)
        return self

    def eval(self) -> "StatefulModel":
        return self.train(False)

    # ------------------------------------------------------------------ stages
    def plan(self, nodes, times, events=None, neighbors: bool = True, push: bool = True,
             on_device: bool = True) -> BatchPlan:
        """The plan of a step on the state (see :meth:`NodeStates.plan`), on the weights' device
        (``on_device=False``: on the host, as built)."""
        plan = self.state.plan(nodes, times, events, neighbors=neighbors, push=push)
        return plan.to(self.device) if on_device else plan

    def inputs(self, plan: BatchPlan):
        """What the weights read for ``plan``: the stored rows (read ahead under staleness,
        now otherwise) and the components' message inputs."""
        rows = plan.stale if plan.stale is not None else self.state.read(plan)
        return rows, self.state.message_inputs(plan)

    def compute(self, plan: BatchPlan):
        """:meth:`TemporalGNN.compute` on the state's rows."""
        return self.net.compute(plan, *self.inputs(plan))

    def forward(self, plan: BatchPlan, num_events: int):
        """:meth:`TemporalGNN.forward` on the state's rows."""
        return self.net(plan, *self.inputs(plan), num_events)

    __call__ = forward

    def score(self, z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
        return self.net.score(z_src, z_dst)

    def absorb(self, plan: BatchPlan, states, lasts, z=None) -> None:
        """Step 3: the batch's endpoints store their memory (:meth:`NodeStates.absorb`)."""
        self.state.absorb(plan, states, lasts, z)

    def settle(self, n_id: torch.Tensor, before: float = np.inf) -> None:
        """Apply pending events earlier than ``before`` (:meth:`NodeStates.settle`)."""
        self.state.settle(self.net, n_id, before)

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
        t = as_numpy(t).astype(np.float64)
        lay = QueryLayout(len(t), neg_dst=False)
        more = [(as_numpy(n), as_numpy(q).astype(np.float64)) for n, q in (extra or [])]
        plan = self.plan(np.concatenate([lay.nodes(as_numpy(src), as_numpy(dst))] + [n for n, _ in more]),
                         np.concatenate([lay.times(t)] + [q for _, q in more]), events=(src, dst, t, eid))
        z, states, lasts = self.compute(plan)
        self.absorb(plan, states, lasts, z)
        return z

    # ------------------------------------------------------------------ checkpoints
    def params_state_dict(self) -> Dict[str, torch.Tensor]:
        """The weights' state dict: what ranks share and checkpoints restore."""
        return self.net.state_dict()

    def load_params(self, params: Dict[str, torch.Tensor]) -> None:
        """Load weights from a state dict, ignoring any node-state entries in it."""
        prefixes = self.state.snapshots.memory_prefixes()
        self.net.load_state_dict({k: v for k, v in params.items() if not k.startswith(prefixes)}, strict=False)

    def weights_and_memories(self) -> Dict[str, torch.Tensor]:
        """Weights and memories in one dict (a best checkpoint's ``model``): the weights'
        entries, and ``memory.memory``, ``memory.last_update`` (and TIGE's ``left_memory.*``)."""
        return {**self.net.state_dict(), **self.state.snapshots.memory_dict()}

    def load_weights_and_memories(self, state: Dict[str, torch.Tensor], adopt: bool = False) -> None:
        """Load what :meth:`weights_and_memories` wrote (memories sized to their rows; ``adopt``: the
        memories hold the given tensors themselves, see :meth:`~speed.train.state.snapshots.Snapshots.load_memory_dict`)."""
        prefixes = self.state.snapshots.memory_prefixes()
        self.net.load_state_dict({k: v for k, v in state.items() if not k.startswith(prefixes)})
        self.state.snapshots.load_memory_dict({k: v for k, v in state.items() if k.startswith(prefixes)}, adopt=adopt)



class RowLayout:
    """Where rows go when their results must not depend on which other rows are computed with
    them (an evaluation divided among processes must give each row the bits one process
    computing all of them gives it).

    Measured on this project's CPU builds (float32 ``addmm`` and ``bmm``, one thread): a row's
    result depends on the other rows only through the matrix height (none from 16 rows up), on
    its place only through its memory alignment -- the same for places congruent modulo
    :data:`PERIOD` -- and a vectorised elementwise kernel rounds the elements of a tensor's last
    partial vector (its scalar tail) differently.  So a row whose index in the whole step is
    ``i`` is placed at a position ``≡ i (mod PERIOD)`` (rows of one residue one after another,
    16 apart), and the height is a multiple of :data:`BLOCK` (at least one block): any subset
    of rows then computes what the whole set computes for them.

    Parameters
    ----------
    index : int ndarray or tensor, shape (n,)
        Each row's index in the whole step (distinct).
    first : int, optional
        Instead of ``index``: the rows ``0 .. first - 1``, each at its own index (:meth:`leading`).
    """

    PERIOD = 16
    BLOCK = 32

    def __init__(self, index=None, *, first: Optional[int] = None):
        self._on = {}
        self.first = first is not None  # the rows 0 .. first - 1 (see leading)
        if self.first:
            self.n = int(first)
            self.rows = max(1, -(-self.n // self.BLOCK)) * self.BLOCK
            self._positions = None
            return
        index = np.ascontiguousarray(index.cpu() if torch.is_tensor(index) else index, dtype=np.int64)
        self.n = int(index.size)
        positions, height = residue_positions(index, self.PERIOD)
        self.rows = max(1, -(-int(height) // self.BLOCK)) * self.BLOCK
        self._positions = torch.from_numpy(positions)

    @classmethod
    def of(cls, index) -> "RowLayout":
        """``index`` as a layout: itself when it is one already (its positions may be on a
        device: :meth:`hold`)."""
        return index if isinstance(index, cls) else cls(index)

    def host_positions(self) -> Optional[torch.Tensor]:
        """int64 (n,): each row's position, on the host (None for :meth:`leading` rows)."""
        return self._positions

    def hold(self, device, positions: Optional[torch.Tensor]) -> None:
        """Keep :meth:`host_positions` as moved to a device (so that moving them can share a
        copy with a step's other tensors)."""
        if positions is not None:
            self._on[positions.device] = positions

    @classmethod
    def leading(cls, n: int) -> "RowLayout":
        """The rows ``0 .. n - 1`` of the whole step: each at its own index, so placing is a
        copy into the first ``n`` rows and taking a slice (what :meth:`__init__` gives for
        ``arange(n)``, without building its positions; a step computed whole takes this)."""
        return cls(first=n)

    def positions(self, device) -> torch.Tensor:
        device = torch.device(device)
        if device not in self._on:
            self._on[device] = torch.arange(self.n, device=device) if self.first else self._positions.to(device)
        return self._on[device]

    def place(self, *tensors):
        """Each tensor (``n`` rows) at its rows' places among :attr:`rows` zero rows."""
        out = []
        for t in tensors:
            if self.first:
                # zero rows after the n: one padding operator (no zeros written under the rows
                # copied), and none where n fills the height already (no operator writes
                # into its inputs, so the tensor itself serves)
                extra = self.rows - self.n
                if extra == 0:
                    out.append(t)
                elif t.numel():
                    out.append(torch.nn.functional.pad(t, (0, 0) * (t.dim() - 1) + (0, extra)))
                else:  # (padding refuses a tensor with an empty dimension: e.g. no edge features)
                    out.append(t.new_zeros((self.rows,) + tuple(t.shape[1:])))
                continue
            full = t.new_zeros((self.rows,) + tuple(t.shape[1:]))
            # (index_copy_: the rows' places are distinct, and it skips the general index kernel)
            full.index_copy_(0, self.positions(t.device), t)
            out.append(full)
        return out if len(out) > 1 else out[0]

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """The ``n`` rows of a result computed on placed rows, in their order."""
        if self.first:
            return t[:self.n]
        return t.index_select(0, self.positions(t.device))

    def gather(self, source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``place(source.index_select(0, index))`` in one copy: the index is placed, not the
        rows.  A padding row then holds ``source``'s first row rather than zeros; no result of
        a real row depends on it (rows are computed apart, see the class), and :meth:`take`
        leaves it."""
        if source.shape[0] == 0 or index.shape[0] == 0:
            return self.place(source.index_select(0, index))
        if self.first:
            extra = self.rows - self.n
            placed = index if extra == 0 else torch.nn.functional.pad(index, (0, extra))
        else:
            placed = index.new_zeros(self.rows).index_copy_(0, self.positions(index.device), index)
        return source.index_select(0, placed)

    def same(self, other: "RowLayout") -> bool:
        """Whether ``other`` places rows exactly as this layout does."""
        if other is self:
            return True
        if self.first or other.first:
            return self.first and other.first and self.n == other.n
        return self.n == other.n and torch.equal(self.host_positions(), other.host_positions())

    @classmethod
    def contiguous(cls, start: int, n: int) -> "RowLayout":
        """The rows ``start .. start + n - 1`` of the whole step."""
        return cls.leading(n) if start == 0 else cls(np.arange(start, start + n, dtype=np.int64))




# build_model's own knobs (not training hyperparameters, so not in TrainConfig): JODIE's Δt
# normaliser (a run derives it from the log, speed.train.model.build.time_scale) and dropout
MODEL_ONLY_DEFAULTS = {"time_scale": 1.0, "dropout": 0.1}


def model_defaults() -> Dict:
    """The keyword defaults of :func:`build_model`: the architecture fields of
    :class:`~speed.train.config.TrainConfig` (one place for them), and :data:`MODEL_ONLY_DEFAULTS`."""
    return {**TrainConfig().architecture(), **MODEL_ONLY_DEFAULTS}


#: the values a recipe's fields may take (speed.train.recipes.Recipe); anything else is refused
RECIPE_CHOICES = {"updater": ("gru", "rnn"), "embedding": ("attention", "time_projection", "identity"),
                  "message_other": ("memory", "attention")}


def _check_recipe(name: str, recipe) -> None:
    """Refuse a recipe whose field names no module (a typo would build another one silently)."""
    for field_name, choices in RECIPE_CHOICES.items():
        value = getattr(recipe, field_name)
        if value not in choices:
            raise ValueError(f"recipe {name!r}: {field_name} {value!r} names no module (choose from "
                             f"{', '.join(choices)})")
    for kind in recipe.state:
        if kind not in COMPONENTS:
            raise ValueError(f"recipe {name!r}: state {kind!r} names no component (choose from "
                             f"{', '.join(COMPONENTS)})")


def build_model(name: str, num_nodes: int, msg_dim: int = 0, static_nodes: Optional[int] = None,
                **hyper) -> StatefulModel:
    """A model assembled from the modules by its recipe (:data:`speed.train.recipes.RECIPES`),
    with its node state.

    Parameters
    ----------
    name : {"jodie", "dyrep", "tgn", "tige"}
    num_nodes : int
        Rows of the node state.
    msg_dim : int
        Edge feature size (0 without features).
    static_nodes : int, optional
        Rows of a static table: every node of the log (default ``num_nodes``; a PAC rank's
        state holds fewer rows).
    **hyper
        Any of ``memory_dim, time_dim, embedding_dim, neighbors, message, aggregator,
        static_memory`` (defaults and choices: :class:`~speed.train.config.TrainConfig`), and
        ``time_scale`` (JODIE's Δt normaliser) and ``dropout``.

    Returns
    -------
    StatefulModel
        ``net`` (the weights) and ``state`` (the node state).
    """
    defaults = model_defaults()
    unknown = sorted(set(hyper) - set(defaults))
    if unknown:
        raise TypeError(f"build_model() got unexpected keyword argument(s) {', '.join(unknown)}")
    h = {**defaults, **hyper}
    name = name.lower()
    if name not in RECIPES:
        raise ValueError(f"unknown model '{name}' (choose from {', '.join(RECIPES)})")
    if h["static_memory"] not in STATIC_KINDS:
        raise ValueError(f"unknown static memory {h['static_memory']!r} (choose from {', '.join(STATIC_KINDS)})")
    if h["message"] not in MESSAGES or h["aggregator"] not in AGGREGATORS:
        raise ValueError(f"unknown message {h['message']!r} or aggregator {h['aggregator']!r} (choose from "
                         f"{', '.join(MESSAGES)} and {', '.join(AGGREGATORS)})")
    memory_dim, time_dim, embedding_dim = int(h["memory_dim"]), int(h["time_dim"]), int(h["embedding_dim"])
    dropout = float(h["dropout"])
    recipe = RECIPES[name]
    _check_recipe(name, recipe)
    if recipe.embedding == "attention":
        embedding = GraphAttentionEmbedding(memory_dim, time_dim, msg_dim, embedding_dim, dropout=dropout)
    elif recipe.embedding == "time_projection":
        embedding = TimeProjectionEmbedding(memory_dim, float(h["time_scale"]))
    else:
        embedding = IdentityEmbedding(memory_dim)
    # what messages are built from: the memory, or what a state component says (TIGER's h(t-))
    state_dim = memory_dim
    for c in recipe.state:
        state_dim = COMPONENTS[c].message_dim(state_dim, embedding.out_dim)
    msg_fn = IdentityMessage(state_dim, time_dim, msg_dim) if h["message"] == "identity" else \
        MLPMessage(state_dim, time_dim, msg_dim, out_dim=memory_dim)
    updater = (GRUUpdater if recipe.updater == "gru" else RNNUpdater)(msg_fn.out_dim, memory_dim)
    extra = {}
    if recipe.message_other == "attention":  # the other side as an attention embedding of the memory's width
        extra["message_embedding"] = GraphAttentionEmbedding(memory_dim, time_dim, msg_dim, memory_dim,
                                                             dropout=dropout)
    agg = LastAggregator() if h["aggregator"] == "last" else MeanAggregator()
    # (modules are created in this order, embedding, message, updater, the rest, so the weights a
    # seed gives stay those of earlier versions)
    decoder = LinkPredictor(embedding.out_dim)
    if h["static_memory"] != "none":  # created last: a seed gives the other weights as without it
        extra["static"] = StaticMemory(num_nodes if static_nodes is None else static_nodes, memory_dim, memory_dim,
                                       trainable=h["static_memory"] == "learned")
    net = TemporalGNN(memory_dim, time_dim, msg_dim, msg_fn, agg, updater, embedding, decoder, name=name, **extra)
    # what rebuilds this model from a checkpoint (speed.load_run)
    net.spec = dict(name=name, num_nodes=int(num_nodes), msg_dim=int(msg_dim), memory_dim=memory_dim,
                    time_dim=time_dim, embedding_dim=embedding_dim, neighbors=int(h["neighbors"]),
                    time_scale=float(h["time_scale"]), dropout=dropout, message=h["message"],
                    aggregator=h["aggregator"], static_memory=h["static_memory"])
    state = NodeStates(num_nodes, memory_dim, embedding.out_dim, int(h["neighbors"]), net.plan_needs(),
                       recipe.state)
    return StatefulModel(net, state)
