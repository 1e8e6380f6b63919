"""Building blocks of memory-based temporal GNNs (the SPEED paper, Fig. 6).

Each piece is a small ``nn.Module`` with one job; :mod:`speed.train.model.network` composes them
into JODIE, DyRep, TGN and TIGE.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from torch import nn


# ------------------------------------------------------------------------ time encoding
class TimeEncoder(nn.Module):
    """``Φ(Δt) = cos(w Δt + b)`` with TGN's initialisation (frequencies ``10^-linspace(0, 9)``).

    Parameters
    ----------
    dim : int
    """

    def __init__(self, dim: int):
        super().__init__()
        self.dim = int(dim)
        self.lin = nn.Linear(1, self.dim)
        with torch.no_grad():
            self.lin.weight.copy_(torch.from_numpy(1.0 / 10 ** np.linspace(0, 9, self.dim)).float().view(-1, 1))
            self.lin.bias.zero_()

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        """dt: float tensor (...,) -> float32 (..., dim)."""
        return torch.cos(self.lin(dt.to(torch.float32).unsqueeze(-1)))


# ----------------------------------------------------------------------------- messages
class IdentityMessage(nn.Module):
    """Raw message ``[s_self || s_other || Φ(Δt) || e]`` (TGN's identity function)."""

    def __init__(self, memory_dim: int, time_dim: int, msg_dim: int):
        super().__init__()
        self.out_dim = 2 * memory_dim + time_dim + msg_dim

    def forward(self, s_self, s_other, t_enc, e):
        return torch.cat([s_self, s_other, t_enc, e], dim=-1)


class MLPMessage(nn.Module):
    """An MLP over the raw message, to ``out_dim`` features."""

    def __init__(self, memory_dim: int, time_dim: int, msg_dim: int, out_dim: int = 100):
        super().__init__()
        raw = 2 * memory_dim + time_dim + msg_dim
        self.out_dim = int(out_dim)
        self.mlp = nn.Sequential(nn.Linear(raw, raw // 2), nn.ReLU(), nn.Linear(raw // 2, self.out_dim))

    def forward(self, s_self, s_other, t_enc, e):
        return self.mlp(torch.cat([s_self, s_other, t_enc, e], dim=-1))


# -------------------------------------------------------------------------- aggregators
class LastAggregator(nn.Module):
    """Per node, the message of its latest event (ties: the one that came last)."""

    kind = "last"  # plans hand it only each node's latest event

    def forward(self, msg: torch.Tensor, index: torch.Tensor, t: torch.Tensor, num: int
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """msg (M, D), index (M,) into ``num`` nodes, t (M,) -> (num, D), (num,)."""
        order = torch.arange(msg.shape[0], device=msg.device)
        last = torch.full((num,), -1, dtype=torch.long, device=msg.device)
        last = last.scatter_reduce(0, index, order, reduce="amax")
        return msg[last], t[last]


class MeanAggregator(nn.Module):
    """Per node, the mean of its messages; the time is the latest."""

    kind = "mean"

    def forward(self, msg, index, t, num):
        out = torch.zeros(num, msg.shape[1], dtype=msg.dtype, device=msg.device).index_add(0, index, msg)
        count = torch.zeros(num, dtype=msg.dtype, device=msg.device).index_add(
            0, index, torch.ones_like(index, dtype=msg.dtype))
        t_last = torch.full((num,), -torch.inf, dtype=t.dtype, device=t.device).scatter_reduce(
            0, index, t, reduce="amax")
        return out / count.clamp(min=1).unsqueeze(1), t_last


# ----------------------------------------------------------------------------- updaters
class GRUUpdater(nn.Module):
    """``s' = GRU(m, s)``."""

    def __init__(self, msg_dim: int, memory_dim: int):
        super().__init__()
        self.cell = nn.GRUCell(msg_dim, memory_dim)

    def forward(self, msg, state):
        return self.cell(msg, state)


class RNNUpdater(nn.Module):
    """``s' = tanh(W m + U s + b)`` (JODIE, DyRep)."""

    def __init__(self, msg_dim: int, memory_dim: int):
        super().__init__()
        self.cell = nn.RNNCell(msg_dim, memory_dim)

    def forward(self, msg, state):
        return self.cell(msg, state)


# --------------------------------------------------------------------------- embeddings
class IdentityEmbedding(nn.Module):
    """``z_i(t) = s_i`` (DyRep)."""

    needs_neighbors = False

    def __init__(self, memory_dim: int):
        super().__init__()
        self.out_dim = memory_dim

    def forward(self, s, dt, **_):
        return s


class TimeProjectionEmbedding(nn.Module):
    """JODIE's projection ``z_i(t) = (1 + w · Δt / scale) ∘ s_i``.

    ``time_scale`` (set from the data by the trainer) keeps ``Δt`` near unit size.
    """

    needs_neighbors = False

    def __init__(self, memory_dim: int, time_scale: float = 1.0):
        super().__init__()
        self.out_dim = memory_dim
        self.time_scale = float(time_scale)
        self.lin = nn.Linear(1, memory_dim)
        nn.init.normal_(self.lin.weight, 0.0, 0.1)
        nn.init.zeros_(self.lin.bias)

    def forward(self, s, dt, **_):
        return s * (1 + self.lin((dt / self.time_scale).to(torch.float32).unsqueeze(-1)))


class GraphAttentionEmbedding(nn.Module):
    """Temporal graph attention over the k most recent neighbours (one layer).

    Per head ``h``, with the edge term ``u_ij = U [e_ij || Φ(t - t_j)]`` shared by key and
    value (as in TransformerConv): query ``q = W_q s_i``; key ``k_j = W_k s_j + u_ij``;
    value ``v_j = W_v s_j + u_ij``; ``z_i = concat_h Σ_j α_ij v_j + W_r s_i`` with
    ``α = softmax_j(q·k_j / sqrt(c))`` over real neighbours.  Nodes without neighbours get
    ``W_r s_i`` alone.

    Computed with as few per-slot vectors as possible, which is what costs when a batch has
    many slots (dense logs) or wide edge features:

    * neighbour memories are projected once per distinct neighbour (``nbr_s`` holds the
      distinct rows, ``nbr_index`` points into them; popular nodes fill many slots); when the
      distinct neighbours are few, queries meet them all in one product (scores and attention
      weights of shape (H, B, U)) and no per-slot key or value is formed;
    * the edge term enters through linearity: ``q_h · U_h f_ij = (U_h^T q_h) · f_ij`` for the
      logits, and ``Σ_j α_ij U_h f_ij = U_h (Σ_j α_ij f_ij)`` for the output, so ``U`` is applied
      once per query and head instead of once per slot (``f_ij = [e_ij || Φ(Δt_ij)]``, kept in
      its two parts).  The result is the same up to float rounding.
    """

    needs_neighbors = True

    def __init__(self, memory_dim: int, time_dim: int, msg_dim: int, out_dim: int, heads: int = 2,
                 dropout: float = 0.1):
        super().__init__()
        self.out_dim = int(out_dim)
        self.heads = heads if out_dim % heads == 0 else 1
        self.head_dim = self.out_dim // self.heads
        self.dropout = float(dropout)
        self.msg_dim = int(msg_dim)
        self.query = nn.Linear(memory_dim, self.out_dim)
        self.node_kv = nn.Linear(memory_dim, 2 * self.out_dim)
        self.edge = nn.Linear(msg_dim + time_dim, self.out_dim, bias=False)  # columns: [e || Φ]
        self.root = nn.Linear(memory_dim, self.out_dim)

    def forward(self, s, dt, *, time_enc, nbr_s, nbr_index, nbr_e, nbr_dt, nbr_mask, dense=None, **_):
        """s (B, d); nbr_s (U, d); nbr_index (B, k) into nbr_s; nbr_e (B, k, m); nbr_dt, nbr_mask (B, k)
        (``nbr_dt`` finite in empty slots).  ``dense``: against every distinct neighbour at once
        (True) or slot by slot (False); None: whichever is cheaper for these sizes.  Slot by
        slot, a query's result depends on its own slots only."""
        b, k = nbr_mask.shape
        h, c = self.heads, self.head_dim
        u = nbr_s.shape[0]
        q = self.query(s).view(b, h, c)
        node_k, node_v = self.node_kv(nbr_s).chunk(2, dim=-1)
        # the neighbour part of the logits and of the output: against every distinct neighbour
        # when they are few (dense logs: (H, B, U) scores and weights, no per-slot vectors), or
        # slot by slot when they are many (the crossover measured on CPU, 2 heads of 50)
        if dense is None:
            dense = u <= 0.8 * k * c
        if dense:
            node_k, node_v = (x.reshape(u, h, c).transpose(0, 1) for x in (node_k, node_v))  # (H, U, c)
            index = nbr_index.unsqueeze(0).expand(h, b, k)
            logits = torch.bmm(q.transpose(0, 1), node_k.transpose(1, 2)).gather(2, index).permute(1, 2, 0)
        else:
            # index_select, not x[idx]: its backward is index_add_, far cheaper on CPU than the
            # accumulating index_put_ behind advanced indexing
            flat = nbr_index.reshape(-1)
            key = node_k.index_select(0, flat).view(b, k, h, c)
            # multiply-and-sum, not einsum: einsum's bmm permutes and its backward copies gradients
            logits = (q.unsqueeze(1) * key).sum(-1)  # (B, k, H)
        # the edge part through linearity: the edge weight per head (H, c, F), the query through
        # it (B, H, F), against each slot's features (B, k, F)
        w_edge = self.edge.weight.view(h, c, -1)
        # per head, (B, c) @ (c, F): einsum would do this bmm too, between permutes and reshapes
        # that double its operators forward and back
        q_edge = torch.bmm(q.transpose(0, 1), w_edge).transpose(0, 1)
        enc = time_enc(nbr_dt)  # empty slots get weight 0 below
        parts = [(nbr_e, q_edge[..., :self.msg_dim])] if self.msg_dim else []
        parts.append((enc, q_edge[..., self.msg_dim:]))
        for feat, qf in parts:
            logits = logits + torch.bmm(feat, qf.transpose(1, 2))
        logits = (logits / c ** 0.5).masked_fill(~nbr_mask.unsqueeze(-1), float("-inf"))
        alpha = torch.softmax(logits, dim=1)
        alpha = torch.nan_to_num(alpha, nan=0.0)  # rows with no neighbour: all -inf -> NaN -> 0
        if self.training and self.dropout:
            alpha = nn.functional.dropout(alpha, p=self.dropout)
        if dense:
            weights = alpha.new_zeros(h, b, u).scatter_add_(2, index, alpha.permute(2, 0, 1))
            out = torch.bmm(weights, node_v).transpose(0, 1)  # (B, H, c)
        else:
            value = node_v.index_select(0, flat).view(b, k, h, c)
            out = (alpha.unsqueeze(-1) * value).sum(1)
        # Σ_j α_ij f_ij per head (B, H, F), then the edge weight
        pooled = torch.cat([torch.bmm(alpha.transpose(1, 2), feat) for feat, _ in parts], dim=-1)
        out = out + torch.bmm(pooled.transpose(0, 1), w_edge.transpose(1, 2)).transpose(0, 1)
        return out.reshape(b, self.out_dim) + self.root(s)


# ----------------------------------------------------------------------------- decoders
class LinkPredictor(nn.Module):
    """``score(i, j) = MLP([z_i || z_j])`` (logits)."""

    def __init__(self, dim: int, hidden: int = None):
        super().__init__()
        hidden = hidden or dim
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, z_src, z_dst):
        return self.mlp(torch.cat([z_src, z_dst], dim=-1)).squeeze(-1)


class NodeClassifier(nn.Module):
    """``p(label | z_i) = sigmoid(MLP(z_i))`` (logits), TGN's three-layer decoder."""

    def __init__(self, dim: int, hidden: int = 80, dropout: float = 0.1):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, 10), nn.ReLU(), nn.Dropout(dropout), nn.Linear(10, 1))

    def forward(self, z):
        return self.mlp(z).squeeze(-1)
