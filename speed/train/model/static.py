"""Static node memory (DistTGL §3.1): a time-independent vector per node beside the GRU memory.

The dynamic memory of a node summarises its recent events, in batches; what does not change
with time (what a node *is*) is held apart, in a table learned from every training event
whatever the batching.  Where it enters the model follows DistTGL (and TGL's node features):
a linear map of a node's static row is added to its dynamic memory before the embedding
module, for the queried nodes and their neighbours alike.  A memory-only embedding (JODIE's
time projection, DyRep's identity) has no neighbours to share it with; there the mapped row is
added after the embedding, as JODIE joins its static embeddings to the projected one (inside
the projection, ``1 + w dt`` scales the unbounded rows, and JODIE's training diverged).
Messages and the memory updater still see the dynamic memory only, so what is stored per node
is unchanged.

Two kinds (``--static-memory``):

``learned``
    An embedding table trained with the model.  Rows start at zero and the map has no bias,
    so an untrained row adds nothing: a node the training never met (a held-out, inductive
    node) is embedded exactly as without static memory.  Only the rows a step touches get a
    gradient, and a sparse Adam updates only those rows.  Under PAC the table is kept out of
    DDP (a dense ``num_nodes x d`` gradient all-reduce every step would cost more than the
    rest of the model); each rank trains the rows of its own events, and at the end of an
    epoch the ranks merge their changes (:func:`merge_static`): a row changed by one rank
    takes that rank's value, a row changed by several (a shared node) their mean change.
``pretrained``
    A table pre-trained before the main training on the training events only, with the same
    task (link prediction against random negatives) and static information only (a node's
    row, no time, no memory), then frozen: the model learns the map (:func:`pretrain_static`).
    Under PAC rank 0 pre-trains and broadcasts the table.

No leakage: evaluation runs without gradients, so validation and test events never train
the table; pre-training reads the training events alone.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import nn

from ..._util import progress_bar
from .modules import LinkPredictor
PRETRAIN_EPOCHS = 10  # DistTGL pre-trains 10 epochs on its four small logs
PRETRAIN_BATCH = 600
PRETRAIN_LR = 1e-3


class StaticMemory(nn.Module):
    """A static vector per node, mapped to the memory's width.

    Parameters
    ----------
    num_nodes : int
        Rows of the table: every node of the log (global ids), also on a PAC rank whose
        dynamic memory holds only its local nodes (see :meth:`map_rows`).
    dim : int
        Width of a static row.
    out_dim : int
        Width of the dynamic memory it is added to.
    trainable : bool
        False for a pre-trained (frozen) table.

    Attributes
    ----------
    table : float32 parameter, shape (num_nodes, dim)
    proj : nn.Linear (dim -> out_dim, no bias)
    """

    def __init__(self, num_nodes: int, dim: int, out_dim: int, trainable: bool = True):
        super().__init__()
        self.table = nn.Parameter(torch.zeros(int(num_nodes), int(dim)), requires_grad=trainable)
        self.proj = nn.Linear(int(dim), int(out_dim), bias=False)
        self._rows: Optional[torch.Tensor] = None  # local id -> table row (a PAC rank), see map_rows

    @property
    def num_nodes(self) -> int:
        return int(self.table.shape[0])

    @property
    def trainable(self) -> bool:
        return bool(self.table.requires_grad)

    def map_rows(self, global_ids: Optional[np.ndarray]) -> None:
        """Read the table by ``global_ids[local id]`` (a PAC rank's local nodes), or by the
        ids themselves (``None``: the full graph)."""
        self._rows = None if global_ids is None else torch.as_tensor(np.asarray(global_ids, dtype=np.int64))

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:
        """nodes: int64 (n,) model ids -> float32 (n, out_dim).

        The table is read with a sparse gradient: a step touches only its batch's rows."""
        if self._rows is not None:
            nodes = self._rows.to(nodes.device).index_select(0, nodes)
        rows = nn.functional.embedding(nodes, self.table, sparse=self.trainable)
        return self.proj(rows)

    def grow(self, num_nodes: int) -> None:
        """Zero rows for nodes up to ``num_nodes`` (a trained model meeting new nodes)."""
        extra = int(num_nodes) - self.num_nodes
        if extra <= 0:
            return
        with torch.no_grad():
            grown = torch.cat([self.table.data, self.table.data.new_zeros(extra, self.table.shape[1])])
        self.table = nn.Parameter(grown, requires_grad=self.trainable)

    def load_table(self, table: torch.Tensor) -> None:
        """Overwrite the table (a pre-trained one, or the merged one of a PAC epoch)."""
        with torch.no_grad():
            self.table.copy_(table.to(self.table.device, self.table.dtype))

    def state_bytes(self) -> int:
        """Bytes of the table, with the two Adam moments of a learned one."""
        n = self.table.numel() * self.table.element_size()
        return int(n * (3 if self.trainable else 1))


@torch.no_grad()
def merge_static(static: StaticMemory, start: torch.Tensor, world, optimizer=None) -> float:
    """End of a PAC epoch: merge the ranks' changes to a learned table (collective).

    Every rank began the epoch with ``start``.  A row changed by one rank takes that rank's
    value; a row changed by several ranks (a shared node's) moves by the mean of their
    changes; other rows stay.  With ``optimizer`` (the table's :class:`RowAdam`) the rows' Adam
    moments are merged the same way, so a rank that trains a row next epoch continues the
    moments of the rank that trained it last (Wikipedia, TGN, P=4, seeds 0-2: test AP 0.9437
    and, re-run, 0.9389 against 0.9388 with each rank's own moments: no gain beyond the seeds'
    spread, but a row's moments then follow its row).  Two all-reduces of the table's size
    per epoch, two more for the moments.

    Parameters
    ----------
    static : StaticMemory
    start : float32 tensor, shape (num_nodes, dim)
        The table at the start of the epoch (the same on every rank).
    world : World
        The ranks (:class:`speed.train.world.World`; host-memory all-reduces).
    optimizer : RowAdam (or torch.optim.SparseAdam), optional

    Returns
    -------
    float
        Seconds spent.
    """
    import time

    t0 = time.perf_counter()
    delta = (static.table.detach() - start.to(static.table.device)).cpu()
    changed = (delta != 0).any(dim=1).to(torch.float32)
    changed_local = changed.clone()
    world.host_all_reduce(delta)
    world.host_all_reduce(changed)
    count = changed.clamp(min=1.0).unsqueeze(1)
    merged = start.cpu() + delta / count
    static.load_table(merged)
    state = None if optimizer is None else optimizer.state.get(static.table)
    if state and world.size > 1:  # the rows' Adam moments: the mean over the ranks that moved them
        mine = changed_local.unsqueeze(1)
        for key in ("exp_avg", "exp_avg_sq"):
            m = state[key].detach().cpu() * mine
            world.host_all_reduce(m)
            keep = (changed > 0).unsqueeze(1)
            state[key].copy_(torch.where(keep, m / count, state[key].cpu()).to(state[key].device))
    return time.perf_counter() - t0


def pretrain_static(src: np.ndarray, dst: np.ndarray, num_nodes: int, dim: int, pool: np.ndarray, seed: int,
                    epochs: int = PRETRAIN_EPOCHS, batch_size: int = PRETRAIN_BATCH, lr: float = PRETRAIN_LR,
                    progress: Optional[bool] = None) -> torch.Tensor:
    """Pre-train a static table on the training events: link prediction from static rows alone.

    A score ``MLP([x_src || x_dst])`` of the rows is trained against one random negative
    destination per event (from ``pool``), in shuffled mini-batches (no time order: the
    rows hold no time).  Rows of nodes absent from the events stay zero.

    Parameters
    ----------
    src, dst : int64 ndarray, shape (E,)
        The training events only (nothing of the validation or test period).
    num_nodes, dim : int
    pool : int64 ndarray
        Candidate negative destinations (the training pool).
    seed : int

    Returns
    -------
    float32 tensor, shape (num_nodes, dim)
    """
    src = torch.as_tensor(np.asarray(src, dtype=np.int64))
    dst = torch.as_tensor(np.asarray(dst, dtype=np.int64))
    if src.numel() == 0:
        return torch.zeros(int(num_nodes), int(dim))
    gen = torch.Generator().manual_seed(int(seed))
    table = nn.Embedding(int(num_nodes), int(dim), sparse=True)
    with torch.no_grad():
        table.weight.copy_(torch.randn(int(num_nodes), int(dim), generator=gen) * 0.1)
    with torch.random.fork_rng(devices=[]):  # seeded by ``seed`` alone; the caller's RNG does not move
        torch.manual_seed(int(seed))
        decoder = LinkPredictor(int(dim))
    opt_rows = RowAdam(list(table.parameters()), lr=lr)
    opt_dec = torch.optim.Adam(decoder.parameters(), lr=lr)
    pool_t = torch.as_tensor(np.asarray(pool, dtype=np.int64))
    loss_fn = nn.functional.binary_cross_entropy_with_logits
    n = src.numel()
    with progress_bar(epochs * n, "static pre-training", progress=progress) as bar:
        for _ in range(int(epochs)):
            order = torch.randperm(n, generator=gen)
            for i in range(0, n, batch_size):
                b = order[i:i + batch_size]
                neg = pool_t[torch.randint(pool_t.numel(), (b.numel(),), generator=gen)]
                xs, xd, xn = table(src[b]), table(dst[b]), table(neg)
                pos, negl = decoder(xs, xd), decoder(xs, xn)
                loss = loss_fn(pos, torch.ones_like(pos)) + loss_fn(negl, torch.zeros_like(negl))
                opt_rows.zero_grad()
                opt_dec.zero_grad()
                loss.backward()
                opt_rows.step()
                opt_dec.step()
                bar.update(b.numel())
    seen = torch.zeros(int(num_nodes), dtype=torch.bool)
    seen[src] = True
    seen[dst] = True
    seen[pool_t] = True
    out = table.weight.detach().clone()
    out[~seen] = 0.0  # a node no training event names has no static information
    return out


def prepare_static(model: nn.Module, src: np.ndarray, dst: np.ndarray, pool: np.ndarray, seed: int,
                   progress: Optional[bool] = None, world=None) -> None:
    """Fill an empty (all-zero) pre-trained static table before training (nothing for ``none``,
    ``learned``, or a table already filled, e.g. by the caller).

    Rank 0 pre-trains on the training events ``src, dst`` (:func:`pretrain_static`) and, under
    PAC (``world``, a :class:`speed.train.world.World`), broadcasts the table, so every rank
    starts from the same one.
    """
    static = getattr(model, "static", None)
    if static is None or static.trainable or bool(static.table.detach().abs().sum() > 0):
        return
    if world is None or world.is_main:
        table = pretrain_static(src, dst, static.num_nodes, static.table.shape[1], pool, seed, progress=progress)
    else:
        table = torch.zeros(static.num_nodes, static.table.shape[1])
    if world is not None:
        world.host_broadcast(table, src=0)
    static.load_table(table)


class RowAdam(torch.optim.Optimizer):
    """torch's ``SparseAdam`` (the same update, the same state), computed with dense row ops.

    ``SparseAdam`` builds sparse tensors three times a step (``sparse_mask`` of both moments,
    the sparse update); here the gradient's rows are gathered once and the moments and the
    table are written back by index: 2.1 ms against 3.0 ms a step for 2,500 rows of 100 on one
    thread (``benchmarks/static_cost.py --optimizer``, retired: ``git show f837953:benchmarks/static_cost.py``), on a step of about 28 ms (TGN,
    Wikipedia).  As in ``SparseAdam``, ``eps`` is added to the square root of the uncorrected
    second moment and the bias corrections go into the step size; the state (``step``,
    ``exp_avg``, ``exp_avg_sq``) is the same, so checkpoints of either load into the other and
    :func:`merge_static` merges its moments.

    Parameters
    ----------
    params : iterable of parameters with sparse gradients
    lr : float
    betas : (float, float)
    eps : float
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        if not lr > 0:
            raise ValueError(f"invalid learning rate: {lr}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not p.grad.is_sparse:
                    raise RuntimeError("RowAdam takes sparse gradients (an embedding read with sparse=True)")
                grad = p.grad.coalesce()  # the update is not linear: one row per index
                rows, g = grad._indices()[0], grad._values()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1  # an empty gradient counts as a step, as in SparseAdam
                if g.numel() == 0:
                    continue
                m = state["exp_avg"].index_select(0, rows)
                v = state["exp_avg_sq"].index_select(0, rows)
                m.add_(g.sub(m).mul_(1 - beta1))  # old + (1 - b) (new - old), as SparseAdam
                v.add_(g.pow(2).sub_(v).mul_(1 - beta2))
                state["exp_avg"].index_copy_(0, rows, m)
                state["exp_avg_sq"].index_copy_(0, rows, v)
                step = state["step"]
                step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                p.index_add_(0, rows, m.div_(v.sqrt_().add_(group["eps"])).mul_(-step_size))
        return None
