"""Memory-based temporal GNNs as compositions of :mod:`speed.train.modules`.

One class, :class:`TemporalGNN`, runs every model; :func:`build_model` picks its parts:

========  ==========  ===============  ==================  ==========  ===========
model     updater     message          embedding           aggregator  memories
========  ==========  ===============  ==================  ==========  ===========
jodie     RNN         identity         time projection     last        one
dyrep     RNN         identity, other  identity            last        one
                      side = its graph
                      attention emb.
tgn       GRU         identity         graph attention     last        one
tige      GRU         identity from    graph attention     last        two (TIGER)
                      the embedding
                      memory h(t-)
========  ==========  ===============  ==================  ==========  ===========

Memory semantics (TGN's, as in PyG's ``TGNMemory``; every result depends on them):

* Each node has *pending* events: those of the most recent batch it took part in, not yet
  applied to its memory (:class:`~speed.train.store.MessageStore`).
* :meth:`TemporalGNN.memory_of` returns a node's memory *with its pending events applied*:
  one message per event, ``msg(s_i, s_j, Φ(t - last_update_i), e_ij)`` from the currently
  stored states, aggregated per node (last or mean) and passed through the updater.  In
  training this runs inside the step, so every node a batch touches -- endpoints, negatives
  and sampled neighbours -- carries gradient into the message and updater weights.

Per batch:

1. :meth:`TemporalGNN.embed` computes ``z_i(t)`` for the batch's nodes from ``memory_of``
   and from neighbours inserted before this batch (strictly earlier times);
2. the decoder scores the batch;
3. :meth:`TemporalGNN.observe` stores ``memory_of`` of the batch's endpoints (detached,
   ``last_update`` = time of the applied message), replaces their pending events with this
   batch's, and inserts the batch into the neighbour sampler;
4. the optimiser steps.

So an event never sees itself or any later event, in memory or in sampling.
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
from .sampler import RecentNeighborSampler
from .store import MessageStore

from .recipes import AGGREGATORS, MESSAGES, RECIPES


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
    """

    memories: Dict[str, Tuple[torch.Tensor, torch.Tensor]]
    pending: Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]

    def to(self, device) -> "NodeState":
        return NodeState({k: (s.to(device), t.to(device)) for k, (s, t) in self.memories.items()},
                         tuple(x.to(device) for x in self.pending))


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
        TIGE: keep a second memory of each node's last embedding ``h(t-)`` and build
        messages from it, while the GRU updates the first memory ``h(t+)``.
    """

    def __init__(self, num_nodes: int, memory_dim: int, time_dim: int, msg_dim: int, message: nn.Module,
                 aggregator: nn.Module, updater: nn.Module, embedding: nn.Module, decoder: nn.Module,
                 neighbors: int = 10, message_embedding: Optional[nn.Module] = None, dual_memory: bool = False,
                 name: str = "custom"):
        super().__init__()
        self.name = name
        self.num_nodes = int(num_nodes)
        self.msg_dim = int(msg_dim)
        self.memory = NodeMemory(num_nodes, memory_dim)
        self.left_memory = NodeMemory(num_nodes, embedding.out_dim) if dual_memory else None
        self.time_enc = TimeEncoder(time_dim)
        self.message = message
        self.aggregator = aggregator
        self.updater = updater
        self.embedding = embedding
        self.message_embedding = message_embedding
        self.decoder = decoder
        self.sampler = RecentNeighborSampler(num_nodes, neighbors)
        self.store = MessageStore(num_nodes)
        self._last_states = None  # (sorted ids, states, last_update) of the latest embed, detached
        self._state_device: Optional[torch.device] = None  # see keep_node_state_on
        self.edge_features: Optional[torch.Tensor] = None  # (E_total, msg_dim), looked up by eid
        self.spec: Optional[dict] = None  # build_model's arguments, when it built this model

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        if self._state_device is not None:  # node state pinned to host memory stays there
            self.keep_node_state_on(self._state_device)
        self.store.to(self.memory.memory.device)  # the store is plain tensors, not buffers
        return out

    def keep_node_state_on(self, device) -> "TemporalGNN":
        """Hold memories, pending messages and edge features on ``device`` (e.g. ``"cpu"``)
        while the weights compute elsewhere: each batch moves only the rows it reads or
        writes.  PAC's full-graph evaluation model does this, so evaluating on a GPU never
        needs the device to hold every node."""
        self._state_device = torch.device(device)
        for mem in self.memories().values():
            mem.memory = mem.memory.to(self._state_device)
            mem.last_update = mem.last_update.to(self._state_device)
        self.store.to(self._state_device)
        if self.edge_features is not None:
            self.edge_features = self.edge_features.to(self._state_device)
        return self

    # ------------------------------------------------------------------------ state
    def set_edge_features(self, msg: Optional[np.ndarray]) -> None:
        """Edge features of the whole log, indexed by event id (kept out of checkpoints)."""
        self.edge_features = None if msg is None else torch.as_tensor(msg, dtype=torch.float32,
                                                                       device=self.memory.memory.device)

    def reset_state(self) -> None:
        """Start of a pass: zero memory, forget pending messages and neighbours."""
        self._last_states = None
        for mem in self.memories().values():
            mem.reset_state()
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
        row, other, t, eid = self.store.gather(n_id)
        return NodeState({k: tuple(x.detach().clone() for x in m.read(n_id)) for k, m in self.memories().items()},
                         (n_id[row], other, t, eid))

    def load_node_state(self, n_id: torch.Tensor, state: NodeState) -> None:
        """Overwrite the rows ``n_id`` with ``state`` (as returned by :meth:`node_state`);
        their pending events become exactly ``state.pending``."""
        self._last_states = None
        for k, mem in self.memories().items():
            values, last = state.memories[k]
            mem.write(n_id, values.to(mem.memory.device), last.to(mem.last_update.device))
        self.store.clear(n_id)
        node, other, t, eid = (x.to(self.memory.memory.device) for x in state.pending)
        if node.numel():
            self.store.replace(node, other, t, eid)

    @torch.no_grad()
    def settle(self, n_id: torch.Tensor) -> None:
        """Apply the pending events of the distinct nodes ``n_id`` to their stored memory
        (so the stored rows are complete states, e.g. before they are synchronised)."""
        self._last_states = None
        state, last = self.memory_of(n_id)
        self.memory.write(n_id, state, last)
        self.store.clear(n_id)

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
        return {"memories": {k: m.backup() for k, m in self.memories().items()},
                "store": self.store.state_dict(), "sampler": self.sampler.state_dict()}

    def restore(self, state: dict) -> None:
        self._last_states = None
        for k, mem in self.memories().items():
            mem.restore(state["memories"][k])
        self.store.load_state_dict(state["store"])
        self.sampler.load_state_dict(state["sampler"])

    # -------------------------------------------------------------------- features
    def _edge_feat(self, eid: torch.Tensor) -> torch.Tensor:
        if self.edge_features is None or self.msg_dim == 0:
            return torch.zeros(*eid.shape, 0, device=eid.device)
        feat = self.edge_features[eid.clamp(min=0).to(self.edge_features.device)].to(eid.device)
        return feat.masked_fill((eid < 0).unsqueeze(-1), 0.0)

    def memory_of(self, n_id: torch.Tensor):
        """Memory of distinct nodes ``n_id`` with their pending events applied.

        Returns
        -------
        state : float32 tensor, shape (n, memory_dim)
            Carries gradient where pending events were applied.
        last_update : float64 tensor, shape (n,)
        """
        s, last = self.memory.read(n_id)
        row, other, t, eid = self.store.gather(n_id)
        if row.numel() == 0:
            return s, last
        node = n_id[row]
        if self.left_memory is not None:  # TIGE: messages carry h(t'-), the last embeddings
            s_self = self.left_memory.read(node)[0]
            s_other = self.left_memory.read(other)[0]
        elif self.message_embedding is not None:  # DyRep: the other side as its attention embedding
            s_self = s[row]
            s_other = self._embed(self.message_embedding, other, t, updated=False)
        else:
            s_self = s[row]
            s_other = self.memory.read(other)[0]
        raw = self.message(s_self, s_other, self.time_enc(t - last[row]), self._edge_feat(eid))
        has = torch.zeros(n_id.numel(), dtype=torch.bool, device=n_id.device)
        has[row] = True
        sel = torch.nonzero(has).squeeze(1)
        local = torch.cumsum(has.long(), 0)[row] - 1  # row -> position among nodes with events
        agg, t_agg = self.aggregator(raw, local, t, sel.numel())
        new = self.updater(agg, s.index_select(0, sel))
        return s.index_copy(0, sel, new), last.index_copy(0, sel, t_agg)

    def _embed(self, embedding: nn.Module, nodes: torch.Tensor, t: torch.Tensor, updated: bool = True):
        """Embeddings of ``nodes`` at ``t`` by ``embedding``; memory states via
        :meth:`memory_of` (``updated``) or as stored."""
        state = self.memory_of if updated else self.memory.read
        if not embedding.needs_neighbors:
            uniq, inv = torch.unique(nodes, return_inverse=True)
            s, last = state(uniq)
            return embedding(s[inv], t - last[inv])
        b = nodes.shape[0]
        nb = self.sampler.sample(nodes.cpu().numpy(), t.cpu().numpy())
        dev = nodes.device
        nbr_nodes, nbr_t = nb.nodes.to(dev), nb.times.to(dev)
        # one memory computation for the batch's nodes and all their neighbours
        uniq, inv = torch.unique(torch.cat([nodes, nbr_nodes.reshape(-1)]), return_inverse=True)
        s, last = state(uniq)
        if updated:  # observe() stores these same states for the batch's endpoints
            self._last_states = (uniq, s.detach(), last)
        own = inv[:b]
        return embedding(s[own], t - last[own], time_enc=self.time_enc, nbr_s=s, nbr_index=inv[b:].view_as(nbr_nodes),
                         nbr_e=self._edge_feat(nb.eids.to(dev)), nbr_dt=(t.unsqueeze(1) - nbr_t),
                         nbr_mask=nb.mask.to(dev))

    def resize(self, num_nodes: int) -> None:
        """Size memory, pending messages and neighbour rings to ``num_nodes`` fresh rows
        (a PAC rank's local nodes); parameters are untouched."""
        dev = self.memory.memory.device
        self.num_nodes = int(num_nodes)
        for mem in self.memories().values():
            mem.resize(self.num_nodes)
        self.sampler = RecentNeighborSampler(self.num_nodes, self.sampler.k, self.sampler.undirected)
        self.store = MessageStore(self.num_nodes, dev)
        self._last_states = None

    def grow(self, num_nodes: int) -> None:
        """Make room for nodes up to ``num_nodes``, keeping every existing row: new nodes
        start with zero memory, no pending events and no neighbours (a trained model
        meeting nodes it never saw)."""
        if int(num_nodes) <= self.num_nodes:
            return
        self._last_states = None
        self.num_nodes = int(num_nodes)
        for mem in self.memories().values():
            mem.grow(self.num_nodes)
        self.sampler.grow(self.num_nodes)
        self.store.grow(self.num_nodes)

    # ---------------------------------------------------------------------- stages
    def forward(self, src: torch.Tensor, dst: torch.Tensor, neg: torch.Tensor, t: torch.Tensor):
        """Score a batch and its negatives: ``(pos_logits, neg_logits, z)``, ``z`` being the
        embeddings of ``cat([src, dst, neg])`` at ``t``.  Steps 1-2 above; what DDP wraps."""
        n = src.shape[0]
        z = self.embed(torch.cat([src, dst, neg]), torch.cat([t, t, t]))
        return self.score(z[:n], z[n:2 * n]), self.score(z[:n], z[2 * n:]), z

    def embed(self, nodes: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Embeddings ``z_i(t)`` of ``nodes`` at times ``t`` (float64).  Step 1 above."""
        return self._embed(self.embedding, nodes, t)

    def score(self, z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
        return self.decoder(z_src, z_dst)

    def _cached_states(self, uniq: torch.Tensor):
        """``memory_of(uniq)``, taken from the latest :meth:`embed` when it covered them
        (nothing has been stored since, so the values are the same)."""
        cache, self._last_states = self._last_states, None
        if cache is not None:
            ids, states, last = cache
            pos = torch.searchsorted(ids, uniq).clamp(max=ids.numel() - 1)
            if bool((ids[pos] == uniq).all()):
                return states[pos], last[pos]
        return self.memory_of(uniq)

    @torch.no_grad()
    def observe(self, src: torch.Tensor, dst: torch.Tensor, t: torch.Tensor, eid: torch.Tensor,
                z: Optional[torch.Tensor] = None) -> None:
        """The batch has been scored: apply its endpoints' pending events, make this batch
        their pending events, record its neighbours.  Step 3 above.

        ``z`` are the embeddings of ``cat([src, dst])`` at ``t``: TIGE keeps them as the
        second memory ``h(t-)`` (later events of a node in the batch win).
        """
        nodes = torch.cat([src, dst])
        uniq, inv = torch.unique(nodes, return_inverse=True)
        state, last = self._cached_states(uniq)
        self.memory.write(uniq, state, last)
        self.store.replace(nodes, torch.cat([dst, src]), torch.cat([t, t]), torch.cat([eid, eid]))
        self.sampler.insert(src.cpu().numpy(), dst.cpu().numpy(), t.cpu().numpy(), eid.cpu().numpy())
        if self.left_memory is not None and z is not None:
            tt = torch.cat([t, t])
            latest = torch.full((uniq.shape[0],), -1, dtype=torch.long, device=nodes.device).scatter_reduce(
                0, inv, torch.arange(nodes.shape[0], device=nodes.device), reduce="amax")
            self.left_memory.write(uniq, z[latest].detach(), tt[latest])


def build_model(name: str, num_nodes: int, msg_dim: int = 0, memory_dim: int = 100, time_dim: int = 100,
                embedding_dim: int = 100, neighbors: int = 10, time_scale: float = 1.0,
                dropout: float = 0.1, message: str = "identity", aggregator: str = "last") -> TemporalGNN:
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
    """
    name = name.lower()
    if name not in RECIPES:
        raise ValueError(f"unknown model '{name}' (choose from {', '.join(RECIPES)})")
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
    model = TemporalGNN(num_nodes, memory_dim, time_dim, msg_dim, msg_fn, agg, updater, embedding,
                        LinkPredictor(embedding.out_dim), neighbors=neighbors, name=name, **extra)
    # what rebuilds this model from a checkpoint (speed.load_run)
    model.spec = dict(name=name, num_nodes=int(num_nodes), msg_dim=int(msg_dim), memory_dim=int(memory_dim),
                      time_dim=int(time_dim), embedding_dim=int(embedding_dim), neighbors=int(neighbors),
                      time_scale=float(time_scale), dropout=float(dropout), message=message, aggregator=aggregator)
    return model
