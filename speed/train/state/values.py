"""The values a pending event's message carries, kept by event id (TIGE's dual memory).

TIGER builds a message from ``h(t'-)`` of the event's two endpoints -- their embeddings at
their latest earlier events -- as they are when the event is taken in, and stores it.
:class:`EventValues` keeps them for the events that may still be applied (the pending ones),
so a message carries exactly what was known when its event was taken in, whatever happened
later or at the same time.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch


class EventValues:
    """``(z_src, z_dst)`` of events by id, with the event's source to tell the sides apart.

    Ids arrive in increasing order (batches are chronological), so lookups are binary
    searches; :meth:`prune` drops the events no longer pending.  The kept events are the first
    ``len(self)`` rows of buffers that grow by doubling, so taking a batch in costs O(batch),
    amortised, however many events are kept.

    Parameters
    ----------
    dim : int
        Embedding width.
    """

    def __init__(self, dim: int):
        self.dim = int(dim)
        self.reset()

    # the kept events: views of the buffers' first n rows
    @property
    def eid(self) -> torch.Tensor:
        return self._eid[:self._n]

    @property
    def src(self) -> torch.Tensor:
        return self._src[:self._n]

    @property
    def values(self) -> torch.Tensor:
        return self._values[:self._n]

    @property
    def device(self) -> torch.device:
        return self._values.device

    def _set(self, eid: torch.Tensor, src: torch.Tensor, values: torch.Tensor, spare: int = 1024) -> None:
        """Keep exactly these events, with room for ``spare`` more."""
        n = int(eid.numel())
        dev = values.device
        self._eid = torch.empty(n + spare, dtype=torch.long, device=dev)
        self._src = torch.empty(n + spare, dtype=torch.long, device=dev)
        self._values = torch.empty(n + spare, 2, self.dim, dtype=values.dtype, device=dev)
        self._eid[:n], self._src[:n], self._values[:n] = eid, src, values
        self._n = n

    def reset(self, device=None) -> None:
        device = device if device is not None else getattr(self, "_values", torch.empty(0)).device
        self._set(torch.empty(0, dtype=torch.long, device=device), torch.empty(0, dtype=torch.long, device=device),
                  torch.empty(0, 2, self.dim, device=device))

    def to(self, device) -> None:
        self._eid, self._src, self._values = (x.to(device) for x in (self._eid, self._src, self._values))

    def __len__(self) -> int:
        return self._n

    def add(self, eid: torch.Tensor, src: torch.Tensor, z_src: torch.Tensor, z_dst: torch.Tensor) -> None:
        """Keep the values of a batch of events (ids larger than any kept): ``z_src`` for the
        message of the source, ``z_dst`` for that of the destination."""
        dev, m = self.device, int(eid.numel())
        need = self._n + m
        if need > self._eid.numel():  # double the buffers
            n = self._n
            self._set(self.eid, self.src, self.values, spare=max(m, n + 1024))
        self._eid[self._n:need] = eid.to(dev)
        self._src[self._n:need] = src.to(dev)
        self._values[self._n:need] = torch.stack([z_src, z_dst], dim=1).detach().to(dev, self._values.dtype)
        self._n = need

    def lookup(self, eid: torch.Tensor, node: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(h_self, h_other)`` of events ``eid`` seen from their endpoint ``node``; zeros for an
        event not kept (e.g. one whose embeddings were never computed)."""
        dev = self.device
        eid, node = eid.to(dev), node.to(dev)
        kept = self.eid
        if eid.numel() == 0 or kept.numel() == 0:
            z = torch.zeros(eid.numel(), self.dim, device=dev)
            return z, z
        pos = torch.searchsorted(kept, eid).clamp(max=kept.numel() - 1)
        found = (kept[pos] == eid).unsqueeze(-1)
        pair = self._values[pos]
        is_src = (self._src[pos] == node).unsqueeze(-1)
        h_self = torch.where(is_src, pair[:, 0], pair[:, 1])
        h_other = torch.where(is_src, pair[:, 1], pair[:, 0])
        zero = torch.zeros_like(h_self)
        return torch.where(found, h_self, zero), torch.where(found, h_other, zero)

    def _kept(self, alive: np.ndarray) -> torch.Tensor:
        """Mask of the events in ``alive`` and of any newer than all of them."""
        alive = torch.from_numpy(np.asarray(alive, dtype=np.int64)).to(self.device)
        newest = int(alive.max()) if alive.numel() else -1
        return torch.isin(self.eid, alive) | (self.eid > newest)

    def prune(self, alive: np.ndarray) -> None:
        """Keep the events in ``alive`` (a superset of the pending events' ids, e.g. every id in
        the store's arrays) and any newer than all of them."""
        if self._n == 0:
            return
        keep = self._kept(alive)
        self._set(self.eid[keep], self.src[keep], self.values[keep], spare=max(1024, int(keep.sum())))

    def select(self, eid: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(eid, src, values)`` of the kept events among ``eid`` (for state exchange)."""
        keep = torch.isin(self.eid, eid.to(self.device))
        return self.eid[keep], self.src[keep], self.values[keep]

    def merge(self, eid: torch.Tensor, src: torch.Tensor, values: torch.Tensor) -> None:
        """Add kept events from elsewhere (another rank, a checkpoint), by id order."""
        dev = self.device
        all_eid = torch.cat([self.eid, eid.to(dev)])
        order = torch.argsort(all_eid, stable=True)
        all_eid = all_eid[order]
        first = torch.ones_like(all_eid, dtype=torch.bool)
        first[1:] = all_eid[1:] != all_eid[:-1]
        self._set(all_eid[first], torch.cat([self.src, src.to(dev)])[order][first],
                  torch.cat([self.values, values.to(dev, self._values.dtype)])[order][first])

    def state_dict(self, alive: Optional[np.ndarray] = None) -> dict:
        """Copies of the kept events (with ``alive``: only those :meth:`prune` would keep)."""
        keep = self._kept(alive) if alive is not None and self._n else slice(None)
        return {"eid": self.eid[keep].cpu().clone(), "src": self.src[keep].cpu().clone(),
                "values": self.values[keep].cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        dev = self.device
        self._set(torch.as_tensor(state["eid"]).to(dev), torch.as_tensor(state["src"]).to(dev),
                  torch.as_tensor(state["values"]).to(dev, self._values.dtype))
