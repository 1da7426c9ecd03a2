"""flash-attention's `flash_attn_varlen_func` on kiln's packed attention, and the `window_size`
check that it shares with `flash_attn_func`."""

from __future__ import annotations

import math
from typing import Optional

from . import _check as check


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


def _offsets(name: str, cu, total: int, tensor: str) -> list[int]:
    """The host copy of a cumulative-offsets tensor (one copy from the GPU), checked."""
    check.require_dtype(name, cu, ("i32",), "kiln's packed attention (cumulative offsets)")
    check.require_rank(name, cu, 1, "[batch + 1]")
    host = [int(x) for x in cu.tolist()]
    if len(host) < 2:
        raise ValueError(f"`{name}` has {len(host)} entries; it needs batch + 1 (at least 2)")
    if host[0] != 0:
        raise ValueError(f"`{name}`[0] is {host[0]}; cumulative offsets start at 0")
    for s in range(1, len(host)):
        if host[s] < host[s - 1]:
            raise ValueError(
                f"`{name}` decreases at entry {s} ({host[s]} after {host[s - 1]}); offsets are cumulative lengths"
            )
    if host[-1] != total:
        raise ValueError(
            f"`{name}` ends at {host[-1]} but packed `{tensor}` has {total} rows; the last offset is the packed length"
        )
    return host


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
):
    """Attention over a packed batch, flash-attention's `flash_attn_varlen_func`: q [total_q, Hq,
    D], k and v [total_k, Hkv, D] (bf16 or f16, D in {64, 128, 256}, Hq a multiple of Hkv);
    sequence s owns rows cu_seqlens_q[s]..cu_seqlens_q[s + 1] of q and cu_seqlens_k[s]..
    cu_seqlens_k[s + 1] of k and v (int32 [batch + 1]); causal aligned bottom-right per sequence;
    `window_size` (left, right), -1 for no bound. The offsets are copied to the host once (kiln
    checks them there). Returns out like q (and the log-sum-exp [Hq, total_q] in f32 with
    `return_lse`). Forward only for now."""
    check.same_device({"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k})
    for name, t in (("q", q), ("k", k), ("v", v)):
        check.require_dtype(name, t, ("bf16", "f16"), "kiln's attention")
        check.require_rank(name, t, 3, "[total, heads, head_dim]")
        check.require_last_stride_one(name, t)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("`q`, `k` and `v` must have one dtype")
    total_q, hq, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"`k` has shape {tuple(k.shape)} but `v` has {tuple(v.shape)}; they must match")
    total_k, hkv, dk = k.shape
    if dk != d:
        raise ValueError(f"`q` has head_dim {d} but `k` has {dk}")
    if d not in (64, 128, 256):
        raise ValueError(f"head_dim {d} is not one kiln's attention takes (64, 128 or 256)")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"`q` has {hq} heads and `k` {hkv}: the query heads must be a multiple of the key/value heads")
    window = window_pair(window_size)
    host_q = _offsets("cu_seqlens_q", cu_seqlens_q, total_q, "q")
    host_k = _offsets("cu_seqlens_k", cu_seqlens_k, total_k, "k")
    if len(host_q) != len(host_k):
        raise ValueError(
            f"`cu_seqlens_q` has {len(host_q)} entries and `cu_seqlens_k` {len(host_k)}; both are [batch + 1]"
        )
    for name, host, given in (("max_seqlen_q", host_q, max_seqlen_q), ("max_seqlen_k", host_k, max_seqlen_k)):
        longest = max(b - a for a, b in zip(host, host[1:]))
        if int(given) < longest:
            raise ValueError(f"`{name}` is {given} but the longest sequence has {longest} rows; pass at least that")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    try:
        import torch
    except ImportError:
        raise ImportError("kiln's ops take torch tensors: install torch (`pip install torch`)") from None
    o, lse = torch.ops.kiln.flash_attn_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, host_q, host_k, scale, bool(causal), window[0], window[1]
    )
    return (o, lse) if return_lse else o
