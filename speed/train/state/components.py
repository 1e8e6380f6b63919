"""Extra per-node state that a model's recipe declares, beside the dynamic memory.

A component owns its structures and answers the hooks :class:`~speed.train.state.nodes.NodeStates`
calls at each point of a run: planning (:meth:`StateComponent.message_inputs`), taking a
batch in (:meth:`StateComponent.absorb`), exchange (:meth:`StateComponent.export` /
:meth:`StateComponent.import_`), back-ups and checkpoints.  Nobody outside the component asks
whether a model has it.

To add a kind of state: subclass :class:`StateComponent` here (or in a module imported here),
register it with :func:`component`, and name it in the model's recipe
(:attr:`speed.train.recipes.Recipe.state`).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Type

import numpy as np
import torch

from ..recipes import STATE_KINDS
from .memory import NodeMemory
from .values import EventValues

COMPONENTS: Dict[str, Type["StateComponent"]] = {}


def component(name: str):
    """Register a :class:`StateComponent` subclass under ``name`` (a recipe's ``state`` entry)."""
    def register(cls):
        cls.name = name
        cls.state_key = cls.__dict__.get("state_key", name)
        if name in STATE_KINDS:  # what the configuration knows of it, without torch
            cls.takes_unscored_events = STATE_KINDS[name].takes_unscored_events
        COMPONENTS[name] = cls
        return cls
    return register


class StateComponent:
    """The hooks of an extra kind of per-node state (defaults: a component that does nothing).

    Parameters
    ----------
    num_nodes : int
    memory_dim, embedding_dim : int
        The model's widths.
    device : torch.device
        Where the rows are held.
    """

    name = "component"
    state_key = "component"  # its entry in back-ups and checkpoints (its name unless set)
    #: events taken in without being scored (PAC ``--observe shared``) are allowed (set from the
    #: kind's row of :data:`speed.train.recipes.STATE_KINDS` when it has one)
    takes_unscored_events = True
    #: it keeps embeddings of the batch's endpoints when a batch is taken in (:meth:`absorb`'s ``z_ob``)
    keeps_embeddings = False

    def __init__(self, num_nodes: int, memory_dim: int, embedding_dim: int, device=None):
        self.num_nodes = int(num_nodes)

    @staticmethod
    def message_dim(memory_dim: int, embedding_dim: int) -> int:
        """Width of the node states a message is built from (the memory's by default)."""
        return memory_dim

    def memories(self) -> Dict[str, NodeMemory]:
        """Row-aligned memories that are synchronised, gathered and checkpointed like the main one."""
        return {}

    def use_memories(self, make) -> None:
        """Replace each memory with ``make(name, memory)`` (see :meth:`NodeStates.use_memories`)."""
        if self.memories():
            raise NotImplementedError(f"{type(self).__name__} does not say how its memories are replaced")

    # -------------------------------------------------------------- structure
    def to(self, device) -> None:
        for mem in self.memories().values():
            mem.to(device)

    def reset(self) -> None:
        for mem in self.memories().values():
            mem.reset_state()

    def resize(self, num_nodes: int) -> None:
        self.num_nodes = int(num_nodes)
        for mem in self.memories().values():
            mem.resize(num_nodes)

    def grow(self, num_nodes: int) -> None:
        self.num_nodes = max(self.num_nodes, int(num_nodes))
        for mem in self.memories().values():
            mem.grow(num_nodes)

    # -------------------------------------------------------------- steps
    def message_inputs(self, plan) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """``(s_self, s_other)`` of the plan's pending events if this component supplies them
        (None: the messages read the stored memories)."""
        return None

    def absorb(self, plan, z_ob: Optional[torch.Tensor]) -> None:
        """A batch was scored and its endpoints stored their memory; ``z_ob`` are the embeddings
        of each endpoint's latest query (``plan.ob_latest``), when :attr:`keeps_embeddings`."""

    # -------------------------------------------------------------- exchange
    def export(self, pending_eid: torch.Tensor):
        """What travels with rows whose pending events are ``pending_eid`` (None: nothing)."""
        return None

    def import_(self, values) -> None:
        """Take in what :meth:`export` produced elsewhere."""

    @staticmethod
    def combine(exports, pending_eid: torch.Tensor):
        """One export from every rank's, for the pending events ``pending_eid`` that stay."""
        return None

    def needs_prune(self, alive_events: int) -> bool:
        """Whether enough is kept for events no longer pending that :meth:`prune` should run."""
        return False

    def prune(self, alive: np.ndarray) -> None:
        """Forget what belongs to no event in ``alive`` (the store's ids)."""

    # -------------------------------------------------------------- checkpoints
    def state_dict(self, alive: Optional[np.ndarray] = None) -> Optional[dict]:
        """What a back-up or checkpoint keeps (None: nothing); ``alive``: the pending events'
        ids, when only what they need is to be kept."""
        return None

    def load_state_dict(self, state: Optional[dict]) -> None:
        pass


@component("dual_memory")
class DualMemory(StateComponent):
    """TIGER's dual memory (TIGE): a second memory ``h(t-)`` of each node's embedding at its
    latest event, and, for each pending event, its endpoints' ``h(t'-)`` as they were when the
    event was taken in (:class:`~speed.train.state.values.EventValues`): an event's message is
    built from those, while the updater writes ``h(t+)``."""

    state_key = "values"  # its entry in back-ups and checkpoints (the name earlier versions wrote)
    keeps_embeddings = True

    def __init__(self, num_nodes: int, memory_dim: int, embedding_dim: int, device=None):
        super().__init__(num_nodes, memory_dim, embedding_dim, device)
        self.left = NodeMemory(num_nodes, embedding_dim, device)
        self.values = EventValues(embedding_dim)
        self.values.reset(self.left.device)

    @staticmethod
    def message_dim(memory_dim: int, embedding_dim: int) -> int:
        return embedding_dim

    def memories(self) -> Dict[str, NodeMemory]:
        return {"left_memory": self.left}

    def use_memories(self, make) -> None:
        self.left = make("left_memory", self.left)

    def to(self, device) -> None:
        super().to(device)
        self.values.to(device)

    def reset(self) -> None:
        super().reset()
        self.values.reset()

    def resize(self, num_nodes: int) -> None:
        super().resize(num_nodes)
        self.values.reset()

    def message_inputs(self, plan):
        return self.values.lookup(plan.pe_eid, plan.pe_node)

    def absorb(self, plan, z_ob) -> None:
        if z_ob is None:
            return
        # TIGER: an event's message carries its endpoints' h(t'-) as known before the batch ...
        self.values.add(plan.ev_eid, plan.ev_src, self.left.read(plan.ev_src)[0], self.left.read(plan.ev_dst)[0])
        # ... and each endpoint's h(t-) becomes its embedding at its latest event of the batch
        t_new = plan.uq_t.index_select(0, plan.q_inv.index_select(0, plan.ob_latest))
        self.left.write(plan.ob_node, z_ob, t_new)

    def needs_prune(self, alive_events: int) -> bool:
        return len(self.values) > 4 * alive_events + 4096

    def export(self, pending_eid):
        return self.values.select(pending_eid)

    def import_(self, values) -> None:
        if values is not None:
            self.values.merge(*values)

    @staticmethod
    def combine(exports, pending_eid):
        """The kept embeddings of every pending event that stays, each once."""
        eid, src, vals = (torch.cat([e[i] for e in exports]) for i in range(3))
        keep = torch.isin(eid, pending_eid)
        eid, src, vals = eid[keep], src[keep], vals[keep]
        order = torch.argsort(eid, stable=True)
        eid, src, vals = eid[order], src[order], vals[order]
        first = torch.ones_like(eid, dtype=torch.bool)
        first[1:] = eid[1:] != eid[:-1]
        return eid[first], src[first], vals[first]

    def prune(self, alive: np.ndarray) -> None:
        self.values.prune(alive)

    def state_dict(self, alive=None) -> dict:
        return self.values.state_dict(alive)

    def load_state_dict(self, state) -> None:
        self.values.load_state_dict(state)
