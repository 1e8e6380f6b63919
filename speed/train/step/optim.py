"""Every run's optimiser: Adam over the weights laid out in one flat buffer (:class:`FlatAdam`),
and a row-wise sparse Adam (:class:`RowAdam`) over a learned static table
(:mod:`speed.train.model.static`), stepped as one."""

from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import nn

from ..model.static import RowAdam


class FlatAdam(torch.optim.Optimizer):
    """Adam (torch's update, state and ``state_dict`` format) over parameters that are views of
    one flat buffer, stepped as one tensor.

    A model's weights are a few dozen small tensors.  torch's Adam updates them one by one, or
    with ``foreach`` kernels that the CPU still runs tensor by tensor: about ten operators per
    tensor and a step, and two ``.item()`` calls per tensor for the bias corrections (step
    counts kept as tensors).  Here the parameters and their gradients are views of one buffer
    each, so a step is seven operators over one tensor on the CPU, with the step count a Python
    integer (no ``.item()``), and torch's fused Adam kernel over that one tensor on a GPU (no
    host-device synchronisation).  Element by element the arithmetic is torch's Adam's.

    The gradients are views of the flat gradient (``zero_grad`` zeroes it in place and backward
    accumulates into it).  When a wrapper replaces them (DDP's bucket views), each step gathers
    them into the flat gradient first.

    The layout is made once, on the parameters as they are: build the optimiser after the
    model is on its device (moving a module afterwards gives its parameters new storage).

    Parameters
    ----------
    params : iterable of float32 parameters, on one device
    lr : float
    betas : (float, float)
    eps : float
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        if not lr > 0:
            raise ValueError(f"invalid learning rate: {lr}")
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ValueError("FlatAdam got no parameters that require gradients")
        device, dtype = params[0].device, params[0].dtype
        if any(p.device != device or p.dtype != dtype for p in params):
            raise ValueError("FlatAdam's parameters must share one device and dtype")
        # the hyperparameters torch's Adam keeps, so that either loads the other's state_dict
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=0.0, amsgrad=False,
                                      maximize=False, foreach=None, capturable=False, differentiable=False,
                                      fused=None))
        self._params: List[nn.Parameter] = params
        sizes = [p.numel() for p in params]
        self._bounds = [0]
        for n in sizes:
            self._bounds.append(self._bounds[-1] + n)
        with torch.no_grad():
            self.flat = torch.cat([p.detach().reshape(-1) for p in params])
            for p, view in zip(params, self._views(self.flat)):
                p.data = view
        self.flat_grad = torch.zeros_like(self.flat)
        self._grad_views = self._views(self.flat_grad)
        for p, g in zip(params, self._grad_views):
            p.grad = g
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.steps = 0
        for p, m, v in zip(params, self._views(self.exp_avg), self._views(self.exp_avg_sq)):
            self.state[p] = {"exp_avg": m, "exp_avg_sq": v}
        self._fused = None
        if device.type == "cuda":
            # torch's fused kernel over the one tensor: a launch or two, no host sync
            self._flat_param = nn.Parameter(self.flat, requires_grad=True)
            self._flat_param.grad = self.flat_grad
            self._fused = torch.optim.Adam([self._flat_param], lr=lr, betas=tuple(betas), eps=eps, fused=True)

    def _views(self, buf: torch.Tensor) -> List[torch.Tensor]:
        b = self._bounds
        return [buf[b[i]:b[i + 1]].view_as(p) for i, p in enumerate(self._params)]

    def _own_grads(self) -> bool:
        """Whether every gradient is still a view of the flat gradient (a Python check, no op)."""
        return all(p.grad is g for p, g in zip(self._params, self._grad_views))

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._own_grads():
            self.flat_grad.zero_()
        else:  # a wrapper holds them (DDP's buckets): its way
            super().zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        if not self._own_grads():
            grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in self._params]
            torch.cat([g.reshape(-1) for g in grads], out=self.flat_grad)
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        self.steps += 1
        if self._fused is not None:
            fg = self._fused.param_groups[0]
            fg["lr"], fg["betas"], fg["eps"] = lr, (beta1, beta2), eps
            self._fused.step()
            return None
        # torch's single-tensor Adam, with the step count a Python integer
        self.exp_avg.lerp_(self.flat_grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.flat_grad, self.flat_grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** self.steps
        bias_correction2 = 1 - beta2 ** self.steps
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-(lr / bias_correction1))
        return None

    # ------------------------------------------------------------------ a captured step
    def capturable(self, on: bool = True) -> None:
        """Let the fused step be recorded in a CUDA graph (its step count and bias corrections
        stay on the device; :mod:`speed.train.step.captured`)."""
        if self._fused is None:
            raise RuntimeError("only the fused (CUDA) step can be recorded")
        self._fused.param_groups[0]["capturable"] = bool(on)

    def replayed(self) -> None:
        """A recorded step ran (its device step count advanced): count it here too."""
        self.steps += 1

    # ------------------------------------------------------------------ state
    def _sync_moments(self) -> None:
        """The fused optimiser keeps its own moments and step: bring them into the flat ones."""
        if self._fused is not None:
            st = self._fused.state.get(self._flat_param)
            if st:
                self.exp_avg.copy_(st["exp_avg"])
                self.exp_avg_sq.copy_(st["exp_avg_sq"])

    def state_dict(self):
        """torch's Adam format: per parameter ``step`` (a float32 tensor), ``exp_avg`` and
        ``exp_avg_sq`` (copies), and the param group."""
        self._sync_moments()
        state = {}
        if self.steps:
            for i, (m, v) in enumerate(zip(self._views(self.exp_avg), self._views(self.exp_avg_sq))):
                state[i] = {"step": torch.tensor(float(self.steps)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
        groups = [{k: v for k, v in self.param_groups[0].items() if k != "params"}]
        groups[0]["params"] = list(range(len(self._params)))
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict) -> None:
        """Load a :meth:`state_dict` of this optimiser or of torch's Adam over the same parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self._params):
            raise ValueError("the optimiser state does not match the model's parameters")
        for k, v in groups[0].items():
            if k != "params":
                self.param_groups[0][k] = v
        saved = state_dict["state"]
        steps = 0
        with torch.no_grad():
            for i, (m, v) in enumerate(zip(self._views(self.exp_avg), self._views(self.exp_avg_sq))):
                st = saved.get(i, saved.get(str(i)))
                if st is None:
                    m.zero_()
                    v.zero_()
                    continue
                m.copy_(torch.as_tensor(st["exp_avg"]).reshape(m.shape))
                v.copy_(torch.as_tensor(st["exp_avg_sq"]).reshape(v.shape))
                steps = max(steps, int(float(st["step"])))
        self.steps = steps
        if self._fused is not None:
            self._fused.state.clear()
            if steps:
                dev = self.flat.device
                self._fused.state[self._flat_param] = {
                    "step": torch.tensor(float(steps), device=dev), "exp_avg": self.exp_avg.clone(),
                    "exp_avg_sq": self.exp_avg_sq.clone()}


class TwoOptimizers:
    """Dense Adam over the weights and sparse Adam over a learned static table, stepped as one
    (the engine and the checkpoints see one optimiser)."""

    def __init__(self, dense: torch.optim.Optimizer, sparse: torch.optim.Optimizer):
        self.dense, self.sparse = dense, sparse

    @property
    def param_groups(self):
        return self.dense.param_groups + self.sparse.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        self.sparse.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.dense.step()
        self.sparse.step()

    def state_dict(self) -> dict:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.dense.load_state_dict(state["dense"])
        self.sparse.load_state_dict(state["sparse"])


def make_optimizer(model: nn.Module, lr: float, static_lr: Optional[float] = None):
    """Adam over ``model``'s weights at ``lr`` (:class:`FlatAdam`); a learned static table gets
    its own sparse Adam at ``static_lr`` (default ``lr``).  Build it once the model is on its
    device."""
    static = getattr(model, "static", None)
    if static is None or not static.trainable:
        return FlatAdam([p for p in model.parameters() if p.requires_grad], lr=lr)
    local = set(model.local_parameters())
    dense = [p for n, p in model.named_parameters() if p.requires_grad and n not in local]
    return TwoOptimizers(FlatAdam(dense, lr=lr),
                         RowAdam([static.table], lr=lr if static_lr is None else static_lr))
