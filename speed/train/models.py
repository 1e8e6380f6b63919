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

Memory update order, per batch of events (documented because every result depends on it):

1. :meth:`TemporalGNN.flush` turns the *previous* batch's events into messages, computed from
   the states before that batch (``s_i``, ``s_j``, ``Φ(t - last_update_i)``, ``e``), aggregates
   them per node and updates those nodes' memory; ``last_update`` becomes the message time.
   In training this runs inside the step, so the loss reaches the message/updater weights.
2. :meth:`TemporalGNN.embed` computes embeddings of the batch's nodes from that memory and
   from neighbours inserted before this batch (strictly earlier times).
3. The decoder scores the batch; the optimiser steps.
4. :meth:`TemporalGNN.observe` stores the batch as pending messages and inserts it into the
   neighbour sampler; :meth:`TemporalGNN.detach` cuts the graph.

So an event never sees itself or any later event, in memory or in sampling.
"""

from __future__ import annotations

from typing import Optional

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
    RNNUpdater,
    TimeEncoder,
    TimeProjectionEmbedding,
)
from .sampler import RecentNeighborSampler

MODELS = ("jodie", "dyrep", "tgn", "tige")


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
        self.edge_features: Optional[torch.Tensor] = None  # (E_total, msg_dim), looked up by eid
        self._pending = None

    # ------------------------------------------------------------------------ state
    def set_edge_features(self, msg: Optional[np.ndarray]) -> None:
        """Edge features of the whole log, indexed by event id (kept out of checkpoints)."""
        self.edge_features = None if msg is None else torch.as_tensor(msg, dtype=torch.float32,
                                                                       device=self.memory.memory.device)

    def reset_state(self) -> None:
        """Start of a pass: zero memory, forget pending messages and neighbours."""
        self.memory.reset_state()
        if self.left_memory is not None:
            self.left_memory.reset_state()
        self.sampler.reset()
        self._pending = None

    def detach(self) -> None:
        self.memory.detach()
        if self.left_memory is not None:
            self.left_memory.detach()

    def backup(self) -> dict:
        """Memory, pending messages and neighbours, detached (see :meth:`restore`)."""
        return {
            "memory": self.memory.backup(),
            "left_memory": None if self.left_memory is None else self.left_memory.backup(),
            "pending": None if self._pending is None else tuple(x.clone() for x in self._pending),
            "sampler": self.sampler.state_dict(),
        }

    def restore(self, state: dict) -> None:
        self.memory.restore(state["memory"])
        if self.left_memory is not None:
            self.left_memory.restore(state["left_memory"])
        self._pending = None if state["pending"] is None else tuple(x.clone() for x in state["pending"])
        self.sampler.load_state_dict(state["sampler"])

    # -------------------------------------------------------------------- features
    def _edge_feat(self, eid: torch.Tensor) -> torch.Tensor:
        if self.edge_features is None or self.msg_dim == 0:
            return torch.zeros(*eid.shape, 0, device=eid.device)
        feat = self.edge_features[eid.clamp(min=0)]
        return feat.masked_fill((eid < 0).unsqueeze(-1), 0.0)

    def _embed_from(self, state: NodeMemory, embedding: nn.Module, nodes: torch.Tensor, t: torch.Tensor):
        s, last = state.read(nodes)
        dt = t - last
        if not embedding.needs_neighbors:
            return embedding(s, dt)
        nb = self.sampler.sample(nodes.cpu().numpy(), t.cpu().numpy())
        dev = s.device
        nbr_nodes, nbr_t = nb.nodes.to(dev), nb.times.to(dev)
        uniq, inv = torch.unique(nbr_nodes, return_inverse=True)
        return embedding(s, dt, time_enc=self.time_enc, nbr_s=state.read(uniq)[0], nbr_index=inv,
                         nbr_e=self._edge_feat(nb.eids.to(dev)), nbr_dt=(t.unsqueeze(1) - nbr_t),
                         nbr_mask=nb.mask.to(dev))

    # ---------------------------------------------------------------------- stages
    def flush(self) -> None:
        """Apply the pending (previous batch's) events to the memory.  Step 1 above."""
        if self._pending is None:
            return
        src, dst, t, eid = self._pending
        self._pending = None
        nodes = torch.cat([src, dst])
        other = torch.cat([dst, src])
        tt = torch.cat([t, t])
        s_self, last = self.memory.read(nodes)
        if self.left_memory is not None:  # TIGE: messages carry h(t'-), the last embeddings
            s_self_msg = self.left_memory.read(nodes)[0]
            s_other = self.left_memory.read(other)[0]
        elif self.message_embedding is not None:  # DyRep: the other side as its attention embedding
            s_self_msg = s_self
            s_other = self._embed_from(self.memory, self.message_embedding, other, tt)
        else:
            s_self_msg = s_self
            s_other = self.memory.read(other)[0]
        e = self._edge_feat(torch.cat([eid, eid]))
        raw = self.message(s_self_msg, s_other, self.time_enc(tt - last), e)
        uniq, inv = torch.unique(nodes, return_inverse=True)
        agg, t_agg = self.aggregator(raw, inv, tt, uniq.shape[0])
        new = self.updater(agg, self.memory.read(uniq)[0])
        self.memory.write(uniq, new, t_agg)

    def embed(self, nodes: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Embeddings ``z_i(t)`` of ``nodes`` at times ``t`` (float64).  Step 2 above."""
        return self._embed_from(self.memory, self.embedding, nodes, t)

    def score(self, z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
        return self.decoder(z_src, z_dst)

    def observe(self, src: torch.Tensor, dst: torch.Tensor, t: torch.Tensor, eid: torch.Tensor,
                z: Optional[torch.Tensor] = None) -> None:
        """The batch is over: queue its messages, record its neighbours.  Step 4 above.

        ``z`` are the embeddings of ``cat([src, dst])`` at ``t``: TIGE keeps them as the
        second memory ``h(t-)`` (later events of a node in the batch win).
        """
        self._pending = (src, dst, t, eid)
        self.sampler.insert(src.cpu().numpy(), dst.cpu().numpy(), t.cpu().numpy(), eid.cpu().numpy())
        if self.left_memory is not None and z is not None:
            nodes = torch.cat([src, dst])
            tt = torch.cat([t, t])
            uniq, inv = torch.unique(nodes, return_inverse=True)
            last = torch.full((uniq.shape[0],), -1, dtype=torch.long, device=nodes.device).scatter_reduce(
                0, inv, torch.arange(nodes.shape[0], device=nodes.device), reduce="amax")
            self.left_memory.write(uniq, z[last].detach(), tt[last])


def build_model(name: str, num_nodes: int, msg_dim: int = 0, memory_dim: int = 100, time_dim: int = 100,
                embedding_dim: int = 100, neighbors: int = 10, time_scale: float = 1.0,
                dropout: float = 0.1) -> TemporalGNN:
    """JODIE, DyRep, TGN or TIGE, assembled from the modules (see the table above).

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
    """
    name = name.lower()
    if name not in MODELS:
        raise ValueError(f"unknown model '{name}' (choose from {', '.join(MODELS)})")
    message = IdentityMessage(memory_dim, time_dim, msg_dim)
    if name == "jodie":
        embedding = TimeProjectionEmbedding(memory_dim, time_scale)
        updater = RNNUpdater(message.out_dim, memory_dim)
        extra = {}
    elif name == "dyrep":
        # the message's other side is an attention embedding with the memory's width
        embedding = IdentityEmbedding(memory_dim)
        updater = RNNUpdater(message.out_dim, memory_dim)
        extra = {"message_embedding": GraphAttentionEmbedding(memory_dim, time_dim, msg_dim, memory_dim,
                                                              dropout=dropout)}
    else:
        embedding = GraphAttentionEmbedding(memory_dim, time_dim, msg_dim, embedding_dim, dropout=dropout)
        if name == "tige":
            # messages are built from h(t-) (the embedding memory) for both endpoints
            message = IdentityMessage(embedding.out_dim, time_dim, msg_dim)
            extra = {"dual_memory": True}
        else:
            extra = {}
        updater = GRUUpdater(message.out_dim, memory_dim)
    return TemporalGNN(num_nodes, memory_dim, time_dim, msg_dim, message, LastAggregator(), updater, embedding,
                       LinkPredictor(embedding.out_dim), neighbors=neighbors, name=name, **extra)
