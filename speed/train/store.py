"""Pending messages: for each node, its events in the most recent batch it took part in."""

from __future__ import annotations

import torch


class MessageStore:
    """Events not yet applied to each node's memory, kept until the node's next batch.

    Every batch replaces the pending events of the nodes it touches (as PyG's ``TGNMemory``
    does).  Entries live in flat buffers, each node's contiguous, with ``start``/``count``
    per node; superseded entries are dropped by an occasional compaction.

    Parameters
    ----------
    num_nodes : int
    device : torch.device
    """

    def __init__(self, num_nodes: int, device=None):
        self.num_nodes = int(num_nodes)
        self.device = device
        self.reset()

    def reset(self) -> None:
        dev = self.device
        self.other = torch.empty(0, dtype=torch.long, device=dev)
        self.t = torch.empty(0, dtype=torch.float64, device=dev)
        self.eid = torch.empty(0, dtype=torch.long, device=dev)
        self.start = torch.zeros(self.num_nodes, dtype=torch.long, device=dev)
        self.count = torch.zeros(self.num_nodes, dtype=torch.long, device=dev)
        self.alive = 0

    def to(self, device) -> "MessageStore":
        self.device = device
        for name in ("other", "t", "eid", "start", "count"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def grow(self, num_nodes: int) -> None:
        """Room for ``num_nodes`` nodes; the new ones have no pending events."""
        extra = int(num_nodes) - self.num_nodes
        if extra > 0:
            self.start = torch.cat([self.start, self.start.new_zeros(extra)])
            self.count = torch.cat([self.count, self.count.new_zeros(extra)])
            self.num_nodes = int(num_nodes)

    def replace(self, node: torch.Tensor, other: torch.Tensor, t: torch.Tensor, eid: torch.Tensor) -> None:
        """The pending events of every node in ``node`` become exactly these (chronological)."""
        dev = self.count.device  # the store may live in host memory while the batch is on a GPU
        node, other, t, eid = node.to(dev), other.to(dev), t.to(dev), eid.to(dev)
        order = torch.sort(node, stable=True).indices  # groups by node, keeps time order inside
        node, other, t, eid = node[order], other[order], t[order], eid[order]
        uniq, counts = torch.unique_consecutive(node, return_counts=True)
        base = self.other.numel()
        self.alive += int(counts.sum()) - int(self.count[uniq].sum())
        self.start[uniq] = base + torch.cumsum(counts, 0) - counts
        self.count[uniq] = counts
        self.other = torch.cat([self.other, other])
        self.t = torch.cat([self.t, t.to(torch.float64)])
        self.eid = torch.cat([self.eid, eid])
        if self.other.numel() > max(4 * self.alive, 1 << 15):
            self._compact()

    def clear(self, n_id: torch.Tensor) -> None:
        """Forget the pending events of ``n_id`` (distinct ids), e.g. once applied."""
        n_id = n_id.to(self.count.device)
        self.alive -= int(self.count[n_id].sum())
        self.count[n_id] = 0

    def gather(self, n_id: torch.Tensor):
        """Pending events of ``n_id``.

        Returns
        -------
        row : int64 tensor, shape (M,)
            Position in ``n_id`` of each event's node (ascending).
        other, t, eid : tensors, shape (M,)
            On the device of ``n_id``.
        """
        out = n_id.device
        if out != self.count.device:
            return tuple(x.to(out) for x in self._gather(n_id.to(self.count.device)))
        return self._gather(n_id)

    def _gather(self, n_id: torch.Tensor):
        count = self.count[n_id]
        total = int(count.sum())
        if total == 0:
            empty = torch.empty(0, dtype=torch.long, device=n_id.device)
            return empty, empty, torch.empty(0, dtype=torch.float64, device=n_id.device), empty
        row = torch.repeat_interleave(torch.arange(n_id.numel(), device=n_id.device), count)
        first = torch.cumsum(count, 0) - count
        idx = torch.repeat_interleave(self.start[n_id] - first, count) + torch.arange(total, device=n_id.device)
        return row, self.other[idx], self.t[idx], self.eid[idx]

    def _compact(self) -> None:
        nodes = torch.nonzero(self.count > 0).squeeze(1)
        row, other, t, eid = self._gather(nodes)
        counts = self.count[nodes]
        self.start[nodes] = torch.cumsum(counts, 0) - counts
        self.other, self.t, self.eid = other, t, eid

    def state_dict(self) -> dict:
        return {k: getattr(self, k).clone() for k in ("other", "t", "eid", "start", "count")} | {"alive": self.alive}

    def load_state_dict(self, state: dict) -> None:
        for k in ("other", "t", "eid", "start", "count"):
            setattr(self, k, state[k].clone().to(self.device))
        self.alive = state["alive"]
        self.num_nodes = int(self.count.numel())
