"""PyTorch Geometric interoperability: Events <-> ``torch_geometric.data.TemporalData``.

torch_geometric is optional (the ``bench`` extra); these calls raise
:class:`~speed.MissingDependencyError` naming the extra when it is missing.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..data.events import Events
from ..errors import InputError
from ..optional import require_pyg

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
    require_pyg("speed.from_pyg")
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
    TemporalData = require_pyg("Events.to_pyg")
    import torch

    kw = {"src": torch.from_numpy(events.src), "dst": torch.from_numpy(events.dst),
          "t": torch.from_numpy(events.t.astype(np.int64) if events.t.dtype.kind in "iu" else events.t)}
    if events.msg is not None:
        kw["msg"] = torch.from_numpy(events.msg)
    if events.label is not None:
        kw["y"] = torch.from_numpy(np.asarray(events.label))
    return TemporalData(**kw)
