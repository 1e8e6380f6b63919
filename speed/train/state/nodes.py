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

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from .batch_plan import BatchPlan, PlanNeeds, build_plan
from .components import COMPONENTS
from .features import MappedFeatures
from .memory import NodeMemory
from .spill import Keep
from .sampler import RecentNeighborSampler
from .store import MessageStore


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

    def written_snapshot(self, writer, backup: Optional[dict] = None) -> Optional[dict]:
        """A snapshot of a sharded state, as :meth:`backup` gives one of a whole state, for
        ``writer`` (:class:`~speed.train.state.sharded.ShardWriter`) to write: memories and
        neighbour rings as arrays that each rank writes its own rows of into the file, pending
        events and components' state as held (every rank holds them whole).  On the writing
        rank; None on the others, which then :meth:`ShardWriter.serve`.  ``backup``: a
        :meth:`backup` of this rank's instead of the live state."""
        out = {"memories": {name: writer.memory(mem, None if backup is None else backup["memories"][name])
                            for name, mem in self.memories().items()}}
        out["sampler"] = writer.sampler(self.sampler, None if backup is None else backup["sampler"])
        if backup is None:
            out["store"] = self.store.state_dict()
            self._components_into(out, out["store"]["eid"])
        else:
            out.update({k: v for k, v in backup.items() if k not in ("partial", "memories", "sampler")})
        return out if writer.writes else None

    def load_pending(self, pending, extras: Optional[Dict] = None) -> None:
        """Make ``pending`` = ``(node, other, t, eid)`` (as :attr:`StateRows.pending`) the pending
        events of their nodes, and give the components what they exported for them."""
        node, other, t, eid = (as_numpy(x) for x in pending)
        self.store.clear(np.unique(node))
        if node.size:
            self.store.replace(node, other, t, eid)
        for c in self.components:
            c.import_((extras or {}).get(c.name))

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

    def read(self, plan: BatchPlan):
        """The stored ``(states, last_update)`` of ``plan.rows``, on the plan's device."""
        return self.memory.read(plan.rows)

    def read_nodes(self, n_id: torch.Tensor):
        """The stored ``(states, last_update)`` of nodes ``n_id`` (of the main memory)."""
        return self.memory.read(n_id)

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

    # ------------------------------------------------------------------ exchange
    def _pending_of(self, ids: np.ndarray) -> Tuple[torch.Tensor, ...]:
        """``(node, other, t, eid)`` of the pending events of the distinct nodes ``ids``."""
        row, other, t, eid = self.store.gather(ids)
        return tuple(torch.from_numpy(x) for x in (ids[row], other, t, eid))

    def rows_with_pending(self, num: int) -> np.ndarray:
        """The rows among the first ``num`` that have pending events (int64, ascending): those
        written since their events were last applied, or holding events at the latest time."""
        return np.flatnonzero(self.store.count[:int(num)] > 0).astype(np.int64)

    def write_memories(self, n_id: torch.Tensor, memories: Dict[str, Tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Overwrite the stored ``(states, last_update)`` of rows ``n_id`` in each named memory
        (:meth:`memories`); pending events stay."""
        mems = self.memories()
        for k, (values, last) in memories.items():
            mems[k].write(n_id, values.to(mems[k].device), last.to(mems[k].device))

    def write_owned(self, name: str, nodes: np.ndarray, values: torch.Tensor, last: torch.Tensor,
                    reset: bool = False) -> None:
        """Store rows of nodes this rank owns in the sharded memory ``name`` (``nodes`` int64
        global ids; :class:`~.sharded.ShardedMemory`), first zeroing it when ``reset``."""
        mem = self.memories()[name]
        if reset:
            mem.reset_state()
        mem.write_owned(nodes, values, last)

    def rows(self, n_id: torch.Tensor) -> StateRows:
        """Stored states and pending events of the distinct nodes ``n_id`` (detached)."""
        pending = self._pending_of(as_numpy(n_id))
        extras = {}
        for c in self.components:
            out = c.export(pending[3])
            if out is not None:
                extras[c.name] = out
        return StateRows({k: tuple(x.detach().clone() for x in m.read(n_id)) for k, m in self.memories().items()},
                         pending, extras)

    def load_rows(self, n_id: torch.Tensor, rows: StateRows) -> None:
        """Overwrite the rows ``n_id`` with ``rows`` (as returned by :meth:`rows`); their pending
        events become exactly ``rows.pending``."""
        for k, mem in self.memories().items():
            values, last = rows.memories[k]
            mem.write(n_id, values.to(mem.device), last.to(mem.device))
        self.store.clear(as_numpy(n_id))
        node, other, t, eid = (as_numpy(x) for x in rows.pending)
        if node.size:
            self.store.replace(node, other, t, eid)
        for c in self.components:
            c.import_(rows.extras.get(c.name))

    def all_rows(self, views: bool = False) -> StateRows:
        """:meth:`rows` of every node.  ``views``: the memories as held (no copy; see
        :meth:`NodeMemory.held`), for a reader done before the state next changes."""
        if not views:
            return self.rows(torch.arange(self.num_nodes, device=self.device))
        pending = self._pending_of(np.arange(self.num_nodes, dtype=np.int64))
        extras = {c.name: out for c in self.components if (out := c.export(pending[3])) is not None}
        return StateRows({k: m.held() for k, m in self.memories().items()}, pending, extras)

    def pending_events(self) -> Tuple[torch.Tensor, ...]:
        """``(node, other, t, eid)`` of every pending event, in host memory (no memory copied)."""
        return self._pending_of(np.arange(self.num_nodes, dtype=np.int64))

    def recent_interactions(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(node, neighbour)`` rows of the interactions the neighbour rings hold (the latest
        ``k`` of every node): two int64 arrays, node by node."""
        return self.sampler.recent_pairs()

    @staticmethod
    def compact_event_ids(snapshots) -> np.ndarray:
        """Renumber the event ids that snapshots (:meth:`structures`, :meth:`backup`) refer to
        -- in the neighbour rings, the pending events and the components' values -- to their
        rank among all those ids, so that a table of only those events' features serves them.

        Each snapshot dict has those entries replaced by renumbered copies (arrays are never
        edited in place: a snapshot may share them with a live state); -1 stays -1.

        Returns
        -------
        int64 ndarray
            The original ids, sorted: new id ``i`` was ``keep[i]``.
        """
        used = [s["sampler"]["nbr_e"].ravel() for s in snapshots] + \
            [s["sampler"]["hold"]["e"] for s in snapshots] + \
            [np.asarray(s["store"]["eid"]) for s in snapshots] + \
            [np.asarray(s["values"]["eid"]) for s in snapshots if "values" in s]
        keep = np.unique(np.concatenate(used))
        keep = keep[keep >= 0]

        def renumber(e):
            e = np.asarray(e)
            return np.where(e >= 0, np.searchsorted(keep, e), -1).astype(np.int64)

        for s in snapshots:
            sampler = s["sampler"]
            s["sampler"] = {**sampler, "nbr_e": renumber(sampler["nbr_e"]),
                            "hold": {**sampler["hold"], "e": renumber(sampler["hold"]["e"])}}
            s["store"] = {**s["store"], "eid": renumber(s["store"]["eid"])}
            if "values" in s:  # TIGE's kept embeddings, by event id
                s["values"] = {**s["values"], "eid": torch.from_numpy(renumber(s["values"]["eid"]))}
        return keep

    def structures(self, keep: Optional[Keep] = None) -> dict:
        """The pending events, neighbour rings and components' state (no memories): what a
        checkpoint needs besides the memories to go on from here (``keep``: see :meth:`backup`)."""
        out = {"store": self.store.state_dict(keep), "sampler": self.sampler.state_dict(keep)}
        self._components_into(out, out["store"]["eid"])
        return out

    def load_structures(self, state: dict, adopt: bool = False) -> None:
        """Load what :meth:`structures` gave; the state takes their number of rows.  ``adopt``:
        hold the arrays themselves (see :meth:`NodeMemory.restore`)."""
        self.store.load_state_dict(state["store"], adopt=adopt)
        self.sampler.load_state_dict(state["sampler"], adopt=adopt)
        self._components_from(state)

    def _components_into(self, out: dict, alive) -> None:
        for c in self.components:  # (the store is compacted: its ids are the pending events')
            st = c.state_dict(alive)
            if st is not None:
                out[c.state_key] = st

    def _components_from(self, state: dict) -> None:
        for c in self.components:
            c.load_state_dict(state.get(c.state_key))

    def memory_prefixes(self) -> Tuple[str, ...]:
        """The key prefixes of :meth:`memory_dict`, one per memory."""
        return tuple(f"{k}." for k in self.memories())

    def memory_dict(self) -> Dict[str, torch.Tensor]:
        """The memories as flat entries ``{name}.memory`` and ``{name}.last_update`` (host memory),
        as a best checkpoint stores them beside the weights."""
        out = {}
        for k, m in self.memories().items():
            # copies: the rows are written in place afterwards
            out[f"{k}.memory"], out[f"{k}.last_update"] = m.memory.detach().cpu().clone(), m.last_update.cpu().clone()
        return out

    def load_memory_dict(self, entries: Dict[str, torch.Tensor], adopt: bool = False) -> None:
        """Load :meth:`memory_dict` entries; the state takes their number of rows.  ``adopt``:
        hold the tensors themselves (see :meth:`NodeMemory.restore`)."""
        for k, m in self.memories().items():
            m.restore({"memory": entries[f"{k}.memory"], "last_update": entries[f"{k}.last_update"]}, adopt=adopt)
        if self.memory.num_nodes > self.num_nodes:
            self.grow(self.memory.num_nodes)

    # ------------------------------------------------------------------ snapshots
    def backup(self, nodes: Optional[np.ndarray] = None, keep: Optional[Keep] = None) -> dict:
        """Memories, pending messages, neighbours and components, detached (see :meth:`restore`).

        ``nodes``: the nodes a coming pass may write (the endpoints of its events): only their
        memories and rings are copied, with those the held events will enter -- a back-up of
        the size of the pass, not of the graph.  The pending events and components are copied
        whole.  ``keep``: where the copies live (in memory by default; :class:`Spill`: in
        unlinked files on disk, written from the live arrays a window at a time)."""
        if nodes is None:
            out = {"memories": {k: m.backup(keep) for k, m in self.memories().items()}}
            out.update(self.structures(keep))
            return out
        rows = np.union1d(np.asarray(nodes, dtype=np.int64), self.sampler.held_nodes())
        out = {"partial": True, "memories": {k: m.backup_rows(rows, keep) for k, m in self.memories().items()},
               "sampler": self.sampler.backup_rows(rows, keep), "store": self.store.state_dict(keep)}
        self._components_into(out, out["store"]["eid"])
        return out

    def restore(self, state: dict, adopt: bool = False) -> None:
        """Put back a :meth:`backup`.  ``adopt``: a whole back-up nobody else holds becomes the
        state itself, no copy (a spilled one then stays mapped, its pages read as touched)."""
        self.generation += 1
        if state.get("partial"):
            for k, mem in self.memories().items():
                mem.restore_rows(state["memories"][k])
            self.sampler.restore_rows(state["sampler"])
            self.store.load_state_dict(state["store"])
            self._components_from(state)
            return
        for k, mem in self.memories().items():
            mem.restore(state["memories"][k], adopt=adopt)
        self.num_nodes = self.memory.num_nodes
        self.load_structures(state, adopt=adopt)

    def whole_backup(self, partial: dict) -> dict:
        """The whole back-up a partial one (:meth:`backup` with ``nodes``) stands for: the state
        now, with the rows the partial one kept put back (a copy of every row, for a writer)."""
        if not partial.get("partial"):
            return partial
        out = self.backup()
        for k, saved in partial["memories"].items():
            i = saved["ids"]
            out["memories"][k]["memory"][i] = saved["memory"].to(out["memories"][k]["memory"].device)
            out["memories"][k]["last_update"][i] = saved["last_update"].to(out["memories"][k]["last_update"].device)
        rings = partial["sampler"]
        for name in ("nbr", "nbr_t", "nbr_e", "head", "count"):
            out["sampler"][name][rings["rows"]] = rings[name]
        out["sampler"]["hold"] = rings["hold"]
        out.update({k: v for k, v in partial.items() if k not in ("partial", "memories", "sampler")})
        return out

    state_dict = backup  # a checkpoint holds exactly a back-up
    load_state_dict = restore
