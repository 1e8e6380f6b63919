"""The owner of a model's per-node state, apart from its weights.

:class:`NodeStates` holds every per-node structure a memory-based temporal GNN reads and
writes as events stream by -- the dynamic memory, the pending events
(:class:`~speed.train.state.store.MessageStore`), the neighbour rings
(:class:`~speed.train.state.sampler.RecentNeighborSampler`), the edge features, and the
extra state a recipe declares (:mod:`speed.train.state.components`, e.g. TIGE's dual
memory).  The model (:class:`~speed.train.model.network.TemporalGNN`) is weights only; PAC sync,
the evaluator, the Predictor, ``speed plan`` and checkpoints speak to the state through the
verbs below, never to its parts.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch

from .batch_plan import BatchPlan, PlanDraft, PlanNeeds, build_plan, stage_groups
from .components import COMPONENTS
from .features import MappedFeatures
from .memory import NodeMemory
from .rows import RowExchange, as_numpy
from .sampler import RecentNeighborSampler
from .snapshots import Snapshots
from .store import MessageStore


class NodeStates:
    """Every per-node structure of a model, with the verbs a run needs.

    Parameters
    ----------
    num_nodes : int
    memory_dim, embedding_dim : int
    neighbors : int
        Neighbours kept per node by the sampler.
    needs : PlanNeeds
        What the model's plans must gather (from :meth:`TemporalGNN.plan_needs`).
    components : sequence of str
        The recipe's extra state (names in :data:`~speed.train.state.components.COMPONENTS`).
    device : torch.device, optional
        Where the memories are held.
    """

    def __init__(self, num_nodes: int, memory_dim: int, embedding_dim: int, neighbors: int, needs: PlanNeeds,
                 components=(), device=None):
        self.num_nodes = int(num_nodes)
        self.needs = needs
        self.memory = NodeMemory(num_nodes, memory_dim, device)
        self.components = [COMPONENTS[c](num_nodes, memory_dim, embedding_dim, device) for c in components]
        self.sampler = RecentNeighborSampler(num_nodes, neighbors)
        self.store = MessageStore(num_nodes)
        self.edge_features: Optional[torch.Tensor] = None
        self.dedup = True  # plan each distinct query and memory key once (see batch_plan)
        #: bumped whenever the memories change wholesale (a reset, a restore, new rows): a
        #: shared-node sync then offers every row (speed.train.pac.sync)
        self.generation = 0
        #: the state's rows by node (read, written, handed over: :class:`~.rows.RowExchange`)
        self.rows = RowExchange(self)
        #: back-ups, checkpoints' entries, written snapshots (:class:`~.snapshots.Snapshots`)
        self.snapshots = Snapshots(self)

    # ------------------------------------------------------------------ structure
    def memories(self) -> Dict[str, NodeMemory]:
        """The node memories by name: ``memory``, and the components' (TIGE's ``left_memory``)."""
        out = {"memory": self.memory}
        for c in self.components:
            out.update(c.memories())
        return out

    @property
    def device(self) -> torch.device:
        """Where the memories are held."""
        return self.memory.device

    @property
    def takes_unscored_events(self) -> bool:
        """Whether events may be taken in without being scored (not with TIGE's event values)."""
        return all(c.takes_unscored_events for c in self.components)

    def to(self, device) -> "NodeStates":
        """Hold the memories on ``device`` (pending events, neighbour rings and edge features
        always live in host memory).  A full-graph evaluation state stays on ``"cpu"`` while the
        weights compute elsewhere: each step moves only the rows it reads or writes."""
        self.memory.to(device)
        for c in self.components:
            c.to(device)
        return self

    def set_edge_features(self, msg) -> None:
        """Edge features of the whole log, indexed by event id (kept out of checkpoints): an
        array, held in memory, or a :class:`~speed.train.state.features.MappedFeatures`, read in
        place."""
        if msg is None or isinstance(msg, MappedFeatures):
            self.edge_features = msg
        elif isinstance(msg, np.memmap) and not msg.flags.writeable:  # a mapped log's: read in place
            self.edge_features = MappedFeatures(msg)
        else:
            self.edge_features = torch.as_tensor(msg, dtype=torch.float32).cpu()

    def edge_feature_table(self):
        """The edge features held (float32 (E, d), in host memory; a mapped table as it is), or None."""
        ef = self.edge_features
        return ef.numpy() if torch.is_tensor(ef) else ef

    def add_edge_features(self, msg: np.ndarray) -> None:
        """Append the features of new events (ids continue after the held ones)."""
        new = torch.from_numpy(np.ascontiguousarray(msg, dtype=np.float32))
        self.edge_features = new if self.edge_features is None else torch.cat([self.edge_features, new])

    def reset(self) -> None:
        """Start of a pass: zero memory, forget pending messages and neighbours."""
        self.reset_memories()
        self.reset_structures()

    def reset_memories(self) -> None:
        """Zero the memories (what the steps write; see :meth:`reset_structures`)."""
        self.generation += 1
        self.memory.reset_state()
        for c in self.components:
            c.reset()

    @property
    def seconds_gathering(self) -> float:
        """Seconds the neighbour sampler has spent in collectives answering queries (its rings
        divided among processes; 0 for a whole sampler)."""
        return self.sampler.seconds_gathering

    def reset_structures(self) -> None:
        """Forget pending messages and neighbours (what the plans advance)."""
        self.sampler.reset()
        self.store.reset()

    def resize(self, num_nodes: int) -> None:
        """Hold ``num_nodes`` fresh rows (a PAC rank's local nodes)."""
        self.generation += 1
        self.num_nodes = int(num_nodes)
        self.memory.resize(self.num_nodes)
        for c in self.components:
            c.resize(self.num_nodes)
        self.sampler = RecentNeighborSampler(self.num_nodes, self.sampler.k, self.sampler.undirected)
        self.store = MessageStore(self.num_nodes)

    def grow(self, num_nodes: int) -> None:
        """Make room for nodes up to ``num_nodes``, keeping every existing row: new nodes start
        with zero memory, no pending events and no neighbours."""
        if int(num_nodes) <= self.num_nodes:
            return
        self.num_nodes = int(num_nodes)
        self.memory.grow(self.num_nodes)
        for c in self.components:
            c.grow(self.num_nodes)
        self.sampler.grow(self.num_nodes)
        self.store.grow(self.num_nodes)

    def use_memories(self, make, make_sampler=None) -> None:
        """Replace every memory with ``make(name, memory)`` and, with ``make_sampler(k)``, the
        neighbour rings (rows divided among ranks: :mod:`speed.train.state.sharded`); the pending
        events and neighbours start empty, sized to the new memories' number of nodes."""
        self.memory = make("memory", self.memory)
        for c in self.components:
            c.use_memories(make)
            c.reset()  # a component's other state (TIGE's event values) starts empty too
        self.num_nodes = int(self.memory.num_nodes)
        # (a sharded sampler inserts directed halves; the events themselves are undirected)
        k = self.sampler.k
        undirected = self.sampler.undirected if type(self.sampler) is RecentNeighborSampler else True
        self.sampler = make_sampler(k) if make_sampler is not None else \
            RecentNeighborSampler(self.num_nodes, k, undirected)
        self.store = MessageStore(self.num_nodes)

    def nbytes(self, num_nodes: Optional[int] = None) -> int:
        """Bytes of memories and timestamps for ``num_nodes`` rows (default: as held)."""
        n = self.num_nodes if num_nodes is None else int(num_nodes)
        return int(sum(m.nbytes(n) for m in self.memories().values()))

    def footprint(self, num_nodes: Optional[int] = None) -> Dict[str, int]:
        """Bytes of every per-node structure for ``num_nodes`` rows (default: as held): the
        memories, the neighbour rings and the pending-event index (the pending events
        themselves are a few per node, kept in arrays compacted at 4x the live ones)."""
        n = self.num_nodes if num_nodes is None else int(num_nodes)
        return {"memories": self.nbytes(n), "neighbours": self.sampler.bytes_per_node() * n,
                "pending": self.store.bytes_per_node() * n}

    # ------------------------------------------------------------------ steps
    def plan(self, nodes, times, events=None, neighbors: bool = True, push: bool = True) -> BatchPlan:
        """The plan of a step (see :func:`~speed.train.state.batch_plan.build_plan`), on the host:
        advances the sampler and the store with ``events``."""
        return build_plan(self, as_numpy(nodes), as_numpy(times).astype(np.float64),
                          None if events is None else tuple(as_numpy(x) for x in events), dedup=self.dedup,
                          neighbors=neighbors, push=push)

    def plan_draft(self, nodes, times, events=None, push: bool = True) -> PlanDraft:
        """:meth:`plan`'s arguments, for its stages run one by one (:meth:`plan_stages`)."""
        return PlanDraft(as_numpy(nodes), as_numpy(times).astype(np.float64),
                         None if events is None else tuple(as_numpy(x) for x in events), dedup=self.dedup, push=push)

    def plan_stages(self) -> list:
        """The stages of :meth:`plan`, grouped as threads may run them on consecutive batches at
        once (:func:`~speed.train.state.batch_plan.stage_groups`): each ``stage(self, draft)``."""
        return stage_groups(self)

    def read(self, plan: BatchPlan):
        """The stored ``(states, last_update)`` of ``plan.rows``, on the plan's device."""
        return self.memory.read(plan.rows)

    def read_nodes(self, n_id: torch.Tensor):
        """The stored ``(states, last_update)`` of nodes ``n_id`` (of the main memory)."""
        return self.memory.read(n_id)

    def memory_device(self) -> torch.device:
        """Where the node memory's rows are held."""
        return self.memory.memory.device

    def buffer_ids(self) -> tuple:
        """The addresses of the memory's buffers: they change when a buffer is replaced (the
        memory resized, or restored by adopting other tensors), which a step recorded on them
        must notice (:mod:`speed.train.step.captured`)."""
        return self.memory.memory.data_ptr(), self.memory.last_update.data_ptr()

    def held_rows(self, ids: np.ndarray):
        """The stored ``(states, last_update)`` of nodes ``ids`` whose rows this process holds
        (all of them, unless the memory is divided among ranks), as host tensors: no exchange."""
        return self.memory.local_rows(ids)

    def read_ahead(self, plan: BatchPlan):
        """:meth:`read` from the planning thread, ahead of the step (bounded staleness)."""
        return self.memory.read_host(plan.rows)

    def message_inputs(self, plan: BatchPlan):
        """``(s_self, s_other)`` of the plan's pending events when a component supplies them
        (TIGE's event values), else None: messages read the stored memories."""
        for c in self.components:
            out = c.message_inputs(plan)
            if out is not None:
                return out
        return None

    @torch.no_grad()
    def absorb(self, plan: BatchPlan, states: torch.Tensor, lasts: torch.Tensor,
               z: Optional[torch.Tensor] = None) -> None:
        """The batch has been scored: its endpoints store their memory as seen at the batch's
        last time; ``z`` are the embeddings of the plan's queries, for the components (TIGE
        keeps each endpoint's latest as ``h(t-)``).  (The plan already made the batch's events
        pending and gave them to the sampler.)"""
        if plan.ob_node.numel() == 0:
            return
        z_ob = None if z is None or not self.keeps_embeddings else z.index_select(0, plan.ob_latest)
        self.observe(plan, plan.ob_node, states.index_select(0, plan.ob_key), lasts.index_select(0, plan.ob_key),
                     z_ob)

    @property
    def keeps_embeddings(self) -> bool:
        """Whether a component keeps the batch's embeddings when it is taken in (TIGE)."""
        return any(c.keeps_embeddings for c in self.components)

    @torch.no_grad()
    def observe(self, plan: BatchPlan, nodes: torch.Tensor, states: torch.Tensor, lasts: torch.Tensor,
                z_ob: Optional[torch.Tensor] = None) -> None:
        """Store ``states``/``lasts`` as the memory of ``nodes`` (the batch's endpoints, or those
        of them this process holds) and give the components the batch: ``z_ob`` are the
        embeddings of ``plan.ob_latest``, each endpoint's latest query (components that keep
        embeddings need them)."""
        if nodes.numel():
            self.memory.write(nodes, states, lasts)
        for c in self.components:
            c.absorb(plan, z_ob)
            if c.needs_prune(self.store.alive):  # drop what belongs to events no longer pending
                c.prune(np.unique(self.store.event_ids()))

    def push_events(self, src, dst, t, eid) -> None:
        """Give events to the neighbour sampler ahead of the plans that query them."""
        self.sampler.push(src, dst, t, eid)

    def insert_neighbors(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        """Record events in the neighbour sampler without touching memory (e.g. the training
        events before evaluation continues from a gathered memory)."""
        self.sampler.insert(src, dst, t, eid)

    def reset_neighbors(self) -> None:
        self.sampler.reset()

    def held_at(self, t: float):
        """``(src, dst)`` rows of the events taken in at time ``t`` that still wait to enter
        the neighbour rings (all of them when ``t`` is the latest time: a query moves only
        earlier events in).  Two int64 arrays."""
        return self.sampler.held_at(t)

    def drop_neighbors(self) -> None:
        """Let the neighbour rings go (no rows) until :meth:`resize` sizes the state again."""
        self.sampler = RecentNeighborSampler(0, self.sampler.k, self.sampler.undirected)

    @torch.no_grad()
    def settle(self, model, n_id: torch.Tensor, before: float = np.inf) -> None:
        """Apply the pending events of the distinct nodes ``n_id`` earlier than ``before`` (all by
        default) to their stored memory with ``model``'s weights, so the stored rows are complete
        states, e.g. before they are synchronised.  Events at ``before`` or later stay pending."""
        ids = as_numpy(n_id).astype(np.int64)
        if ids.size == 0:
            return
        t = np.full(ids.size, before, dtype=np.float64)
        plan = self.plan(ids, t, neighbors=False).to(model.device)
        states, lasts = model.key_states(plan, self.read(plan), self.message_inputs(plan))
        keys = plan.uq_key.index_select(0, plan.q_inv)
        self.memory.write(n_id, states.index_select(0, keys), lasts.index_select(0, keys))
        self.store.clear(ids, before)

