"""Interoperability with the graph libraries of the field, above the data and partition layers
(nothing below imports it).

* :mod:`.dgl` -- :func:`to_dgl` / :func:`from_dgl`: a log as a DGL graph, one edge per event;
* :mod:`.dgl_parts` -- :func:`part_graph` / :func:`save_dgl_parts`: shards as DGL graph files;
* :mod:`.pyg` -- :func:`to_pyg` / :func:`from_pyg`: a log as PyG's ``TemporalData``.

The libraries themselves are optional and imported on first use.
"""

from .dgl import from_dgl, to_dgl
from .dgl_parts import part_graph, save_dgl_parts
from .pyg import from_pyg, to_pyg

__all__ = ["from_dgl", "from_pyg", "part_graph", "save_dgl_parts", "to_dgl", "to_pyg"]
