"""Edge features read in place from a shards directory, by event id.

A PAC rank other than rank 0 never holds the whole log: its events come from the shards'
memory-mapped arrays (:meth:`speed.partition.shards.Shards.merge`), and so do the edge features
its steps read.  The features are stored in the shards' bucket order; ``position`` maps an event
id to its stored row, so a step reads only its batch's rows from the page cache, which every
rank on a host shares.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch


class MappedFeatures:
    """Rows of a memory-mapped feature array, indexed by event id.

    Parameters
    ----------
    rows : ndarray, shape (E, d)
        The features in stored order (a read-only memory map).
    position : int ndarray, shape (E,), optional
        The stored row of each event id (None: the rows are in event id order, as the
        time-ordered log's, :mod:`speed.partition.ordered`).

    Only what a step needs of a tensor is offered: :meth:`index_select` on dimension 0 and
    ``shape``.
    """

    def __init__(self, rows: np.ndarray, position: Optional[np.ndarray] = None):
        if rows.ndim != 2 or (position is not None and position.shape != (rows.shape[0],)):
            raise ValueError(f"rows {rows.shape} and positions {getattr(position, 'shape', None)} do not match")
        self.rows, self.position = rows, position

    @property
    def shape(self):
        return torch.Size(self.rows.shape)

    def index_select(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        """float32 (len(index), d): the rows of event ids ``index``."""
        if dim != 0:
            raise ValueError("edge features are selected by event id (dimension 0)")
        at = index.numpy() if self.position is None else self.position[index.numpy()]
        # sorted reads touch each page once; the inverse order puts the rows back
        order = np.argsort(at, kind="stable")
        out = np.empty((at.size, self.rows.shape[1]), dtype=np.float32)
        out[order] = self.rows[at[order]]
        return torch.from_numpy(out)
