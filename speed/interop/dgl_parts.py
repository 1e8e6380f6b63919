"""Shards as DGL graph files: a group of parts as a ``dgl.DGLGraph`` in local node ids, and
every part of a shards directory written with ``dgl.save_graphs`` (``speed partition --dgl``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, List

import numpy as np

from .._util import atomic_dir, places
from ..data.events import Events
from ..partition.shards import Shards, load_shards
from ..optional import require_dgl


def part_graph(events: Events, node_parts: np.ndarray, parts: Iterable[int]):
    """A group of parts as a DGL graph in local node ids.

    Local ids number the group's nodes (shared nodes first, then the others, each in
    global id order); ``ndata[dgl.NID]`` maps them back and ``edata[dgl.EID]`` holds the
    event ids.  Other edge data as in :func:`to_dgl`.
    """
    dgl, torch = require_dgl("speed.part_graph")
    parts = list(parts)
    shared = np.flatnonzero(node_parts == -1)
    own = np.flatnonzero(np.isin(node_parts, parts))
    nodes = np.concatenate([shared, own])
    local = places(nodes, node_parts.shape[0])
    keep = (local[events.src] >= 0) & (local[events.dst] >= 0)
    sub = events.select(keep) if not keep.all() else events
    g = dgl.graph((torch.from_numpy(local[sub.src]), torch.from_numpy(local[sub.dst])), num_nodes=int(nodes.size))
    g.ndata[dgl.NID] = torch.from_numpy(nodes)
    g.ndata["shared"] = torch.from_numpy(np.arange(nodes.size) < shared.size)
    g.edata[dgl.EID] = torch.from_numpy(np.ascontiguousarray(sub.eid))
    g.edata["t"] = torch.from_numpy(np.ascontiguousarray(sub.t))
    if sub.msg is not None:
        g.edata["msg"] = torch.from_numpy(np.ascontiguousarray(sub.msg))
    if sub.label is not None:
        g.edata["label"] = torch.from_numpy(np.ascontiguousarray(sub.label))
    return g


def save_dgl_parts(shards, out_dir, period: str = "all", overwrite: bool = False) -> List[Path]:
    """Write each part of a shards directory as a DGL graph file (``dgl.save_graphs``).

    Parameters
    ----------
    shards : Shards or path-like
    out_dir : path-like
        Receives ``part{p}.bin`` for every part (local node ids; see :func:`part_graph`),
        written atomically as a whole directory.
    period : {"all", "train", "eval"}

    Returns
    -------
    list of pathlib.Path
        Load one with ``dgl.load_graphs(path)[0][0]``.
    """
    dgl, _ = require_dgl("speed.save_dgl_parts")
    sh = shards if isinstance(shards, Shards) else load_shards(shards)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, overwrite=overwrite, markers=("part0.bin",), kind="folder of DGL parts") as tmp:
        for p in range(sh.num_parts):
            ev = sh.part(p, period)
            dgl.save_graphs(str(tmp / f"part{p}.bin"), [part_graph(ev, sh.node_parts, [p])])
    return [out_dir / f"part{p}.bin" for p in range(sh.num_parts)]
