"""The attention backward: `flash_attn_backward` (flash-attention's `_flash_attn_backward`
without dropout or windows) and the checks the autograd of `flash_attn_func` runs, each bad
input one TypeError or ValueError naming the argument."""

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
):
    """dq, dk, dv of `flash_attn_func(q, k, v, softmax_scale, causal)` given its `out`, its
    `lse` (return_lse=True) and the gradient `dout` of out. dk and dv are summed over the query
    heads that share a key/value head (GQA). `deterministic=True` gives the same bits on every
    run (dq summed in a fixed order; somewhat slower)."""
    check_backward(dout, q, k, v, out, lse)
    require_bool("causal", causal)
    require_bool("deterministic", deterministic)
    scale = 1.0 / math.sqrt(q.shape[3]) if softmax_scale is None else float(softmax_scale)
    from . import _require_torch

    _require_torch()
    import torch

    return torch.ops.kiln.flash_attn_backward(dout, q, k, v, out, lse, scale, causal, deterministic)
