"""DGL interoperability: Events <-> ``dgl.DGLGraph``, and shards as DGL graph files.

DGL is optional (the ``dgl`` extra); these calls raise :class:`~speed.MissingDependencyError`
with the install command when it is missing, and ``import speed`` never needs it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional

import numpy as np

from ._util import atomic_dir
from .data.events import Events
from .errors import InputError, MissingDependencyError


def require_dgl(what: str):
    """``(dgl, torch)``, or :class:`~speed.MissingDependencyError` naming the extra."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:
        import dgl
        import torch
    except ImportError as exc:
        raise MissingDependencyError("dgl", "dgl", what) from exc
    return dgl, torch


def to_dgl(events: Events):
    """The events as a directed DGL multigraph, one edge per event, in time order.

    Parameters
    ----------
    events : Events

    Returns
    -------
    dgl.DGLGraph
        ``num_nodes = events.num_nodes``; ``edata['t']`` (float64 or int64, shape (E,)),
        ``edata['eid']`` (int64), and ``edata['msg']`` (float32, (E, d)) and
        ``edata['label']`` when the events have them.  Numeric original node ids are in
        ``ndata['node_id']``.
    """
    dgl, torch = require_dgl("speed.to_dgl")
    g = dgl.graph((torch.from_numpy(np.ascontiguousarray(events.src)),
                   torch.from_numpy(np.ascontiguousarray(events.dst))), num_nodes=events.num_nodes)
    g.edata["t"] = torch.from_numpy(np.ascontiguousarray(events.t))
    g.edata["eid"] = torch.from_numpy(np.ascontiguousarray(events.eid))
    if events.msg is not None:
        g.edata["msg"] = torch.from_numpy(np.ascontiguousarray(events.msg))
    if events.label is not None:
        g.edata["label"] = torch.from_numpy(np.ascontiguousarray(events.label))
    if events.node_ids is not None and events.node_ids.dtype.kind in "iuf":
        g.ndata["node_id"] = torch.from_numpy(np.ascontiguousarray(events.node_ids))
    return g


def from_dgl(graph, time_key: str = "t", msg_key: Optional[str] = "msg",
             label_key: Optional[str] = "label") -> Events:
    """Events from a DGL graph whose edges carry timestamps.

    Parameters
    ----------
    graph : dgl.DGLGraph
        Homogeneous graph; one event per edge.
    time_key : str
        Edge feature holding the time (required).
    msg_key, label_key : str, optional
        Edge features used as ``msg`` and ``label`` when present.

    Returns
    -------
    Events
        Sorted by time (stable), node ids as in the graph; ``ndata['node_id']`` becomes
        ``node_ids`` when present.
    """
    require_dgl("speed.from_dgl")
    if len(graph.ntypes) != 1 or len(graph.etypes) != 1:
        raise InputError(f"from_dgl needs a homogeneous graph, got node types {graph.ntypes} "
                         f"and edge types {graph.etypes}")
    if time_key not in graph.edata:
        raise InputError(f"the graph has no edge feature '{time_key}' (edge features: {list(graph.edata.keys())})")
    src, dst = (x.cpu().numpy().astype(np.int64) for x in graph.edges())
    t = graph.edata[time_key].cpu().numpy()
    msg = graph.edata[msg_key].cpu().numpy() if msg_key and msg_key in graph.edata else None
    label = graph.edata[label_key].cpu().numpy() if label_key and label_key in graph.edata else None
    node_ids = graph.ndata["node_id"].cpu().numpy() if "node_id" in graph.ndata else None
    ev = Events.from_arrays(src, dst, t, msg=msg, label=label, num_nodes=graph.num_nodes(),
                            node_ids=node_ids, remap=False)
    ev.meta.update(source="dgl", format="dgl")
    return ev


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
    local = np.full(node_parts.shape[0], -1, dtype=np.int64)
    local[nodes] = np.arange(nodes.size)
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
    from .partition.shards import Shards, load_shards

    dgl, _ = require_dgl("speed.save_dgl_parts")
    sh = shards if isinstance(shards, Shards) else load_shards(shards)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        for p in range(sh.num_parts):
            ev = sh.part(p, period)
            dgl.save_graphs(str(tmp / f"part{p}.bin"), [part_graph(ev, sh.node_parts, [p])])
    return [out_dir / f"part{p}.bin" for p in range(sh.num_parts)]


# ------------------------------------------------------------------------- PyG
def _require_pyg(what: str):
    try:
        from torch_geometric.data import TemporalData
    except ImportError as exc:
        raise MissingDependencyError("torch_geometric", "bench", what) from exc
    return TemporalData


def from_pyg(data, num_nodes: Optional[int] = None) -> Events:
    """Events from a PyTorch Geometric ``TemporalData`` (``src``, ``dst``, ``t``, optional
    ``msg`` and ``y``), e.g. a dataset of ``torch_geometric.datasets.JODIEDataset``.

    Returns
    -------
    Events
        Node ids as in ``data``; ``num_nodes`` as given, else ``data.num_nodes`` (PyG counts
        the largest id + 1, so pass it to keep ids that never occur); ``msg`` and ``y``
        become ``msg`` and ``label``.  Sorted by time (stable) if ``data`` is not.
    """
    _require_pyg("speed.from_pyg")
    for key in ("src", "dst", "t"):
        if getattr(data, key, None) is None:
            raise InputError(f"from_pyg needs TemporalData with '{key}'")
    src, dst, t = (getattr(data, k).cpu().numpy() for k in ("src", "dst", "t"))
    msg = data.msg.cpu().numpy() if getattr(data, "msg", None) is not None else None
    y = data.y.cpu().numpy() if getattr(data, "y", None) is not None else None
    num_nodes = int(data.num_nodes) if num_nodes is None else int(num_nodes)
    ev = Events.from_arrays(src.astype(np.int64), dst.astype(np.int64), t, msg=msg, label=y, num_nodes=num_nodes,
                            remap=False)
    ev.meta.update(source="pyg", format="pyg")
    return ev


def to_pyg(events: Events):
    """The events as a PyTorch Geometric ``TemporalData`` (``msg`` and ``label`` as ``msg``
    and ``y``), ready for ``torch_geometric.loader.TemporalDataLoader``.  PyG keeps no node
    count (it is the largest id + 1): pass ``events.num_nodes`` back to :func:`from_pyg`."""
    TemporalData = _require_pyg("Events.to_pyg")
    import torch

    kw = {"src": torch.from_numpy(events.src), "dst": torch.from_numpy(events.dst),
          "t": torch.from_numpy(events.t.astype(np.int64) if events.t.dtype.kind in "iu" else events.t)}
    if events.msg is not None:
        kw["msg"] = torch.from_numpy(events.msg)
    if events.label is not None:
        kw["y"] = torch.from_numpy(np.asarray(events.label))
    return TemporalData(**kw)
