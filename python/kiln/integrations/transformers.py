"""transformers plug-ins: `register()` adds "kiln" to transformers' attention interface (so that
`attn_implementation="kiln"` runs attention on kiln's kernels), to its mask interface (so that
a decode step's mask reaches kiln as each sequence's first key and length instead of a
materialised 4-D mask), and to its experts interface (so that `experts_implementation="kiln"`
runs MoE experts on kiln's grouped kernels); `fuse_mlp(model)` runs a model's gated-SiLU MLPs
(Llama, Qwen2, Mistral, ...) as kiln's fused SwiGLU, which transformers has no interface for;
`fuse_norms(model)` runs its RMSNorms, the residual add in front of each layer's second norm
and the rotary embedding on kiln's kernels (as Liger-Kernel patches a model's modules);
`enable(model)` does all of it."""

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


# --------------------------------------------------------------------- RMSNorm and rotary embedding
#: transformers' RMSNorm classes that compute `weight * (x * rsqrt(mean(x^2) + eps)).to(dtype)`
#: (Gemma's `1 + weight` is not one of them).
RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "MistralRMSNorm", "MixtralRMSNorm")
#: Their decoder layers: residual, input norm, attention, residual add, post-attention norm,
#: MLP, residual add (the one order the fused layer forward reproduces).
DECODER_LAYERS = tuple(n.replace("RMSNorm", "DecoderLayer") for n in RMS_NORMS)
#: Their modeling modules, whose attention calls the module's `apply_rotary_pos_emb` (rotate_half).
ROPE_MODULES = {n.replace("RMSNorm", "DecoderLayer"): m for n, m in zip(
    RMS_NORMS, ("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral"))}


def _kiln_can(x, weight=None) -> bool:
    """Whether kiln's forward-only kernels take `x` (and a weight of its dtype) here."""
    import torch

    return (
        x.is_cuda
        and x.dtype in (torch.bfloat16, torch.float16)
        and (weight is None or weight.dtype == x.dtype)
        and not (torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)))
    )


def _rms_norm_forward(self, hidden_states):
    """The module's RMSNorm in one kiln kernel; its own forward where kiln does not apply."""
    import kiln

    if not self._kiln_fused or not _kiln_can(hidden_states, self.weight):
        return self._kiln_unfused_forward(hidden_states)
    return kiln.rms_norm(hidden_states, self.weight, self.variance_epsilon)


def _layer_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                   use_cache=False, position_embeddings=None, **kwargs):
    """transformers' decoder layer with the residual add after attention and the
    post-attention norm in one kiln kernel: the attention's output (a fresh tensor) becomes
    residual + output in place, and its norm is what the MLP reads."""
    import kiln

    post = self.post_attention_layernorm
    if not self._kiln_fused or not _kiln_can(hidden_states, post.weight):
        return self._kiln_unfused_forward(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                          past_key_values=past_key_values, use_cache=use_cache,
                                          position_embeddings=position_embeddings, **kwargs)
    h = self.input_layernorm(hidden_states)
    h, _ = self.self_attn(hidden_states=h, attention_mask=attention_mask, position_ids=position_ids,
                          past_key_values=past_key_values, use_cache=use_cache,
                          position_embeddings=position_embeddings, **kwargs)
    if h.shape != hidden_states.shape or h.dtype != hidden_states.dtype:
        h = hidden_states + h  # (not expected of these layers: the plain add)
        residual, h = h, post(h)
    else:
        residual = h  # becomes hidden_states + attention output
        h = kiln.rms_norm(hidden_states, post.weight, post.variance_epsilon, residual=residual)
    return residual + self.mlp(h)


def _rope(q, k, cos, sin, unsqueeze_dim=1, *, unfused):
    """transformers' apply_rotary_pos_emb on q [B, H, S, D] and k in place in one kiln launch
    (q and k are the projections' fresh views); the original where kiln does not apply."""
    import torch

    import kiln

    if (
        unsqueeze_dim != 1
        or q.dim() != 4
        or cos.shape[-1] != q.shape[-1]
        or not _kiln_can(q)
        or not _kiln_can(k, q)
        or cos.dtype not in (q.dtype, torch.float32)
    ):
        return unfused(q, k, cos, sin, unsqueeze_dim)
    try:
        return kiln.apply_rotary(q, k, cos, sin)
    except ValueError:  # a layout kiln refuses (overlapping q and k, say): torch's ops
        return unfused(q, k, cos, sin, unsqueeze_dim)


# The modeling modules' own apply_rotary_pos_emb while kiln's is installed, by module name.
_ROPE_UNFUSED: dict = {}


def _set_rope(module_name: str, enable: bool) -> bool:
    """Installs (or removes) kiln's rotary embedding in `transformers.models.<m>.modeling_<m>`;
    returns whether it is installed."""
    import functools
    import importlib

    mod = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    if enable and module_name not in _ROPE_UNFUSED:
        _ROPE_UNFUSED[module_name] = mod.apply_rotary_pos_emb
        mod.apply_rotary_pos_emb = functools.partial(_rope, unfused=_ROPE_UNFUSED[module_name])
    elif not enable and module_name in _ROPE_UNFUSED:
        mod.apply_rotary_pos_emb = _ROPE_UNFUSED.pop(module_name)
    return module_name in _ROPE_UNFUSED


def _patch(m, forward, enable: bool) -> None:
    import types

    if not hasattr(m, "_kiln_unfused_forward"):
        m._kiln_unfused_forward = m.forward
        m.forward = types.MethodType(forward, m)
    m._kiln_fused = enable


def fuse_norms(model, enable: bool = True, residual: bool = True, rope: bool = True) -> int:
    """Runs (or, with `enable=False`, stops running) `model`'s RMSNorms (the classes in
    `RMS_NORMS`: Llama, Qwen2, Qwen3 and its q/k norms, Qwen3-MoE, Mistral, Mixtral) on kiln's
    kernel; with `residual`, each decoder layer's residual add after attention and its
    post-attention norm as one kernel; with `rope`, the rotary embedding of those models'
    attention in place on q and k in one launch (process-wide for that model family: the
    modeling module's `apply_rotary_pos_emb` is swapped, as Liger-Kernel does). Inference only:
    where autograd records, or the dtype is not bf16/f16, the modules' own forwards run.
    Returns the number of modules patched (norms and layers)."""
    n = 0
    families = set()
    for m in model.modules():
        name = type(m).__name__
        if name in RMS_NORMS:
            _patch(m, _rms_norm_forward, enable)
            n += enable
        elif name in DECODER_LAYERS:
            families.add(ROPE_MODULES[name])
            if residual or hasattr(m, "_kiln_unfused_forward"):
                _patch(m, _layer_forward, enable and residual)
                n += enable and residual
    for fam in families:
        _set_rope(fam, enable and rope)
    return n


def enable(model, on: bool = True) -> dict:
    """kiln everywhere it applies in `model`: registers kiln with transformers, selects its
    attention (and experts, for MoE models), fuses the gated MLPs (`fuse_mlp`) and the norms,
    residual adds and rotary embedding (`fuse_norms`). `on=False` returns to sdpa (and
    grouped_mm experts) and unfuses. Returns what was patched."""
    register()
    model.set_attn_implementation(NAME if on else "sdpa")
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation(NAME if on else "grouped_mm")
        except (ValueError, AttributeError):  # a dense model
            pass
    return {"mlps": fuse_mlp(model, enable=on), "norms": fuse_norms(model, enable=on)}
