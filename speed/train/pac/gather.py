"""What a rank sends of its node state: its rows in global ids (:func:`local_payload`, which
:func:`~.sharded.shard_state` brings to the rows' owners)."""

from __future__ import annotations

import numpy as np
import torch

from ..model.network import StatefulModel
from ..state.rows import StateRows


def local_payload(model: StatefulModel, nodes: np.ndarray) -> StateRows:
    """This rank's whole node state, pending events in global ids (host memory).  The
    memories are the model's own tensors where they are host memory (no copy): read them
    before the model's state next changes."""
    st = model.state.rows.read_all(views=True).to("cpu")
    g = torch.from_numpy(nodes)
    node, other, t, eid = st.pending
    # a component's export is (eid, node, ...) with the node in local ids (TIGE's values)
    extras = {k: (v[0], g[v[1]]) + tuple(v[2:]) for k, v in st.extras.items()}
    return StateRows(st.memories, (g[node], g[other], t, eid), extras)
