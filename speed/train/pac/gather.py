"""What a rank sends of its node state: its rows in global ids (:func:`local_payload`, which
:func:`~.sharded.shard_state` brings to the rows' owners), and a padded gather of rows whose
count differs per rank (:func:`gather_rows`, local validation's scores)."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch
import torch.distributed as dist

from ..model.network import StatefulModel
from ..state.nodes import StateRows


def _padded(x: torch.Tensor, world: int, group=None):
    """``x`` (first dimension differing per rank) padded to the largest rank's rows, and every
    rank's row count (one all_gather of the counts)."""
    x = x.contiguous().cpu()
    n = torch.tensor([x.shape[0]], dtype=torch.long)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n, group=group)
    sizes = [int(s) for s in sizes]
    pad = x.new_zeros((max(sizes),) + tuple(x.shape[1:]))
    pad[:x.shape[0]] = x
    return pad, sizes


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
    pad, sizes = _padded(x, world, group)
    out = [torch.empty_like(pad) for _ in range(world)] if rank == 0 else None
    dist.gather(pad, out, dst=0, group=group)
    if rank != 0:
        return None
    return [o[:s] for o, s in zip(out, sizes)]


def all_gather_rows(x: torch.Tensor, world: int, group=None) -> List[torch.Tensor]:
    """Every rank's ``x`` (first dimension differing per rank), on every rank, in rank order."""
    pad, sizes = _padded(x, world, group)
    out = [torch.empty_like(pad) for _ in range(world)]
    dist.all_gather(out, pad, group=group)
    return [o[:s] for o, s in zip(out, sizes)]


def local_payload(model: StatefulModel, nodes: np.ndarray) -> StateRows:
    """This rank's whole node state, pending events in global ids (host memory).  The
    memories are the model's own tensors where they are host memory (no copy): read them
    before the model's state next changes."""
    st = model.state.all_rows(views=True).to("cpu")
    g = torch.from_numpy(nodes)
    node, other, t, eid = st.pending
    # a component's export is (eid, node, ...) with the node in local ids (TIGE's values)
    extras = {k: (v[0], g[v[1]]) + tuple(v[2:]) for k, v in st.extras.items()}
    return StateRows(st.memories, (g[node], g[other], t, eid), extras)
