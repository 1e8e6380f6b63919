"""The link loss of a step: binary cross-entropy of the events against their negatives, in one
autograd node with torch's own arithmetic.

``binary_cross_entropy_with_logits`` twice (against ones, against zeros) costs about fifty
operators a step with its targets and backward; here the two halves go through the same formula
together, element for element the arithmetic of torch's kernel (forward:
``((1 - y) x + m) + log(exp(-m) + exp(-x - m))`` with ``m = max(-x, 0)``; backward:
``(sigmoid(x) - y) g / n``), so a run's losses are bit for bit those of the two calls.
"""

from __future__ import annotations

import torch


class _PairBCE(torch.autograd.Function):
    """mean(bce(pos, 1)) + mean(bce(neg, 0)) for ``pos``, ``neg`` of one length.

    Each half is computed on its own tensor: a vectorised kernel runs the last elements of a
    tensor through its scalar path, so halves laid end to end would round some elements
    differently from the two calls."""

    @staticmethod
    def forward(ctx, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(pos, neg)
        return _half(pos, True) + _half(neg, False)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        pos, neg = ctx.saved_tensors
        n = pos.shape[0]
        return pos.sigmoid().sub_(1).mul_(grad).div_(n), neg.sigmoid().mul_(grad).div_(n)


def _half(x: torch.Tensor, positive: bool) -> torch.Tensor:
    """mean(bce_with_logits(x, y)) for y all ones (``positive``) or all zeros, with torch's
    arithmetic: ``(1 - y) x + m`` is ``m`` exactly for ones (``0 x`` is a signed zero) and
    ``x + m`` for zeros."""
    neg_x = x.neg()
    m = neg_x.clamp_min(0)
    log_term = m.neg().exp_().add_(neg_x.sub_(m).exp_()).log_()
    # m + log_term for ones (IEEE addition commutes: the same bits as torch's (0 x + m) + log),
    # (x + m) + log_term for zeros
    return (log_term.add_(m) if positive else x.add(m).add_(log_term)).mean()


def link_loss(pos_logit: torch.Tensor, neg_logit: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of positives (target 1) and negatives (target 0), the mean over each
    added: ``bce_with_logits(pos, 1) + bce_with_logits(neg, 0)``, in one autograd node.

    Parameters
    ----------
    pos_logit, neg_logit : float tensor, shape (B,)

    Returns
    -------
    0-dim tensor
    """
    if pos_logit.shape != neg_logit.shape or pos_logit.dim() != 1:
        raise ValueError(f"link_loss takes two logit vectors of one length, got {tuple(pos_logit.shape)} "
                         f"and {tuple(neg_logit.shape)}")
    return _PairBCE.apply(pos_logit, neg_logit)
