"""SEP's saved stream state: what an append goes on from (``sep.npz`` and its later versions in
a shards folder, named by the manifest's ``sep_state``).

Besides the kernel's own state (:meth:`SepStream.state`: centrality, codes, hub rows, loads),
an append needs what the shards' metrics are made of, so that they are updated from the
appended events alone, never by a pass over the stored ones: the nodes present in the
partitioned events, the static hubs, each part's assigned events and the partitioned events
per bucket.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import InputError
from .sep import SepStream

STATE_FORMAT = 1
STATE_FILE = "sep.npz"


@dataclass
class SavedStream:
    """SEP's stream after the partitioned events of a shards version.

    Attributes
    ----------
    stream : SepStream
        Centrality (decayed to the last partitioned event), codes (nodes no event placed are
        pinned to the part they were given, :meth:`SepStream.pin`), hub rows, part loads.
    present : bool ndarray, shape (num_nodes,)
        Nodes of the partitioned events (the ``|V|`` of the replication factor and of top-k).
    hubs : int64 ndarray, shape (H,)
        The static hubs (top-k by centrality when chosen), ascending.
    assigned : int64 ndarray, shape (P,)
        Partitioned events each part trains in ``assigned`` mode (after the shared-shared spread).
    bucket_counts : int64 ndarray, shape (num_buckets,)
        Partitioned events per bucket, each segment counted in the buckets it is stored in.
    num_partitioned : int
    topk : float
    is_src : bool ndarray, shape (num_nodes,), optional
        Per-side numbering (JODIE's format): whether each row is a source.
    """

    stream: SepStream
    present: np.ndarray
    hubs: np.ndarray
    assigned: np.ndarray
    bucket_counts: np.ndarray
    num_partitioned: int
    topk: float
    is_src: Optional[np.ndarray] = None

    @property
    def num_nodes(self) -> int:
        return int(self.stream.code.size)

    def save(self, path) -> None:
        """Write ``path`` (an ``.npz``; the caller makes it atomic)."""
        arrays = dict(self.stream.state(), present=self.present, hubs=self.hubs, assigned=self.assigned,
                      bucket_counts=self.bucket_counts, num_partitioned=np.int64(self.num_partitioned),
                      topk=np.float64(self.topk), format=np.int64(STATE_FORMAT))
        if self.is_src is not None:
            arrays["is_src"] = self.is_src
        buf = io.BytesIO()  # one write of the finished file
        np.savez(buf, **arrays)
        Path(path).write_bytes(buf.getvalue())

    @classmethod
    def load(cls, path, total_after: int) -> "SavedStream":
        """Read ``path``; the stream's capacity floor is set for ``total_after`` events in all."""
        path = Path(path)
        try:
            with np.load(path) as z:
                if int(z["format"]) != STATE_FORMAT:
                    raise InputError(f"unknown SEP state format {int(z['format'])}", path)
                state = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise InputError("missing file (the shards keep no SEP stream state to append to)", path) from None
        except InputError:
            raise
        except Exception as exc:
            raise InputError(f"unreadable SEP state ({type(exc).__name__}: {exc})", path) from None
        return cls(stream=SepStream.from_state(state, total_after), present=state["present"].astype(bool),
                   hubs=state["hubs"].astype(np.int64), assigned=state["assigned"].astype(np.int64),
                   bucket_counts=state["bucket_counts"].astype(np.int64),
                   num_partitioned=int(state["num_partitioned"]), topk=float(state["topk"]),
                   is_src=state["is_src"].astype(bool) if "is_src" in state else None)


def saved_after_partition(stream: SepStream, node_parts: np.ndarray, present: np.ndarray, hubs: np.ndarray,
                          assigned, bucket_counts: np.ndarray, num_partitioned: int, topk: float,
                          is_src: Optional[np.ndarray] = None, pin: bool = True) -> SavedStream:
    """The state to save with freshly partitioned shards: ``pin`` the nodes no event placed to
    the part they were given, where their stored (val/test) events are."""
    if pin:
        stream.pin(node_parts)
    return SavedStream(stream=stream, present=np.asarray(present, dtype=bool), hubs=np.asarray(hubs, dtype=np.int64),
                       assigned=np.asarray(assigned, dtype=np.int64),
                       bucket_counts=np.asarray(bucket_counts, dtype=np.int64), num_partitioned=int(num_partitioned),
                       topk=float(topk), is_src=is_src)
