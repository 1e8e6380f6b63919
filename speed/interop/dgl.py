"""DGL interoperability: Events <-> ``dgl.DGLGraph``.

DGL is optional (the ``dgl`` extra); these calls raise :class:`~speed.MissingDependencyError`
with the install command when it is missing, and ``import speed`` never needs it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..data.events import Events
from ..errors import InputError
from ..optional import require_dgl


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
