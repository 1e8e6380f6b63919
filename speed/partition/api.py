"""The public partitioning API: ``speed.partition``, ``Partitioner`` and their result.

Every method -- SEP and the baselines -- produces a ``node_parts`` array (-1 = shared), so
the result, the metrics and the shard format are the same whichever method ran.

To add a partitioner: write ``run(events, num_parts, params, timer, progress) -> MethodOutput``
and add a :class:`Method` to :data:`REGISTRY` naming the parameters it uses.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .._params import CLOSED_FRACTION, NON_NEGATIVE, POSITIVE, POSITIVE_INT, is_real, problem
from .._util import Registered, StageTimer
from ..data.events import Events
from ..errors import InputError
from . import _kernels, baselines
from .balance import balance_stats, spread_shared_events
from .metrics import partition_metrics
from .sep import sep

# The defaults of partitioning, read by partition(), Partitioner and the CLI.  ``balance`` 0.1:
# without a capacity a skewed log's largest part held 1.7-4x the mean (docs/partitioning.md);
# trained with the default in-epoch sync (TrainConfig.sync_every) such shards keep their accuracy.
DEFAULTS: Dict[str, Any] = {"num_parts": 4, "topk": 0.0, "beta": 0.1, "lam": 1.0, "eps": 1.0, "seed": 0,
                            "method": "sep", "balance": 0.1}


@dataclass(frozen=True)
class MethodOutput:
    node_parts: np.ndarray
    extra: Dict[str, Any]
    centrality: Optional[np.ndarray] = None
    hubs: Optional[np.ndarray] = None


@dataclass(frozen=True)
class Method:
    """A partitioning method.

    Attributes
    ----------
    name : str
    run : callable
        ``run(events, num_parts, params, timer, progress) -> MethodOutput``.
    params : tuple of str
        The hyperparameters it uses (recorded in the manifest).
    vertex_cut : bool
        Whether it assigns events and may replicate nodes (else it assigns nodes).
    """

    name: str
    run: Callable[..., MethodOutput]
    params: Tuple[str, ...]
    vertex_cut: bool


def _run_sep(events, num_parts, p, timer, progress):
    node_parts, cent, hubs, extra = sep(events, num_parts, float(p["topk"]), float(p["beta"]), float(p["lam"]),
                                        float(p["eps"]), timer, progress, balance=p["balance"])
    return MethodOutput(node_parts, extra, cent, hubs)


def _staged(fn):
    """A baseline timed as the ``assign`` stage; edge-cut methods do not stream."""
    def run(events, num_parts, p, timer, progress):
        with timer.stage("assign"):
            node_parts, extra = fn(events, num_parts, p, progress)
        extra.setdefault("stream_loads", None)
        return MethodOutput(node_parts, extra)
    return run


REGISTRY: Dict[str, Method] = {m.name: m for m in (
    Method("sep", _run_sep, ("topk", "beta", "lam", "eps", "balance", "seed"), vertex_cut=True),
    Method("hdrf", _staged(lambda e, n, p, pr: baselines.hdrf(e, n, p["lam"], p["eps"], pr)),
           ("lam", "eps", "balance", "seed"), vertex_cut=True),
    Method("greedy", _staged(lambda e, n, p, pr: baselines.greedy(e, n, pr)), ("balance", "seed"), vertex_cut=True),
    Method("random", _staged(lambda e, n, p, pr: baselines.random_parts(e, n, p["seed"])), ("seed",),
           vertex_cut=False),
    Method("kl", _staged(lambda e, n, p, pr: baselines.kl(e, n, p["seed"])), ("seed",), vertex_cut=False),
    Method("metis", _staged(lambda e, n, p, pr: baselines.metis(e, n, p["seed"])), ("seed",), vertex_cut=False),
)}
METHODS = Registered(lambda: REGISTRY)  # as the registry is now (a row added is a method at once)
VERTEX_CUT = tuple(m.name for m in REGISTRY.values() if m.vertex_cut)  # may replicate nodes


@dataclass
class PartitionResult:
    """The outcome of partitioning one event stream.

    Attributes
    ----------
    node_parts : int64 ndarray, shape (num_nodes,)
        Part id per node, ``-1`` for shared nodes.  Nodes that do not occur in the
        partitioned events are spread over the parts with the fewest nodes.
    shared : int64 ndarray, shape (S,)
        Shared node ids, ascending: the nodes placed in every part.
    num_parts : int
    method : str
    params : dict
        The hyperparameters, as given.
    stats : dict
        Manifest metrics (see :func:`speed.partition.metrics.partition_metrics`) plus
        ``stream_loads``, ``dropped_events``, ``num_hubs`` and ``seconds`` per stage.
    event_part : int32 ndarray, shape (E,)
        The part each partitioned event was assigned to, ``-1`` (DROPPED) for a cut event.
        Vertex-cut methods decide it while streaming; for edge-cut methods it is the
        endpoints' common part.  Shards store it, so a PAC rank can train each event once.
    centrality : float64 ndarray, shape (num_nodes,), optional
    hubs : int64 ndarray, shape (H,), optional
    stream : SepStream, optional
        SEP's stream state after the events (SEP only): saved with the shards, so later
        events can be appended (:mod:`speed.partition.append`).
    events : Events
        The partitioned events (kept to write shards).
    """

    node_parts: np.ndarray
    shared: np.ndarray
    num_parts: int
    method: str
    params: Dict[str, Any]
    stats: Dict[str, Any]
    events: Events = field(repr=False)
    event_part: Optional[np.ndarray] = field(default=None, repr=False)
    centrality: Optional[np.ndarray] = field(default=None, repr=False)
    hubs: Optional[np.ndarray] = field(default=None, repr=False)
    stream: Optional[Any] = field(default=None, repr=False)

    @property
    def replication_factor(self) -> float:
        return self.stats["replication_factor"]

    @property
    def edge_cut(self) -> float:
        return self.stats["edge_cut"]

    def save(self, path, events: Optional[Events] = None, split=None, overwrite: bool = False,
             progress: Optional[bool] = None, extra: Optional[dict] = None):
        """Write shards and ``manifest.json`` to the directory ``path`` (atomically).

        Parameters
        ----------
        path : path-like
        events : Events, optional
            The events to store, by default the partitioned ones.  Pass the full log
            (train + val + test, same node ids) to keep evaluation events in the shards.
        split : Split, optional
            Recorded in the manifest and ``nodes.npz``.
        overwrite : bool
        extra : dict, optional
            More manifest entries.

        Returns
        -------
        pathlib.Path
        """
        from .shards import write_shards

        return write_shards(path, self, events=events, split=split, overwrite=overwrite,
                            progress=progress, extra=extra)


# Shards keep one bucket of events per pair of parts, P (P + 1) / 2 of them: 4096 parts are 8.4M
# buckets (their offsets alone 67 MB per segment); 10,000 raised MemoryError.
MAX_PARTS = 4096


# each parameter of a partitioning and what it may be (:mod:`speed._params`; balance may also be
# None: no capacity)
PARTITION_RULES = {"num_parts": POSITIVE_INT, "topk": CLOSED_FRACTION, "beta": NON_NEGATIVE, "lam": POSITIVE,
                   "eps": POSITIVE, "balance": NON_NEGATIVE, "method": METHODS}


def validate_params(num_parts, topk, beta, lam, eps, method, balance=None):
    """Check a partitioning's parameters; raises :class:`~speed.errors.InputError` naming the
    first bad one."""
    given = dict(num_parts=num_parts, topk=topk, beta=beta, lam=lam, eps=eps, balance=balance, method=method)
    for name, rule in PARTITION_RULES.items():
        v = given[name]
        if v is None and name == "balance":
            continue
        why = problem(rule, v)
        if why:
            hint = " (the CLI takes percent)" if name == "topk" and is_real(v) else ""
            raise InputError(f"{name} {why}{hint}")
    if num_parts > MAX_PARTS:
        raise InputError(f"num_parts is {num_parts:,}; at most {MAX_PARTS:,} (the shards keep a bucket of events per "
                         "pair of parts; a few parts per rank is what training needs)")


class PartsWarning(UserWarning):
    """More parts than the partitioned events have nodes."""


def check_parts_for_nodes(num_parts: int, num_nodes: int) -> None:
    """Warn when there are more parts than the partitioned events have nodes: some parts stay
    empty until appends bring nodes (3,000 parts of a 1,963-node log made a 70 MB folder of
    empty buckets).  A log that starts small and grows by appends may want them, so it is not
    refused."""
    if num_parts > max(num_nodes, 1):
        warnings.warn(f"{num_parts:,} parts for {num_nodes:,} nodes: at least {num_parts - num_nodes:,} parts stay "
                      "empty until appends bring nodes, and the shards keep a bucket per pair of parts (a few parts "
                      "per rank is what training needs)", PartsWarning, stacklevel=3)


def partition(
    events: Events,
    num_parts: Optional[int] = None,
    topk: float = DEFAULTS["topk"],
    beta: float = DEFAULTS["beta"],
    lam: float = DEFAULTS["lam"],
    eps: float = DEFAULTS["eps"],
    seed: int = DEFAULTS["seed"],
    method: str = DEFAULTS["method"],
    progress: Optional[bool] = None,
    balance: Optional[float] = DEFAULTS["balance"],
    into=None,
) -> PartitionResult:
    """Partition exactly the given events into ``num_parts`` node-induced sub-graphs, or append
    them to existing shards (``into``).

    With ``method="sep"`` (default) the events stream once in time order.  Only the ``floor(topk * |V|)`` nodes of
    highest time-decayed centrality (hubs) may join several parts; a node that joins
    several becomes shared and is placed in every part.  Every other node lives in
    exactly one part, so the replication factor is at most ``topk * P + 1 - topk``.

    Parameters
    ----------
    events : Events
        The events to partition (the CLI passes the training events).
    num_parts : int
        ``P >= 1`` (required unless ``into`` is given: appended shards keep theirs).
    topk : float
        Fraction of nodes that may be replicated, in [0, 1] (``0.05`` = 5%).
    beta : float
        Centrality time decay (unitless; 0 = degree).
    lam, eps : float
        Weight and smoothing of the load-balance term.
    seed : int
        Seeds ``random`` and ``kl`` (and METIS's coarsening).  SEP, HDRF and greedy are
        deterministic: score ties go to the lowest partition id; for them it is recorded.
    method : {"sep", "hdrf", "greedy", "random", "kl", "metis"}
        ``hdrf`` and ``greedy`` are streaming vertex-cuts with unlimited replication (every
        replicated node is shared); ``random``, ``kl`` (networkx Kernighan-Lin, recursive)
        and ``metis`` (DGL, needs the ``dgl`` extra) assign nodes with no replicas, on the
        static projection for the latter two.  ``topk`` and ``beta`` apply to SEP only,
        ``lam`` and ``eps`` to SEP and HDRF.
    balance : float or None
        Even the parts' training events (default 0.1; None: the paper's rule alone; see
        docs/partitioning.md for what balance costs in replication).  SEP then caps every part at
        ``(1 + balance)`` times the mean load while streaming, replicating ("dynamic hubs")
        nodes whose part is full, so the replication bound becomes ``k' P + 1 - k'`` with
        ``k'`` the fraction of static and dynamic hubs; and, after any vertex-cut method, the
        events between two shared nodes are spread to even the parts
        (:mod:`speed.partition.balance`).
    progress : bool, optional
        Progress bars on stderr (default: when stderr is a terminal).
    into : path-like, optional
        A shards directory partitioned by SEP: append ``events`` to it instead (SEP goes on
        from its saved stream state; the other parameters are those stored with the shards and
        are ignored; see :mod:`speed.partition.append`).  Events are matched to the shards'
        nodes by their original ids and must not be older than the shards' last event.

    Returns
    -------
    PartitionResult
        With ``into``: the appended shards' node parts and metrics, the new events (in the
        shards' node ids) and their parts.
    """
    if into is not None:
        return append_result(into, events, progress)
    if num_parts is None:
        raise InputError("num_parts is required (the number of parts to partition into)")
    validate_params(num_parts, topk, beta, lam, eps, method, balance)
    if len(events) == 0:
        raise InputError("no events to partition")
    check_parts_for_nodes(num_parts, int(np.count_nonzero(events.node_mask())))
    timer = StageTimer()
    num_parts = int(num_parts)
    m = REGISTRY[method]
    given = {"topk": topk, "beta": beta, "lam": lam, "eps": eps, "seed": seed, "balance": balance}
    out = m.run(events, num_parts, given, timer, progress)
    extra = dict(out.extra)
    event_part = extra.pop("event_part", None)
    stream = extra.pop("stream", None)
    with timer.stage("metrics"):
        stats = partition_metrics(events, out.node_parts, num_parts)
        if event_part is None:
            event_part = _kernels.endpoint_event_parts(events.src, events.dst, out.node_parts)
        if balance is not None and m.vertex_cut:
            spread_shared_events(events.src, events.dst, out.node_parts, event_part, num_parts)
        stats.update(balance_stats(np.bincount(event_part[event_part >= 0], minlength=num_parts)))
    stats.update(extra)
    stats["seconds"] = timer.rounded()
    return PartitionResult(
        node_parts=out.node_parts,
        shared=np.flatnonzero(out.node_parts == _kernels.SHARED).astype(np.int64),
        num_parts=num_parts,
        method=method,
        params={k: given[k] for k in m.params},
        stats=stats,
        events=events,
        event_part=event_part,
        centrality=out.centrality,
        hubs=out.hubs,
        stream=stream,
    )


def append_result(into, events: Events, progress: Optional[bool] = None) -> PartitionResult:
    """:func:`speed.partition.append.append_events`, as a :class:`PartitionResult`."""
    from .append import append_events
    from .shards import Shards

    manifest, event_part, (src, dst), kept = append_events(into, events, progress=progress)
    if kept.size != len(events):  # events the shards held already were left out
        events = events.select(kept)
    shards = Shards(into)
    new = Events(src=src, dst=dst, t=events.t, eid=np.arange(shards.num_events - len(events), shards.num_events),
                 num_nodes=shards.num_nodes, msg=events.msg, label=events.label, node_ids=shards.node_ids,
                 bipartite=shards.bipartite, meta=events.meta.copy())
    keys = ("replication_factor", "edge_cut", "cut_events", "shared_nodes", "part_events", "part_nodes",
            "assigned_events", "largest_part_ratio", "stream_loads", "dropped_events", "num_hubs", "dynamic_hubs",
            "num_train_nodes", "num_partitioned_events", "appends", "advice")
    return PartitionResult(node_parts=shards.node_parts, shared=shards.shared, num_parts=shards.num_parts,
                           method="sep", params=dict(manifest["params"]),
                           stats={k: manifest[k] for k in keys if k in manifest}, events=new,
                           event_part=event_part, centrality=shards.centrality)


class Partitioner:
    """SEP as a scikit-learn style estimator.

    Hyperparameters are stored unchanged; ``fit`` validates them, partitions and sets
    the learned attributes (ending in ``_``).

    Examples
    --------
    >>> p = Partitioner(num_parts=4, topk=0.05).fit(events)   # doctest: +SKIP
    >>> p.node_parts_, p.shared_, p.stats_["edge_cut"]          # doctest: +SKIP
    """

    def __init__(self, num_parts: int = DEFAULTS["num_parts"], topk: float = DEFAULTS["topk"],
                 beta: float = DEFAULTS["beta"], lam: float = DEFAULTS["lam"], eps: float = DEFAULTS["eps"],
                 seed: int = DEFAULTS["seed"], method: str = DEFAULTS["method"], progress: Optional[bool] = None,
                 balance: Optional[float] = DEFAULTS["balance"]):
        self.num_parts = num_parts
        self.topk = topk
        self.beta = beta
        self.lam = lam
        self.eps = eps
        self.seed = seed
        self.method = method
        self.progress = progress
        self.balance = balance

    def get_params(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in ("num_parts", "topk", "beta", "lam", "eps", "seed", "method",
                                                "balance")}

    def fit(self, events: Events) -> "Partitioner":
        res = partition(events, progress=self.progress, **self.get_params())
        self._set(res)
        return self

    def partial_fit(self, events: Events, into=None) -> "Partitioner":
        """Partition ``events`` on from where the last call left the stream.

        With ``into`` (a shards directory) the events are appended to those shards (see
        :func:`partition`'s ``into``); the first call on an unfitted partitioner without
        ``into`` is :meth:`fit`.  Otherwise SEP goes on in memory from the previous call's
        stream: ``events`` must continue the earlier ones (same node ids, ids past the earlier
        ``num_nodes`` are new nodes, no event older than the last one).

        The learned attributes then describe the whole stream so far; ``result_`` holds the
        latest events and their parts.
        """
        if into is not None:
            self._set(append_result(into, events, self.progress))
            return self
        if not hasattr(self, "result_"):
            return self.fit(events)
        from .append import continue_in_memory, saved_from_result

        if self._stream is None:
            self._stream = saved_from_result(self.result_)
        num_parts, params = self.result_.num_parts, self.result_.params
        node_parts, event_part, stats = continue_in_memory(self._stream, events, num_parts, self.progress)
        self._set(PartitionResult(node_parts=node_parts,
                                  shared=np.flatnonzero(node_parts == _kernels.SHARED).astype(np.int64),
                                  num_parts=num_parts, method="sep", params=dict(params), stats=stats, events=events,
                                  event_part=event_part, centrality=self._stream.stream.cent,
                                  hubs=self._stream.hubs), keep_stream=True)
        return self

    def _set(self, res: PartitionResult, keep_stream: bool = False) -> None:
        if not keep_stream:
            self._stream = None  # SEP's state to go on from, built on the first partial_fit after a fit
        self.result_ = res
        self.node_parts_ = res.node_parts
        self.shared_ = res.shared
        self.stats_ = res.stats
        self.centrality_ = res.centrality
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"Partitioner({args})"
