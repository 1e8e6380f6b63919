"""State exchange: the ranks' node state becomes one full-graph state on rank 0.

Each rank sends, with tensor collectives on a host-memory (gloo) process group, the rows of
its own nodes, the rows of the shared nodes and its pending events in global ids.  Rank 0
knows every rank's group (groups are seeded), so node ids are not sent.  The assembled state
lives in host memory.  Non-shared nodes come from their only rank; shared nodes by the sync
rule (``last`` when sync is ``none``, so evaluation sees one state per node), and a shared
node's pending events from the rank whose state won.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..models import NodeState, TemporalGNN
from .sync import combine_shared


def gather_rows(x: torch.Tensor, world: int, rank: int, group=None) -> Optional[List[torch.Tensor]]:
    """Gather tensors whose first dimension differs per rank onto rank 0 (padded gather).

    Parameters
    ----------
    x : tensor, shape (n_r, ...)
        This rank's rows (host memory).

    Returns
    -------
    list of tensors on rank 0 (rank order, unpadded); None elsewhere.
    """
    x = x.contiguous().cpu()
    n = torch.tensor([x.shape[0]], dtype=torch.long)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n, group=group)
    sizes = [int(s) for s in sizes]
    pad = x.new_zeros((max(sizes),) + tuple(x.shape[1:]))
    pad[:x.shape[0]] = x
    out = [torch.empty_like(pad) for _ in range(world)] if rank == 0 else None
    dist.gather(pad, out, dst=0, group=group)
    if rank != 0:
        return None
    return [o[:s] for o, s in zip(out, sizes)]


def local_payload(model: TemporalGNN, nodes: np.ndarray) -> NodeState:
    """This rank's whole node state, pending events in global ids (host memory)."""
    local = torch.arange(model.num_nodes, device=model.memory.memory.device)
    st = model.node_state(local).to("cpu")
    g = torch.from_numpy(nodes)
    node, other, t, eid = st.pending
    values = None if st.values is None else (st.values[0], g[st.values[1]], st.values[2])
    return NodeState(st.memories, (g[node], g[other], t, eid), values)


def gather_state(model: TemporalGNN, nodes: np.ndarray, num_shared: int, world: int, rank: int,
                 group=None) -> Optional[List[NodeState]]:
    """Every rank's :func:`local_payload`, on rank 0 (None elsewhere)."""
    st = local_payload(model, nodes)
    mems = {}
    for name, (s, lu) in st.memories.items():
        mems[name] = (gather_rows(s, world, rank, group), gather_rows(lu, world, rank, group))
    pending = [gather_rows(x, world, rank, group) for x in st.pending]
    values = None if st.values is None else [gather_rows(x, world, rank, group) for x in st.values]
    if rank != 0:
        return None
    return [NodeState({k: (v[0][r], v[1][r]) for k, v in mems.items()}, tuple(p[r] for p in pending),
                      None if values is None else tuple(v[r] for v in values))
            for r in range(world)]


def assemble(payloads: Sequence[NodeState], own: Sequence[np.ndarray], shared: np.ndarray, num_nodes: int,
             rule: str) -> NodeState:
    """One full-graph state from every rank's payload.

    Parameters
    ----------
    payloads : list of NodeState
        Rank r's local rows (shared first, then ``own[r]``).
    own : list of int64 ndarray
        Global ids of each rank's own nodes, in local order.
    shared : int64 ndarray, shape (S,)
    num_nodes : int
    rule : {"last", "mean"}

    Returns
    -------
    NodeState
        Rows for global ids ``0..num_nodes-1``.
    """
    ns = int(shared.size)
    shared_t = torch.from_numpy(shared)
    memories: Dict = {}
    winner = None
    for name in payloads[0].memories:
        s0, l0 = payloads[0].memories[name]
        mem = s0.new_zeros((num_nodes, s0.shape[1]))
        last = l0.new_zeros(num_nodes)
        for p, ids in zip(payloads, own):
            s, lu = p.memories[name]
            idx = torch.from_numpy(ids)
            mem[idx], last[idx] = s[ns:], lu[ns:]
        if ns:
            l_all = torch.stack([p.memories[name][1][:ns] for p in payloads])
            s_all = torch.stack([p.memories[name][0][:ns] for p in payloads])
            mem[shared_t], last[shared_t] = combine_shared(s_all, l_all, rule)
            if name == "memory":
                winner = torch.argmax(l_all, dim=0)
        memories[name] = (mem, last)
    parts = []
    for r, p in enumerate(payloads):
        node, other, t, eid = p.pending
        is_shared = torch.isin(node, shared_t)
        keep = ~is_shared
        if ns and winner is not None:  # a shared node's pending events come from its winning rank
            pos = torch.searchsorted(shared_t, node).clamp(max=ns - 1)
            keep |= is_shared & (winner[pos] == r)
        parts.append((node[keep], other[keep], t[keep], eid[keep]))
    pending = tuple(torch.cat([q[i] for q in parts]) for i in range(4))
    values = None
    if payloads[0].values is not None:  # TIGE: the kept embeddings of every pending event that stays
        eid, src, vals = (torch.cat([p.values[i] for p in payloads]) for i in range(3))
        keep = torch.isin(eid, pending[3])
        eid, src, vals = eid[keep], src[keep], vals[keep]
        order = torch.argsort(eid, stable=True)
        eid, src, vals = eid[order], src[order], vals[order]
        first = torch.ones_like(eid, dtype=torch.bool)
        first[1:] = eid[1:] != eid[:-1]
        values = (eid[first], src[first], vals[first])
    return NodeState(memories, pending, values)
