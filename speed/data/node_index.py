"""Original node ids to rows (:class:`NodeIndex`): of a model's node state, as a
:class:`~speed.train.run.predictor.Predictor` speaks the ids of the user's files, and of appended
shards, whose new events bring their own ids: ints or strings, one id space or two (JODIE-style
logs number users and items apart), growing for new ids."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..errors import InputError


class NodeIndex:
    """Original node ids to rows of the model's node state, growing for new ids.

    Parameters
    ----------
    node_ids : ndarray, shape (N,), optional
        Original id of each row (ints or strings); None: the ids are the rows.
    num_nodes : int
    num_src_ids : int, optional
        Sources and destinations numbered apart (JODIE): rows ``[0, num_src_ids)`` are
        sources, the rest destinations, and a lookup names its side.
    sides : bool ndarray, shape (N,), optional
        The same for rows in any order (appended shards): whether each row is a source.

    Attributes
    ----------
    ids : ndarray, shape (rows,)
        Original id of each row (int64 or str).
    sides : str ndarray, shape (rows,)
        ``"src"`` or ``"dst"`` per row (per-side numbering only).
    """

    def __init__(self, node_ids: Optional[np.ndarray], num_nodes: int, num_src_ids: Optional[int] = None,
                 sides: Optional[np.ndarray] = None):
        ids = np.arange(num_nodes, dtype=np.int64) if node_ids is None else np.asarray(node_ids)
        self.ids = ids.astype(str) if ids.dtype.kind in "OSU" else ids.astype(np.int64)
        self.per_side = num_src_ids is not None or sides is not None
        rows = np.arange(ids.size, dtype=np.int64)
        if self.per_side:
            is_src = rows < num_src_ids if sides is None else np.asarray(sides, dtype=bool)
            self._tables = {"src": self._table(self.ids[is_src], rows[is_src]),
                            "dst": self._table(self.ids[~is_src], rows[~is_src])}
            self.sides = np.where(is_src, "src", "dst")
        else:
            both = self._table(self.ids, rows)
            self._tables = {"src": both, "dst": both}

    @staticmethod
    def _table(ids, rows):
        order = np.argsort(ids, kind="stable")
        keys = ids[order]
        dense = None
        # small non-negative integer ids: a direct table, as the readers compact them; a lookup is
        # then one gather instead of a binary search per id (5x faster on 10^5-10^6 nodes)
        if keys.dtype.kind == "i" and keys.size and keys[0] >= 0 and keys[-1] < 4 * keys.size + (1 << 20):
            dense = np.full(int(keys[-1]) + 1, -1, dtype=np.int64)
            dense[keys] = rows[order]
        return [keys, rows[order], dense]

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def strings(self) -> bool:
        return self.ids.dtype.kind == "U"

    def convert(self, values, what: str = "node id") -> np.ndarray:
        """``values`` as ids of this run's kind (ints or strings)."""
        a = np.asarray(values)
        if a.ndim == 0:
            a = a.reshape(1)
        if self.strings:
            return a.astype(str)
        if a.dtype.kind == "i":
            return a.astype(np.int64)
        if a.dtype.kind == "u":
            if a.size and int(a.max()) > _INT64_MAX:
                raise InputError(f"{what} {int(a.max())} is larger than a 64-bit integer holds (the node ids "
                                 "here are 64-bit integers)")
            return a.astype(np.int64)
        if a.dtype.kind in "US":
            try:  # whole numbers written as text: parsed exactly, never through a float
                return a.astype(np.int64)
            except OverflowError:
                bad = next(v for v in a.ravel() if _too_large(v))
                raise InputError(f"{what} {bad} is larger than a 64-bit integer holds (the node ids here are "
                                 "64-bit integers)") from None
            except ValueError:
                pass
        try:
            out = a.astype(np.float64) if a.dtype.kind != "f" else a
        except ValueError:
            bad = next(v for v in a.ravel() if not _is_number(v))
            raise InputError(f"{what} {bad!r} is not an integer, and this run's node ids are integers") from None
        if not np.all(np.isfinite(out)) or np.any(out != np.round(out)):
            bad = out[~(np.isfinite(out) & (out == np.round(out)))][0]
            raise InputError(f"{what} {bad!r} is not an integer, and this run's node ids are integers")
        if out.size and np.abs(out).max() >= 2.0 ** 53:  # a float this large no longer names one integer
            bad = out[np.abs(out) >= 2.0 ** 53][0]
            raise InputError(f"{what} {bad!r} is too large to be read exactly as a float: write it as a whole number")
        return out.astype(np.int64)

    def side(self, side: Optional[str]) -> str:
        if side is None:
            if self.per_side:
                raise InputError("this run numbers sources and destinations apart (a bipartite JODIE-style log), "
                                 "so an id may name two nodes: say side='src' or side='dst'")
            return "src"
        if side not in ("src", "dst"):
            raise InputError(f"side must be 'src' or 'dst', got {side!r}")
        return side

    def lookup(self, ids, side: str = "src") -> np.ndarray:
        """Rows of ``ids`` on ``side``, -1 for an id never seen (nothing is added).  int64, shape (n,)."""
        return self._find(self.convert(ids), side)

    def _find(self, ids: np.ndarray, side: str) -> np.ndarray:
        keys, rows, dense = self._tables[side]
        if dense is not None and ids.dtype.kind == "i":
            inside = (ids >= 0) & (ids < dense.size)
            return np.where(inside, dense[np.where(inside, ids, 0)], -1)
        pos = np.searchsorted(keys, ids).clip(max=max(keys.size - 1, 0))
        found = (keys[pos] == ids) if keys.size else np.zeros(ids.size, dtype=bool)
        return np.where(found, rows[pos] if keys.size else 0, -1)

    def rows(self, ids, side: str = "src") -> Tuple[np.ndarray, int]:
        """Rows of ``ids`` on ``side``; ids never seen get new rows (appended).

        Returns the rows (int64, shape (n,)) and the number of rows now.
        """
        ids = self.convert(ids)
        keys, rows, _ = self._tables[side]
        out = self._find(ids, side)
        found = out >= 0
        if not found.all():
            new, inv = np.unique(ids[~found], return_inverse=True)
            new_rows = np.arange(self.ids.size, self.ids.size + new.size, dtype=np.int64)
            out[~found] = new_rows[inv]
            self.ids = np.concatenate([self.ids, new])  # str arrays widen to the longest id
            table = self._table(np.concatenate([keys, new]), np.concatenate([rows, new_rows]))
            if self.per_side:
                self._tables[side] = table
                self.sides = np.concatenate([self.sides, np.full(new.size, side)])
            else:
                self._tables = {"src": table, "dst": table}
        return out, int(self.ids.size)


_INT64_MAX = int(np.iinfo(np.int64).max)


def _too_large(v) -> bool:
    try:
        return abs(int(v)) > _INT64_MAX
    except (TypeError, ValueError):
        return False


def _is_number(v) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False
