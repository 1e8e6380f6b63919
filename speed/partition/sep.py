"""SEP, the streaming edge partitioner (paper §II-B, Alg. 1), and the public API.

``speed.partition(events, num_parts, topk=...)`` is the function; ``Partitioner`` is the
same thing as a scikit-learn style estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np

from .._util import StageTimer, progress_bar
from ..data.events import Events
from ..errors import InputError
from . import _kernels
from .centrality import node_centrality, select_hubs
from .metrics import partition_metrics

METHODS = ("sep",)
_CHUNK = 1 << 21  # events per kernel call: small enough for a lively progress bar


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


def _sep(events: Events, num_parts: int, topk: float, beta: float, lam: float, eps: float,
         timer: StageTimer, progress: Optional[bool]):
    n = events.num_nodes
    with timer.stage("centrality"):
        cent = node_centrality(events, beta)
        present = events.node_mask()
        hubs = select_hubs(cent, present, topk)
    with timer.stage("assign"):
        code = _kernels.initial_codes(n, hubs)
        hub_mask = np.zeros((hubs.size, (num_parts + 63) // 64), dtype=np.uint64)
        load = np.zeros(num_parts, dtype=np.int64)
        dropped = 0
        ne = len(events)
        with progress_bar(ne, "SEP assign", progress=progress) as bar:
            for start in range(0, ne, _CHUNK):
                end = min(ne, start + _CHUNK)
                dropped += _kernels.sep_assign(events.src, events.dst, start, end, cent, code, hub_mask, load,
                                               float(lam), float(eps))
                bar.update(end - start)
        node_parts = _kernels.finalize_parts(code, hub_mask)
        node_parts = _kernels.fill_unplaced(node_parts, num_parts)
    extra = {"stream_loads": [int(x) for x in load], "dropped_events": int(dropped), "num_hubs": int(hubs.size)}
    return node_parts, cent, hubs, extra


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

    SEP streams the events once in time order.  Only the ``floor(topk * |V|)`` nodes of
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
        Recorded for reproducibility.  SEP itself is deterministic: score ties go to the
        lowest partition id.
    method : str
        ``"sep"``.
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
    node_parts, cent, hubs, extra = _sep(events, int(num_parts), float(topk), float(beta), float(lam),
                                         float(eps), timer, progress)
    with timer.stage("metrics"):
        stats = partition_metrics(events, node_parts, int(num_parts))
    stats.update(extra)
    stats["seconds"] = timer.rounded()
    return PartitionResult(
        node_parts=node_parts,
        shared=np.flatnonzero(node_parts == _kernels.SHARED).astype(np.int64),
        num_parts=int(num_parts),
        method=method,
        params={"topk": topk, "beta": beta, "lam": lam, "eps": eps, "seed": seed},
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
