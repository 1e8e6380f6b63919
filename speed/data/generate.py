"""Synthetic power-law event logs, for benchmarks and demos without downloads.

Node popularity follows a Zipf law (``weight ∝ rank^-alpha``), so a few hubs take a
large share of the events, as in payment, click and edit logs.  Nodes also belong to
communities; with probability ``locality`` an event's destination is drawn from the
source's community, which gives partitioners structure to find.  Everything is
vectorised numpy, generated in chunks so 10⁸-event logs stream to disk in bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Tuple

import numpy as np

from .._util import atomic_file, progress_bar
from ..errors import InputError
from .events import Events

_CHUNK = 1 << 22


@dataclass
class _Population:
    """Nodes of one side, ordered by community, with cumulative Zipf weights."""

    ids: np.ndarray  # node id at each position of the community order
    cum: np.ndarray  # cumulative weight along that order
    lo: np.ndarray  # per community: cumulative weight before its first node
    hi: np.ndarray  # per community: cumulative weight at its last node
    comm_of: np.ndarray  # community of each node id (indexed by id - offset)
    offset: int

    @classmethod
    def build(cls, n: int, alpha: float, communities: int, offset: int, rng: np.random.Generator):
        rank_weight = (np.arange(1, n + 1, dtype=np.float64)) ** (-alpha)
        weight = rank_weight[rng.permutation(n)]  # hubs scattered over the id range
        comm = rng.integers(0, communities, size=n)
        order = np.argsort(comm, kind="stable")
        cum = np.cumsum(weight[order])
        counts = np.bincount(comm, minlength=communities)
        ends = np.cumsum(counts)
        starts = ends - counts
        before = np.concatenate([[0.0], cum])
        return cls(ids=order.astype(np.int64) + offset, cum=cum, lo=before[starts], hi=before[ends],
                   comm_of=comm, offset=offset)

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Nodes for uniform draws ``u`` in [0, 1) over the whole population."""
        pos = np.searchsorted(self.cum, u * self.cum[-1], side="right")
        return self.ids[np.minimum(pos, self.ids.size - 1)]

    def sample_in(self, comm: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Nodes drawn within communities ``comm`` (empty communities fall back to all)."""
        lo, hi = self.lo[comm], self.hi[comm]
        empty = hi <= lo
        x = np.where(empty, u * self.cum[-1], lo + u * (hi - lo))
        pos = np.searchsorted(self.cum, x, side="right")
        return self.ids[np.minimum(pos, self.ids.size - 1)]


def _validate(num_nodes, num_events, alpha, communities, locality, num_items, fanout=1.0):
    if num_nodes < 2:
        raise InputError(f"num_nodes must be >= 2, got {num_nodes}")
    if num_events < 1:
        raise InputError(f"num_events must be >= 1, got {num_events}")
    if alpha < 0:
        raise InputError(f"alpha must be >= 0, got {alpha}")
    if communities < 1:
        raise InputError(f"communities must be >= 1, got {communities}")
    if not 0 <= locality <= 1:
        raise InputError(f"locality must be in [0, 1], got {locality}")
    if num_items is not None and not 1 <= num_items < num_nodes:
        raise InputError(f"num_items must be in [1, num_nodes), got {num_items}")
    if not fanout >= 1:
        raise InputError(f"fanout must be >= 1, got {fanout}")


def iter_generated(
    num_nodes: int,
    num_events: int,
    alpha: float = 1.0,
    communities: Optional[int] = None,
    locality: float = 0.8,
    bipartite: bool = False,
    num_items: Optional[int] = None,
    seed: int = 0,
    chunk: int = _CHUNK,
    fanout: float = 1.0,
) -> Iterator[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(src, dst, t)`` chunks (int64 arrays) of a synthetic log in time order.

    See :func:`generate_events` for the parameters.
    """
    if communities is None:
        communities = max(1, num_nodes // 1000)
    if bipartite and num_items is None:
        num_items = max(1, num_nodes // 10)
    _validate(num_nodes, num_events, alpha, communities, locality, num_items if bipartite else None, fanout)
    rng = np.random.default_rng(seed)
    if bipartite:
        users = _Population.build(num_nodes - num_items, alpha, communities, 0, rng)
        items = _Population.build(num_items, alpha, communities, num_nodes - num_items, rng)
    else:
        users = items = _Population.build(num_nodes, alpha, communities, 0, rng)
    gap = 10  # mean seconds between events
    for start in range(0, num_events, chunk):
        m = min(chunk, num_events - start)
        src = users.sample(rng.random(m))
        comm = users.comm_of[src - users.offset] % communities
        local = rng.random(m) < locality
        dst = np.where(local, items.sample_in(comm, rng.random(m)), items.sample(rng.random(m)))
        if not bipartite:
            # Popular nodes would often draw themselves; real logs have few self-loops.
            for _ in range(3):
                loop = np.flatnonzero(dst == src)
                if loop.size == 0:
                    break
                dst[loop] = items.sample(rng.random(loop.size))
            loop = dst == src
            dst[loop] = (src[loop] + 1) % num_nodes
        t = np.sort(rng.integers(start * gap, (start + m) * gap, size=m))
        if fanout > 1:  # messages to several recipients: runs of events share a source and a time
            first = np.flatnonzero(rng.random(m) < 1.0 / fanout)
            head = np.maximum.accumulate(np.where(np.isin(np.arange(m), first), np.arange(m), 0))
            src, t = src[head], t[head]
            same = dst == src
            dst[same] = (src[same] + 1) % num_nodes if not bipartite else dst[same]
        yield src, dst, t.astype(np.int64)


def generate_events(
    num_nodes: int = 10_000,
    num_events: int = 100_000,
    alpha: float = 1.0,
    communities: Optional[int] = None,
    locality: float = 0.8,
    bipartite: bool = False,
    num_items: Optional[int] = None,
    seed: int = 0,
    fanout: float = 1.0,
) -> Events:
    """A synthetic power-law event log in memory.

    Parameters
    ----------
    num_nodes : int
        Node id space (all of it for unipartite logs; users + items for bipartite).
    num_events : int
    alpha : float
        Zipf exponent of node popularity (0 = uniform; ~1 gives realistic hubs).
    communities : int, optional
        Number of communities; default ``num_nodes // 1000``.
    locality : float
        Probability that a destination comes from the source's community.
    bipartite : bool
        Sources are users, destinations items (ids after the users).
    num_items : int, optional
        Items in a bipartite log; default ``num_nodes // 10``.
    seed : int
    fanout : float
        Mean recipients per message: events come in runs (of geometric length, this mean) that
        share a source and a timestamp, as a mail to several people does (1: every event its own).

    Returns
    -------
    Events
        Integer timestamps, about 10 s apart on average.  Nodes that never occur still
        count in ``num_nodes``.
    """
    chunks = list(iter_generated(num_nodes, num_events, alpha, communities, locality, bipartite,
                                 num_items, seed, fanout=fanout))
    src, dst, t = (np.concatenate(c) for c in zip(*chunks))
    ev = Events.from_arrays(src, dst, t, num_nodes=num_nodes, bipartite=bipartite, remap=False)
    ev.meta.update(source="generated", format="synthetic")
    return ev


def write_generated(path, num_nodes: int, num_events: int, progress: Optional[bool] = None, **kw) -> Path:
    """Stream a synthetic log to a CSV file (``src,dst,t`` header; gzip if ``.gz``).

    Written to a temporary file and renamed, so an interrupted run leaves nothing.
    Keyword arguments are those of :func:`generate_events`.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    path = Path(path)
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("t", pa.int64())])
    with atomic_file(path) as tmp:
        sink = pa.OSFile(str(tmp), "wb")
        stream = pa.CompressedOutputStream(sink, "gzip") if path.suffix == ".gz" else sink
        stream.write(b"src,dst,t\n")  # pyarrow would quote the header names
        opts = pacsv.WriteOptions(include_header=False)
        with pacsv.CSVWriter(stream, schema, write_options=opts) as writer, \
                progress_bar(num_events, f"generate {path.name}", progress=progress) as bar:
            for src, dst, t in iter_generated(num_nodes, num_events, **kw):
                writer.write_table(pa.table({"src": src, "dst": dst, "t": t}, schema=schema))
                bar.update(src.size)
        stream.close()
    return path
