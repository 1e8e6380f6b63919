"""Optional dependencies, loaded on first use with an error that names the extra to install.

The lowest layer (beside :mod:`speed.errors`): a partitioner (METIS) and the interop package
both need DGL, and neither may import the other for it.
"""

from __future__ import annotations

import os

from .errors import MissingDependencyError


def require_dgl(what: str):
    """``(dgl, torch)``, or :class:`~speed.MissingDependencyError` naming the ``dgl`` extra."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:
        import dgl
        import torch
    except ImportError as exc:
        raise MissingDependencyError("dgl", "dgl", what) from exc
    return dgl, torch


def require_pyg(what: str):
    """PyG's ``TemporalData``, or :class:`~speed.MissingDependencyError` naming the ``bench`` extra."""
    try:
        from torch_geometric.data import TemporalData
    except ImportError as exc:
        raise MissingDependencyError("torch_geometric", "bench", what) from exc
    return TemporalData
