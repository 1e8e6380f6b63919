"""The one way a parameter is checked, for training, online updates and partitioning.

After scikit-learn's parameter constraints: a rule says what a value may be (:class:`Interval`,
:class:`Boolean`, :class:`Options`), :func:`problem` says why a value breaks it, and
:func:`plain` turns an accepted numpy scalar into the Python number it stands for, so that
``batch_size=np.int64(200)`` is accepted and stored (``metrics.json``, checkpoints) as ``200``.
Integers are ``numbers.Integral`` and reals ``numbers.Real`` (numpy's scalars register there),
never ``bool``: ``True`` is not a batch size.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import numpy as np


def is_integer(v) -> bool:
    """An integer of any kind (Python's or numpy's), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def is_real(v) -> bool:
    """A finite real number of any kind, not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(float(v))


@dataclass(frozen=True)
class Interval:
    """A number's kind and range: ``kind`` int or float, ``low`` and ``high`` bounds (None:
    unbounded), each open or closed."""

    kind: type
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = True

    def problem(self, v) -> Optional[str]:
        """Why ``v`` breaks the rule (None if it keeps it)."""
        ok = is_integer(v) if self.kind is int else is_real(v)
        ok = ok and (self.low is None or (v > self.low if self.low_open else v >= self.low))
        ok = ok and (self.high is None or (v < self.high if self.high_open else v <= self.high))
        return None if ok else f"must be {self}, got {v!r}"

    def __str__(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        if self.high is None:
            if self.low is None:
                return noun
            if self.kind is not int and self.low == 0 and self.low_open:
                return "a positive number"
            return f"{noun} {'>' if self.low_open else '>='} {self.low}"
        if self.low is None:
            return f"{noun} {'<' if self.high_open else '<='} {self.high}"
        if (self.kind, self.low, self.low_open) == (float, 0, False) and self.high == 1:
            return f"a fraction in [0, 1{')' if self.high_open else ']'}"
        lo, hi = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{noun} in {lo}{self.low}, {self.high}{hi}"


@dataclass(frozen=True)
class Boolean:
    """True or False (Python's or numpy's)."""

    def problem(self, v) -> Optional[str]:
        return None if isinstance(v, (bool, np.bool_)) else f"must be True or False, got {v!r}"


@dataclass(frozen=True)
class Options:
    """One of a set of names."""

    names: Iterable[str]

    def problem(self, v) -> Optional[str]:
        names = list(self.names)
        return None if isinstance(v, str) and v in names else f"must be one of {', '.join(names)}, got {v!r}"


POSITIVE_INT = Interval(int, 1)
COUNT = Interval(int, 0)
POSITIVE = Interval(float, 0, low_open=True)
NON_NEGATIVE = Interval(float, 0)
FRACTION = Interval(float, 0, 1)
CLOSED_FRACTION = Interval(float, 0, 1, high_open=False)
FINITE = Interval(float)
BOOLEAN = Boolean()


def problem(rule, v) -> Optional[str]:
    """Why ``v`` breaks ``rule`` (a rule above, or a collection of names), or None."""
    if rule is None:
        return None
    if not hasattr(rule, "problem"):
        rule = Options(rule)
    return rule.problem(v)


def plain(v) -> Any:
    """``v`` with a numpy scalar made the Python value it stands for (others unchanged)."""
    if isinstance(v, np.generic):
        return v.item()
    return v
