"""The MoE layer as a torch custom op (`kiln::moe_layer`, with a fake implementation for
torch.compile), the road a layer call takes when torch must see it: its body is the direct
road's one native call (checks, the output allocated through torch, the whole pipeline
enqueued on torch's current stream with the handle's workspace). Imported by `kiln.moe` when
it first runs a layer that way."""

from __future__ import annotations

from typing import Optional

import torch

from ._native import native


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
    return native().moe_layer(
        x, w13, w2, router_logits, bias, top_k_index, top_k_weights, top_k, scoring, renormalize, n_group, topk_group,
        routed_scaling, combine,
    )


@moe_layer_op.register_fake
def _(x, w13, w2, router_logits, bias, top_k_index, top_k_weights, top_k, scoring, renormalize, n_group, topk_group, routed_scaling, combine):
    return torch.empty_like(x)


def _no_backward(ctx, *grads):
    raise NotImplementedError(
        "kiln's MoE layer has no backward yet: run it under torch.no_grad() or use torch's experts for training"
    )


torch.library.register_autograd("kiln::moe_layer", _no_backward, setup_context=lambda ctx, inputs, output: None)
