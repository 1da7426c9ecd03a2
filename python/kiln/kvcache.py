"""flash-attention's `flash_attn_with_kvcache` on kiln's decode over a KV cache, paged (with a
block table) or dense (one cache per sequence, as transformers keeps it, read where it lies):
the call (straight to the extension, which checks, allocates and launches; through the torch
custom ops `kiln::paged_attn` and `kiln::kv_append` under torch.compile), and `check_errors`
for bad input the GPU found."""

import math
from typing import Optional

from ._dispatch import through_torch
from ._native import native

PAGE_SIZES = (16, 64, 256)
MAX_QUERIES = 16


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            return_softmax_lse: bool = False, check_tables: bool = False, cache_leftpad=None):
    """One decode step over a KV cache, with flash-attention's shapes and meanings: q
    [B, Sq (1 to 16), Hq, D]; with `block_table` (int32 [B, max_pages]) k_cache and v_cache are
    pages [num_pages, page_size (16, 64 or 256), Hkv, D], without it one cache per sequence
    [B, S, Hkv, D] (transformers' [B, Hkv, S, D] caches through `.transpose(1, 2)`, read where
    they lie). cache_seqlens: int32 [B] (or an int) of the tokens cached before this step; None
    (dense caches only) attends to all S. cache_leftpad: int32 [B], each sequence's first key
    (left padding: keys before it are not attended to; needs cache_seqlens). With k and v
    [B, Sn, Hkv, D], they are written into the caches first (in place) at positions
    cache_seqlens .. cache_seqlens + Sn, and attended to. causal aligns the queries with the
    context's last tokens (bottom-right). Returns out [B, Sq, Hq, D] (and the LSE [B, Hq, Sq] in
    f32 with `return_softmax_lse`).

    Capturable in a CUDA graph as it is: the GPU checks every table entry (nothing outside the
    cache is read; a sequence with a bad entry comes out NaN) and records it, and the next
    kiln call outside capture (or `kiln.check_errors()`) raises a ValueError saying what was
    bad. `check_tables=True` also reads the tables back first (a synchronisation; not under
    capture) to refuse bad entries before the launch."""
    if through_torch(q, k_cache, v_cache, k, v, cache_seqlens, block_table, cache_leftpad):
        return _through_torch(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal,
                              return_softmax_lse, check_tables, cache_leftpad)
    return native().flash_attn_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale,
                                       causal, return_softmax_lse, check_tables, cache_leftpad)


def _through_torch(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal,
                   return_softmax_lse, check_tables, cache_leftpad):
    """The same step as the custom ops (torch.compile traces them; their bodies are the
    extension's calls, which check the arguments)."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    seqlens = cache_seqlens
    if isinstance(cache_seqlens, int):
        seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    if (k is None) != (v is None):
        raise ValueError("give both `k` and `v` (the new tokens to append) or neither")
    if k is not None:
        if seqlens is None:
            raise ValueError("appending `k` and `v` needs `cache_seqlens` (where each sequence's new tokens go)")
        seqlens = (seqlens + k.shape[1]).to(torch.int32)
        torch.ops.kiln.kv_append(k.contiguous(), v.contiguous(), k_cache, v_cache, block_table, seqlens,
                                 bool(check_tables))
    out, lse = torch.ops.kiln.paged_attn(q, k_cache, v_cache, block_table, seqlens, cache_leftpad, scale,
                                         bool(causal), bool(check_tables))
    return (out, lse) if return_softmax_lse else out


def check_errors(device=None) -> None:
    """Waits for the GPU (`device`: an index or torch device, default the current one), then
    raises a ValueError if a kiln call there was given input the GPU found bad since the last
    report (a `block_table` page outside the cache, a `cache_seqlens` or `cache_leftpad` entry
    past its cache, packed offsets that are not cumulative): those sequences came out NaN and
    nothing outside the tensors was read or written. Such an error is also raised, once, by the
    next decode or packed call outside CUDA-graph capture."""
    import torch

    if device is None:
        dev = torch.cuda.current_device()
    else:
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        dev = dev.index if dev.index is not None else torch.cuda.current_device()
    native().check_errors(int(dev))


def _register_ops() -> None:
    import torch

    @torch.library.custom_op("kiln::paged_attn", mutates_args=(), device_types="cuda")
    def paged_attn_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_table: Optional[torch.Tensor], cache_seqlens: Optional[torch.Tensor],
                      cache_leftpad: Optional[torch.Tensor], softmax_scale: float, causal: bool,
                      check_tables: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(native().flash_attn_kvcache(q, k_cache, v_cache, None, None, cache_seqlens, block_table,
                                                 softmax_scale, causal, True, check_tables, cache_leftpad))

    @paged_attn_op.register_fake
    def _(q, k_cache, v_cache, block_table, cache_seqlens, cache_leftpad, softmax_scale, causal, check_tables):
        b, sq, hq, _ = q.shape
        return q.new_empty(q.shape), q.new_empty((b, hq, sq), dtype=torch.float32)

    @torch.library.custom_op("kiln::kv_append", mutates_args=("k_cache", "v_cache"), device_types="cuda")
    def kv_append_op(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_table: Optional[torch.Tensor], cache_seqlens: torch.Tensor, check_tables: bool) -> None:
        native().kv_append(k, v, k_cache, v_cache, block_table, cache_seqlens, check_tables)

    @kv_append_op.register_fake
    def _(k, v, k_cache, v_cache, block_table, cache_seqlens, check_tables):
        return None


try:
    import torch as _torch  # noqa: F401
except ImportError:  # the call works without torch (the extension reads tensor-like objects)
    pass
else:
    _register_ops()
