"""One rank's world: its rank, the world size, its device and threads, its process groups, the
DDP wrapper and every collective of a parallel run.

Training (DDP, the step count, shared-node syncs, weight averaging), the evaluation's row
exchanges, the hand-over of trained state, the owners' writes of ``best.json`` and the parallel
update all go through a :class:`World`; nothing else calls :mod:`torch.distributed`.

Four groups:

``device``
    the default group: NCCL between GPU ranks (each on its own GPU), gloo on CPUs or when a host
    runs more ranks than it has GPUs (:func:`rank_backend`).  Its collectives take tensors on
    the rank's device: gradients, shared-node rows of a state held there, embeddings.
``host``
    gloo, for tensors in host memory (an evaluation's sharded rows, the hand-over, plans'
    neighbour answers) and for Python objects; the device group itself when that is gloo.
``wait``
    gloo with a day's timeout, for the waits on rank 0's decisions and on its writing of
    ``best.json`` (which can take longer than any step).
``plan``
    gloo, the host collectives of plans built ahead in a thread (a sharded sampler's answers,
    :meth:`World.planning`): on a group of their own they run beside the step's collectives
    without interleaving with them.

``strict=True`` (or ``SPEED_STRICT_COLLECTIVES=1`` in the environment, which spawned ranks
inherit) checks every call against what NCCL would refuse: a device-group collective given a
tensor that is not on the rank's device, a host-group collective given a tensor that is not in
host memory; object collectives only ever go to the host and wait groups; and any
:mod:`torch.distributed` collective called from outside this module raises.  (On a machine
without a GPU a rank's device *is* the host, so a host tensor handed to the device group cannot
be told from a device one there: that check bites on a GPU.)  A world of
one (:meth:`World.alone`) has no groups: every collective returns its input (the single-process
trainer's).
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from datetime import timedelta
from typing import Any, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

# how long the other ranks may wait for rank 0's decisions and its writing of best.json (a day)
WAIT_FOR_MAIN_S = 24 * 3600


class StrictError(RuntimeError):
    """A collective that NCCL would refuse (raised in strict mode only)."""


def ranks_use_cuda(config) -> bool:
    """Whether the ranks of a parallel run of ``config`` each take a GPU (decided here only)."""
    return torch.cuda.is_available() and config.device != "cpu"


def rank_backend(cuda: bool, local_rank: int, local_world: int, gpus: int):
    """``(backend, gpu)`` of a rank: NCCL on its own GPU when every rank of the host has one;
    when more ranks than GPUs share a host (two ranks on one GPU, to test PAC there) gloo,
    which moves CUDA tensors through the host, with the GPUs taken in turn (NCCL refuses two
    ranks on one device); gloo on a CPU (gpu None)."""
    if not cuda:
        return "gloo", None
    if gpus <= 0:
        raise RuntimeError("a CUDA rank found no GPU")
    if local_world > gpus:
        return "gloo", local_rank % gpus
    return "nccl", local_rank


# the collectives of torch.distributed that speed calls (through World alone)
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list",
                "all_to_all_single", "all_to_all", "gather", "gather_object", "scatter", "reduce", "barrier",
                "all_gather_into_tensor", "reduce_scatter_tensor")


_GUARDED: list = []  # non-empty once the functions are guarded (in this process)


def _guard_distributed() -> None:
    """Strict mode: make every collective of :mod:`torch.distributed` refuse a caller outside
    this module (torch's own internals, which call the functions of its modules directly, are
    not affected)."""
    import sys

    if _GUARDED:
        return
    here = __file__.rsplit(".", 1)[0]
    torch_dir = os.path.dirname(torch.__file__)

    def guard(name, fn):
        def guarded(*args, **kwargs):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(torch_dir):
                frame = frame.f_back
            where = frame.f_code.co_filename if frame is not None else "?"
            if where.rsplit(".", 1)[0] != here:
                raise StrictError(f"torch.distributed.{name} called from {where}:{frame.f_lineno if frame else 0}, "
                                  "not through speed.train.world.World")
            return fn(*args, **kwargs)
        return guarded

    for name in _COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, guard(name, getattr(dist, name)))
    _GUARDED.append(True)


#: the most bytes (the tensor times the ranks) that World.host_all_gather sends as an all-to-all
A2A_GATHER_BYTES = 4 << 20


class Gathering:
    """A host collective under way (:meth:`World.host_all_gather_start`,
    :meth:`World.host_exchange_start`): :meth:`wait` returns what it receives (every rank's
    tensor in rank order; the exchange's one tensor, in a list) once it has arrived."""

    def __init__(self, out: List[torch.Tensor], work=None, keep: Optional[torch.Tensor] = None):
        self._out, self._work = out, work
        self._keep = keep  # the buffer sent, alive until the collective is done with it

    def wait(self) -> List[torch.Tensor]:
        if self._work is not None:
            self._work.wait()
            self._work = self._keep = None
        return self._out


class World:
    """A rank's place in a parallel run and its collectives (see the module docstring).

    Parameters
    ----------
    rank, size : int
    device : torch.device
    backend : str
        The device group's backend ("nccl" or "gloo"; "none" for a world of one).
    host_group, wait_group : ProcessGroup, optional
        None: the default group (host) or the host group (wait).
    plan_group : ProcessGroup, optional
        The planning thread's host group (:meth:`planning`); None: none apart.
    strict : bool
        Check every call as NCCL would (see the module docstring).
    """

    def __init__(self, rank: int = 0, size: int = 1, device="cpu", backend: str = "none", host_group=None,
                 wait_group=None, strict: bool = False, plan_group=None):
        self.rank, self.size = int(rank), int(size)
        self.device = torch.device(device)
        self.backend = backend
        self.strict = bool(strict or os.environ.get("SPEED_STRICT_COLLECTIVES") == "1")
        self._host = host_group
        self._wait = wait_group if wait_group is not None else host_group
        self._plan = plan_group
        if self.strict:
            _guard_distributed()

    # ------------------------------------------------------------------ making one
    @classmethod
    def alone(cls, device="cpu") -> "World":
        """A world of one process: no groups, every collective returns its input."""
        return cls(0, 1, device)

    @classmethod
    def start(cls, rank: int, size: int, local_rank: int, config, init_method: Optional[str] = None,
              recorded_threads: Optional[int] = None):
        """Join the process group of a parallel run; returns ``(world, config, why)`` with the
        rank's device and thread count in the config (``recorded_threads``: a resumed run's,
        which it keeps) and why that count (:func:`speed._threads.choose_threads`).

        A CPU rank's default thread count is the machine's cores over the ranks *on this
        machine*, counted by host name once the group is up: torchrun's ``LOCAL_WORLD_SIZE``
        counts only the ranks of one torchrun agent, so two "nodes" on one host would each take
        every core (and, with ``--deterministic``, give other numbers than ``--nproc 2``, whose
        results depend on the thread count)."""
        from .._threads import apply_threads, choose_threads

        cuda = ranks_use_cuda(config)
        backend, gpu = rank_backend(cuda, local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", size)),
                                    torch.cuda.device_count() if cuda else 0)
        world = cls.join(rank, size, f"cuda:{gpu}" if cuda else "cpu", backend, init_method, config.timeout)
        if cuda:
            config = replace(config, device=str(world.device))
            threads, why = choose_threads(1, config.num_threads, recorded_threads, gpu=True)
        else:
            hosts = world.objects(socket.gethostname())
            on_host = sum(h == hosts[rank] for h in hosts)
            # not measured: the peers starting beside this rank would count as load
            threads, why = choose_threads(on_host, config.num_threads, recorded_threads, config.deterministic,
                                          measure=False)
            config = replace(config, device="cpu", num_threads=threads)
        if threads:
            apply_threads(threads)
        return world, config, why

    @classmethod
    def join(cls, rank: int, size: int, device="cpu", backend: str = "gloo", init_method: Optional[str] = None,
             timeout_s: float = 300.0) -> "World":
        """Start the process group (``backend`` for the device group) and the host and wait
        groups beside it; ``device`` is the rank's (its GPU set as the current one)."""
        device = torch.device(device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        timeout = timedelta(seconds=timeout_s)
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size, timeout=timeout)
        host = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None
        # the waits on rank 0 get a group of their own with a long timeout; a rank that dies is
        # still caught by the launcher (spawn, torchrun)
        wait = dist.new_group(backend="gloo", timeout=max(timeout, timedelta(seconds=WAIT_FOR_MAIN_S)))
        plan = dist.new_group(backend="gloo", timeout=timeout)
        return cls(rank, size, device, backend, host, wait, plan_group=plan)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def planning(self) -> "World":
        """This world as a planning thread sees it: the same ranks, their host and object
        collectives over the ``plan`` group, so that the plans an evaluation builds ahead (the
        sharded sampler answers each plan's queries with a collective) exchange beside the
        step's own collectives, never between them.  Itself where there is no such group (a
        world of one, or one made by hand): plans of divided steps are then built in the step
        (:attr:`plans_ahead`)."""
        if self._plan is None or self.size == 1:
            return self
        return World(self.rank, self.size, self.device, self.backend, host_group=self._plan, wait_group=self._plan,
                     strict=self.strict)

    @property
    def plans_ahead(self) -> bool:
        """Whether steps whose work the ranks divide may be planned ahead in a thread (see
        :meth:`planning`)."""
        return self.size == 1 or self._plan is not None

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.size}, device={self.device}, backend={self.backend})"

    # ------------------------------------------------------------------ checks
    def _device_tensor(self, *tensors) -> None:
        if self.strict:
            for t in tensors:
                if t.device != self.device and not (t.device.type == self.device.type == "cpu"):
                    raise StrictError(f"a {t.device} tensor handed to the device group of a rank on {self.device}")

    def _host_tensor(self, *tensors) -> None:
        if self.strict:
            for t in tensors:
                if t.device.type != "cpu":
                    raise StrictError(f"a {t.device} tensor handed to the host group")

    # ------------------------------------------------------------------ DDP
    def wrap(self, net: torch.nn.Module, ignore: Sequence[str] = (), find_unused: bool = False,
             bucket_mb: float = 0.2, bucket_view: bool = True):
        """``net`` in a DistributedDataParallel wrapper over the device group (its gradients
        averaged every step); ``ignore``: parameters each rank keeps to itself."""
        torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(net, list(ignore))
        if self.strict:
            for p in net.parameters():
                self._device_tensor(p)
        return torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            find_unused_parameters=find_unused, bucket_cap_mb=bucket_mb, gradient_as_bucket_view=bucket_view)

    # ------------------------------------------------------------------ device group
    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place over the device group (``op``: "sum" or "max")."""
        if self.size > 1:
            self._device_tensor(t)
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``t`` as rank ``src`` holds it, in place on every rank (over the device group)."""
        if self.size > 1:
            self._device_tensor(t)
            dist.broadcast(t, src=src)
        return t

    def all_mean_(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` averaged over the ranks, in place (over the device group): the sum, divided by
        the number of ranks, as DDP averages gradients."""
        if self.size > 1:
            self.all_reduce(t)
            t.div_(self.size)
        return t

    def drift(self, t: torch.Tensor) -> float:
        """How far any rank's ``t`` is from rank 0's: the largest absolute difference, the same
        on every rank (0.0 where every rank holds the same values, e.g. weights kept in step)."""
        if self.size == 1:
            return 0.0
        first = self.broadcast(t.detach().clone())
        gap = (t.detach() - first).abs().max().reshape(1).to(torch.float64)
        return float(self.all_reduce(gap, "max").item())

    def all_max(self, value: int) -> int:
        """The largest ``value`` of any rank (a device tensor over the device group)."""
        if self.size == 1:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.long, device=self.device)
        return int(self.all_reduce(t, "max").item())

    def all_gather(self, t: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's ``t`` (one shape on every rank), over the device group, in rank order."""
        if self.size == 1:
            return [t]
        self._device_tensor(t)
        out = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(out, t.contiguous())
        return out

    def all_gather_rows_device(self, x: torch.Tensor, counts: Sequence[int]) -> List[torch.Tensor]:
        """Every rank's rows ``x`` whose counts (``counts``, every rank's, known to all) differ:
        padded to the largest over the device group, returned unpadded in rank order."""
        if self.size == 1:
            return [x]
        width = max(max(counts), 1)
        pad = x.new_zeros((width,) + tuple(x.shape[1:]))
        pad[:x.shape[0]] = x
        got = self.all_gather(pad)
        return [g[:c] for g, c in zip(got, counts)]

    # ------------------------------------------------------------------ host group
    def host_all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.size > 1:
            self._host_tensor(t)
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=self._host)
        return t

    def host_broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        if self.size > 1:
            self._host_tensor(t)
            dist.broadcast(t, src=src, group=self._host)
        return t

    def host_all_gather(self, t: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's ``t`` (one shape everywhere), host memory, in rank order."""
        return self.host_all_gather_start(t).wait()

    def host_all_gather_start(self, t: torch.Tensor) -> "Gathering":
        """:meth:`host_all_gather` begun and not waited for: its :class:`Gathering`'s ``wait()``
        returns the tensors.  Between the two the rank computes while gloo's own threads move
        the rows, so a rank that posts its gather before a step meets nobody over it after the
        step: the peers posted theirs before the step's exchange.  At most one gathering per
        group is under way at a time here (each is waited for before the next one starts)."""
        if self.size == 1:
            return Gathering([t])
        self._host_tensor(t)
        if t.dtype == torch.bool or t.numel() == 0 or t.numel() * t.element_size() * self.size > A2A_GATHER_BYTES:
            out = [torch.empty_like(t) for _ in range(self.size)]
            send = t.contiguous()
            return Gathering(out, dist.all_gather(out, send, group=self._host, async_op=True), keep=send)
        # As an all-to-all of ``t`` sent to every rank: gloo's all_gather costs 2-3x its time
        # for the same rows (2 ranks on one host, 16-250 KB a rank: 0.15-0.73 ms against
        # 0.15-0.26 ms), and the sharded sampler gathers its answers once an evaluation step.
        # Only while the copies sent stay small: a large gather (the hand-over's pending events)
        # would hold one copy per rank beside the result.
        send = t.contiguous().reshape(1, -1).expand(self.size, -1).contiguous()
        recv = torch.empty_like(send)
        work = dist.all_to_all_single(recv, send, group=self._host, async_op=True)
        return Gathering([r.view(t.shape) for r in recv.unbind(0)], work, keep=send)

    def _padded(self, x: torch.Tensor):
        x = x.contiguous().cpu()
        sizes = [int(s) for s in self.host_all_gather(torch.tensor([x.shape[0]], dtype=torch.long))]
        pad = x.new_zeros((max(sizes),) + tuple(x.shape[1:]))
        pad[:x.shape[0]] = x
        return pad, sizes

    def host_all_gather_rows(self, x: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's rows ``x`` (their number differing per rank), on every rank, in rank order."""
        if self.size == 1:
            return [x.cpu()]
        pad, sizes = self._padded(x)
        return [o[:s] for o, s in zip(self.host_all_gather(pad), sizes)]

    def host_gather_rows(self, x: torch.Tensor) -> Optional[List[torch.Tensor]]:
        """Every rank's rows ``x`` on rank 0 (in rank order), None elsewhere."""
        if self.size == 1:
            return [x.cpu()]
        pad, sizes = self._padded(x)
        self._host_tensor(pad)
        out = [torch.empty_like(pad) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(pad, out, dst=0, group=self._host)
        return None if self.rank else [o[:s] for o, s in zip(out, sizes)]

    def host_exchange(self, send: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int]) -> torch.Tensor:
        """One ``all_to_all_single``: rows ``send_counts[r]`` of ``send`` (grouped by destination,
        in rank order) go to rank ``r``; returns what arrives, ``recv_counts[r]`` rows from rank
        ``r`` in rank order.  Both counts must be known to the caller (every rank can compute
        what every other sends when the ranks run the same plans)."""
        return self.host_exchange_start(send, send_counts, recv_counts).wait()[0]

    def host_exchange_start(self, send: torch.Tensor, send_counts: Sequence[int],
                            recv_counts: Sequence[int]) -> "Gathering":
        """:meth:`host_exchange` begun and not waited for: ``wait()`` returns ``[received]``.
        The rank computes meanwhile while gloo's threads move the rows (a divided evaluation
        step embeds the step before while its exchange is under way)."""
        if self.size == 1:
            return Gathering([send])
        send = send.contiguous()
        recv = send.new_empty((int(sum(recv_counts)),) + tuple(send.shape[1:]))
        self._host_tensor(send, recv)
        work = dist.all_to_all_single(recv, send, [int(c) for c in recv_counts], [int(c) for c in send_counts],
                                      group=self._host, async_op=True)
        return Gathering([recv], work, keep=send)

    def host_exchange_by_owner(self, x: torch.Tensor, dest: np.ndarray) -> List[torch.Tensor]:
        """Send row ``i`` of ``x`` to rank ``dest[i]`` (counts exchanged first: one small and one
        ``all_to_all_single``); returns what each rank sent this one, in rank order."""
        if self.size == 1:
            return [x]
        order = np.argsort(dest, kind="stable")
        send = x[torch.from_numpy(order)].contiguous()
        out_counts = torch.from_numpy(np.bincount(dest, minlength=self.size).astype(np.int64))
        in_counts = torch.empty_like(out_counts)
        self._host_tensor(out_counts, in_counts)
        dist.all_to_all_single(in_counts, out_counts, group=self._host)
        recv = self.host_exchange(send, out_counts.tolist(), in_counts.tolist())
        return list(torch.split(recv, in_counts.tolist()))

    # ------------------------------------------------------------------ objects and waits
    def objects(self, obj: Any, wait: bool = False) -> List[Any]:
        """Every rank's ``obj`` (pickled), in rank order, over the host (or wait) group."""
        if self.size == 1:
            return [obj]
        out = [None] * self.size
        dist.all_gather_object(out, obj, group=self._wait if wait else self._host)
        return out

    def broadcast_objects(self, msg: list, src: int = 0, wait: bool = False) -> list:
        """``msg`` (a list) as rank ``src`` holds it, on every rank."""
        if self.size > 1:
            dist.broadcast_object_list(msg, src=src, group=self._wait if wait else self._host)
        return msg

    def agree(self, flag: bool) -> bool:
        """Rank 0's decision, known to every rank (over the wait group: rank 0 may have
        evaluated meanwhile)."""
        return bool(self.agree_value(int(flag)))

    def agree_value(self, value: int) -> int:
        """Rank 0's integer, known to every rank."""
        if self.size == 1:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.long)
        self._host_tensor(t)
        dist.broadcast(t, src=0, group=self._wait)
        return int(t.item())

    def barrier(self, wait: bool = False) -> None:
        if self.size > 1:
            dist.barrier(group=self._wait if wait else self._host)

    def leave(self) -> None:
        """Tear the groups down (torchrun ranks; spawned ranks leave without it, see
        :mod:`.pac.launch`)."""
        if self.size > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
