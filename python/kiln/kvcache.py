"""flash-attention's `flash_attn_with_kvcache` on kiln's decode over a paged KV cache: the
argument checks (no torch needed), the torch custom ops `kiln::paged_attn` and `kiln::kv_append`."""


import math
from typing import Optional

from . import _check as check

PAGE_SIZES = (16, 64, 256)
MAX_QUERIES = 16


def _require_packed(name: str, t) -> None:
    if tuple(t.stride()) != _packed_strides(tuple(t.shape)):
        raise ValueError(
            f"`{name}` has strides {tuple(t.stride())} for shape {tuple(t.shape)}; kiln's decode "
            f"reads it packed (call `.contiguous()`)"
        )


def _packed_strides(shape: tuple) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def check_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale) -> float:
    """Every argument check of `flash_attn_with_kvcache`; the softmax scale to use."""
    check.same_device({"q": q, "k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v,
                       "cache_seqlens": cache_seqlens, "block_table": block_table})
    check.require_dtype("q", q, ("bf16", "f16"), "kiln's decode")
    check.require_rank("q", q, 4, "[batch, seqlen_q, heads, head_dim]")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check.require_rank(name, t, 4, "[num_pages, page_size, heads_kv, head_dim] (a paged cache)")
        if t.dtype != q.dtype:
            raise TypeError(f"`{name}` is {check.dtype_name(t)} but `q` is {check.dtype_name(q)}; give them one dtype")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"`k_cache` has shape {tuple(k_cache.shape)} but `v_cache` has {tuple(v_cache.shape)}; they must match")
    b, sq, hq, d = q.shape
    _, page_size, hkv, dk = k_cache.shape
    if dk != d:
        raise ValueError(f"`q` has head_dim {d} but `k_cache` has {dk}")
    if d not in (64, 128, 256):
        raise ValueError(f"head_dim {d} is not one kiln's decode takes (64, 128 or 256)")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"`q` has {hq} heads and `k_cache` {hkv}: the query heads must be a multiple of the key/value heads")
    if not 1 <= sq <= MAX_QUERIES:
        raise ValueError(f"`q` has {sq} query tokens per sequence; kiln's decode takes 1 to {MAX_QUERIES}")
    if page_size not in PAGE_SIZES:
        raise ValueError(f"`k_cache` has pages of {page_size} tokens; kiln's decode takes 16, 64 or 256")
    if block_table is None:
        raise ValueError("`block_table` is None; kiln's decode reads a paged cache [num_pages, page_size, heads_kv, head_dim] through a block table")
    check.require_dtype("block_table", block_table, ("i32",), "the block table")
    check.require_rank("block_table", block_table, 2, "[batch, max_pages]")
    if block_table.shape[0] != b:
        raise ValueError(f"`block_table` has {block_table.shape[0]} rows but `q` has batch {b}")
    if cache_seqlens is None or isinstance(cache_seqlens, int):
        raise ValueError("`cache_seqlens` must be an int32 tensor [batch] of the cached tokens per sequence")
    check.require_dtype("cache_seqlens", cache_seqlens, ("i32",), "`cache_seqlens`")
    check.require_shape("cache_seqlens", cache_seqlens, (b,), "one length per sequence")
    if (k is None) != (v is None):
        raise ValueError("give both `k` and `v` (the new tokens to append) or neither")
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            check.require_rank(name, t, 4, "[batch, seqlen_new, heads_kv, head_dim]")
            if t.dtype != q.dtype:
                raise TypeError(f"`{name}` is {check.dtype_name(t)} but `q` is {check.dtype_name(q)}; give them one dtype")
            if t.shape[0] != b or t.shape[2] != hkv or t.shape[3] != d:
                raise ValueError(f"`{name}` has shape {tuple(t.shape)}; expected ({b}, seqlen_new, {hkv}, {d})")
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError(f"`k` has shape {tuple(k.shape)} but `v` has {tuple(v.shape)}; they must match")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_table", block_table),
                    ("cache_seqlens", cache_seqlens), ("k", k), ("v", v)):
        if t is not None:
            _require_packed(name, t)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"`softmax_scale` is {scale}; it must be finite and positive")
    return scale


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            return_softmax_lse: bool = False, check_tables: bool = True):
    """One decode step over a paged KV cache, with flash-attention's shapes and meanings: q
    [B, Sq (1 to 16), Hq, D], k_cache and v_cache [num_pages, page_size (16, 64 or 256), Hkv, D],
    block_table int32 [B, max_pages], cache_seqlens int32 [B] (the tokens cached before this
    step). With k and v [B, Sn, Hkv, D], they are written into the caches first (in place) at
    positions cache_seqlens .. cache_seqlens + Sn, and attended to. causal aligns the queries
    with the context's last tokens (bottom-right). Returns out [B, Sq, Hq, D] (and the LSE
    [B, Hq, Sq] in f32 with `return_softmax_lse`). `check_tables` reads the block table and
    lengths back to refuse bad entries (a synchronisation; False under CUDA graphs, where a
    sequence with bad entries comes out NaN instead)."""
    scale = check_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale)
    import torch

    seqlens = cache_seqlens
    if k is not None:
        seqlens = (cache_seqlens + k.shape[1]).to(torch.int32)
        torch.ops.kiln.kv_append(k, v, k_cache, v_cache, block_table, seqlens, bool(check_tables))
    out, lse = torch.ops.kiln.paged_attn(q, k_cache, v_cache, block_table, seqlens, scale, bool(causal),
                                         bool(check_tables))
    return (out, lse) if return_softmax_lse else out


def _register_ops() -> None:
    import torch

    from ._native import native, stream_of

    @torch.library.custom_op("kiln::paged_attn", mutates_args=(), device_types="cuda")
    def paged_attn_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                      cache_seqlens: torch.Tensor, softmax_scale: float, causal: bool,
                      check_tables: bool) -> tuple[torch.Tensor, torch.Tensor]:
        b, sq, hq, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        dev = q.device.index or 0
        native().attention_paged(dev, stream_of(dev), check.describe(q), check.describe(k_cache),
                                 check.describe(v_cache), check.describe(block_table),
                                 check.describe(cache_seqlens), check.describe(out), check.describe(lse),
                                 float(softmax_scale), bool(causal), bool(check_tables))
        return out, lse

    @paged_attn_op.register_fake
    def _(q, k_cache, v_cache, block_table, cache_seqlens, softmax_scale, causal, check_tables):
        b, sq, hq, _ = q.shape
        return torch.empty_like(q), q.new_empty((b, hq, sq), dtype=torch.float32)

    @torch.library.custom_op("kiln::kv_append", mutates_args=("k_cache", "v_cache"), device_types="cuda")
    def kv_append_op(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_table: torch.Tensor, cache_seqlens: torch.Tensor, check_tables: bool) -> None:
        dev = k.device.index or 0
        native().kv_append(dev, stream_of(dev), check.describe(k), check.describe(v), check.describe(k_cache),
                           check.describe(v_cache), check.describe(block_table), check.describe(cache_seqlens),
                           bool(check_tables))

    @kv_append_op.register_fake
    def _(k, v, k_cache, v_cache, block_table, cache_seqlens, check_tables):
        return None


try:
    import torch as _torch  # noqa: F401
except ImportError:  # the checks work without torch; the ops need it
    pass
else:
    _register_ops()
