"""Which parts each rank trains on in an epoch, and a rank's sub-graph in local node ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ..._util import places
from ...data.events import Events
from ...data.meta import EventsMeta
from ...partition.shards import Shards
from ..config import ConfigError


def check_world(num_parts: int, world: int) -> None:
    """Groups must be equal: the number of parts must be a multiple of the number of ranks (the
    rule of PAC training and of a parallel update alike)."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ConfigError("nproc", f"must be a positive number of processes, got {world!r}")
    if num_parts % world:
        raise ConfigError("nproc", f"is {world}, but the shards have {num_parts} parts, which is not a multiple "
                                   f"of {world} processes: use a number of processes that divides {num_parts} "
                                   f"(or re-partition with a multiple of it)")


@dataclass(frozen=True)
class PartLoads:
    """The training events a group of parts holds, from the shards' bucket counts.

    Attributes
    ----------
    own : int64 ndarray, shape (P,)
        Events of part ``p`` alone: between its nodes, between its nodes and shared nodes,
        and (``assigned``) the shared–shared events assigned to it.
    cut : int64 ndarray, shape (P, P)
        Cut events between parts ``p`` and ``q`` (symmetric, zero diagonal): a group holds
        them when it holds both parts.
    everywhere : int
        Shared–shared events every group holds (``induced``; 0 for ``assigned``).

    Counted before the inductive hold-out (a few events fewer train on each rank).
    """

    own: np.ndarray
    cut: np.ndarray
    everywhere: int

    def of(self, groups: List[np.ndarray]) -> np.ndarray:
        """int64 (len(groups),): the training events of each group."""
        return np.array([self.own[g].sum() + self.cut[np.ix_(g, g)].sum() // 2 + self.everywhere for g in groups],
                        dtype=np.int64)


def part_loads(shards: Shards, subgraph: str) -> PartLoads:
    """:class:`PartLoads` of the shards' training period for ``subgraph`` (``induced``/``assigned``)."""
    from ...partition._kernels import bucket_id

    P = shards.num_parts
    per_bucket, shared_assigned = shards.train_counts()

    def count(a: int, b: int) -> int:
        return int(per_bucket[bucket_id(a, b, P)])

    own = np.array([count(0, p + 1) + count(p + 1, p + 1) for p in range(P)], dtype=np.int64)
    cut = np.zeros((P, P), dtype=np.int64)
    for p in range(P):
        for q in range(p + 1, P):
            cut[p, q] = cut[q, p] = count(p + 1, q + 1)
    everywhere = count(0, 0)
    if subgraph == "assigned" and shared_assigned is not None:
        own += shared_assigned
        everywhere = 0
    return PartLoads(own=own, cut=cut, everywhere=int(everywhere))


_CANDIDATES = 64  # seeded random groupings weighed against LPT each epoch
_TOLERANCE = 0.02  # groupings whose largest group is within 2% of the best are equally good


def part_groups(num_parts: int, world: int, seed: int, epoch: int, shuffle: bool,
                loads: Optional[PartLoads] = None) -> List[np.ndarray]:
    """The parts of each rank in ``epoch``.

    Without ``loads``: a seeded permutation cut into ``world`` equal groups of parts.  With
    ``loads``, the groups are balanced in training events: the candidates are LPT (largest
    part first onto the group with the fewest events, among groups with room; ties to the
    group first in a seeded order) and 64 seeded random groupings; of those whose largest group
    is within 2% of the best candidate's, one is drawn with the epoch's seed, so parts still
    meet different partners across epochs whenever the loads allow it.  Without ``shuffle``
    the groups are LPT's (the same every epoch).

    Returns
    -------
    list of int64 ndarray
        ``world`` sorted arrays of ``num_parts // world`` part ids.
    """
    m = num_parts // world
    if loads is None:
        perm = np.random.default_rng([seed, epoch]).permutation(num_parts) if shuffle else np.arange(num_parts)
        return [np.sort(perm[r * m:(r + 1) * m]) for r in range(world)]
    rng = np.random.default_rng([seed, epoch, 1]) if shuffle else np.random.default_rng(0)
    candidates = [_lpt(loads, world, m, rng.permutation(world))]
    if shuffle:
        for _ in range(_CANDIDATES):
            perm = rng.permutation(num_parts)
            candidates.append([np.sort(perm[r * m:(r + 1) * m]) for r in range(world)])
    largest = np.array([loads.of(c).max() for c in candidates])
    good = np.flatnonzero(largest <= largest.min() * (1 + _TOLERANCE))
    return candidates[int(good[rng.integers(good.size)])] if shuffle else candidates[0]


def _lpt(loads: PartLoads, world: int, m: int, rank_order: np.ndarray) -> List[np.ndarray]:
    groups: List[List[int]] = [[] for _ in range(world)]
    total = np.zeros(world, dtype=np.int64)
    for p in np.argsort(-loads.own, kind="stable"):
        open_ = [r for r in rank_order if len(groups[r]) < m]
        # the part's own events plus the cut events it brings back with the group's parts
        gain = {r: loads.own[p] + loads.cut[p, groups[r]].sum() for r in open_}
        r = min(open_, key=lambda r: total[r] + gain[r])
        groups[r].append(int(p))
        total[r] += gain[r]
    return [np.sort(np.array(g, dtype=np.int64)) for g in groups]


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
    """int64 (num_nodes,): each global id's place among ``nodes``, -1 for the others."""
    return places(nodes, num_nodes)


def own_nodes(shards: Shards, group: np.ndarray) -> np.ndarray:
    """Global ids of the non-shared nodes of a group's parts, ascending."""
    return np.flatnonzero(np.isin(shards.node_parts, group))


def rank_graph(shards: Shards, group: np.ndarray, new_nodes: Optional[np.ndarray],
               subgraph: str = "induced") -> RankGraph:
    """The training sub-graph of ``group``'s parts plus the shared nodes (``subgraph``: see
    :meth:`speed.partition.shards.Shards.merge`)."""
    nodes = np.concatenate([shards.shared, own_nodes(shards, group)])
    g2l = local_ids(nodes, shards.num_nodes)
    ev = shards.merge(group, period="train", subgraph=subgraph, features=False)  # features are read by event id
    if new_nodes is not None and new_nodes.any():
        ev = ev.select(~(new_nodes[ev.src] | new_nodes[ev.dst]))
    local = Events(src=g2l[ev.src], dst=g2l[ev.dst], t=ev.t, eid=ev.eid, num_nodes=int(nodes.size),
                   bipartite=ev.bipartite, meta=EventsMeta(source=str(shards.path), parts=group.tolist()))
    return RankGraph(parts=group, nodes=nodes, num_shared=int(shards.shared.size), events=local)
