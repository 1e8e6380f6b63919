"""A node memory whose rows are divided among ranks (PAC's exact, sharded evaluation).

Each node's rows live on one rank, its owner (:func:`speed.train.pac.sharded.owners`).  Every
rank runs the same evaluation steps, so each step's reads are the same on every rank:
:meth:`ShardedMemory.read` answers a read with one collective, every rank contributing the
requested rows it owns, each row once however many queries, neighbours or keys name it.  A write
keeps the rows the rank owns and drops the rest (every rank computed the same values), so writes
need no exchange.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

import numpy as np
import torch
import torch.distributed as dist

from .memory import NodeMemory
from .sampler import RecentNeighborSampler


def _local_index(owner: np.ndarray, mine: np.ndarray) -> np.ndarray:
    """Each node's row among those a rank holds (int32 while they fit; -1 for the others'): one
    lookup per id, where a search in ``mine`` costs a log per id on every step."""
    local = np.full(owner.size, -1, dtype=np.int32 if mine.size < 2 ** 31 else np.int64)
    local[mine] = np.arange(mine.size)
    return local


class Exchange:
    """Counts what the ranks send each other when reading sharded rows."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.rows = 0  # rows this rank received from others
        self.bytes = 0  # bytes this rank received from others
        self.seconds = 0.0

    def as_dict(self) -> Dict:
        return {"calls": self.calls, "rows_received": self.rows, "bytes_received": self.bytes,
                "seconds": self.seconds}


class ShardedMemory(NodeMemory):
    """A :class:`~speed.train.state.memory.NodeMemory` of ``len(owner)`` nodes of which this
    rank holds the rows it owns (its ``memory`` and ``last_update`` are those rows, in id order).

    Every rank must call :meth:`read` with the same ids at the same point (the evaluation runs
    the same stream on every rank); :meth:`write` needs no exchange.

    Parameters
    ----------
    owner : int16 ndarray, shape (num_nodes,)
        See :func:`owners` (one array, shared by a state's memories).
    memory_dim : int
    rank, world : int
    group : ProcessGroup, optional
        A gloo group (the rows are host memory).
    exchange : Exchange, optional
        Where the traffic is counted.
    """

    def __init__(self, owner: np.ndarray, memory_dim: int, rank: int, world: int, group=None,
                 exchange: Optional[Exchange] = None):
        self.owner = owner
        self.rank, self.world, self.group = int(rank), int(world), group
        self.mine = np.flatnonzero(owner == rank)  # global ids of the rows held, ascending
        self.local = _local_index(owner, self.mine)
        self.exchange = exchange if exchange is not None else Exchange()
        super().__init__(self.mine.size, memory_dim, "cpu")
        self.num_nodes = int(owner.size)  # the ids it answers for

    # ------------------------------------------------------------------ rows
    def _local(self, ids: np.ndarray) -> np.ndarray:
        return self.local[ids].astype(np.int64)

    def nbytes(self, num_nodes: int) -> int:
        return int(num_nodes) * (self.memory_dim * 4 + 8)

    def resize(self, num_nodes: int) -> None:
        raise RuntimeError("a sharded memory keeps its owners: build a new one")

    def grow(self, num_nodes: int) -> None:
        if int(num_nodes) > self.num_nodes:
            raise RuntimeError("a sharded memory keeps its owners: build a new one")

    def to(self, device) -> "ShardedMemory":
        if torch.device(device).type != "cpu":  # the exchange runs on a host (gloo) group
            raise ValueError("a sharded memory lives in host memory")
        return self

    def owned(self) -> np.ndarray:
        """Global ids of the rows this rank holds (int64, ascending)."""
        return self.mine

    def read(self, n_id: torch.Tensor):
        """``(memory[n_id], last_update[n_id])``: the rows this rank holds, and the others' from
        their owners, in one collective (every rank receives every requested row)."""
        ids = n_id.detach().cpu().numpy().astype(np.int64, copy=False)
        dev = n_id.device
        if self.world == 1 or ids.size == 0:
            i = torch.from_numpy(self._local(ids))
            return self.memory[i].to(dev), self.last_update[i].to(dev)
        t0 = time.perf_counter()
        d = self.memory_dim
        who = self.owner[ids]
        counts = np.bincount(who, minlength=self.world)  # known to every rank: the ids are the same
        mine = np.flatnonzero(who == self.rank)
        loc = torch.from_numpy(self._local(ids[mine]))
        # one float32 row per node: its memory, then its float64 time as two float32 words (bit-exact)
        rows = torch.empty(int(counts.max()), d + 2)
        rows[:mine.size, :d] = self.memory[loc]
        rows[:mine.size, d:] = self.last_update[loc].view(torch.float32).reshape(-1, 2)
        got = [torch.empty_like(rows) for _ in range(self.world)]
        dist.all_gather(got, rows, group=self.group)
        out = torch.empty(ids.size, d + 2)
        for r in range(self.world):
            out[torch.from_numpy(np.flatnonzero(who == r))] = got[r][:int(counts[r])]
        ex = self.exchange
        ex.calls += 1
        ex.rows += int(ids.size - mine.size)
        ex.bytes += int(ids.size - mine.size) * (d + 2) * 4
        ex.seconds += time.perf_counter() - t0
        last = out[:, d:].contiguous().view(torch.float64).reshape(-1)
        return out[:, :d].contiguous().to(dev), last.to(dev)

    read_host = read

    def restore(self, state: Dict[str, torch.Tensor], adopt: bool = False) -> None:
        """Take this rank's rows of a :meth:`backup` (or, from a full-graph back-up, the rows it owns)."""
        memory, last = state["memory"], state["last_update"]
        if memory.shape[0] != self.mine.size:  # a full-graph back-up (a resumed run's)
            i = torch.from_numpy(self.mine)
            memory, last = torch.as_tensor(memory)[i], torch.as_tensor(last)[i]
        super().restore({"memory": memory, "last_update": last}, adopt=False)
        self.num_nodes = int(self.owner.size)

    def write(self, n_id: torch.Tensor, values: torch.Tensor, t: torch.Tensor) -> None:
        """Keep the rows of ``n_id`` this rank owns (every rank computed the same values)."""
        ids = n_id.detach().cpu().numpy().astype(np.int64, copy=False)
        keep = np.flatnonzero(self.owner[ids] == self.rank)
        if keep.size == 0:
            return
        k = torch.from_numpy(keep)
        super().write(torch.from_numpy(self._local(ids[keep])), values.detach().cpu().index_select(0, k),
                      t.detach().cpu().index_select(0, k))

    def write_owned(self, ids: np.ndarray, values: torch.Tensor, t: torch.Tensor) -> None:
        """Store rows of nodes this rank owns (``ids`` int64, every one owned here)."""
        if ids.size:
            super().write(torch.from_numpy(self._local(ids)), values, t)

    def backup_rows(self, n_id: np.ndarray) -> Dict[str, torch.Tensor]:
        """A copy of the rows of ``n_id`` (global ids) this rank holds."""
        ids = np.asarray(n_id, dtype=np.int64)
        ids = ids[self.owner[ids] == self.rank]
        i = torch.from_numpy(self._local(ids))
        return {"ids": torch.from_numpy(ids), "memory": self.memory[i].clone(), "last_update": self.last_update[i].clone()}

    def restore_rows(self, rows: Dict[str, torch.Tensor]) -> None:
        self.write_owned(np.asarray(rows["ids"]), rows["memory"], rows["last_update"])

    def stream_to(self, dst: int, field: str, write=None, source: Optional[Dict[str, torch.Tensor]] = None,
                  chunk: int = 1 << 16) -> None:
        """Every node's ``field`` (``"memory"`` or ``"last_update"``) in id order, handed to
        ``write`` on rank ``dst`` a block of ``chunk`` nodes at a time: no rank holds more than
        its own rows and one block.  ``source``: this rank's rows of a :meth:`backup` instead of
        the held ones, or of a :meth:`backup_rows` put over them.  Collective (``dist.gather``
        per block)."""
        live = {"memory": self.memory, "last_update": self.last_update}
        overlay = None
        if source is not None and "ids" in source:
            overlay = (np.asarray(source["ids"]), source[field])
        elif source is not None:
            live = source
        _stream_rows(live[field], self.owner, self.mine, self.rank, self.world, self.group, dst, write, chunk,
                     overlay)

    def __repr__(self) -> str:
        return (f"ShardedMemory(num_nodes={self.num_nodes}, held={self.mine.size}, memory_dim={self.memory_dim}, "
                f"rank={self.rank}/{self.world})")


_HOLD = (("src", np.int64), ("dst", np.int64), ("t", np.float64), ("e", np.int64))


class ShardedSampler(RecentNeighborSampler):
    """A :class:`~speed.train.state.sampler.RecentNeighborSampler` whose rings are divided among
    ranks like the memories: this rank keeps the rings of the nodes it owns.

    Every rank sees every event and every query (the ranks run the same steps).  An event
    enters the ring of each endpoint the rank owns, in event order, so each ring is the one a
    whole sampler holds; a query is answered by the owner of its node, and one ``all_gather``
    gives every rank every answer.  The events pushed and not yet in the rings are also kept as
    given (every rank the same), for a snapshot of the whole sampler (:meth:`held_events`).

    Parameters
    ----------
    owner : int16 ndarray, shape (num_nodes,)
    k : int
    rank, world : int
    group : ProcessGroup, optional
    exchange : Exchange, optional
    """

    def __init__(self, owner: np.ndarray, k: int, rank: int, world: int, group=None,
                 exchange: Optional[Exchange] = None):
        self.owner = owner
        self.rank, self.world, self.group = int(rank), int(world), group
        self.mine = np.flatnonzero(owner == rank)
        self.local = _local_index(owner, self.mine)
        self.exchange = exchange if exchange is not None else Exchange()
        # (each ring gets its node's half of an event: directed inserts into local rows)
        super().__init__(self.mine.size, k, undirected=False)

    def reset(self) -> None:
        super().reset()
        self.flushed_to = -np.inf  # what a whole sampler would have moved into its rings: t < this
        self.given = {name: np.empty(0, dtype=dt) for name, dt in _HOLD}  # events pushed, as given

    def grow(self, num_nodes: int) -> None:
        raise RuntimeError("a sharded sampler keeps its owners: build a new one")

    def _local(self, ids: np.ndarray) -> np.ndarray:
        return self.local[ids].astype(np.int64)

    def push(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        self._push(src, dst, t, eid, self.flushed_to)

    def insert(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, eid: np.ndarray) -> None:
        t = np.asarray(t, dtype=np.float64)
        # (the events about to enter the rings are not kept as given: a whole log's at evaluation)
        self._push(src, dst, t, eid, max(self.flushed_to, float(t[-1])) if t.size else self.flushed_to)
        if t.size:
            self.flush(float(t[-1]))

    def _push(self, src, dst, t, eid, held_from: float) -> None:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        t, eid = np.asarray(t, dtype=np.float64), np.asarray(eid, dtype=np.int64)
        old = np.searchsorted(self.given["t"], held_from, side="left")
        new = np.searchsorted(t, held_from, side="left")
        self.given = {name: np.concatenate([self.given[name][old:], np.asarray(x[new:], dtype=dt)])
                      for (name, dt), x in zip(_HOLD, (src, dst, t, eid))}
        # each event as two directed halves, in event order (a self-loop is one interaction)
        a = np.stack([src, dst], 1).reshape(-1)
        b = np.stack([dst, src], 1).reshape(-1)
        second = np.tile(np.array([False, True]), src.size)
        mine = (self.owner[a] == self.rank) & ~(second & (a == b))
        super().push(self._local(a[mine]), b[mine], np.repeat(t, 2)[mine], np.repeat(eid, 2)[mine])

    def flush(self, before: float) -> None:
        self.flushed_to = max(self.flushed_to, float(before))
        super().flush(before)

    def sample_arrays(self, nodes: np.ndarray, times: np.ndarray):
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        times = np.ascontiguousarray(times, dtype=np.float64)
        # A whole sampler has moved every held event before its latest query into the rings,
        # where later ones may have pushed older entries out: a query earlier than that (DyRep's
        # message times) must see the same rings, so this rank's catch up first.
        self.settle()
        if times.size:
            self.flushed_to = max(self.flushed_to, float(times.max()))
        who = self.owner[nodes]
        mine = np.flatnonzero(who == self.rank)
        n, t, e, m = super().sample_arrays(self._local(nodes[mine]), times[mine])
        if self.world == 1 or nodes.size == 0:
            return n, t, e, m
        t0 = time.perf_counter()
        k = self.k
        counts = np.bincount(who, minlength=self.world)
        # one int64 row per answer: neighbours, times (their float64 bits), events, mask
        rows = torch.zeros(int(counts.max()), 3 * k + 1, dtype=torch.int64)
        rows[:mine.size] = torch.from_numpy(np.concatenate(
            [n, t.view(np.int64), e, m.sum(axis=1, keepdims=True).astype(np.int64)], axis=1))
        got = [torch.empty_like(rows) for _ in range(self.world)]
        dist.all_gather(got, rows, group=self.group)
        out = np.empty((nodes.size, 3 * k + 1), dtype=np.int64)
        for r in range(self.world):
            out[who == r] = got[r][:int(counts[r])].numpy()
        ex = self.exchange
        ex.calls += 1
        ex.bytes += int(nodes.size - mine.size) * (3 * k + 1) * 8
        ex.seconds += time.perf_counter() - t0
        filled = out[:, 3 * k]
        mask = np.arange(k)[None, :] < filled[:, None]  # the answers are filled left to right
        return (np.ascontiguousarray(out[:, :k]), np.ascontiguousarray(out[:, k:2 * k]).view(np.float64),
                np.ascontiguousarray(out[:, 2 * k:3 * k]), mask)

    def recent_pairs(self):
        i, j = super().recent_pairs()
        return self.mine[i], j

    def settle(self) -> None:
        """Move into the rings every event a whole sampler would hold there by now."""
        RecentNeighborSampler.flush(self, self.flushed_to)

    def held_events(self) -> dict:
        """The events a whole sampler holds now (pushed, not yet in its rings), as given:
        ``{"src", "dst", "t", "e"}`` arrays."""
        keep = np.searchsorted(self.given["t"], self.flushed_to, side="left")
        return {name: self.given[name][keep:].copy() for name, _ in _HOLD}

    def held_nodes(self) -> np.ndarray:
        self.settle()
        return np.unique(self.mine[self.hold["src"][self.hold_lo:]]).astype(np.int64)

    def backup_rows(self, rows: np.ndarray) -> dict:
        """The rings of the nodes of ``rows`` (global ids) this rank owns, the held events and
        the point a whole sampler has reached."""
        self.settle()
        ids = np.asarray(rows, dtype=np.int64)
        ids = ids[self.owner[ids] == self.rank]
        out = super().backup_rows(self._local(ids))
        out.update(ids=ids, flushed_to=float(self.flushed_to), given=self.held_events())
        return out

    def restore_rows(self, saved: dict) -> None:
        super().restore_rows(saved)
        self.flushed_to = float(saved["flushed_to"])
        self.given = {name: np.asarray(saved["given"][name], dtype=dt).copy() for name, dt in _HOLD}

    def state_dict(self) -> dict:
        self.settle()
        out = super().state_dict()
        out.update(flushed_to=float(self.flushed_to), given=self.held_events())
        return out

    def load_state_dict(self, state: dict, adopt: bool = False) -> None:
        """Take a :meth:`state_dict` of this rank's, or a whole sampler's (a checkpoint's): its
        rings of the nodes this rank owns, and its held events."""
        if "given" in state:
            super().load_state_dict(state, adopt=adopt)
            self.flushed_to = float(state["flushed_to"])
            self.given = {name: np.asarray(state["given"][name], dtype=dt).copy() for name, dt in _HOLD}
            return
        rows = self.mine
        super().load_state_dict({**{name: np.asarray(state[name])[rows] for name in ("nbr", "nbr_t", "nbr_e",
                                                                                      "head", "count")},
                                 "hold": {}})
        self.flushed_to = -np.inf
        self.given = {name: np.empty(0, dtype=dt) for name, dt in _HOLD}
        hold = state.get("hold") or {}
        if len(hold.get("t", ())):
            self._push(*(np.asarray(hold[name]) for name, _ in _HOLD), -np.inf)

    def stream_to(self, dst: int, name: str, write=None, source: Optional[dict] = None,
                  chunk: int = 1 << 16) -> None:
        """Every node's ``name`` row (``nbr``, ``nbr_t``, ``nbr_e``, ``head`` or ``count``) in id
        order, handed to ``write`` on rank ``dst`` a block at a time (see
        :meth:`ShardedMemory.stream_to`; ``source``: a :meth:`state_dict` of this rank's)."""
        overlay = None
        if source is None or "ids" in source:  # the live rings (with a backup_rows put over them)
            self.settle()
            held = torch.from_numpy(np.ascontiguousarray(self.__dict__[name]))
            if source is not None:
                overlay = (source["ids"], torch.from_numpy(np.ascontiguousarray(source[name])))
        else:
            held = torch.from_numpy(np.ascontiguousarray(source[name]))
        _stream_rows(held, self.owner, self.mine, self.rank, self.world, self.group, dst, write, chunk, overlay)

    def __repr__(self) -> str:
        return (f"ShardedSampler(num_nodes={self.owner.size}, held={self.mine.size}, k={self.k}, "
                f"rank={self.rank}/{self.world})")


def _stream_rows(held: torch.Tensor, owner: np.ndarray, mine: np.ndarray, rank: int, world: int, group,
                 dst: int, write, chunk: int, overlay=None) -> None:
    """Rows ``held`` (this rank's, for the ids ``mine``) of every node in id order, to ``write``
    on rank ``dst`` a block of ``chunk`` nodes at a time (``dist.gather`` per block);
    ``overlay``: ``(ids, rows)`` of this rank's nodes to send instead of the held ones."""
    num_nodes = owner.size
    if overlay is not None:
        order = np.argsort(overlay[0], kind="stable")
        over_ids, over_rows = np.asarray(overlay[0])[order], overlay[1][torch.from_numpy(order)]
    for lo in range(0, num_nodes, chunk):
        hi = min(lo + chunk, num_nodes)
        who = owner[lo:hi]
        ids = np.flatnonzero(who == rank) + lo
        rows = held[torch.from_numpy(np.searchsorted(mine, ids))]
        if overlay is not None:
            a, b = np.searchsorted(over_ids, [lo, hi])
            if b > a:
                rows[torch.from_numpy(np.searchsorted(ids, over_ids[a:b]))] = over_rows[a:b]
        if world == 1:
            block = rows
        else:
            counts = np.bincount(who, minlength=world)
            pad = rows.new_zeros((int(counts.max()),) + tuple(rows.shape[1:]))
            pad[:rows.shape[0]] = rows
            got = [torch.empty_like(pad) for _ in range(world)] if rank == dst else None
            dist.gather(pad, got, dst=dst, group=group)
            block = None
            if rank == dst:
                block = rows.new_empty((hi - lo,) + tuple(rows.shape[1:]))
                for r in range(world):
                    block[torch.from_numpy(np.flatnonzero(who == r))] = got[r][:int(counts[r])]
        if rank == dst and write is not None:
            write(block.numpy())


class Deferred:
    """An array whose bytes are produced while its file is written, so that no process holds it
    whole: ``fill(write)`` calls ``write(block)`` with consecutive blocks of rows (ndarrays of
    ``dtype``, shape ``(k,) + shape[1:]``), in order, ``shape[0]`` rows in all.  The run-folder
    writer (:mod:`speed.train.run.serial`) saves it as an ordinary tensor.

    Parameters
    ----------
    shape : tuple of int
    dtype : numpy dtype
    fill : callable
    torch : bool
        Read back as a torch tensor (else a numpy array), as the value it stands for.
    """

    def __init__(self, shape, dtype, fill, torch: bool = True):
        self.shape, self.dtype, self.fill = tuple(int(s) for s in shape), np.dtype(dtype), fill
        self.torch = bool(torch)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class ShardWriter:
    """The sharded parts of a state (memories, neighbour rings) as :class:`Deferred` arrays on
    rank ``dst``, brought from their owners a block at a time while ``dst`` writes its file, so
    no process holds them whole.  Every other rank :meth:`serve`-s the same blocks meanwhile, in
    the order they were asked for (the writer fills them in that order: checked).

    Parameters
    ----------
    rank : int
    dst : int
        The writing rank.
    group : ProcessGroup, optional
        Where the blocks travel (default: each part's own group).  The others may wait long
        here while ``dst`` prepares the rest of its file: give a group with a long timeout.
    """

    def __init__(self, rank: int, dst: int = 0, group=None):
        self.rank, self.dst, self.group = int(rank), int(dst), group
        self.streams: list = []
        self.filled = 0

    @property
    def writes(self) -> bool:
        return self.rank == self.dst

    def _deferred(self, shape, dtype, stream, torch: bool = True) -> Deferred:
        i = len(self.streams)
        self.streams.append(stream)
        return Deferred(shape, dtype, lambda write: self._fill(i, write), torch)

    def memory(self, mem: ShardedMemory, source: Optional[Dict] = None) -> Dict[str, Deferred]:
        """``{"memory", "last_update"}`` of ``mem`` (or of this rank's ``source`` back-up of it)."""
        return {field: self._deferred((mem.num_nodes, mem.memory_dim) if field == "memory" else (mem.num_nodes,),
                                      np.float32 if field == "memory" else np.float64,
                                      lambda write, f=field: self._stream(mem, f, write, source))
                for field in ("memory", "last_update")}

    def sampler(self, sampler: ShardedSampler, source: Optional[dict] = None) -> dict:
        """A whole sampler's state dict of ``sampler`` (or of this rank's ``source`` state dict of it)."""
        n, k = sampler.owner.size, sampler.k
        shapes = {"nbr": ((n, k), np.int64), "nbr_t": ((n, k), np.float64), "nbr_e": ((n, k), np.int64),
                  "head": ((n,), np.int64), "count": ((n,), np.int64)}
        out = {name: self._deferred(shape, dtype, lambda write, a=name: self._stream(sampler, a, write, source),
                                    torch=False)
               for name, (shape, dtype) in shapes.items()}
        out["hold"] = sampler.held_events() if source is None else dict(source["given"])
        return out

    def _stream(self, part, name: str, write, source) -> None:
        group = part.group if self.group is None else self.group
        held = part.group
        part.group = group
        try:
            part.stream_to(self.dst, name, write, source)
        finally:
            part.group = held

    def _fill(self, i: int, write) -> None:
        if i != self.filled:
            raise RuntimeError(f"sharded rows written out of order (block {i}, expected {self.filled})")
        self.streams[i](write)
        self.filled += 1

    def serve(self) -> None:
        """On the other ranks: take part in every block, in order, while ``dst`` writes."""
        for stream in self.streams:
            stream(None)

    def check(self) -> None:
        """On ``dst``, after the write: every stream was written (else the others still wait)."""
        if self.filled != len(self.streams):
            raise RuntimeError(f"{len(self.streams) - self.filled} sharded arrays were not written")
