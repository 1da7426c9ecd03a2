"""kiln's kernels as torch custom ops (`kiln::gemm`, `kiln::flash_attn` and
`kiln::flash_attn_varlen` with their backwards, `kiln::grouped_gemm`, `kiln::swiglu`), with fake
implementations for torch.compile and clear errors where an op has no backward: the road a call
takes when torch must see it (`_dispatch.through_torch`)."""

from __future__ import annotations

from typing import Optional

import torch

from . import _check as check
from ._native import native, stream_of

_FLOAT16 = ("bf16", "f16")


def _no_backward(name: str):
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"kiln's {name} has no backward yet: run it under torch.no_grad() or use torch's op "
            f"for training"
        )

    return backward


def _setup_nothing(ctx, inputs, output):
    pass


# ---------------------------------------------------------------------------------------- GEMM
# (the extension's `gemm` checks, allocates when `out` is None, and launches)
@torch.library.custom_op("kiln::gemm", mutates_args=(), device_types="cuda")
def gemm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    c: Optional[torch.Tensor],
    alpha: float,
    beta: float,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return native().gemm(a, b, None, out_dtype, alpha, beta, c)


@gemm_op.register_fake
def _(a, b, c, alpha, beta, out_dtype):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


@torch.library.custom_op("kiln::gemm_out", mutates_args=("out",), device_types="cuda")
def gemm_out_op(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, c: Optional[torch.Tensor], alpha: float, beta: float
) -> None:
    native().gemm(a, b, out, None, alpha, beta, c)


@gemm_out_op.register_fake
def _(a, b, out, c, alpha, beta):
    return None


torch.library.register_autograd("kiln::gemm", _no_backward("gemm"), setup_context=_setup_nothing)


# ----------------------------------------------------------------------------------- attention
# (the extension's `flash_attn` checks, copies what TMA cannot address, allocates and launches)
@torch.library.custom_op("kiln::flash_attn", mutates_args=(), device_types="cuda")
def flash_attn_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float,
    causal: bool,
    deterministic: bool,
    window_left: int = -1,
    window_right: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    # (`deterministic` is the backward's: kept with the inputs so that autograd sees it)
    return tuple(native().flash_attn(q, k, v, softmax_scale, causal, True, None, (window_left, window_right)))


@flash_attn_op.register_fake
def _(q, k, v, softmax_scale, causal, deterministic, window_left=-1, window_right=-1):
    b, s, h, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("kiln::flash_attn_out", mutates_args=("out", "lse"), device_types="cuda")
def flash_attn_out_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    softmax_scale: float,
    causal: bool,
    window_left: int = -1,
    window_right: int = -1,
) -> None:
    native().flash_attn(q, k, v, softmax_scale, causal, False, out, (window_left, window_right), None, lse)


@flash_attn_out_op.register_fake
def _(q, k, v, out, lse, softmax_scale, causal, window_left=-1, window_right=-1):
    return None


def launch_attention_backward(
    dout, q, k, v, out, lse, dq, dk, dv, scale: float, causal: bool, deterministic: bool, window=(-1, -1)
) -> None:
    dev = q.device.index or 0
    native().attention_backward(
        dev,
        stream_of(dev),
        check.describe(q),
        check.describe(k),
        check.describe(v),
        check.describe(out),
        check.describe(lse),
        check.describe(dout),
        check.describe(dq),
        check.describe(dk),
        check.describe(dv),
        float(scale),
        bool(causal),
        bool(deterministic),
        (int(window[0]), int(window[1])),
    )


# The two memory orders kiln's backward reads, as permutations of a [B, S, H, D] view: BSHD
# memory, and BHSD memory (a transposed view). Each is its own inverse.
_BSHD, _BHSD = (0, 1, 2, 3), (0, 2, 1, 3)


def _order_of(t: torch.Tensor) -> tuple:
    """The order `t` [B, S, H, D] is packed in (BSHD when it is in neither)."""
    return _BHSD if not t.is_contiguous() and t.permute(_BHSD).is_contiguous() else _BSHD


def _in_order(t: torch.Tensor, order: tuple) -> torch.Tensor:
    """`t` packed in `order`: itself when it is, else a copy. The backward reads q, k, v, out and
    dout in one order; the forward read each where it lay, and autograd's gradients may come
    expanded, transposed or strided."""
    p = t.permute(order)
    return t if p.is_contiguous() else p.contiguous().permute(order)


def _empty_in_order(t: torch.Tensor, order: tuple) -> torch.Tensor:
    return torch.empty(t.permute(order).shape, dtype=t.dtype, device=t.device).permute(order)


@torch.library.custom_op("kiln::flash_attn_backward", mutates_args=(), device_types="cuda")
def flash_attn_backward_op(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    softmax_scale: float,
    causal: bool,
    deterministic: bool,
    window_left: int = -1,
    window_right: int = -1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    order = _order_of(q)
    q, k, v, out, dout = (_in_order(t, order) for t in (q, k, v, out, dout))
    dq, dk, dv = (_empty_in_order(t, order) for t in (q, k, v))
    launch_attention_backward(
        dout, q, k, v, out, lse, dq, dk, dv, softmax_scale, causal, deterministic, (window_left, window_right)
    )
    return dq, dk, dv


@flash_attn_backward_op.register_fake
def _(dout, q, k, v, out, lse, softmax_scale, causal, deterministic, window_left=-1, window_right=-1):
    order = _order_of(q)
    return tuple(_empty_in_order(t, order) for t in (q, k, v))


def _setup_attention(ctx, inputs, output):
    q, k, v, softmax_scale, causal, deterministic, window_left, window_right = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.softmax_scale, ctx.causal, ctx.deterministic = softmax_scale, causal, deterministic
    ctx.window = (window_left, window_right)


def _attention_backward(ctx, dout, dlse):
    # The log-sum-exp is an auxiliary output (flash-attention's too): no gradient flows from it.
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.kiln.flash_attn_backward(
        dout, q, k, v, out, lse, ctx.softmax_scale, ctx.causal, ctx.deterministic, *ctx.window
    )
    return dq, dk, dv, None, None, None, None, None


torch.library.register_autograd("kiln::flash_attn", _attention_backward, setup_context=_setup_attention)
torch.library.register_autograd(
    "kiln::flash_attn_backward", _no_backward("flash_attn_func's backward (double backward)"), setup_context=_setup_nothing
)


# ------------------------------------------------------------------------------ packed attention
@torch.library.custom_op("kiln::flash_attn_varlen", mutates_args=(), device_types="cuda")
def flash_attn_varlen_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    host_q: Optional[list[int]] = None,
    host_k: Optional[list[int]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(
        native().flash_attn_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            (window_left, window_right), True, host_q, host_k,
        )
    )


@flash_attn_varlen_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
      window_right, host_q=None, host_k=None):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("kiln::flash_attn_varlen_backward", mutates_args=(), device_types="cuda")
def flash_attn_varlen_backward_op(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    host_q: Optional[list[int]] = None,
    host_k: Optional[list[int]] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (autograd's dout may come expanded or strided; the packed backward reads packed rows)
    return tuple(
        native().flash_attn_varlen_backward(
            dout.contiguous(), q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            softmax_scale, causal, (window_left, window_right), False, host_q, host_k,
        )
    )


@flash_attn_varlen_backward_op.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, host_q=None, host_k=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), k.new_empty(k.shape)


def _setup_varlen(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal, window_left, window_right, host_q, host_k = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.args = (max_q, max_k, softmax_scale, causal, window_left, window_right, host_q, host_k)


def _varlen_backward(ctx, dout, dlse):
    # (no gradient flows from the log-sum-exp, as in flash_attn_func's backward)
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = torch.ops.kiln.flash_attn_varlen_backward(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.args)
    return (dq, dk, dv) + (None,) * 10


torch.library.register_autograd("kiln::flash_attn_varlen", _varlen_backward, setup_context=_setup_varlen)
torch.library.register_autograd(
    "kiln::flash_attn_varlen_backward",
    _no_backward("flash_attn_varlen_func's backward (double backward)"),
    setup_context=_setup_nothing,
)


# ------------------------------------------------------------------------------------------ MoE
# (the extension's `grouped_gemm` and `swiglu` check, allocate the output and launch)
@torch.library.custom_op("kiln::grouped_gemm", mutates_args=(), device_types="cuda")
def grouped_gemm_op(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return native().grouped_gemm(x, w, offsets)


@grouped_gemm_op.register_fake
def _(x, w, offsets):
    return x.new_empty((x.shape[0], w.shape[1]))


@torch.library.custom_op("kiln::swiglu", mutates_args=(), device_types="cuda")
def swiglu_op(
    x: torch.Tensor,
    w1: torch.Tensor,
    w3: Optional[torch.Tensor],
    offsets: torch.Tensor,
    routing_weights: Optional[torch.Tensor],
) -> torch.Tensor:
    return native().swiglu(x, w1, w3, offsets, routing_weights)


@swiglu_op.register_fake
def _(x, w1, w3, offsets, routing_weights):
    n = w1.shape[1] if w3 is not None else w1.shape[1] // 2
    return x.new_empty((x.shape[0], n))


torch.library.register_autograd("kiln::grouped_gemm", _no_backward("moe.grouped_gemm"), setup_context=_setup_nothing)
torch.library.register_autograd("kiln::swiglu", _no_backward("moe.swiglu"), setup_context=_setup_nothing)


# ------------------------------------------------------------------- RMSNorm and rotary embedding
# (forward only: the extension checks, allocates and launches; the residual and q, k in place)
@torch.library.custom_op("kiln::rms_norm", mutates_args=(), device_types="cuda")
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return native().rms_norm(x, weight, eps, None, None)


@rms_norm_op.register_fake
def _(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("kiln::add_rms_norm", mutates_args=("residual",), device_types="cuda")
def add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return native().rms_norm(x, weight, eps, residual, None)


@add_rms_norm_op.register_fake
def _(x, residual, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("kiln::rope_", mutates_args=("q", "k"), device_types="cuda")
def rope_op(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> None:
    native().rope(q, k, cos, sin, interleaved)


@rope_op.register_fake
def _(q, k, cos, sin, interleaved):
    return None


torch.library.register_autograd("kiln::rms_norm", _no_backward("rms_norm"), setup_context=_setup_nothing)
