"""The MoE layer as a torch custom op (`kiln::moe_layer`, with a fake implementation for
torch.compile): the output and the workspace (its size asked of the extension once per shape)
allocated by torch on the tensors' device, one native call that enqueues the whole pipeline on
torch's current stream. Imported by `kiln.moe` when it first runs a layer."""

from __future__ import annotations

from typing import Optional

import torch

from . import _check as check
from ._native import native, stream_of

# Workspace bytes by (tokens, hidden, experts, intermediate, top_k, dtype, combine): what the
# extension's layout gives for those sizes (nothing else changes it).
_WORKSPACE: dict = {}


def _describe(t):
    return None if t is None else check.describe(t)


@torch.library.custom_op("kiln::moe_layer", mutates_args=(), device_types="cuda")
def moe_layer_op(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    router_logits: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    top_k_index: Optional[torch.Tensor],
    top_k_weights: Optional[torch.Tensor],
    top_k: int,
    scoring: str,
    renormalize: bool,
    n_group: int,
    topk_group: int,
    routed_scaling: float,
    combine: str,
) -> torch.Tensor:
    out = torch.empty_like(x)
    if x.shape[0] == 0:
        return out
    dev = x.device.index or 0
    k = top_k_index.shape[1] if top_k_index is not None else top_k
    groups = (n_group, topk_group) if n_group else None
    route = (_describe(router_logits), _describe(bias), _describe(top_k_index), _describe(top_k_weights),
             int(top_k), scoring, bool(renormalize), groups, float(routed_scaling))
    tensors = (check.describe(x), check.describe(w13), check.describe(w2), check.describe(out))
    key = (x.shape[0], x.shape[1], w13.shape[0], w13.shape[1], k, x.dtype, combine)
    size = _WORKSPACE.get(key)
    if size is None:
        size = _WORKSPACE[key] = native().moe_layer_workspace(dev, tensors, route, combine)
    ws = torch.empty(((size + 3) // 4,), dtype=torch.int32, device=x.device)
    native().moe_layer(dev, stream_of(dev), tensors, check.describe(ws), route, combine)
    return out


@moe_layer_op.register_fake
def _(x, w13, w2, router_logits, bias, top_k_index, top_k_weights, top_k, scoring, renormalize, n_group, topk_group, routed_scaling, combine):
    return torch.empty_like(x)


def _no_backward(ctx, *grads):
    raise NotImplementedError(
        "kiln's MoE layer has no backward yet: run it under torch.no_grad() or use torch's experts for training"
    )


torch.library.register_autograd("kiln::moe_layer", _no_backward, setup_context=lambda ctx, inputs, output: None)
