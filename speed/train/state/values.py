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
    searches; :meth:`prune` drops the events no longer pending.

    Parameters
    ----------
    dim : int
        Embedding width.
    """

    def __init__(self, dim: int):
        self.dim = int(dim)
        self.reset()

    def reset(self, device=None) -> None:
        device = device if device is not None else getattr(self, "values", torch.empty(0)).device
        self.eid = torch.empty(0, dtype=torch.long, device=device)
        self.src = torch.empty(0, dtype=torch.long, device=device)
        self.values = torch.empty(0, 2, self.dim, device=device)

    def to(self, device) -> None:
        self.eid, self.src, self.values = (x.to(device) for x in (self.eid, self.src, self.values))

    def __len__(self) -> int:
        return int(self.eid.numel())

    def add(self, eid: torch.Tensor, src: torch.Tensor, z_src: torch.Tensor, z_dst: torch.Tensor) -> None:
        """Keep the values of a batch of events (ids larger than any kept): ``z_src`` for the
        message of the source, ``z_dst`` for that of the destination."""
        dev = self.values.device
        self.eid = torch.cat([self.eid, eid.to(dev)])
        self.src = torch.cat([self.src, src.to(dev)])
        self.values = torch.cat([self.values, torch.stack([z_src, z_dst], dim=1).detach().to(dev)])

    def lookup(self, eid: torch.Tensor, node: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(h_self, h_other)`` of events ``eid`` seen from their endpoint ``node``; zeros for an
        event not kept (e.g. one whose embeddings were never computed)."""
        dev = self.values.device
        eid, node = eid.to(dev), node.to(dev)
        if eid.numel() == 0 or self.eid.numel() == 0:
            z = torch.zeros(eid.numel(), self.dim, device=dev)
            return z, z
        pos = torch.searchsorted(self.eid, eid).clamp(max=self.eid.numel() - 1)
        found = (self.eid[pos] == eid).unsqueeze(-1)
        pair = self.values[pos]
        is_src = (self.src[pos] == node).unsqueeze(-1)
        h_self = torch.where(is_src, pair[:, 0], pair[:, 1])
        h_other = torch.where(is_src, pair[:, 1], pair[:, 0])
        zero = torch.zeros_like(h_self)
        return torch.where(found, h_self, zero), torch.where(found, h_other, zero)

    def _kept(self, alive: np.ndarray) -> torch.Tensor:
        """Mask of the events in ``alive`` and of any newer than all of them."""
        alive = torch.from_numpy(np.asarray(alive, dtype=np.int64)).to(self.eid.device)
        newest = int(alive.max()) if alive.numel() else -1
        return torch.isin(self.eid, alive) | (self.eid > newest)

    def prune(self, alive: np.ndarray) -> None:
        """Keep the events in ``alive`` (a superset of the pending events' ids, e.g. every id in
        the store's arrays) and any newer than all of them."""
        if self.eid.numel() == 0:
            return
        keep = self._kept(alive)
        self.eid, self.src, self.values = self.eid[keep], self.src[keep], self.values[keep]

    def select(self, eid: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(eid, src, values)`` of the kept events among ``eid`` (for state exchange)."""
        keep = torch.isin(self.eid, eid.to(self.eid.device))
        return self.eid[keep], self.src[keep], self.values[keep]

    def merge(self, eid: torch.Tensor, src: torch.Tensor, values: torch.Tensor) -> None:
        """Add kept events from elsewhere (another rank, a checkpoint), by id order."""
        dev = self.values.device
        all_eid = torch.cat([self.eid, eid.to(dev)])
        order = torch.argsort(all_eid, stable=True)
        all_eid = all_eid[order]
        first = torch.ones_like(all_eid, dtype=torch.bool)
        first[1:] = all_eid[1:] != all_eid[:-1]
        self.eid = all_eid[first]
        self.src = torch.cat([self.src, src.to(dev)])[order][first]
        self.values = torch.cat([self.values, values.to(dev, self.values.dtype)])[order][first]

    def state_dict(self, alive: Optional[np.ndarray] = None) -> dict:
        """Copies of the kept events (with ``alive``: only those :meth:`prune` would keep)."""
        keep = self._kept(alive) if alive is not None and self.eid.numel() else slice(None)
        return {"eid": self.eid[keep].cpu().clone(), "src": self.src[keep].cpu().clone(),
                "values": self.values[keep].cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        dev = self.values.device
        self.eid = torch.as_tensor(state["eid"]).to(dev).clone()
        self.src = torch.as_tensor(state["src"]).to(dev).clone()
        self.values = torch.as_tensor(state["values"]).to(dev).clone()
