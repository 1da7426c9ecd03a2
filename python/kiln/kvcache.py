"""flash-attention's `flash_attn_with_kvcache` on kiln's decode over a KV cache, paged (with a
block table) or dense (one cache per sequence, as transformers keeps it, read where it lies):
the argument checks (no torch needed), the torch custom ops `kiln::paged_attn` and
`kiln::kv_append`, and `check_errors` for bad tables the GPU found."""


import math
from typing import Optional

from . import _check as check

PAGE_SIZES = (16, 64, 256)
MAX_QUERIES = 16


def _require_packed(name: str, t) -> None:
    if tuple(t.stride()) != check.packed_strides(tuple(t.shape)):
        raise ValueError(
            f"`{name}` has strides {tuple(t.stride())} for shape {tuple(t.shape)}; kiln's decode "
            f"reads it packed (call `.contiguous()`)"
        )


def check_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale) -> float:
    """Every argument check of `flash_attn_with_kvcache`; the softmax scale to use."""
    check.same_device({"q": q, "k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v,
                       "cache_seqlens": None if isinstance(cache_seqlens, int) else cache_seqlens,
                       "block_table": block_table})
    check.require_dtype("q", q, ("bf16", "f16"), "kiln's decode")
    check.require_rank("q", q, 4, "[batch, seqlen_q, heads, head_dim]")
    paged = block_table is not None
    layout = ("[num_pages, page_size, heads_kv, head_dim] (a paged cache)" if paged else
              "[batch, seqlen, heads_kv, head_dim] (a cache per sequence; a transposed view of "
              "transformers' [batch, heads_kv, seqlen, head_dim] cache is read in place)")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check.require_rank(name, t, 4, layout)
        if t.dtype != q.dtype:
            raise TypeError(f"`{name}` is {check.dtype_name(t)} but `q` is {check.dtype_name(q)}; give them one dtype")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"`k_cache` has shape {tuple(k_cache.shape)} but `v_cache` has {tuple(v_cache.shape)}; they must match")
    b, sq, hq, d = q.shape
    rows, cache_len, hkv, dk = k_cache.shape
    if dk != d:
        raise ValueError(f"`q` has head_dim {d} but `k_cache` has {dk}")
    if d not in (64, 128, 256):
        raise ValueError(f"head_dim {d} is not one kiln's decode takes (64, 128 or 256)")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"`q` has {hq} heads and `k_cache` {hkv}: the query heads must be a multiple of the key/value heads")
    if not 1 <= sq <= MAX_QUERIES:
        raise ValueError(f"`q` has {sq} query tokens per sequence; kiln's decode takes 1 to {MAX_QUERIES}")
    if paged:
        if cache_len not in PAGE_SIZES:
            raise ValueError(f"`k_cache` has pages of {cache_len} tokens; kiln's decode takes 16, 64 or 256")
        check.require_dtype("block_table", block_table, ("i32",), "the block table")
        check.require_rank("block_table", block_table, 2, "[batch, max_pages]")
        if block_table.shape[0] != b:
            raise ValueError(f"`block_table` has {block_table.shape[0]} rows but `q` has batch {b}")
        _require_packed("block_table", block_table)
    elif rows != b:
        raise ValueError(
            f"`k_cache` has {rows} rows but `q` has batch {b}; without a block table the cache is "
            f"[batch, seqlen, heads_kv, head_dim], one row per sequence (pass `block_table` for a paged cache)"
        )
    if cache_seqlens is None:
        if paged:
            raise ValueError("`cache_seqlens` must be an int32 tensor [batch] (or an int) of the cached tokens per sequence")
    elif isinstance(cache_seqlens, int):
        if not 0 <= cache_seqlens <= (cache_len * block_table.shape[1] if paged else cache_len):
            raise ValueError(f"`cache_seqlens` is {cache_seqlens}; it must be 0 to the tokens the cache holds")
    else:
        check.require_dtype("cache_seqlens", cache_seqlens, ("i32",), "`cache_seqlens`")
        check.require_shape("cache_seqlens", cache_seqlens, (b,), "one length per sequence")
        _require_packed("cache_seqlens", cache_seqlens)
    if (k is None) != (v is None):
        raise ValueError("give both `k` and `v` (the new tokens to append) or neither")
    if k is not None:
        if cache_seqlens is None:
            raise ValueError("appending `k` and `v` needs `cache_seqlens` (where each sequence's new tokens go)")
        for name, t in (("k", k), ("v", v)):
            check.require_rank(name, t, 4, "[batch, seqlen_new, heads_kv, head_dim]")
            if t.dtype != q.dtype:
                raise TypeError(f"`{name}` is {check.dtype_name(t)} but `q` is {check.dtype_name(q)}; give them one dtype")
            if t.shape[0] != b or t.shape[2] != hkv or t.shape[3] != d:
                raise ValueError(f"`{name}` has shape {tuple(t.shape)}; expected ({b}, seqlen_new, {hkv}, {d})")
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError(f"`k` has shape {tuple(k.shape)} but `v` has {tuple(v.shape)}; they must match")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check.require_tma_addressable(name, t, "kiln's decode reads (and appends to) the cache where it lies, which")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"`softmax_scale` is {scale}; it must be finite and positive")
    return scale


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            return_softmax_lse: bool = False, check_tables: bool = False):
    """One decode step over a KV cache, with flash-attention's shapes and meanings: q
    [B, Sq (1 to 16), Hq, D]; with `block_table` (int32 [B, max_pages]) k_cache and v_cache are
    pages [num_pages, page_size (16, 64 or 256), Hkv, D], without it one cache per sequence
    [B, S, Hkv, D] (transformers' [B, Hkv, S, D] caches through `.transpose(1, 2)`, read where
    they lie). cache_seqlens: int32 [B] (or an int) of the tokens cached before this step; None
    (dense caches only) attends to all S. With k and v [B, Sn, Hkv, D], they are written into
    the caches first (in place) at positions cache_seqlens .. cache_seqlens + Sn, and attended
    to. causal aligns the queries with the context's last tokens (bottom-right). Returns out
    [B, Sq, Hq, D] (and the LSE [B, Hq, Sq] in f32 with `return_softmax_lse`).

    Capturable in a CUDA graph as it is: the GPU checks every table entry (nothing outside the
    cache is read; a sequence with a bad entry comes out NaN) and records it, and the next
    decode call outside capture (or `kiln.check_errors()`) raises a ValueError saying what was
    bad. `check_tables=True` also reads the tables back first (a synchronisation; not under
    capture) to refuse bad entries before the launch."""
    scale = check_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale)
    q = check.in_place_or_copy(q)
    import torch

    seqlens = cache_seqlens
    if isinstance(cache_seqlens, int):
        seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    if k is not None:
        seqlens = (seqlens + k.shape[1]).to(torch.int32)
        k, v = k.contiguous(), v.contiguous()
        torch.ops.kiln.kv_append(k, v, k_cache, v_cache, block_table, seqlens, bool(check_tables))
    out, lse = torch.ops.kiln.paged_attn(q, k_cache, v_cache, block_table, seqlens, scale, bool(causal),
                                         bool(check_tables))
    return (out, lse) if return_softmax_lse else out


def check_errors(device=None) -> None:
    """Waits for the GPU (`device`: an index or torch device, default the current one), then
    raises a ValueError if a decode step or KV append there was given a table entry the GPU
    found bad since the last report (a `block_table` page outside the cache, a `cache_seqlens`
    entry past its cache): those sequences came out NaN and nothing outside the cache was read.
    Such an error is also raised, once, by the next decode call outside CUDA-graph capture."""
    import torch

    from ._native import native

    if device is None:
        dev = torch.cuda.current_device()
    else:
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        dev = dev.index if dev.index is not None else torch.cuda.current_device()
    native().check_errors(int(dev))


def _register_ops() -> None:
    import torch

    from ._native import native, stream_of

    def optional(t):
        return None if t is None else check.describe(t)

    @torch.library.custom_op("kiln::paged_attn", mutates_args=(), device_types="cuda")
    def paged_attn_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_table: Optional[torch.Tensor], cache_seqlens: Optional[torch.Tensor],
                      softmax_scale: float, causal: bool, check_tables: bool) -> tuple[torch.Tensor, torch.Tensor]:
        b, sq, hq, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        dev = q.device.index or 0
        native().attention_paged(dev, stream_of(dev), check.describe(q), check.describe(k_cache),
                                 check.describe(v_cache), optional(block_table), optional(cache_seqlens),
                                 check.describe(out), check.describe(lse), float(softmax_scale), bool(causal),
                                 bool(check_tables))
        return out, lse

    @paged_attn_op.register_fake
    def _(q, k_cache, v_cache, block_table, cache_seqlens, softmax_scale, causal, check_tables):
        b, sq, hq, _ = q.shape
        return torch.empty_like(q), q.new_empty((b, hq, sq), dtype=torch.float32)

    @torch.library.custom_op("kiln::kv_append", mutates_args=("k_cache", "v_cache"), device_types="cuda")
    def kv_append_op(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_table: Optional[torch.Tensor], cache_seqlens: torch.Tensor, check_tables: bool) -> None:
        dev = k.device.index or 0
        native().kv_append(dev, stream_of(dev), check.describe(k), check.describe(v), check.describe(k_cache),
                           check.describe(v_cache), optional(block_table), check.describe(cache_seqlens),
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
