"""Exact evaluation spread over the ranks: the owner of each node's rows, and the trained state
brought to the owners.

During evaluation every node's memory rows live on exactly one rank, its *owner*
(:func:`owners`): a node of one part on the rank that trained the part this epoch, a shared
(hub) node on rank ``i % world`` for the i-th shared node, a node of no part (one that only
val or test events name) on rank ``node % world``.

Every rank builds the same plan of each evaluation step; the work of a step is divided among
them (:mod:`speed.train.eval.divided`): a node's owner computes its memory keys and stores its
states, and each rank embeds and scores a share of the step's events, receiving from the owners
only the rows and key states its share needs.  The figures are bit for bit those of one process
holding every row (tested).

The pending events, neighbour rings and TIGE's per-event values are kept on every rank: they
are what plans are built from, on the host, and a plan must be the same everywhere.  They are
a fraction of the per-node bytes (``speed plan`` states each part); the memories, the rest of
the state, are divided.
"""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np
import torch

from ..state.sharded import pack_rows, unpack_rows


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


def shard_state(trained, target, nodes: np.ndarray, num_shared: int, shared: np.ndarray, owner: np.ndarray,
                rule: str, world) -> Dict:
    """Bring every rank's trained node state into ``target``'s sharded memories (collective).

    The owner of a node of this rank's parts is this rank: its rows are written where they are.
    A shared node's copies go to its owner (one ``all_to_all_single``), which combines them by
    the sync rule (:func:`~.sync.combine_shared`).  The pending events are kept on every rank
    (they are planned from): each rank contributes those of its own nodes, and of the shared
    nodes whose state it won.

    Parameters
    ----------
    trained : StatefulModel
        This rank's trained model; local rows ``nodes`` (global ids, ``num_shared`` shared first).
        Its node state is let go once its rows are handed over (resized to 0 rows), before the
        pending events are gathered.
    target : StatefulModel
        Its memories are :class:`~speed.train.state.sharded.ShardedMemory` over ``owner``; its structures are replaced.
    shared : int64 ndarray, shape (S,)
    owner : ndarray, shape (num_nodes,)
    rule : {"last", "mean"}
    world : World
        The ranks (host-memory exchanges).

    Returns
    -------
    dict
        Bytes this rank sent and received.
    """
    from ..state.components import COMPONENTS
    from .gather import local_payload
    from .sync import combine_shared, latest_rank

    rank = world.rank

    ns = int(num_shared)
    st = local_payload(trained, nodes)
    winner = None
    sent = received = 0
    held = shared[owner[shared] == rank]  # the shared nodes this rank owns, in the ranks' common order
    for name, (s, lu) in st.memories.items():
        target.state.rows.write_owned(name, nodes[ns:], s[ns:].float(), lu[ns:], reset=True)
        if ns == 0:
            continue
        packed = pack_rows(s[:ns], lu[:ns])
        parts = world.host_exchange_by_owner(packed, owner[shared].astype(np.int64))
        sent += packed.numel() * 4
        received += sum(p.numel() for p in parts) * 4
        states, last = unpack_rows(torch.stack(parts))  # (world, S_held, d), (world, S_held)
        c_s, c_l = combine_shared(states, last, rule)
        target.state.rows.write_owned(name, held, c_s, c_l)
        if name == "memory":  # whose pending events a shared node keeps: the rank whose state won
            winner = latest_rank(torch.stack(world.host_all_gather_rows(lu[:ns])))
    # the trained rows are with their owners now: let them go (they are most of what the rank
    # holds, and kept beside the whole pending store gathered below they made its peak)
    st.memories.clear()
    s = lu = None
    trained.state.resize(0)
    node, other, t, eid = st.pending
    keep = ~torch.isin(node, torch.from_numpy(shared))
    if ns and winner is not None:
        sh = torch.from_numpy(shared)
        pos = torch.searchsorted(sh, node).clamp(max=ns - 1)
        keep |= (sh[pos] == node) & (winner[pos] == rank)
    pending = tuple(torch.cat(world.host_all_gather_rows(x[keep])) for x in (node, other, t, eid))
    extras = {}
    for k, v in st.extras.items():
        got = [world.host_all_gather_rows(x) for x in v]
        extras[k] = COMPONENTS[k].combine([tuple(g[r] for g in got) for r in range(world.size)], pending[3])
    target.state.rows.load_pending(pending, extras)
    return {"shared_bytes_sent": int(sent), "shared_bytes_received": int(received)}
