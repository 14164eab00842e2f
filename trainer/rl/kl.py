"""Per-token KL between a student and a teacher distribution over the vocabulary, and the textual
feedback loss built on it.

Three divergences, per token, with p the student's distribution and q the teacher's:

    reverse  KL(p || q) = sum_v p (log p - log q)     on-policy distillation (the default)
    forward  KL(q || p) = sum_v q (log q - log p)
    jsd      0.5 KL(p || m) + 0.5 KL(q || m), m = (p + q) / 2

The teacher is a constant target: no gradient reaches it.

`naive_token_kl` is the reference: it takes full [T, V] logits. `chunked_token_kl` takes the final
hidden states and the head's weight and never holds more than `chunk_size` rows of logits at once,
in the forward or the backward (which recomputes each chunk's logits and applies the gradient of
the KL with respect to the logits in closed form). `feedback_kl_loss` runs a `Transformer` on the
student and teacher sequences of `trainer.rl.feedback` and averages the chunked KL over the target
tokens. It runs the chunked KL as the model's output head (`Transformer.forward(head=...)`), so it
holds under FSDP2 too: the output weight is gathered by FSDP2's own hooks for that forward and its
gradient is reduce-scattered like every other; `full_logits_kl_loss` is the naive path.

Shape legend: T tokens (positions), V vocabulary, D model dim, B sequences, N selected tokens,
c the tokens of one chunk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

if TYPE_CHECKING:
    from trainer.model import Transformer

__all__ = [
    "KL_KINDS",
    "KLKind",
    "chunked_token_kl",
    "feedback_kl_loss",
    "final_hidden",
    "full_logits_kl_loss",
    "naive_token_kl",
    "padded_batch",
    "predicting_rows",
]

KLKind = Literal["reverse", "forward", "jsd"]
KL_KINDS: tuple[KLKind, ...] = ("reverse", "forward", "jsd")


def _check_kind(kind: str) -> None:
    if kind not in KL_KINDS:
        raise ValueError(f"kind must be one of {', '.join(KL_KINDS)}, got {kind!r}")


def _kl(student_logp_TV: Tensor, teacher_logp_TV: Tensor, kind: str) -> Tensor:
    """Per-token divergence [T] from log-probabilities."""
    if kind == "reverse":
        return (student_logp_TV.exp() * (student_logp_TV - teacher_logp_TV)).sum(-1)
    if kind == "forward":
        return (teacher_logp_TV.exp() * (teacher_logp_TV - student_logp_TV)).sum(-1)
    mixture_logp_TV = torch.logaddexp(student_logp_TV, teacher_logp_TV) - math.log(2.0)
    return 0.5 * ((student_logp_TV.exp() * (student_logp_TV - mixture_logp_TV)).sum(-1)
                  + (teacher_logp_TV.exp() * (teacher_logp_TV - mixture_logp_TV)).sum(-1))


def naive_token_kl(student_logits_TV: Tensor, teacher_logits_TV: Tensor, kind: KLKind = "reverse") -> Tensor:
    """Per-token divergence [T] from full logits (the reference for `chunked_token_kl`).

    Computed in float32 (float64 stays float64); the teacher's logits are detached.
    """
    _check_kind(kind)
    dtype = torch.promote_types(student_logits_TV.dtype, torch.float32)
    student_logp_TV = F.log_softmax(student_logits_TV.to(dtype), dim=-1)
    teacher_logp_TV = F.log_softmax(teacher_logits_TV.detach().to(dtype), dim=-1)
    return _kl(student_logp_TV, teacher_logp_TV, kind)


# The chunked path below computes what `_kl` and autograd compute, with each chunk's [c, V] buffers
# reused in place: at most four of them live at once (three in the backward of reverse and forward).


def _chunk_logps(student_hidden_cD: Tensor, teacher_hidden_cD: Tensor, weight_VD: Tensor) -> tuple[Tensor, Tensor]:
    """Log-softmax of the chunk's student and teacher logits, computed in the logits' own buffers."""
    dtype = torch.promote_types(student_hidden_cD.dtype, torch.float32)
    logps = []
    for hidden_cD in (student_hidden_cD, teacher_hidden_cD):
        logits_cV = (hidden_cD @ weight_VD.T).to(dtype)
        logps.append(logits_cV.sub_(torch.logsumexp(logits_cV, dim=-1, keepdim=True)))
    return logps[0], logps[1]


def _rowdot(a_cV: Tensor, b_cV: Tensor) -> Tensor:
    """sum_v a * b per row [c], without a [c, V] product."""
    return (a_cV.unsqueeze(1) @ b_cV.unsqueeze(2)).view(-1)


def _chunk_kl(student_hidden_cD: Tensor, teacher_hidden_cD: Tensor, weight_VD: Tensor, kind: str) -> Tensor:
    """`_kl` of one chunk, from the hidden states."""
    student_logp_cV, teacher_logp_cV = _chunk_logps(student_hidden_cD, teacher_hidden_cD, weight_VD)
    if kind == "reverse":
        student_p_cV = student_logp_cV.exp()
        return _rowdot(student_p_cV, student_logp_cV.sub_(teacher_logp_cV))
    if kind == "forward":
        teacher_p_cV = teacher_logp_cV.exp()
        return _rowdot(teacher_p_cV, teacher_logp_cV.sub_(student_logp_cV))
    mixture_logp_cV = torch.logaddexp(student_logp_cV, teacher_logp_cV).sub_(math.log(2.0))
    p_cV = student_logp_cV.exp()
    kl_c = _rowdot(p_cV, student_logp_cV.sub_(mixture_logp_cV))
    torch.exp(teacher_logp_cV, out=p_cV)
    return kl_c.add_(_rowdot(p_cV, teacher_logp_cV.sub_(mixture_logp_cV))).mul_(0.5)


def _chunk_logit_grad(student_hidden_cD: Tensor, teacher_hidden_cD: Tensor, weight_VD: Tensor, kind: str) -> Tensor:
    """Gradient [c, V] of each token's divergence with respect to the student's logits.

    With p = softmax(z) and a divergence f(p), df/dz = p * (g - sum_v p g) where g = df/dp, up to
    a constant that cancels: reverse g = log p - log q, forward g = -q / p (so df/dz = p - q),
    jsd g = (log p - log m) / 2.
    """
    student_logp_cV, teacher_logp_cV = _chunk_logps(student_hidden_cD, teacher_hidden_cD, weight_VD)
    if kind == "forward":
        return student_logp_cV.exp_().sub_(teacher_logp_cV.exp_())
    if kind == "reverse":
        g_cV = teacher_logp_cV.sub_(student_logp_cV).neg_()
        p_cV = student_logp_cV.exp_()
        scale = 1.0
    else:
        mixture_logp_cV = torch.logaddexp(student_logp_cV, teacher_logp_cV).sub_(math.log(2.0))
        del teacher_logp_cV
        p_cV = student_logp_cV.exp()
        g_cV = student_logp_cV.sub_(mixture_logp_cV)
        del mixture_logp_cV
        scale = 0.5
    g_cV.sub_(_rowdot(p_cV, g_cV)[:, None])
    return p_cV.mul_(g_cV).mul_(scale)


class _ChunkedKL(torch.autograd.Function):
    """Forward: the per-token divergence, chunk by chunk. Backward: each chunk's logits again, the
    closed-form gradient with respect to them (`_chunk_logit_grad`), and from it the gradients of
    the student's hidden states and of the weight. Nothing of size [T, V] is saved."""

    @staticmethod
    def forward(ctx: Any, student_hidden_TD: Tensor, teacher_hidden_TD: Tensor, weight_VD: Tensor,
                kind: str, chunk_size: int) -> Tensor:
        T = student_hidden_TD.shape[0]
        dtype = torch.promote_types(student_hidden_TD.dtype, torch.float32)
        kl_T = torch.empty(T, dtype=dtype, device=student_hidden_TD.device)
        for start in range(0, T, chunk_size):
            stop = min(start + chunk_size, T)
            kl_T[start:stop] = _chunk_kl(student_hidden_TD[start:stop], teacher_hidden_TD[start:stop], weight_VD, kind)
        ctx.save_for_backward(student_hidden_TD, teacher_hidden_TD, weight_VD)
        ctx.kind, ctx.chunk_size = kind, chunk_size
        return kl_T

    @staticmethod
    def backward(ctx: Any, grad_kl_T: Tensor) -> tuple[Tensor | None, None, Tensor | None, None, None]:
        student_hidden_TD, teacher_hidden_TD, weight_VD = ctx.saved_tensors
        need_hidden, _, need_weight = ctx.needs_input_grad[:3]
        grad_hidden_TD = torch.zeros_like(student_hidden_TD) if need_hidden else None
        # Summed over chunks in float32 (or float64), then returned in the weight's dtype.
        grad_weight_VD = (torch.zeros(weight_VD.shape, dtype=grad_kl_T.dtype, device=weight_VD.device)
                          if need_weight else None)
        T = student_hidden_TD.shape[0]
        for start in range(0, T, ctx.chunk_size):
            stop = min(start + ctx.chunk_size, T)
            student_hidden_cD = student_hidden_TD[start:stop]
            grad_logits_cV = _chunk_logit_grad(student_hidden_cD, teacher_hidden_TD[start:stop], weight_VD, ctx.kind)
            grad_logits_cV.mul_(grad_kl_T[start:stop, None])
            if grad_hidden_TD is not None:
                grad_hidden_TD[start:stop] = (grad_logits_cV.to(weight_VD.dtype) @ weight_VD).to(grad_hidden_TD.dtype)
            if grad_weight_VD is not None:
                grad_weight_VD.addmm_(grad_logits_cV.T, student_hidden_cD.to(grad_weight_VD.dtype))
        if grad_weight_VD is not None:
            grad_weight_VD = grad_weight_VD.to(weight_VD.dtype)
        return grad_hidden_TD, None, grad_weight_VD, None, None


def chunked_token_kl(student_hidden_TD: Tensor, teacher_hidden_TD: Tensor, weight_VD: Tensor,
                     kind: KLKind = "reverse", chunk_size: int = 512) -> Tensor:
    """Per-token divergence [T] of softmax(student_hidden @ weight.T) from
    softmax(teacher_hidden @ weight.T), `chunk_size` tokens at a time.

    Equal to ``naive_token_kl(student_hidden @ weight.T, teacher_hidden @ weight.T, kind)`` in
    value and in the gradients with respect to `student_hidden_TD` and `weight_VD`: in float32 to
    atol 1e-5 and rtol 1e-5 (values and gradients, for logits of O(1): the two sum the same terms
    in another order, and the backward uses the closed-form gradient instead of autograd's chain
    through log_softmax; the rounding grows with V, to ~7e-6 on KLs of ~0.8 at V = 32768); in
    float64 to 1e-10. The tests check both. No gradient reaches `teacher_hidden_TD`, and the teacher's
    logits carry none to the weight.

    Memory: at most four [chunk_size, V] float32 buffers at a time, forward and backward, beside
    the inputs and a [V, D] gradient of the weight; the naive path holds about seven [T, V] tensors
    (tests/benchmarks/bench_feedback_kl.py measures both).
    Logits are computed in the inputs' dtype and the softmax in float32 (float64 stays float64).
    """
    _check_kind(kind)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if student_hidden_TD.shape != teacher_hidden_TD.shape:
        raise ValueError(f"student hidden {tuple(student_hidden_TD.shape)} and teacher hidden "
                         f"{tuple(teacher_hidden_TD.shape)} differ in shape")
    if student_hidden_TD.ndim != 2 or weight_VD.ndim != 2 or weight_VD.shape[1] != student_hidden_TD.shape[1]:
        raise ValueError(f"need hidden [T, D] and weight [V, D], got {tuple(student_hidden_TD.shape)} "
                         f"and {tuple(weight_VD.shape)}")
    kl_T: Tensor = _ChunkedKL.apply(student_hidden_TD, teacher_hidden_TD.detach(), weight_VD, kind, chunk_size)
    return kl_T


def final_hidden(model: Transformer, tokens_BT: Tensor) -> Tensor:
    """The normed hidden states [B, T, D] that `model.output` would turn into logits, without the
    [B, T, V] logits: the model's own forward with a head that returns them, so that FSDP2's hooks
    run as in any forward."""
    hidden_BTD: Tensor = model(tokens_BT, head=lambda normed_BTD, _weight_VD: normed_BTD)
    return hidden_BTD


def padded_batch(sequences: Sequence[Tensor]) -> Tensor:
    """int64 sequences as one zero-padded batch [B, T]. Padding goes after each sequence, where a
    causal model never looks from the target positions."""
    batch_BT = torch.zeros(len(sequences), max(len(s) for s in sequences), dtype=torch.long)
    for i, sequence in enumerate(sequences):
        batch_BT[i, :len(sequence)] = sequence
    return batch_BT


def predicting_rows(hidden_BTD: Tensor, spans: Sequence[tuple[int, int]]) -> Tensor:
    """The hidden state that predicts each target token (the one before it), for all sequences: [N, D]."""
    return torch.cat([hidden_BTD[i, start - 1:stop - 1] for i, (start, stop) in enumerate(spans)])


def feedback_kl_loss(model: Transformer, tokens_student: Sequence[Tensor], tokens_teacher: Sequence[Tensor],
                     span_student: Sequence[tuple[int, int]], span_teacher: Sequence[tuple[int, int]], *,
                     kind: KLKind = "reverse", chunk_size: int = 512) -> Tensor:
    """Mean over all target tokens of the divergence of the student (the original context, with
    gradients) from the teacher (the hinted context, same weights, no_grad).

    Sequence i is `tokens_student[i]` (int64 [T_i]) with its target at positions
    `span_student[i]` = [start, stop), and likewise for the teacher; the two targets must be the same
    tokens (`trainer.rl.feedback.FeedbackExample` holds such pairs). Each target token is predicted by
    the hidden state one position before it, so a span must start at 1 or later. The sequences of
    each side run as one padded batch.

    The teacher runs first, so `model.aux_loss()` afterwards is the student forward's.
    """
    n = len(tokens_student)
    if not n or not len(tokens_teacher) == len(span_student) == len(span_teacher) == n:
        raise ValueError(f"need the same non-zero number of student sequences, teacher sequences and spans, got "
                         f"{n}, {len(tokens_teacher)}, {len(span_student)}, {len(span_teacher)}")
    for i in range(n):
        (s0, s1), (t0, t1) = span_student[i], span_teacher[i]
        if not (1 <= s0 < s1 <= len(tokens_student[i]) and 1 <= t0 < t1 <= len(tokens_teacher[i])):
            raise ValueError(f"sequence {i}: spans {span_student[i]} and {span_teacher[i]} must be non-empty, start "
                             f"at 1 or later and end inside the sequences ({len(tokens_student[i])}, "
                             f"{len(tokens_teacher[i])} tokens)")
        if not torch.equal(tokens_student[i][s0:s1], tokens_teacher[i][t0:t1]):
            raise ValueError(f"sequence {i}: the student's and the teacher's target tokens differ")
    device = model.rope_cos.device
    with torch.no_grad():
        teacher_rows_ND = predicting_rows(final_hidden(model, padded_batch(tokens_teacher).to(device)), span_teacher)

    def head(student_hidden_BTD: Tensor, weight_VD: Tensor) -> Tensor:
        # Inside the model's forward: under FSDP2 the output weight is gathered here, and only here.
        return chunked_token_kl(predicting_rows(student_hidden_BTD, span_student), teacher_rows_ND, weight_VD,
                                kind=kind, chunk_size=chunk_size)

    kl_N: Tensor = model(padded_batch(tokens_student).to(device), head=head)
    return kl_N.mean()


def full_logits_kl_loss(model: Transformer, tokens_student: Sequence[Tensor], tokens_teacher: Sequence[Tensor],
                        span_student: Sequence[tuple[int, int]], span_teacher: Sequence[tuple[int, int]], *,
                        kind: KLKind = "reverse") -> Tensor:
    """`feedback_kl_loss` the naive way, from the model's full [B, T, V] logits: the reference the
    tests and the benchmark compare the chunked path with."""
    device = model.rope_cos.device
    with torch.no_grad():
        teacher_BTV = model(padded_batch(tokens_teacher).to(device)).float()
    student_BTV = model(padded_batch(tokens_student).to(device)).float()
    return naive_token_kl(predicting_rows(student_BTV, span_student), predicting_rows(teacher_BTV, span_teacher),
                          kind=kind).mean()
