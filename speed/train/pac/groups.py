"""Which parts each rank trains on in an epoch, and a rank's sub-graph in local node ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ...data.events import Events
from ...partition.shards import Shards
from ..config import ConfigError


def check_world(num_parts: int, world: int) -> None:
    """Groups must be equal: the number of parts must be a multiple of the number of ranks."""
    if num_parts % world:
        raise ConfigError("nproc", f"is {world}, but the shards have {num_parts} parts, which is not a multiple "
                                   f"of {world} processes: use a number of processes that divides {num_parts} "
                                   f"(or re-partition with a multiple of it)")


def part_groups(num_parts: int, world: int, seed: int, epoch: int, shuffle: bool) -> List[np.ndarray]:
    """The parts of each rank in ``epoch``: a seeded permutation cut into ``world`` groups.

    Returns
    -------
    list of int64 ndarray
        ``world`` sorted arrays of ``num_parts // world`` part ids.
    """
    perm = np.random.default_rng([seed, epoch]).permutation(num_parts) if shuffle else np.arange(num_parts)
    m = num_parts // world
    return [np.sort(perm[r * m:(r + 1) * m]) for r in range(world)]


@dataclass
class RankGraph:
    """A rank's training sub-graph in local node ids.

    Attributes
    ----------
    parts : int64 ndarray
    nodes : int64 ndarray, shape (n,)
        Global id of each local node: shared nodes first (the same local ids on every rank),
        then the group's own nodes, ascending.
    num_shared : int
    events : Events
        Training events (inductive mask applied) with local ``src``/``dst`` and global ``eid``.
    """

    parts: np.ndarray
    nodes: np.ndarray
    num_shared: int
    events: Events

    def global_to_local(self, num_nodes: int) -> np.ndarray:
        """int64 (num_nodes,): each global id's local id, -1 for nodes not on this rank."""
        return local_ids(self.nodes, num_nodes)


def local_ids(nodes: np.ndarray, num_nodes: int) -> np.ndarray:
    g2l = np.full(num_nodes, -1, dtype=np.int64)
    g2l[nodes] = np.arange(nodes.size)
    return g2l


def own_nodes(shards: Shards, group: np.ndarray) -> np.ndarray:
    """Global ids of the non-shared nodes of a group's parts, ascending."""
    return np.flatnonzero(np.isin(shards.node_parts, group))


def rank_graph(shards: Shards, group: np.ndarray, new_nodes: Optional[np.ndarray],
               subgraph: str = "induced") -> RankGraph:
    """The training sub-graph of ``group``'s parts plus the shared nodes (``subgraph``: see
    :meth:`speed.partition.shards.Shards.merge`)."""
    nodes = np.concatenate([shards.shared, own_nodes(shards, group)])
    g2l = local_ids(nodes, shards.num_nodes)
    ev = shards.merge(group, period="train", subgraph=subgraph)
    if new_nodes is not None and new_nodes.any():
        ev = ev.select(~(new_nodes[ev.src] | new_nodes[ev.dst]))
    local = Events(src=g2l[ev.src], dst=g2l[ev.dst], t=ev.t, eid=ev.eid, num_nodes=int(nodes.size),
                   bipartite=ev.bipartite, meta={"source": str(shards.path), "parts": group.tolist()})
    return RankGraph(parts=group, nodes=nodes, num_shared=int(shards.shared.size), events=local)
