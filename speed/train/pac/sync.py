"""Shared-node sync: make the state of the nodes every rank holds agree across ranks.

The rules (:func:`combine_shared`): for each shared node the state with the largest
``last_update`` wins (``last``; ties: the lowest rank), or the mean of the ranks' states
(``mean``); a rank never takes in a state later than its own clock (ranks move through time at
their own pace).  To add a rule: its name in :data:`speed.train.config.SYNC_RULES` and its
function in :data:`COMBINE` (a rule but ``last`` syncs every shared row each time).

:class:`SharedSync` applies ``last`` sending only what changed: a rank offers the shared rows
it wrote since the last sync (they have pending events), those it took from another rank at
the last sync (the others must see what it holds now), and keeps the offers its clock refused
until its clock reaches them or the sender offers a newer state.  That is exactly the set of
states that could beat a rank's own, so every rank ends each sync with the states the sync of
every row gives (tested against it).  A rank whose memories changed wholesale since the last
sync (a new pass over its sub-graph resets them; the end of an epoch restores a back-up) asks
for a full sync, every rank offering every row; ``mean`` always syncs every row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from .. import config  # config.SYNC_RULES: the rules' names ("none" never combines)
from ..model.network import StatefulModel


def combine_shared(states: torch.Tensor, last: torch.Tensor, mode: str, now: float = float("inf"),
                   own: int = 0):
    """The sync rule on gathered states ``(W, S, d)`` and times ``(W, S)``.

    ``last``: the state with the largest ``last_update`` wins (ties: the lowest rank);
    ``mean``: the mean state with the latest time.  Only the states not later than ``now`` (the
    receiving rank's clock; infinite at the end of an epoch) take part, so that within an epoch a
    rank that is behind in time never takes in another rank's state from its own future; its own
    state (rank ``own``) always takes part.  Returns ``(states (S, d), last (S,))``.
    """
    if mode not in config.SYNC_RULES or mode not in COMBINE:
        raise ValueError(f"unknown sync rule {mode!r} (choose from {', '.join(config.SYNC_RULES)})")
    valid = last <= now
    valid[own] = True
    latest = torch.where(valid, last, torch.full_like(last, -float("inf")))
    return COMBINE[mode](states, last, valid, latest)


def _latest_wins(states, last, valid, latest):
    winner = latest_rank(latest)
    cols = torch.arange(states.shape[1], device=states.device)
    return states[winner, cols], last[winner, cols]


def _mean(states, last, valid, latest):
    w = valid.to(states.dtype).unsqueeze(-1)
    return (states * w).sum(0) / w.sum(0), latest.max(0).values


# Each rule of config.SYNC_RULES: ``rule(states (W, S, d), last (W, S), valid (W, S), latest (W, S))
# -> (states (S, d), last (S,))``, ``valid`` the states that may take part (not later than the
# receiving rank's clock, and its own) and ``latest`` their times (-inf where not valid).
COMBINE: Dict[str, Callable] = {"last": _latest_wins, "mean": _mean}


def latest_rank(last: torch.Tensor) -> torch.Tensor:
    """Which rank's state of each shared node wins, from their times ``last`` (W, S): the
    latest, ties to the lowest rank (argmax returns the first maximum).  The pending events of
    a shared node go with its state: the hand-over to the owners keeps the winner's."""
    return torch.argmax(last, dim=0)


def winning_offers(node: torch.Tensor, rank: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """:func:`latest_rank`'s rule over offers that differ in number per node: for each distinct
    ``node``, the index of its offer with the latest ``last``, ties to the lowest ``rank`` (int64,
    one per node, in node order).  Stable sorts, the last key first."""
    o = torch.argsort(rank, stable=True)
    o = o[torch.argsort(-last[o], stable=True)]
    o = o[torch.argsort(node[o], stable=True)]
    sorted_node = node[o]
    first = torch.ones_like(sorted_node, dtype=torch.bool)
    first[1:] = sorted_node[1:] != sorted_node[:-1]
    return o[first]


def _words(x: torch.Tensor) -> torch.Tensor:
    """A 64-bit column (n,) as two float32 columns (n, 2), bit for bit."""
    return x.contiguous().view(torch.float32).reshape(-1, 2)


@dataclass
class _Offers:
    """Offered rows of one memory: node (local id), sender, time, state."""

    node: torch.Tensor
    rank: torch.Tensor
    last: torch.Tensor
    state: torch.Tensor

    def __len__(self) -> int:
        return int(self.node.shape[0])

    @staticmethod
    def cat(parts: List["_Offers"]) -> "_Offers":
        return _Offers(*(torch.cat([getattr(p, f) for p in parts]) for f in ("node", "rank", "last", "state")))

    def take(self, i: torch.Tensor) -> "_Offers":
        return _Offers(self.node[i], self.rank[i], self.last[i], self.state[i])


@dataclass
class SyncStats:
    """What a rank's syncs of one epoch did."""

    rounds: int = 0
    full_rounds: int = 0
    rows_sent: List[int] = field(default_factory=list)  # rows this rank offered, per sync
    rows_taken: int = 0  # rows that took another rank's state
    bytes_sent: int = 0
    seconds: float = 0.0

    def as_dict(self) -> Dict:
        sent = self.rows_sent
        return {"rounds": self.rounds, "full_rounds": self.full_rounds, "rows_sent": int(sum(sent)),
                "rows_sent_per_sync": float(np.mean(sent)) if sent else 0.0, "rows_taken": self.rows_taken,
                "bytes_sent": self.bytes_sent, "seconds": self.seconds}


class SharedSync:
    """The shared-node syncs of one rank over one epoch (see the module docstring).

    Parameters
    ----------
    model : StatefulModel
        The rank's model; its first ``num_shared`` rows are the shared nodes, in the same order
        on every rank.
    num_shared : int
    mode : str
        A rule of :data:`speed.train.config.SYNC_RULES`, or "none".
    world : World
        The ranks; rows travel over its device group (where the state is held).
    """

    def __init__(self, model: StatefulModel, num_shared: int, mode: str, world):
        self.model, self.num_shared, self.mode, self.world = model, int(num_shared), mode, world
        self.generation = model.state.generation
        self.adopted = np.empty(0, dtype=np.int64)  # rows that took another rank's state last time
        self.refused: Dict[str, Optional[_Offers]] = {}  # offers later than this rank's clock
        self.stats = SyncStats()

    def __call__(self, before: float = float("inf")) -> float:
        """Sync now: pending events earlier than ``before`` are applied first (so a rank
        offers complete states), and ``before`` is the rank's clock.  Returns the seconds spent."""
        start = time.perf_counter()
        w, ns, state = self.world, self.num_shared, self.model.state
        if self.mode == "none" or ns == 0 or w.size == 1:
            return time.perf_counter() - start
        dev = state.device
        # only "last" can be synced from the rows that changed (see the module docstring)
        changed = self.mode != "last" or state.generation != self.generation
        offer = np.union1d(state.rows.with_pending(ns), self.adopted)
        # one small collective: every rank's count, and whether any asks for a full sync
        head = torch.tensor([offer.size, int(changed)], dtype=torch.long, device=w.device)
        heads = [h.cpu() for h in w.all_gather(head)]
        full = any(int(h[1]) for h in heads)
        if full:
            offer = np.arange(ns, dtype=np.int64)
        counts = [ns if full else int(h[0]) for h in heads]
        ids = torch.from_numpy(offer).to(dev)
        with torch.no_grad():
            self.model.settle(ids, before)
            mine = state.rows.read(ids).memories
            names = list(mine)
            # one row per node: its id and, per memory, its time (two words each) and state
            packed = torch.cat([_words(ids.to(torch.int64))] + [torch.cat([_words(mine[k][1].to(torch.float64)),
                                                                            mine[k][0].float()], 1) for k in names], 1)
            got = w.all_gather_rows_device(packed.to(w.device), counts)
        self.stats.rows_sent.append(int(offer.size))
        self.stats.bytes_sent += int(packed.numel()) * 4
        self.stats.rounds += 1
        self.stats.full_rounds += int(full)
        taken = self._combine(got, names, mine, ids, before, full)
        self.adopted = taken
        self.generation = state.generation
        seconds = time.perf_counter() - start
        self.stats.seconds += seconds
        return seconds

    def start(self) -> None:
        """The pass begins (after the memories were reset): changes from here on are offered."""
        self.generation = self.model.state.generation
        self.adopted = np.empty(0, dtype=np.int64)
        self.refused = {}

    def _every_row(self, got, names, mine, ids, now: float) -> np.ndarray:
        """A rule but ``last``: every rank offered every row, in id order."""
        w, state = self.world, self.model.state
        col, writes = 2, {}
        for k in names:
            d = mine[k][0].shape[1]
            last = torch.stack([g[:, col:col + 2].contiguous().view(torch.float64).reshape(-1) for g in got])
            states = torch.stack([g[:, col + 2:col + 2 + d] for g in got])
            col += 2 + d
            s, lu = combine_shared(states.to(state.device), last.to(state.device), self.mode, now=now, own=w.rank)
            writes[k] = (s, lu)
        state.rows.write_memories(ids, writes)
        return np.empty(0, dtype=np.int64)

    def _combine(self, got, names, mine, ids, now: float, full: bool) -> np.ndarray:
        """Apply the rule to the offers received (and the refused ones kept); returns the rows
        that took another rank's state."""
        if self.mode != "last":
            return self._every_row(got, names, mine, ids, now)
        w, state = self.world, self.model.state
        dev = state.device
        me = w.rank
        widths = {k: mine[k][0].shape[1] for k in names}
        adopted = []
        per_memory = {}
        for r, rows in enumerate(got):
            rows = rows.to(dev)
            node = rows[:, :2].contiguous().view(torch.int64).reshape(-1)
            col = 2
            for k in names:
                last = rows[:, col:col + 2].contiguous().view(torch.float64).reshape(-1)
                s = rows[:, col + 2:col + 2 + widths[k]]
                col += 2 + widths[k]
                if r != me:
                    per_memory.setdefault(k, []).append(
                        _Offers(node, torch.full_like(node, r), last, s))
        writes = {}
        for k in names:
            offers = per_memory.get(k, [])
            kept = None if full else self.refused.get(k)
            parts = ([kept] if kept is not None else []) + offers
            if not parts:
                self.refused[k] = None
                continue
            cand = _Offers.cat(parts)
            # the newest offer of each (node, sender): the sender's state now (offers come after
            # the kept refusals, so the last of each pair wins)
            key = cand.node * w.size + cand.rank
            order = torch.argsort(key, stable=True)
            key_sorted = key[order]
            last_of = torch.ones_like(key_sorted, dtype=torch.bool)
            last_of[:-1] = key_sorted[1:] != key_sorted[:-1]
            cand = cand.take(order[last_of])
            valid = cand.last <= now
            self.refused[k] = cand.take(torch.nonzero(~valid).reshape(-1)) if bool((~valid).any()) else None
            cand = cand.take(torch.nonzero(valid).reshape(-1))
            if len(cand) == 0:
                continue
            nodes = torch.unique(cand.node)
            own_s, own_l = state.rows.read(nodes).memories[k]
            own = _Offers(nodes, torch.full_like(nodes, me), own_l.to(dev), own_s.to(dev))
            every = _Offers.cat([own, cand])
            win = every.take(winning_offers(every.node, every.rank, every.last))
            other = torch.nonzero(win.rank != me).reshape(-1)
            if other.numel():
                writes[k] = win.take(other)
                adopted.append(writes[k].node)
        for k, win in writes.items():
            state.rows.write_memories(win.node, {k: (win.state, win.last)})
        self.stats.rows_taken += int(sum(int(a.numel()) for a in adopted))
        return np.unique(torch.cat(adopted).cpu().numpy()) if adopted else np.empty(0, dtype=np.int64)


def sync_shared(model: StatefulModel, num_shared: int, mode: str, world, before: float = float("inf")) -> float:
    """One full sync of the first ``num_shared`` local rows across ranks (every row offered),
    as :class:`SharedSync` does after a rank's memories changed wholesale.  Returns the seconds
    spent."""
    sync = SharedSync(model, num_shared, mode, world)
    sync.generation = -1  # a full sync
    return sync(before)
