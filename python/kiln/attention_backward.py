"""The attention backward: `flash_attn_backward` (flash-attention's `_flash_attn_backward`
without dropout), the checks the autograd of `flash_attn_func` runs, each bad input
one TypeError or ValueError naming the argument, and `flash_attn_func`'s road through torch's
dispatcher (autograd, torch.compile, tensor subclasses)."""

from __future__ import annotations

import math
from typing import Optional

from . import _check as check


def require_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` is {type(value).__name__}; expected True or False")


def check_backward(dout, q, k, v, out, lse) -> None:
    """The backward's inputs: the forward's q, k, v (as `flash_attn_func` checks them), its
    output `out` and log-sum-exp `lse` (f32 [B, Hq, Sq]), and the output's gradient `dout`."""
    check.same_device({"dout": dout, "q": q, "k": k, "v": v, "out": out, "lse": lse})
    if lse is None:
        raise ValueError(
            "the backward needs the forward's `lse` (f32 [batch, heads, seqlen_q]): run "
            "flash_attn_func with return_lse=True and pass it"
        )
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)):
        check.require_dtype(name, t, ("bf16", "f16"), "kiln's attention backward")
        check.require_rank(name, t, 4, "[batch, seqlen, heads, head_dim]")
    b, sq, hq, d = q.shape
    for name, t, like, of in (("out", out, q, "q"), ("dout", dout, q, "q"), ("v", v, k, "k")):
        check.require_shape(name, t, tuple(like.shape), f"like {of}")
    for name, t in (("k", k), ("v", v), ("out", out), ("dout", dout)):
        if check.dtype_name(t) != check.dtype_name(q):
            raise TypeError(f"`{name}` is {check.dtype_name(t)} but `q` is {check.dtype_name(q)}; they must have one dtype")
    check.require_dtype("lse", lse, ("f32",), "the forward's log-sum-exp")
    check.require_shape("lse", lse, (b, hq, sq), "[batch, heads, seqlen_q], as flash_attn_func returns it")
    if d not in (64, 128, 256):
        raise ValueError(f"head_dim {d} is not one kiln's attention takes (64, 128 or 256)")
    hkv = k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or hkv == 0 or hq % hkv:
        raise ValueError(
            f"`k` has shape {tuple(k.shape)}; expected [{b}, seqlen_k, heads_k, {d}] with heads_k dividing {hq}"
        )


def flash_attn_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    window_size=(-1, -1),
):
    """dq, dk, dv of `flash_attn_func(q, k, v, softmax_scale, causal, window_size=window_size)`
    given its `out`, its `lse` (return_lse=True) and the gradient `dout` of out. dk and dv are
    summed over the query heads that share a key/value head (GQA). `deterministic=True` gives
    the same bits on every run (dq summed in a fixed order; somewhat slower)."""
    from .attention_varlen import window_pair

    check_backward(dout, q, k, v, out, lse)
    require_bool("causal", causal)
    require_bool("deterministic", deterministic)
    wl, wr = window_pair(window_size)
    scale = 1.0 / math.sqrt(q.shape[3]) if softmax_scale is None else float(softmax_scale)
    from . import _require_torch

    _require_torch()
    import torch

    return torch.ops.kiln.flash_attn_backward(dout, q, k, v, out, lse, scale, causal, deterministic, wl, wr)


def forward_through_torch(q, k, v, softmax_scale, causal, return_lse, out, window_size, deterministic):
    """`flash_attn_func` as the `kiln::flash_attn` custom op (autograd records it; torch.compile
    traces it) or, with `out`, `kiln::flash_attn_out` (forward only). The op's body is the
    extension's call, which checks the arguments."""
    import torch

    from .attention_varlen import window_pair

    require_bool("causal", causal)
    require_bool("deterministic", deterministic)
    wl, wr = window_pair(window_size)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    if out is None:
        o, lse = torch.ops.kiln.flash_attn(q, k, v, scale, causal, deterministic, wl, wr)
    else:
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            raise ValueError(
                "`out=` writes into a given tensor, which autograd cannot differentiate: leave `out` "
                "out to get gradients, or call under torch.no_grad()"
            )
        o, lse = out, q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        torch.ops.kiln.flash_attn_out(q, k, v, o, lse, scale, causal, wl, wr)
    return (o, lse) if return_lse else o
