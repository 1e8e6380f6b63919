"""Snapshots of a node state: back-ups a pass restores, what checkpoints store, and the
writing of a sharded state into one file.

:class:`Snapshots` is the part of a :class:`~speed.train.state.nodes.NodeStates` (its
``snapshots``) that changes when the serialised layout changes; its keys are read in
:mod:`speed.train.state` only (the architecture test checks it).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch

from .spill import Keep


class Snapshots:
    """Back-ups, checkpoints' entries and written snapshots of a node state (``NodeStates.snapshots``).

    Parameters
    ----------
    states : NodeStates
        The state they are taken of and put back into (its parts as they are now).
    """

    def __init__(self, states):
        self.states = states

    def written_snapshot(self, writer, backup: Optional[dict] = None) -> Optional[dict]:
        """A snapshot of a sharded state, as :meth:`backup` gives one of a whole state, for
        ``writer`` (:class:`~speed.train.state.sharded.ShardWriter`) to write: memories and
        neighbour rings as arrays that each rank writes its own rows of into the file, pending
        events and components' state as held (every rank holds them whole).  On the writing
        rank; None on the others, which then :meth:`ShardWriter.serve`.  ``backup``: a
        :meth:`backup` of this rank's instead of the live state."""
        out = {"memories": {name: writer.memory(mem, None if backup is None else backup["memories"][name])
                            for name, mem in self.states.memories().items()}}
        out["sampler"] = writer.sampler(self.states.sampler, None if backup is None else backup["sampler"])
        if backup is None:
            out["store"] = self.states.store.state_dict()
            self._components_into(out, out["store"]["eid"])
        else:
            out.update({k: v for k, v in backup.items() if k not in ("partial", "memories", "sampler")})
        return out if writer.writes else None

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
        out = {"store": self.states.store.state_dict(keep), "sampler": self.states.sampler.state_dict(keep)}
        self._components_into(out, out["store"]["eid"])
        return out

    def load_structures(self, state: dict, adopt: bool = False) -> None:
        """Load what :meth:`structures` gave; the state takes their number of rows.  ``adopt``:
        hold the arrays themselves (see :meth:`NodeMemory.restore`)."""
        self.states.store.load_state_dict(state["store"], adopt=adopt)
        self.states.sampler.load_state_dict(state["sampler"], adopt=adopt)
        self._components_from(state)

    def _components_into(self, out: dict, alive) -> None:
        for c in self.states.components:  # (the store is compacted: its ids are the pending events')
            st = c.state_dict(alive)
            if st is not None:
                out[c.state_key] = st

    def _components_from(self, state: dict) -> None:
        for c in self.states.components:
            c.load_state_dict(state.get(c.state_key))

    def memory_prefixes(self) -> Tuple[str, ...]:
        """The key prefixes of :meth:`memory_dict`, one per memory."""
        return tuple(f"{k}." for k in self.states.memories())

    def memory_dict(self) -> Dict[str, torch.Tensor]:
        """The memories as flat entries ``{name}.memory`` and ``{name}.last_update`` (host memory),
        as a best checkpoint stores them beside the weights."""
        out = {}
        for k, m in self.states.memories().items():
            # copies: the rows are written in place afterwards
            out[f"{k}.memory"], out[f"{k}.last_update"] = m.memory.detach().cpu().clone(), m.last_update.cpu().clone()
        return out

    def load_memory_dict(self, entries: Dict[str, torch.Tensor], adopt: bool = False) -> None:
        """Load :meth:`memory_dict` entries; the state takes their number of rows.  ``adopt``:
        hold the tensors themselves (see :meth:`NodeMemory.restore`)."""
        for k, m in self.states.memories().items():
            m.restore({"memory": entries[f"{k}.memory"], "last_update": entries[f"{k}.last_update"]}, adopt=adopt)
        if self.states.memory.num_nodes > self.states.num_nodes:
            self.states.grow(self.states.memory.num_nodes)

    def backup(self, nodes: Optional[np.ndarray] = None, keep: Optional[Keep] = None) -> dict:
        """Memories, pending messages, neighbours and components, detached (see :meth:`restore`).

        ``nodes``: the nodes a coming pass may write (the endpoints of its events): only their
        memories and rings are copied, with those the held events will enter -- a back-up of
        the size of the pass, not of the graph.  The pending events and components are copied
        whole.  ``keep``: where the copies live (in memory by default; :class:`Spill`: in
        unlinked files on disk, written from the live arrays a window at a time)."""
        if nodes is None:
            out = {"memories": {k: m.backup(keep) for k, m in self.states.memories().items()}}
            out.update(self.structures(keep))
            return out
        rows = np.union1d(np.asarray(nodes, dtype=np.int64), self.states.sampler.held_nodes())
        out = {"partial": True, "memories": {k: m.backup_rows(rows, keep) for k, m in self.states.memories().items()},
               "sampler": self.states.sampler.backup_rows(rows, keep), "store": self.states.store.state_dict(keep)}
        self._components_into(out, out["store"]["eid"])
        return out

    def restore(self, state: dict, adopt: bool = False) -> None:
        """Put back a :meth:`backup`.  ``adopt``: a whole back-up nobody else holds becomes the
        state itself, no copy (a spilled one then stays mapped, its pages read as touched)."""
        self.states.generation += 1
        if state.get("partial"):
            for k, mem in self.states.memories().items():
                mem.restore_rows(state["memories"][k])
            self.states.sampler.restore_rows(state["sampler"])
            self.states.store.load_state_dict(state["store"])
            self._components_from(state)
            return
        for k, mem in self.states.memories().items():
            mem.restore(state["memories"][k], adopt=adopt)
        self.states.num_nodes = self.states.memory.num_nodes
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
