"""The public partitioning API: ``speed.partition``, ``Partitioner`` and their result.

Every method -- SEP and the baselines -- produces a ``node_parts`` array (-1 = shared), so
the result, the metrics and the shard format are the same whichever method ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np

from .._util import StageTimer
from ..data.events import Events
from ..errors import InputError
from . import _kernels, baselines
from .metrics import partition_metrics
from .sep import sep

METHODS = ("sep", "hdrf", "greedy", "random", "kl", "metis")
VERTEX_CUT = ("sep", "hdrf", "greedy")  # streaming methods that may replicate nodes


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
    centrality : float64 ndarray, shape (num_nodes,), optional
    hubs : int64 ndarray, shape (H,), optional
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
    centrality: Optional[np.ndarray] = field(default=None, repr=False)
    hubs: Optional[np.ndarray] = field(default=None, repr=False)

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


def _validate(num_parts, topk, beta, lam, eps, method):
    if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)) or num_parts < 1:
        raise InputError(f"num_parts must be an integer >= 1, got {num_parts!r}")
    for name, v in (("topk", topk), ("beta", beta), ("lam", lam), ("eps", eps)):
        if not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
            raise InputError(f"{name} must be a finite number, got {v!r}")
    if not 0.0 <= topk <= 1.0:
        raise InputError(f"topk must be a fraction in [0, 1], got {topk} (the CLI takes percent)")
    if beta < 0:
        raise InputError(f"beta must be >= 0, got {beta}")
    if lam <= 0 or eps <= 0:
        raise InputError(f"lam and eps must be > 0, got lam={lam}, eps={eps}")
    if method not in METHODS:
        raise InputError(f"unknown method '{method}' (choose from {', '.join(METHODS)})")


def _params(method, topk, beta, lam, eps, seed) -> Dict[str, Any]:
    """The hyperparameters that the method uses, as given."""
    if method == "sep":
        return {"topk": topk, "beta": beta, "lam": lam, "eps": eps, "seed": seed}
    if method == "hdrf":
        return {"lam": lam, "eps": eps, "seed": seed}
    return {"seed": seed}


def partition(
    events: Events,
    num_parts: int,
    topk: float = 0.0,
    beta: float = 0.1,
    lam: float = 1.0,
    eps: float = 1.0,
    seed: int = 0,
    method: str = "sep",
    progress: Optional[bool] = None,
) -> PartitionResult:
    """Partition exactly the given events into ``num_parts`` node-induced sub-graphs.

    With ``method="sep"`` (default) the events stream once in time order.  Only the ``floor(topk * |V|)`` nodes of
    highest time-decayed centrality (hubs) may join several parts; a node that joins
    several becomes shared and is placed in every part.  Every other node lives in
    exactly one part, so the replication factor is at most ``topk * P + 1 - topk``.

    Parameters
    ----------
    events : Events
        The events to partition (the CLI passes the training events).
    num_parts : int
        ``P >= 1``.
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
    progress : bool, optional
        Progress bars on stderr (default: when stderr is a terminal).

    Returns
    -------
    PartitionResult
    """
    _validate(num_parts, topk, beta, lam, eps, method)
    if len(events) == 0:
        raise InputError("no events to partition")
    timer = StageTimer()
    num_parts = int(num_parts)
    cent = hubs = None
    if method == "sep":
        node_parts, cent, hubs, extra = sep(events, num_parts, float(topk), float(beta), float(lam), float(eps),
                                            timer, progress)
    else:
        with timer.stage("assign"):
            if method == "hdrf":
                node_parts, extra = baselines.hdrf(events, num_parts, lam, eps, progress)
            elif method == "greedy":
                node_parts, extra = baselines.greedy(events, num_parts, progress)
            elif method == "random":
                node_parts, extra = baselines.random_parts(events, num_parts, seed)
            elif method == "kl":
                node_parts, extra = baselines.kl(events, num_parts, seed)
            else:
                node_parts, extra = baselines.metis(events, num_parts, seed)
        extra.setdefault("stream_loads", None)  # edge-cut methods do not stream
    with timer.stage("metrics"):
        stats = partition_metrics(events, node_parts, int(num_parts))
    stats.update(extra)
    stats["seconds"] = timer.rounded()
    return PartitionResult(
        node_parts=node_parts,
        shared=np.flatnonzero(node_parts == _kernels.SHARED).astype(np.int64),
        num_parts=int(num_parts),
        method=method,
        params=_params(method, topk, beta, lam, eps, seed),
        stats=stats,
        events=events,
        centrality=cent,
        hubs=hubs,
    )


class Partitioner:
    """SEP as a scikit-learn style estimator.

    Hyperparameters are stored unchanged; ``fit`` validates them, partitions and sets
    the learned attributes (ending in ``_``).

    Examples
    --------
    >>> p = Partitioner(num_parts=4, topk=0.05).fit(events)   # doctest: +SKIP
    >>> p.node_parts_, p.shared_, p.stats_["edge_cut"]          # doctest: +SKIP
    """

    def __init__(self, num_parts: int = 4, topk: float = 0.0, beta: float = 0.1, lam: float = 1.0,
                 eps: float = 1.0, seed: int = 0, method: str = "sep", progress: Optional[bool] = None):
        self.num_parts = num_parts
        self.topk = topk
        self.beta = beta
        self.lam = lam
        self.eps = eps
        self.seed = seed
        self.method = method
        self.progress = progress

    def get_params(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in ("num_parts", "topk", "beta", "lam", "eps", "seed", "method")}

    def fit(self, events: Events) -> "Partitioner":
        res = partition(events, progress=self.progress, **self.get_params())
        self.result_ = res
        self.node_parts_ = res.node_parts
        self.shared_ = res.shared
        self.stats_ = res.stats
        self.centrality_ = res.centrality
        return self

    def fit_predict(self, events: Events) -> np.ndarray:
        """Fit and return ``node_parts_``."""
        return self.fit(events).node_parts_

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"Partitioner({args})"
