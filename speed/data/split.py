"""Chronological train/val/test split and the inductive (new-node) protocol of TGN."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Tuple

import numpy as np

from .._util import release_arrays
from ..errors import InputError
from .events import MASK_WINDOW, Events

# The default chronological split (fractions of events) and inductive hold-out (a fraction of
# all nodes, drawn from the val/test nodes: TGN's rule); partition, train and TrainConfig read these.
DEFAULT_VAL = 0.15
DEFAULT_TEST = 0.15
DEFAULT_NEW_NODE_FRACTION = 0.1

@dataclass
class SplitPoints:
    """Where a log splits and which nodes are held out: what every split records, in memory
    (:class:`Split`) or out of core (``speed.partition.outofcore.StreamedSplit``).
    Subclasses provide ``num_train_masked`` (training events that touch no held-out node)."""

    num_train: int
    num_val: int
    num_test: int
    val_time: float
    test_time: float
    new_nodes: np.ndarray
    seed: int
    new_node_fraction: float

    def summary(self) -> dict:
        """The manifest's record of the split."""
        return {
            "num_train_events": self.num_train,
            "num_train_events_masked": int(self.num_train_masked),
            "num_val_events": self.num_val,
            "num_test_events": self.num_test,
            "val_time": self.val_time,
            "test_time": self.test_time,
            "new_node_fraction": self.new_node_fraction,
            "num_new_nodes": int(self.new_nodes.sum()),
            "seed": self.seed,
        }


@dataclass
class Split(SplitPoints):
    """A chronological split of one event log.

    Events are sorted, so each period is a contiguous range of positions:
    train ``[0, num_train)``, val ``[num_train, num_train + num_val)``, test the rest.

    Attributes
    ----------
    num_train, num_val, num_test : int
    val_time, test_time : float
        Train holds ``t <= val_time``, val ``val_time < t <= test_time``, test ``t > test_time``.
    new_nodes : bool ndarray, shape (num_nodes,)
        Nodes held out of training for the inductive protocol: ``int(fraction * |nodes|)``
        nodes drawn from those seen in val/test (TGN's rule).
    train_mask : bool ndarray, shape (num_train,)
        Training events that touch no held-out node (the events a model may train on).
    val_inductive, test_inductive : bool ndarray, shape (num_val,), (num_test,)
        Val/test events with at least one endpoint unseen in the (masked) training events.
    """

    events: Events = field(repr=False)

    # The masks below are computed on first use: partitioning needs only the counts and
    # the held-out nodes, so ``speed partition`` does not pay for them.
    @cached_property
    def train_mask(self) -> np.ndarray:
        ev = self.events
        return ~(self.new_nodes[ev.src[: self.num_train]] | self.new_nodes[ev.dst[: self.num_train]])

    @cached_property
    def _seen_in_training(self) -> np.ndarray:
        # a window at a time, a mapped log's pages let go as it goes (reading the training period
        # whole kept 1.3 GB of a 10^8-event log resident, beside its masked copies)
        ev, m = self.events, self.train_mask
        seen = np.zeros(ev.num_nodes, dtype=bool)
        for lo in range(0, self.num_train, MASK_WINDOW):
            hi = min(lo + MASK_WINDOW, self.num_train)
            seen[ev.src[lo:hi][m[lo:hi]]] = True
            seen[ev.dst[lo:hi][m[lo:hi]]] = True
            release_arrays([ev.src, ev.dst])
        return seen

    def _inductive(self, sl: slice) -> np.ndarray:
        seen, ev = self._seen_in_training, self.events
        out = ~seen[ev.src[sl]] | ~seen[ev.dst[sl]]
        release_arrays([ev.src, ev.dst])
        return out

    @cached_property
    def val_inductive(self) -> np.ndarray:
        return self._inductive(slice(self.num_train, self.num_train + self.num_val))

    @cached_property
    def test_inductive(self) -> np.ndarray:
        return self._inductive(slice(self.num_train + self.num_val, self.num_train + self.num_val + self.num_test))

    def require_trainable(self, source=None) -> None:
        """Refuse a split that leaves a period empty: training needs events to train on,
        and evaluation needs validation and test events."""
        require_periods(self.num_train, int(self.train_mask.sum()), self.num_val, self.num_test, source)

    def train(self, events: Events) -> Events:
        """The training period's events (without the inductive mask)."""
        return events.select(slice(0, self.num_train))

    def val(self, events: Events) -> Events:
        return events.select(slice(self.num_train, self.num_train + self.num_val))

    def test(self, events: Events) -> Events:
        return events.select(slice(self.num_train + self.num_val, len(events)))

    @property
    def num_train_masked(self) -> int:
        return int(self.train_mask.sum())


def _sorted_quantile(t: np.ndarray, q: float) -> float:
    """``np.quantile(t, q)`` (linear interpolation) for sorted ``t``, in O(1)."""
    pos = q * (t.shape[0] - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, t.shape[0] - 1)
    return float(t[lo] + (t[hi] - t[lo]) * (pos - lo))


def require_periods(num_train: int, num_train_masked: int, num_val: int, num_test: int, source=None) -> None:
    """:class:`InputError` unless every period of a split has events (see :meth:`Split.require_trainable`)."""
    if min(num_train, num_val, num_test) == 0:
        raise InputError(f"the log is too small or too degenerate to train on: it splits into {num_train} training, "
                         f"{num_val} validation and {num_test} test events by time; every period needs events "
                         f"(a log with events at three or more distinct times, many more in practice)", source)
    if num_train_masked == 0:
        raise InputError("no training events are left once the held-out (inductive) nodes are masked: use a larger "
                         "log or new_node_fraction=0", source)


def check_fractions(val: float, test: float, new_node_fraction: float = DEFAULT_NEW_NODE_FRACTION) -> None:
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise InputError(f"val ({val}) and test ({test}) must be fractions with val + test < 1")
    if not 0 <= new_node_fraction <= 1:
        raise InputError(f"new_node_fraction must be in [0, 1], got {new_node_fraction}")


def check_times(times) -> Tuple[float, float]:
    """``(val_time, test_time)`` as floats, finite and increasing."""
    try:
        val_time, test_time = (float(x) for x in times)
    except (TypeError, ValueError):
        raise InputError(f"split times must be two numbers (val_time, test_time), got {times!r}") from None
    if not (np.isfinite(val_time) and np.isfinite(test_time)) or val_time >= test_time:
        raise InputError(f"split times must be finite with val_time < test_time, got {val_time:g} and {test_time:g}")
    return val_time, test_time


def split_points(t: np.ndarray, val: float, test: float, times=None):
    """Where a sorted log splits: ``(val_time, test_time, num_train, num_val, num_test)``.

    By time quantiles (``val``, ``test`` fractions), or at the given ``times`` (``(val_time,
    test_time)``: train is ``t <= val_time``, val ``val_time < t <= test_time``, test after).
    ``t`` may be a memory map: it is read at a few positions only (quantiles, bisection).
    """
    if times is not None:
        val_time, test_time = check_times(times)
    else:
        val_time, test_time = (_sorted_quantile(t, q) for q in (1.0 - val - test, 1.0 - test))
    num_train = int(np.searchsorted(t, val_time, side="right"))
    num_val = int(np.searchsorted(t, test_time, side="right")) - num_train
    return val_time, test_time, num_train, num_val, t.shape[0] - num_train - num_val


def held_out_nodes(in_later: np.ndarray, new_node_fraction: float, seed: int, num_present: int) -> np.ndarray:
    """The inductive hold-out, TGN's rule: ``int(new_node_fraction * num_present)`` nodes drawn
    (seeded) from the nodes seen after training (all of them when there are fewer).

    Parameters
    ----------
    in_later : bool ndarray, shape (num_nodes,)
        Nodes that occur in the validation or test events.
    new_node_fraction : float
    seed : int
    num_present : int
        Nodes that occur anywhere in the log (TGN's ``n_total_unique_nodes``).

    Returns
    -------
    bool ndarray, shape (num_nodes,)
    """
    rng = np.random.default_rng(seed)
    later_nodes = np.flatnonzero(in_later)
    k = min(int(math.floor(new_node_fraction * num_present + 1e-9)), later_nodes.size)
    held = rng.choice(later_nodes, size=k, replace=False) if k else np.empty(0, dtype=np.int64)
    new_nodes = np.zeros(in_later.shape[0], dtype=bool)
    new_nodes[held] = True
    return new_nodes


def chronological_split(
    events: Events,
    val: float = DEFAULT_VAL,
    test: float = DEFAULT_TEST,
    new_node_fraction: float = DEFAULT_NEW_NODE_FRACTION,
    seed: int = 0,
    times=None,
) -> Split:
    """Split events by time quantiles and choose the inductive held-out nodes.

    Parameters
    ----------
    events : Events
        Sorted by time.
    val, test : float
        Fractions of the time quantiles for validation and test (default 15% each,
        so train is the first 70%).
    new_node_fraction : float
        Hold out ``int(new_node_fraction * |nodes|)`` of the nodes seen in val/test: their events
        are masked out of training (TGN's protocol; default 0.1).  A log whose benchmark is
        transductive (``events.meta.transductive``, e.g. TGB's) holds none out.
    seed : int
        Seeds the choice of held-out nodes.
    times : (float, float), optional
        Split at these times instead of the quantiles: train holds ``t <= times[0]``, val
        ``times[0] < t <= times[1]``, test the rest (``val`` and ``test`` are then unused).

    Returns
    -------
    Split
    """
    check_fractions(val, test, new_node_fraction)
    if events.meta.transductive:  # the benchmark's own protocol decides
        new_node_fraction = 0.0
    val_time, test_time, num_train, num_val, num_test = split_points(events.t_float(), val, test, times)
    later = slice(num_train, len(events))
    in_later = np.zeros(events.num_nodes, dtype=bool)
    in_later[events.src[later]] = True
    in_later[events.dst[later]] = True
    new_nodes = held_out_nodes(in_later, new_node_fraction, seed, int(events.node_mask().sum()))

    return Split(
        num_train=num_train,
        num_val=num_val,
        num_test=num_test,
        val_time=float(val_time),
        test_time=float(test_time),
        new_nodes=new_nodes,
        seed=seed,
        new_node_fraction=new_node_fraction,
        events=events,
    )
