"""transformers plug-ins: `register()` adds "kiln" to transformers' attention interface (so that
`attn_implementation="kiln"` runs attention on kiln's kernels) and to its experts interface (so
that `experts_implementation="kiln"` runs MoE experts on kiln's grouped kernels)."""

from __future__ import annotations

NAME = "kiln"


def kiln_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention signature: query [B, Hq, Sq, D], key/value [B, Hkv, Sk, D]; returns
    ([B, Sq, Hq, D], None). Every tensor is read where it lies (the query's BSHD memory after
    RoPE, the KV cache's BHSD memory): no copy, no repeat of K/V for GQA. A decode step (at most
    16 query tokens; K/V the cache) runs kiln's decode over the dense cache, split over the
    context when the batch is small; longer queries run the forward. A materialised mask
    (padding, a static cache's tail) or dropout falls back to torch's SDPA, since kiln's kernels
    take only the causal mask."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    import kiln

    if attention_mask is not None or (dropout and module.training) or query.shape[-1] not in (64, 128, 256):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    sq, sk = query.shape[2], key.shape[2]
    causal = bool(is_causal) and sq > 1
    # flash-attention's [B, S, H, D] views of the same memory: nothing is copied.
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    training = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if sq <= kiln.kvcache.MAX_QUERIES and sk >= sq and not training:
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
    """Registers "kiln" with transformers (idempotent). Attention masks use SDPA's mask builder,
    which leaves the mask out (None) when it is purely causal: then kiln runs the attention."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(NAME, kiln_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError:  # a transformers without the experts interface: attention only
        return
    ExpertsInterface.register(NAME, kiln_experts_forward)
