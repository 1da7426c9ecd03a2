"""transformers plug-ins: `register()` adds "kiln" to transformers' attention interface (so that
`attn_implementation="kiln"` runs attention on kiln's kernels) and to its experts interface (so
that `experts_implementation="kiln"` runs MoE experts on kiln's grouped kernels); `fuse_mlp(model)`
runs a model's gated-SiLU MLPs (Llama, Qwen2, Mistral, ...) as kiln's fused SwiGLU, which
transformers has no interface for."""

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
