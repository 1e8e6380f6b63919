"""A node state's rows, read and written by node: what PAC synchronises, hands over to the
rows' owners and gathers, and what an update reads of the neighbour rings.

:class:`RowExchange` is the part of a :class:`~speed.train.state.nodes.NodeStates` (its ``rows``)
that changes when the way rows travel between processes changes; :class:`StateRows` is what
travels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np
import torch


@dataclass
class StateRows:
    """Rows of the node state, detached: what PAC synchronises, gathers and checkpoints.

    Attributes
    ----------
    memories : dict of str to (float32 tensor (n, d), float64 tensor (n,))
        For each memory (:meth:`NodeStates.memories`), the states and ``last_update`` of the
        rows, in the order of the ids they were read for.
    pending : tuple of 4 tensors, each shape (M,)
        ``(node, other, t, eid)``: the rows' pending events (int64, int64, float64, int64),
        ``node`` and ``other`` in the same id space as the ids.
    extras : dict of str to tuple of tensors
        What each component exports with the rows (:meth:`StateComponent.export`), e.g. TIGE's
        ``(eid, src, values)`` of the pending events (``src`` in the same id space).
    """

    memories: Dict[str, Tuple[torch.Tensor, torch.Tensor]]
    pending: Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
    extras: Dict[str, Tuple[torch.Tensor, ...]] = field(default_factory=dict)

    def to(self, device) -> "StateRows":
        return StateRows({k: (s.to(device), t.to(device)) for k, (s, t) in self.memories.items()},
                         tuple(x.to(device) for x in self.pending),
                         {k: tuple(x.to(device) for x in v) for k, v in self.extras.items()})


def as_numpy(x) -> np.ndarray:
    """A tensor (detached, on the host) or array-like as an ndarray."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class RowExchange:
    """The rows of a node state by node (``NodeStates.rows``): read them with their pending
    events, write them back, store what a sync or the owners' hand-over brought.

    Parameters
    ----------
    states : NodeStates
        The state whose rows these are (its memories, store and components as they are now).
    """

    def __init__(self, states):
        self.states = states

    def load_pending(self, pending, extras: Optional[Dict] = None) -> None:
        """Make ``pending`` = ``(node, other, t, eid)`` (as :attr:`StateRows.pending`) the pending
        events of their nodes, and give the components what they exported for them."""
        node, other, t, eid = (as_numpy(x) for x in pending)
        self.states.store.clear(np.unique(node))
        if node.size:
            self.states.store.replace(node, other, t, eid)
        for c in self.states.components:
            c.import_((extras or {}).get(c.name))

    def _pending_of(self, ids: np.ndarray) -> Tuple[torch.Tensor, ...]:
        """``(node, other, t, eid)`` of the pending events of the distinct nodes ``ids``."""
        row, other, t, eid = self.states.store.gather(ids)
        return tuple(torch.from_numpy(x) for x in (ids[row], other, t, eid))

    def with_pending(self, num: int) -> np.ndarray:
        """The rows among the first ``num`` that have pending events (int64, ascending): those
        written since their events were last applied, or holding events at the latest time."""
        return np.flatnonzero(self.states.store.count[:int(num)] > 0).astype(np.int64)

    def write_memories(self, n_id: torch.Tensor, memories: Dict[str, Tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Overwrite the stored ``(states, last_update)`` of rows ``n_id`` in each named memory
        (:meth:`NodeStates.memories`); pending events stay."""
        mems = self.states.memories()
        for k, (values, last) in memories.items():
            mems[k].write(n_id, values.to(mems[k].device), last.to(mems[k].device))

    def write_owned(self, name: str, nodes: np.ndarray, values: torch.Tensor, last: torch.Tensor,
                    reset: bool = False) -> None:
        """Store rows of nodes this rank owns in the sharded memory ``name`` (``nodes`` int64
        global ids; :class:`~.sharded.ShardedMemory`), first zeroing it when ``reset``."""
        mem = self.states.memories()[name]
        if reset:
            mem.reset_state()
        mem.write_owned(nodes, values, last)

    def read(self, n_id: torch.Tensor) -> StateRows:
        """Stored states and pending events of the distinct nodes ``n_id`` (detached)."""
        pending = self._pending_of(as_numpy(n_id))
        extras = {}
        for c in self.states.components:
            out = c.export(pending[3])
            if out is not None:
                extras[c.name] = out
        return StateRows({k: tuple(x.detach().clone() for x in m.read(n_id)) for k, m in self.states.memories().items()},
                         pending, extras)

    def load(self, n_id: torch.Tensor, rows: StateRows) -> None:
        """Overwrite the rows ``n_id`` with ``rows`` (as :meth:`read` returns them); their pending
        events become exactly ``rows.pending``."""
        for k, mem in self.states.memories().items():
            values, last = rows.memories[k]
            mem.write(n_id, values.to(mem.device), last.to(mem.device))
        self.states.store.clear(as_numpy(n_id))
        node, other, t, eid = (as_numpy(x) for x in rows.pending)
        if node.size:
            self.states.store.replace(node, other, t, eid)
        for c in self.states.components:
            c.import_(rows.extras.get(c.name))

    def read_all(self, views: bool = False) -> StateRows:
        """:meth:`read` of every node.  ``views``: the memories as held (no copy; see
        :meth:`NodeMemory.held`), for a reader done before the state next changes."""
        if not views:
            return self.read(torch.arange(self.states.num_nodes, device=self.states.device))
        pending = self._pending_of(np.arange(self.states.num_nodes, dtype=np.int64))
        extras = {c.name: out for c in self.states.components if (out := c.export(pending[3])) is not None}
        return StateRows({k: m.held() for k, m in self.states.memories().items()}, pending, extras)

    def pending(self) -> Tuple[torch.Tensor, ...]:
        """``(node, other, t, eid)`` of every pending event, in host memory (no memory copied)."""
        return self._pending_of(np.arange(self.states.num_nodes, dtype=np.int64))

    def recent_interactions(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(node, neighbour)`` rows of the interactions the neighbour rings hold (the latest
        ``k`` of every node): two int64 arrays, node by node."""
        return self.states.sampler.recent_pairs()
