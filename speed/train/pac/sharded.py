"""Exact evaluation spread over the ranks: owners, state hand-over, shared embedding work, writing.

During evaluation every node's memory rows live on exactly one rank, its *owner*
(:func:`owners`): a node of one part on the rank that trained the part this epoch, a shared
(hub) node on rank ``i % world`` for the i-th shared node, a node of no part (one that only
val or test events name) on rank ``node % world``.

Every rank runs the same evaluation stream (the same plans, the same weights), so each step's
reads are the same on every rank.  :meth:`~speed.train.state.sharded.ShardedMemory.read` answers a read with one
collective: every rank contributes the requested rows it owns, each row once however many
queries, neighbours or keys name it, and every rank receives the others'.  A write keeps the
rows the rank owns and drops the rest (every rank computed the same values), so writes need no
exchange.  The figures are therefore those of one process holding every row: the same plan,
the same inputs, the same modules (tested to 1e-6 against the single-process evaluation).

The pending events, neighbour rings and TIGE's per-event values are kept on every rank: they
are what plans are built from, on the host, and a plan must be the same everywhere.  They are
a fraction of the per-node bytes (``speed plan`` states each part); the memories, the rest of
the state, are divided.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..state.sharded import Exchange


def owners(num_nodes: int, shared: np.ndarray, own: Sequence[np.ndarray], world: int) -> np.ndarray:
    """The rank that holds each node's rows during evaluation.

    Parameters
    ----------
    num_nodes : int
    shared : int64 ndarray, shape (S,)
        The shared nodes, in the order the ranks hold them.
    own : list of int64 ndarray
        Each rank's own (non-shared) nodes this epoch.
    world : int

    Returns
    -------
    int16 ndarray, shape (num_nodes,)
    """
    dtype = np.int16 if world < 2 ** 15 else np.int32
    out = (np.arange(num_nodes, dtype=np.int64) % world).astype(dtype)  # nodes of no part
    for r, ids in enumerate(own):
        out[ids] = r
    out[shared] = (np.arange(shared.size) % world).astype(dtype)
    return out


class QueryShare:
    """Work of a step split among the ranks, which run the same steps: ``share(fn, n)`` has each
    rank compute ``fn(part)`` for a contiguous share ``part`` of ``n`` rows (float32, one row
    each), and one ``all_gather`` gives every rank all ``n`` (:meth:`TemporalGNN.compute`'s
    ``share``: the embeddings of the distinct queries).

    Parameters
    ----------
    rank, world : int
    group : ProcessGroup, optional
        Where the embeddings are gathered (the default group: NCCL on GPUs, gloo on CPUs).
    exchange : Exchange, optional
        Where the seconds are counted.
    """

    def __init__(self, rank: int, world: int, group=None, exchange: Optional[Exchange] = None):
        self.rank, self.world, self.group = int(rank), int(world), group
        self.exchange = exchange

    def __call__(self, embed, m: int) -> torch.Tensor:
        if self.world == 1 or m == 0:
            return embed(slice(None))
        bounds = [m * r // self.world for r in range(self.world + 1)]
        lo, hi = bounds[self.rank], bounds[self.rank + 1]
        z = embed(slice(lo, hi))
        t0 = time.perf_counter()
        width = max(bounds[r + 1] - bounds[r] for r in range(self.world))
        pad = z.new_zeros((width, z.shape[1]))
        pad[:hi - lo] = z
        got = [torch.empty_like(pad) for _ in range(self.world)]
        dist.all_gather(got, pad, group=self.group)
        out = torch.cat([got[r][:bounds[r + 1] - bounds[r]] for r in range(self.world)])
        if self.exchange is not None:
            self.exchange.seconds += time.perf_counter() - t0
            self.exchange.bytes += (m - (hi - lo)) * z.shape[1] * z.element_size()
        return out


def exchange_by_owner(x: torch.Tensor, dest: np.ndarray, world: int, group=None) -> List[torch.Tensor]:
    """Send row ``i`` of ``x`` to rank ``dest[i]`` (one ``all_to_all_single`` with uneven
    splits); returns what each rank sent this one, in rank order."""
    order = np.argsort(dest, kind="stable")
    send = x[torch.from_numpy(order)].contiguous()
    out_counts = torch.from_numpy(np.bincount(dest, minlength=world).astype(np.int64))
    in_counts = torch.empty_like(out_counts)
    dist.all_to_all_single(in_counts, out_counts, group=group)
    recv = send.new_empty((int(in_counts.sum()),) + tuple(send.shape[1:]))
    dist.all_to_all_single(recv, send, in_counts.tolist(), out_counts.tolist(), group=group)
    return list(torch.split(recv, in_counts.tolist()))


def _pack(s: torch.Tensor, lu: torch.Tensor) -> torch.Tensor:
    """Rows of states (float32 (n, d)) and times (float64 (n,)) as float32 (n, d + 2), bit-exact."""
    return torch.cat([s.to(torch.float32), lu.to(torch.float64).contiguous().view(torch.float32).reshape(-1, 2)], 1)


def _unpack(x: torch.Tensor):
    d = x.shape[-1] - 2
    return x[..., :d], x[..., d:].contiguous().view(torch.float64).squeeze(-1)


def shard_state(trained, target, nodes: np.ndarray, num_shared: int, shared: np.ndarray, owner: np.ndarray,
                rule: str, rank: int, world: int, group=None) -> Dict:
    """Bring every rank's trained node state into ``target``'s sharded memories (collective).

    The owner of a node of this rank's parts is this rank: its rows are written where they are.
    A shared node's copies go to its owner (one ``all_to_all_single``), which combines them by
    the sync rule (:func:`~.sync.combine_shared`).  The pending events are kept on every rank
    (they are planned from): each rank contributes those of its own nodes, and of the shared
    nodes whose state it won, as the full-graph gather did (:func:`~.gather.assemble`).

    Parameters
    ----------
    trained : StatefulModel
        This rank's trained model; local rows ``nodes`` (global ids, ``num_shared`` shared first).
    target : StatefulModel
        Its memories are :class:`~speed.train.state.sharded.ShardedMemory` over ``owner``; its structures are replaced.
    shared : int64 ndarray, shape (S,)
    owner : ndarray, shape (num_nodes,)
    rule : {"last", "mean"}

    Returns
    -------
    dict
        Bytes this rank sent and received.
    """
    from ..state.components import COMPONENTS
    from .gather import all_gather_rows, local_payload
    from .sync import combine_shared

    ns = int(num_shared)
    st = local_payload(trained, nodes)
    mems = target.state.memories()
    winner = None
    sent = received = 0
    held = shared[owner[shared] == rank]  # the shared nodes this rank owns, in the ranks' common order
    for name, (s, lu) in st.memories.items():
        mem = mems[name]
        mem.reset_state()
        mem.write_owned(nodes[ns:], s[ns:].float(), lu[ns:])
        if ns == 0:
            continue
        packed = _pack(s[:ns], lu[:ns])
        parts = exchange_by_owner(packed, owner[shared].astype(np.int64), world, group)
        sent += packed.numel() * 4
        received += sum(p.numel() for p in parts) * 4
        states, last = _unpack(torch.stack(parts))  # (world, S_held, d), (world, S_held)
        c_s, c_l = combine_shared(states, last, rule)
        mem.write_owned(held, c_s, c_l)
        if name == "memory":  # whose pending events a shared node keeps: the rank whose state won
            winner = torch.argmax(torch.stack(all_gather_rows(lu[:ns], world, group)), dim=0)
    node, other, t, eid = st.pending
    keep = ~torch.isin(node, torch.from_numpy(shared))
    if ns and winner is not None:
        sh = torch.from_numpy(shared)
        pos = torch.searchsorted(sh, node).clamp(max=ns - 1)
        keep |= (sh[pos] == node) & (winner[pos] == rank)
    pending = tuple(torch.cat(all_gather_rows(x[keep], world, group)) for x in (node, other, t, eid))
    extras = {}
    for k, v in st.extras.items():
        got = [all_gather_rows(x, world, group) for x in v]
        extras[k] = COMPONENTS[k].combine([tuple(g[r] for g in got) for r in range(world)], pending[3])
    target.state.load_pending(pending, extras)
    return {"shared_bytes_sent": int(sent), "shared_bytes_received": int(received)}
