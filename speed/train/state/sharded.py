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
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from ..._util import places
from .memory import NodeMemory
from .spill import Keep, release, windows
from .sampler import RecentNeighborSampler


def _local_index(owner: np.ndarray, mine: np.ndarray) -> np.ndarray:
    """Each node's row among those a rank holds (int32 while they fit; -1 for the others'): one
    lookup per id, where a search in ``mine`` costs a log per id on every step."""
    return places(mine, owner.size, dtype=np.int32 if mine.size < 2 ** 31 else np.int64)



def pack_rows(states: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Rows of states (float32 (n, d)) and their times (float64 (n,)) as one float32 (n, d + 2)
    tensor, bit for bit: how rows travel between ranks in one collective."""
    return torch.cat([states.to(torch.float32),
                      last.to(torch.float64).contiguous().view(torch.float32).reshape(-1, 2)], 1)


def unpack_rows(x: torch.Tensor):
    """:func:`pack_rows`'s ``(states (..., d), last (...))`` back, from float32 (..., d + 2)."""
    d = x.shape[-1] - 2
    return x[..., :d], x[..., d:].contiguous().view(torch.float64).reshape(x.shape[:-1])

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
    world : World
        The ranks (:class:`speed.train.world.World`; the rows are host memory, exchanged
        over its host group).
    exchange : Exchange, optional
        Where the traffic is counted.
    """

    def __init__(self, owner: np.ndarray, memory_dim: int, world, exchange: Optional[Exchange] = None):
        self.owner = owner
        self.comm = world
        self.rank, self.world = world.rank, world.size
        self.mine = np.flatnonzero(owner == self.rank)  # global ids of the rows held, ascending
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
        if self.world == 1 or ids.size == 0:  # every row is this rank's
            states, last = self.local_rows(ids)
            return states.to(dev), last.to(dev)
        t0 = time.perf_counter()
        d = self.memory_dim
        who = self.owner[ids]
        counts = np.bincount(who, minlength=self.world)  # known to every rank: the ids are the same
        mine = np.flatnonzero(who == self.rank)
        loc = torch.from_numpy(self._local(ids[mine]))
        # one float32 row per node: its memory, then its float64 time as two float32 words (bit-exact)
        rows = torch.empty(int(counts.max()), d + 2)
        rows[:mine.size, :d] = self.memory.index_select(0, loc)
        rows[:mine.size, d:] = self.last_update.index_select(0, loc).view(torch.float32).reshape(-1, 2)
        got = self.comm.host_all_gather(rows)
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

    def local_rows(self, ids: np.ndarray):
        """The rows of ``ids`` (global ids, every one owned here), as host tensors: no exchange."""
        loc = torch.from_numpy(self._local(np.asarray(ids, dtype=np.int64)))
        return self.memory.index_select(0, loc), self.last_update.index_select(0, loc)

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

    def backup_rows(self, n_id: np.ndarray, keep: Optional[Keep] = None) -> Dict[str, torch.Tensor]:
        """A copy of the rows of ``n_id`` (global ids) this rank holds (``keep``: in memory or
        spilled, :mod:`~speed.train.state.spill`)."""
        keep = keep or Keep()
        ids = np.asarray(n_id, dtype=np.int64)
        ids = ids[self.owner[ids] == self.rank]
        local = self._local(ids)
        return {"ids": torch.from_numpy(ids), "memory": keep.take(self.memory, local),
                "last_update": keep.take(self.last_update, local)}

    def restore_rows(self, rows: Dict[str, torch.Tensor]) -> None:
        ids, memory, last = np.asarray(rows["ids"]), rows["memory"], rows["last_update"]
        for lo, hi in windows(memory):
            self.write_owned(ids[lo:hi], memory[lo:hi], last[lo:hi])

    def write_rows(self, path, offset: int, field: str, source: Optional[Dict[str, torch.Tensor]] = None,
                   chunk: int = 1 << 16) -> int:
        """Write the rows this rank holds of ``field`` (``"memory"`` or ``"last_update"``) into
        the file ``path``, whose array of every node's rows, in id order, starts at byte
        ``offset``; the other ranks write theirs meanwhile.  ``source``: this rank's rows of a
        :meth:`backup` instead of the held ones, or of a :meth:`backup_rows` put over them.
        Returns the rows written."""
        live = {"memory": self.memory, "last_update": self.last_update}
        overlay = None
        if source is not None and "ids" in source:
            overlay = (np.asarray(source["ids"]), source[field])
        elif source is not None:
            live = source
        return _write_rows(torch.as_tensor(live[field]), self.owner.size, self.mine, path, offset, chunk, overlay)

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
    world : World
    exchange : Exchange, optional
    """

    def __init__(self, owner: np.ndarray, k: int, world, exchange: Optional[Exchange] = None):
        self.owner = owner
        self.comm = world
        self.rank, self.world = world.rank, world.size
        self.mine = np.flatnonzero(owner == self.rank)
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
        return self.sample_later(nodes, times)()

    def sample_later(self, nodes: np.ndarray, times: np.ndarray):
        """This rank's answers read now and the gather of the others' begun; the callable
        returned waits for it and gives :meth:`sample_arrays`'s arrays.  An evaluation begins a
        plan's gather before the step ahead of it and ends it after (one meeting fewer a step:
        :class:`~speed.train.step.loader.PlanLoader`'s ``overlap``)."""
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
            return lambda: (n, t, e, m)
        t0 = time.perf_counter()
        k = self.k
        counts = np.bincount(who, minlength=self.world)
        # one int64 row per answer: neighbours, times (their float64 bits), events, mask
        rows = torch.zeros(int(counts.max()), 3 * k + 1, dtype=torch.int64)
        rows[:mine.size] = torch.from_numpy(np.concatenate(
            [n, t.view(np.int64), e, m.sum(axis=1, keepdims=True).astype(np.int64)], axis=1))
        gathering = self.comm.host_all_gather_start(rows)
        self._account(time.perf_counter() - t0)

        def answers():
            t1 = time.perf_counter()
            got = gathering.wait()
            # each rank's answers are its nodes' in query order: in place by one stable sort of the owners
            out = np.empty((nodes.size, 3 * k + 1), dtype=np.int64)
            out[np.argsort(who, kind="stable")] = np.concatenate([got[r][:int(counts[r])].numpy()
                                                                  for r in range(self.world)])
            ex = self.exchange
            ex.calls += 1
            ex.bytes += int(nodes.size - mine.size) * (3 * k + 1) * 8
            self._account(time.perf_counter() - t1)
            filled = out[:, 3 * k]
            mask = np.arange(k)[None, :] < filled[:, None]  # the answers are filled left to right
            return (np.ascontiguousarray(out[:, :k]), np.ascontiguousarray(out[:, k:2 * k]).view(np.float64),
                    np.ascontiguousarray(out[:, 2 * k:3 * k]), mask)

        return answers

    def _account(self, seconds: float) -> None:
        self.exchange.seconds += seconds
        self.seconds_gathering += seconds  # (waiting for the other ranks' answers included)

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

    def backup_rows(self, rows: np.ndarray, keep=None) -> dict:
        """The rings of the nodes of ``rows`` (global ids) this rank owns, the held events and
        the point a whole sampler has reached."""
        self.settle()
        ids = np.asarray(rows, dtype=np.int64)
        ids = ids[self.owner[ids] == self.rank]
        out = super().backup_rows(self._local(ids), keep)
        out.update(ids=ids, flushed_to=float(self.flushed_to), given=self.held_events())
        return out

    def restore_rows(self, saved: dict) -> None:
        super().restore_rows(saved)
        self.flushed_to = float(saved["flushed_to"])
        self.given = {name: np.asarray(saved["given"][name], dtype=dt).copy() for name, dt in _HOLD}

    def state_dict(self, keep=None) -> dict:
        self.settle()
        out = super().state_dict(keep)
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

    def write_rows(self, path, offset: int, name: str, source: Optional[dict] = None, chunk: int = 1 << 16) -> int:
        """Write this rank's rows of ``name`` (``nbr``, ``nbr_t``, ``nbr_e``, ``head`` or
        ``count``) into a whole sampler's array at byte ``offset`` of ``path`` (see
        :meth:`ShardedMemory.write_rows`; ``source``: a :meth:`state_dict` of this rank's, or a
        :meth:`backup_rows` put over the live rings)."""
        overlay = None
        if source is None or "ids" in source:  # the live rings (with a backup_rows put over them)
            self.settle()
            held = torch.from_numpy(np.ascontiguousarray(self.__dict__[name]))
            if source is not None:
                overlay = (source["ids"], torch.from_numpy(np.ascontiguousarray(source[name])))
        else:
            held = torch.from_numpy(np.ascontiguousarray(source[name]))
        return _write_rows(held, self.owner.size, self.mine, path, offset, chunk, overlay)

    def __repr__(self) -> str:
        return (f"ShardedSampler(num_nodes={self.owner.size}, held={self.mine.size}, k={self.k}, "
                f"rank={self.rank}/{self.world})")


def _write_rows(held: torch.Tensor, num_nodes: int, mine: np.ndarray, path, offset: int, chunk: int,
                overlay=None) -> int:
    """Write ``held`` (this rank's rows, of the ids ``mine``, ascending) into the array of
    ``num_nodes`` rows at byte ``offset`` of the file ``path``, each row at its id's place.

    The file is mapped a window of ``chunk`` ids at a time (shared with the other ranks writing
    their rows of the same windows: each byte has one writer) and synced before it is let go, so
    a rank holds no more than its rows and one window.  ``overlay``: ``(ids, rows)`` of this
    rank's nodes to write instead of the held ones.  Returns the rows written."""
    row_shape = tuple(held.shape[1:])
    dtype = np.dtype(torch.empty(0, dtype=held.dtype).numpy().dtype)
    row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
    if overlay is not None:  # (a back-up's rows, often spilled: read a window's at a time, never gathered whole)
        order = np.argsort(np.asarray(overlay[0]), kind="stable")
        over_ids, over_src = np.asarray(overlay[0])[order], overlay[1]
    written = 0
    for lo in range(0, int(num_nodes), chunk):
        a, b = (int(x) for x in np.searchsorted(mine, [lo, min(lo + chunk, num_nodes)]))
        if b == a:
            continue
        ids = mine[a:b]  # the held rows of these ids are held[a:b]: one slice, no gather
        rows = held[a:b]
        if overlay is not None:
            i, j = np.searchsorted(over_ids, [lo, lo + chunk])
            if j > i:
                rows = rows.clone()
                rows[torch.from_numpy(np.searchsorted(ids, over_ids[i:j]))] = over_src[torch.from_numpy(order[i:j])]
                release(over_src)
        first = int(ids[0])
        window = np.memmap(path, dtype=dtype, mode="r+", offset=int(offset) + first * row_bytes,
                           shape=(int(ids[-1]) + 1 - first,) + row_shape)
        window[ids - first] = rows.numpy()
        window.flush()  # msync: on disk (or the shared file system) before the window goes
        del window
        release(held)  # a spilled source's pages read so far
        written += b - a
    return written


class Deferred:
    """An array that the ranks holding its rows write into its file themselves, so that no
    process holds it whole: the run-folder writer (:mod:`speed.train.run.serial`) saves it as
    an ordinary tensor, leaving its bytes to ``writer`` (:meth:`ShardWriter.place`).

    Parameters
    ----------
    shape : tuple of int
    dtype : numpy dtype
    writer : ShardWriter
    index : int
        Its place among ``writer``'s arrays.
    torch : bool
        Read back as a torch tensor (else a numpy array), as the value it stands for.
    """

    def __init__(self, shape, dtype, writer: "ShardWriter", index: int, torch: bool = True):
        self.shape, self.dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        self.writer, self.index, self.torch = writer, int(index), bool(torch)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class ShardWriter:
    """The sharded parts of a state (memories, neighbour rings) as :class:`Deferred` arrays of
    the file rank ``dst`` writes, each rank writing the rows it owns into them itself.

    Rank ``dst`` writes the file's header and every other array, leaving the deferred arrays'
    bytes, then hands the file's path and their places to the others (:meth:`place`); the
    others wait in :meth:`serve`.  Every rank then writes its rows into each array, a window at
    a time (:meth:`ShardedMemory.write_rows`), and ``dst`` goes on once all have written and
    the rows written add up to every node's.  Nothing is gathered: a rank holds its own rows and
    one window, and the rows reach the file once, from their owner.

    The ranks write into one file: their hosts must share it coherently (one host's disk, or
    a file system that all of them mount at the same path, as a run folder needs anyway).

    Parameters
    ----------
    world : World
        The ranks; the places and the outcome travel over its wait group (the others wait there
        while ``dst`` prepares its file).
    dst : int
        The rank that writes the file.
    """

    def __init__(self, world, dst: int = 0):
        self.comm = world
        self.rank, self.dst = world.rank, int(dst)
        self.writes_rows: list = []  # one callable per array: (path, offset) -> rows written
        self.num_rows: list = []
        self.row_bytes: list = []
        self.bytes_written = 0  # of this rank's rows, once written
        self.world = 1
        self.placed = False

    @property
    def writes(self) -> bool:
        return self.rank == self.dst

    def _deferred(self, part, shape, dtype, write, torch: bool = True) -> Deferred:
        self.world = max(self.world, int(part.world))
        self.writes_rows.append(write)
        self.num_rows.append(int(shape[0]))
        self.row_bytes.append(int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize)
        return Deferred(shape, dtype, self, len(self.writes_rows) - 1, torch)

    def memory(self, mem: ShardedMemory, source: Optional[Dict] = None) -> Dict[str, Deferred]:
        """``{"memory", "last_update"}`` of ``mem`` (or of this rank's ``source`` back-up of it)."""
        return {field: self._deferred(mem, (mem.num_nodes, mem.memory_dim) if field == "memory" else (mem.num_nodes,),
                                      np.float32 if field == "memory" else np.float64,
                                      lambda path, at, f=field: mem.write_rows(path, at, f, source))
                for field in ("memory", "last_update")}

    def sampler(self, sampler: ShardedSampler, source: Optional[dict] = None) -> dict:
        """A whole sampler's state dict of ``sampler`` (or of this rank's ``source`` state dict of it)."""
        n, k = sampler.owner.size, sampler.k
        shapes = {"nbr": ((n, k), np.int64), "nbr_t": ((n, k), np.float64), "nbr_e": ((n, k), np.int64),
                  "head": ((n,), np.int64), "count": ((n,), np.int64)}
        out = {name: self._deferred(sampler, shape, dtype,
                                    lambda path, at, a=name: sampler.write_rows(path, at, a, source), torch=False)
               for name, (shape, dtype) in shapes.items()}
        out["hold"] = sampler.held_events() if source is None else dict(source["given"])
        return out

    def place(self, path, offsets: Dict[int, int]) -> None:
        """On ``dst``, once the file ``path`` has its full size: every rank writes its rows of
        array ``i`` at byte ``offsets[i]`` (all of them: checked).  Collective with
        :meth:`serve`."""
        if set(offsets) != set(range(len(self.writes_rows))):
            raise RuntimeError(f"{len(self.writes_rows) - len(offsets)} sharded arrays have no place in the file")
        self._broadcast([str(Path(path).resolve()), {int(i): int(v) for i, v in offsets.items()}])
        self.placed = True
        self._write(str(Path(path).resolve()), offsets)

    def abort(self) -> None:
        """On ``dst``, when its file failed before :meth:`place`: the others stop waiting."""
        if not self.placed and self.writes_rows:
            self.placed = True
            self._broadcast([None, None])

    def serve(self) -> None:
        """On the other ranks: wait for the file's place, then write this rank's rows into it."""
        if not self.writes_rows:
            return
        path, offsets = self._broadcast([None, None])
        if path is None:
            raise RuntimeError(f"rank {self.dst} could not write its file: see its error")
        self._write(path, {int(i): int(v) for i, v in offsets.items()})

    def check(self) -> None:
        """On ``dst``, after the write: the arrays were placed (else the others still wait)."""
        if self.writes_rows and not self.placed:
            raise RuntimeError(f"{len(self.writes_rows)} sharded arrays were not written")

    def _broadcast(self, msg: list) -> list:
        if self.world > 1:
            self.comm.broadcast_objects(msg, src=self.dst, wait=True)
        return msg

    def _write(self, path: str, offsets: Dict[int, int]) -> None:
        rows, error = np.zeros(len(self.writes_rows), dtype=np.int64), ""
        try:
            for i, write in enumerate(self.writes_rows):
                rows[i] = write(path, offsets[i])
        except Exception as e:  # every rank learns that the file is incomplete, and why
            error = f"rank {self.rank}: {type(e).__name__}: {e}"
        outcome = [(rows, error)]
        if self.world > 1:
            outcome = self.comm.objects((rows, error), wait=True)
        self.bytes_written = int(np.dot(rows, self.row_bytes))
        errors = [e for _, e in outcome if e]
        if errors:
            raise RuntimeError("writing sharded rows failed: " + "; ".join(errors))
        total = np.sum([r for r, _ in outcome], axis=0)
        short = np.flatnonzero(total != np.asarray(self.num_rows))
        if short.size:
            i = int(short[0])
            raise RuntimeError(f"sharded array {i}: {int(total[i])} rows written of {self.num_rows[i]}")
