"""``nn.Linear`` whose backward is one autograd node with autograd's own arithmetic.

Through ``F.linear`` a dense layer records three nodes (the weight's transpose, ``addmm`` and,
for the bias, a reduction the engine adds), and their backward runs about seventeen leaf
operators a step, most of them views and transposes: host work between kernel launches on a
GPU.  :class:`Linear` computes the forward with the same ``addmm`` and the backward with the very
products autograd's formulas for ``addmm`` pick (``mm_mat1_backward`` / ``mm_mat2_backward`` in
torch's ``FunctionsManual.cpp``, including their choice by the input's memory layout), so
outputs and gradients are bit for bit those of ``nn.Linear`` (tested), in about half the
operators.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _Addmm(torch.autograd.Function):
    """``bias + x @ weight.T`` for a 2-D ``x``, with ``addmm``'s backward written out."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = gw = gb = None
        if need_x:
            # mm_mat1_backward with mat2 = weight.t(): a column-major input gets its gradient
            # column-major, computed as (mat2 @ grad.T).T
            if x.stride(0) == 1 and x.stride(1) == x.shape[0]:
                gx = weight.t().mm(grad.t()).t()
            else:
                gx = grad.mm(weight)
        if need_w:
            # mm_mat2_backward: mat2 = weight.t() is column-major, so (grad.T @ mat1).T, whose
            # transpose (the weight's gradient) is grad.T @ x
            gw = grad.t().mm(x)
        if need_b:
            # the engine's sum_to of addmm's (B, out) gradient to the bias's shape
            gb = grad.sum(0)
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, bit for bit, in one autograd node when ``x`` has two
    dimensions and a bias, or more, contiguous (flattened to two as ``F.linear`` flattens them);
    anything else goes through ``F.linear`` itself.

    Parameters
    ----------
    x : float tensor, shape (..., in)
    weight : float tensor, shape (out, in)
    bias : float tensor, shape (out,), optional

    Returns
    -------
    float tensor, shape (..., out)
    """
    if bias is None or x.dim() < 2 or (x.dim() > 2 and not x.is_contiguous()):
        return F.linear(x, weight, bias)
    if x.dim() == 2:
        return _Addmm.apply(x, weight, bias)
    rows = 1
    for n in x.shape[:-1]:  # not reshape(-1, ...): that fails on an empty batch
        rows *= n
    out = _Addmm.apply(x.reshape(rows, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], out.shape[-1])


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, initialisation and state dict) computed by :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
