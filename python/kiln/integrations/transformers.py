"""transformers plug-ins: `register()` adds "kiln" to transformers' attention interface (so that
`attn_implementation="kiln"` runs attention on kiln's kernels), to its mask interface (so that
a decode step's mask reaches kiln as each sequence's first key and length instead of a
materialised 4-D mask), and to its experts interface (so that `experts_implementation="kiln"`
runs MoE experts on kiln's grouped kernels); `fuse_mlp(model)` runs a model's gated-SiLU MLPs
(Llama, Qwen2, Mistral, ...) as kiln's fused SwiGLU, which transformers has no interface for."""

from __future__ import annotations

NAME = "kiln"

#: Head dims kiln's attention kernels take.
HEAD_DIMS = (64, 128, 256)


def _head_dim(config) -> int | None:
    d = getattr(config, "head_dim", None)
    if d is None and getattr(config, "num_attention_heads", None):
        d = config.hidden_size // config.num_attention_heads
    return d


def kiln_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None, attention_mask=None,
              **kwargs):
    """transformers' mask interface. A causal decode step (at most 16 query tokens, the model's
    head dim one kiln takes, the plain causal mask over a 2-D padding mask) gets kiln's compact
    mask: an int32 [1, 1, 2, batch] tensor of each sequence's first key (the padding mask's first
    1: left padding) and its end (the query tokens' last position + 1), made on the GPU from the
    padding mask and the cache's offset without a synchronisation (capturable). A padding row
    that is not one run of keys ending at the queries (a hole, right padding) gets first key -1,
    which kiln's decode writes as NaN and reports at its next call (`kiln.check_errors()`): use
    sdpa for such masks. Anything else (longer queries, sliding windows, chunks, packed sequences,
    other overlays) gets sdpa's mask, as before; with neither padding nor a static cache the
    purely causal mask is left out (None)."""
    import torch
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    from kiln.kvcache import MAX_QUERIES

    config = kwargs.get("config")
    if (
        q_length > MAX_QUERIES
        or kv_offset != 0
        or mask_function not in (None, causal_mask_function)
        or (config is not None and _head_dim(config) not in HEAD_DIMS)
    ):
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, mask_function=mask_function or causal_mask_function,
                         attention_mask=attention_mask, **kwargs)
    end = q_offset + q_length  # the queries are the context's last tokens (a tensor for a static cache)
    if attention_mask is None and not isinstance(end, torch.Tensor) and end == kv_length:
        return None  # every key of the cache, causal: kiln's decode needs no mask
    device = attention_mask.device if attention_mask is not None else kwargs.get("device", "cpu")
    if isinstance(end, torch.Tensor):
        end = end.to(device=device, dtype=torch.int64)
    if attention_mask is None:
        first = torch.zeros(batch_size, dtype=torch.int64, device=device)
    else:
        pad = attention_mask[:, :kv_length].to(torch.bool)
        first = pad.to(torch.int32).argmax(-1)  # the first 1 (0 for a row without one)
        ones = (pad & (torch.arange(pad.shape[-1], device=device) < end)).sum(-1)
        first = torch.where(ones == 0, end, first)  # no key at all: an empty run
        first = torch.where(ones == end - first, first, -1)  # not one run ending at the queries
    ends = torch.zeros_like(first) + end
    return torch.stack((first, ends)).to(torch.int32).view(1, 1, 2, batch_size)


def is_compact(mask) -> bool:
    """Whether `mask` is kiln's compact decode mask (`kiln_mask`): int32 [1, 1, 2, batch]."""
    import torch

    return isinstance(mask, torch.Tensor) and mask.dtype == torch.int32 and mask.dim() == 4 and mask.shape[2] == 2


def dense_mask(compact, q_length, kv_length):
    """The bool [batch, 1, q_length, kv_length] mask kiln's compact mask stands for (query i sees
    keys first .. end - q_length + i; a row marked bad, first -1, sees none), for sdpa."""
    import torch

    first, end = compact[0, 0, 0].long(), compact[0, 0, 1].long()
    j = torch.arange(kv_length, device=compact.device)
    i = torch.arange(q_length, device=compact.device)
    last = end[:, None] - q_length + i[None, :]  # [batch, q]: the last key query i sees
    seen = (j[None, None, :] >= first[:, None, None]) & (j[None, None, :] <= last[:, :, None])
    return (seen & (first >= 0)[:, None, None])[:, None]


def kiln_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention signature: query [B, Hq, Sq, D], key/value [B, Hkv, Sk, D]; returns
    ([B, Sq, Hq, D], None). Every tensor is read where it lies (the query's BSHD memory after
    RoPE, the KV cache's BHSD memory): no copy, no repeat of K/V for GQA. A decode step (at most
    16 query tokens; K/V the cache) runs kiln's decode over the dense cache, split over the
    context when the batch is small: over the whole cache without a mask, or with kiln's compact
    mask (`kiln_mask`) from each sequence's first key to its end (a static cache, left padding);
    longer queries run the forward. A materialised mask or dropout falls back to torch's SDPA."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    import kiln

    sq, sk = query.shape[2], key.shape[2]
    training = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    compact = attention_mask is not None and is_compact(attention_mask)
    decode = sq <= kiln.kvcache.MAX_QUERIES and sk >= sq and not training
    usable = not (dropout and module.training) and query.shape[-1] in HEAD_DIMS
    if not usable or (attention_mask is not None and not (compact and decode)):
        if compact:
            attention_mask = dense_mask(attention_mask, sq, sk)
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = bool(is_causal) and sq > 1
    # flash-attention's [B, S, H, D] views of the same memory: nothing is copied.
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    if compact:
        # (the queries are each sequence's last tokens before its end: bottom-right causal)
        out = kiln.flash_attn_with_kvcache(q, k, v, cache_seqlens=attention_mask[0, 0, 1],
                                           cache_leftpad=attention_mask[0, 0, 0], softmax_scale=scaling,
                                           causal=causal)
    elif decode:
        # Decode (forward only): the queries are the cache's last tokens (bottom-right), every row
        # of the batch attends to the whole cache it was given.
        out = kiln.flash_attn_with_kvcache(q, k, v, softmax_scale=scaling, causal=causal)
    else:
        out = kiln.flash_attn_func(q, k, v, softmax_scale=scaling, causal=causal)
    return out, None


def kiln_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """transformers' experts signature over gate_up_proj [E, 2I, H] and down_proj [E, H, I]."""
    import kiln

    if getattr(self, "experts_are_transposed", False) or getattr(self, "gate_up_proj_bias", None) is not None:
        from transformers.integrations.moe import grouped_mm_experts_forward

        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    return kiln.moe.experts(hidden_states, self.gate_up_proj, self.down_proj, top_k_index, top_k_weights)


def register() -> None:
    """Registers "kiln" with transformers (idempotent): the attention function, the mask
    function (`kiln_mask`: a decode step's compact mask, else sdpa's) and the experts."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(NAME, kiln_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, kiln_mask)
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError:  # a transformers without the experts interface: attention only
        return
    ExpertsInterface.register(NAME, kiln_experts_forward)


def _is_swiglu_mlp(m) -> bool:
    """A module computing down(silu(gate(x)) * up(x)) with bias-free linear layers."""
    import torch.nn as nn

    parts = [getattr(m, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    act = getattr(m, "act_fn", None)
    return (
        all(isinstance(p, nn.Linear) and p.bias is None for p in parts)
        and (isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation")
        and parts[0].weight.shape == parts[1].weight.shape
    )


# Offsets [0, rows] of the one "expert" a dense MLP is, per (device, rows): made once (before a
# CUDA-graph capture, by the warm-up calls) and reused, so a call allocates only its outputs.
_ONE_EXPERT: dict = {}


def _one_expert(rows: int, device):
    key = (device, rows)
    offsets = _ONE_EXPERT.get(key)
    if offsets is None:
        import torch

        offsets = torch.tensor([0, rows], dtype=torch.int32, device=device)
        _ONE_EXPERT[key] = offsets
    return offsets


def _fused_mlp_forward(self, x):
    """silu(x W_gateᵀ) * (x W_upᵀ) in one kiln kernel (x read once, no [T, 2I] intermediate),
    then the down projection; the module's own forward where kiln does not apply (training, a
    dtype kiln does not take, fusion switched off)."""
    import torch

    import kiln

    gate, up = self.gate_proj.weight, self.up_proj.weight
    if (
        not self._kiln_fused
        or x.dtype not in (torch.bfloat16, torch.float16)
        or gate.dtype != x.dtype
        or (torch.is_grad_enabled() and (x.requires_grad or gate.requires_grad))
    ):
        return self._kiln_unfused_forward(x)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    h = kiln.moe.swiglu(x2, gate.unsqueeze(0), _one_expert(x2.shape[0], x.device), w3=up.unsqueeze(0))
    return self.down_proj(h).reshape(*lead, -1)


def fuse_mlp(model, enable: bool = True) -> int:
    """Runs (or, with `enable=False`, stops running) every gated-SiLU MLP of `model` (modules with
    bias-free gate_proj, up_proj, down_proj and a SiLU act_fn: Llama, Qwen2, Mistral, Qwen3's
    dense layers) as kiln's fused SwiGLU then the down projection. Returns the number of modules
    that run fused. Modules kiln cannot take keep their forward."""
    import types

    n = 0
    for m in model.modules():
        if not _is_swiglu_mlp(m):
            continue
        if not hasattr(m, "_kiln_unfused_forward"):
            m._kiln_unfused_forward = m.forward
            m.forward = types.MethodType(_fused_mlp_forward, m)
        m._kiln_fused = enable
        n += enable
    return n
