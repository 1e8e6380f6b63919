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

from ..model.network import StatefulModel
from ..state.components import COMPONENTS
from ..state.nodes import StateRows
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


def local_payload(model: StatefulModel, nodes: np.ndarray) -> StateRows:
    """This rank's whole node state, pending events in global ids (host memory)."""
    st = model.state.all_rows().to("cpu")
    g = torch.from_numpy(nodes)
    node, other, t, eid = st.pending
    # a component's export is (eid, node, ...) with the node in local ids (TIGE's values)
    extras = {k: (v[0], g[v[1]]) + tuple(v[2:]) for k, v in st.extras.items()}
    return StateRows(st.memories, (g[node], g[other], t, eid), extras)


def gather_state(model: StatefulModel, nodes: np.ndarray, num_shared: int, world: int, rank: int,
                 group=None) -> Optional[List[StateRows]]:
    """Every rank's :func:`local_payload`, on rank 0 (None elsewhere)."""
    st = local_payload(model, nodes)
    mems = {}
    for name, (s, lu) in st.memories.items():
        mems[name] = (gather_rows(s, world, rank, group), gather_rows(lu, world, rank, group))
    pending = [gather_rows(x, world, rank, group) for x in st.pending]
    extras = {k: [gather_rows(x, world, rank, group) for x in v] for k, v in st.extras.items()}
    if rank != 0:
        return None
    return [StateRows({k: (v[0][r], v[1][r]) for k, v in mems.items()}, tuple(p[r] for p in pending),
                      {k: tuple(x[r] for x in v) for k, v in extras.items()})
            for r in range(world)]


def assemble(payloads: Sequence[StateRows], own: Sequence[np.ndarray], shared: np.ndarray, num_nodes: int,
             rule: str) -> StateRows:
    """One full-graph state from every rank's payload.

    Parameters
    ----------
    payloads : list of StateRows
        Rank r's local rows (shared first, then ``own[r]``).
    own : list of int64 ndarray
        Global ids of each rank's own nodes, in local order.
    shared : int64 ndarray, shape (S,)
    num_nodes : int
    rule : {"last", "mean"}

    Returns
    -------
    StateRows
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
    # each component combines what the ranks exported for the pending events that stay
    extras = {k: COMPONENTS[k].combine([p.extras[k] for p in payloads], pending[3]) for k in payloads[0].extras}
    return StateRows(memories, pending, extras)
