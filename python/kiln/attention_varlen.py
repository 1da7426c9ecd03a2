"""flash-attention's `flash_attn_varlen_func` on kiln's packed attention (differentiable: its
backward is `flash_attn_varlen_backward`), and the `window_size` check that it shares with
`flash_attn_func`."""

from __future__ import annotations

import math
from typing import Optional

from ._dispatch import through_torch
from ._native import native


def window_pair(window_size) -> tuple[int, int]:
    """flash-attention's `window_size` (left, right; -1 for no bound) as two ints, or a ValueError."""
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(
            f"`window_size` is {window_size!r}; give (left, right), each -1 (no bound) or a key count"
        ) from None
    for side, w in (("left", left), ("right", right)):
        if w < -1:
            raise ValueError(f"`window_size` {side} is {w}; use -1 for no bound or a key count >= 0")
    return left, right


def _no_deterministic(deterministic) -> None:
    from .attention_backward import require_bool

    require_bool("deterministic", deterministic)
    if deterministic:
        raise ValueError(
            "`deterministic=True`: kiln's packed backward has no deterministic mode yet (dq's additions "
            "come in any order); leave it False, or run each sequence through flash_attn_func with "
            "deterministic=True"
        )


def _host_offsets(cu) -> list[int]:
    """The host copy of a cumulative-offsets tensor (one copy from the GPU: a synchronisation)."""
    return [int(x) for x in cu.tolist()]


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size=(-1, -1),
    return_lse: bool = False,
    check_offsets: bool = False,
    deterministic: bool = False,
):
    """Attention over a packed batch, flash-attention's `flash_attn_varlen_func`: q [total_q, Hq,
    D], k and v [total_k, Hkv, D] (bf16 or f16, D in {64, 128, 256}, Hq a multiple of Hkv);
    sequence s owns rows cu_seqlens_q[s]..cu_seqlens_q[s + 1] of q and cu_seqlens_k[s]..
    cu_seqlens_k[s + 1] of k and v (int32 [batch + 1] on the GPU); `max_seqlen_q` and
    `max_seqlen_k` are the longest sequences (at least: the grid covers `max_seqlen_q` rows of
    each); causal aligned bottom-right per sequence; `window_size` (left, right), -1 for no
    bound. The offsets are never read on the host: the GPU checks them (a sequence whose offsets
    are not cumulative within the packed rows, or longer than `max_seqlen_q`, comes out NaN and
    the next kiln call outside CUDA-graph capture, or `kiln.check_errors()`, raises a
    ValueError), so a call is capturable and never synchronises. `check_offsets=True` reads them
    back first (a synchronisation; not under capture) to refuse bad ones before the launch.
    Returns out like q (and the log-sum-exp [Hq, total_q] in f32 with `return_lse`).
    Differentiable in q, k and v at head dims 64 and 128 (kiln's packed backward, causal and
    the window included); `deterministic=True` is refused for now (the packed backward adds dq
    in any order)."""
    _no_deterministic(deterministic)
    host_q = host_k = None
    if check_offsets:
        host_q, host_k = _host_offsets(cu_seqlens_q), _host_offsets(cu_seqlens_k)
    if through_torch(q, k, v, cu_seqlens_q, cu_seqlens_k):
        import torch

        wl, wr = window_pair(window_size)
        scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
        o, lse = torch.ops.kiln.flash_attn_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), scale, bool(causal), wl, wr,
            host_q, host_k,
        )
        return (o, lse) if return_lse else o
    return native().flash_attn_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size,
        return_lse, host_q, host_k,
    )


def flash_attn_varlen_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size=(-1, -1),
    deterministic: bool = False,
    check_offsets: bool = False,
):
    """dq, dk, dv of `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    max_seqlen_k, softmax_scale, causal, window_size)` given its `out`, its `lse`
    (return_lse=True: f32 [Hq, total_q]) and the gradient `dout` of out (q's shape); every
    tensor packed rows. dk and dv are summed over the query heads that share a key/value head
    (GQA). The offsets are checked as the forward checks them (on the GPU, or first on the host
    with `check_offsets=True`). `deterministic=True` is refused for now."""
    _no_deterministic(deterministic)
    host_q = host_k = None
    if check_offsets:
        host_q, host_k = _host_offsets(cu_seqlens_q), _host_offsets(cu_seqlens_k)
    if through_torch(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k):
        import torch

        wl, wr = window_pair(window_size)
        scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
        return torch.ops.kiln.flash_attn_varlen_backward(
            dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), scale,
            bool(causal), wl, wr, host_q, host_k,
        )
    return tuple(
        native().flash_attn_varlen_backward(
            dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            window_size, deterministic, host_q, host_k,
        )
    )
