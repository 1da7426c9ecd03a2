"""Mixture-of-experts on kiln's grouped kernels: the grouped GEMM, the fused SwiGLU dual GEMM
and the whole MoE layer over transformers-style weights, with no permutation materialised:
kiln routes on the GPU (or takes transformers' top-k), the gate/up GEMM gathers each row's
token from the hidden states in its loads, the down projection's epilogue weighs each row and
adds it into its token's output. `route` and `combine` give the two ends alone (for layers that
move rows between GPUs in between)."""

from __future__ import annotations

import math

from . import _check as check
from ._dispatch import through_torch
from ._moe_fp4 import Fp4Experts, quantize_experts
from ._moe_fp8 import Fp8Experts
from ._native import native

__all__ = [
    "grouped_gemm",
    "swiglu",
    "experts",
    "quantize_experts",
    "Fp4Experts",
    "Fp8Experts",
    "layer",
    "route",
    "combine",
    "Routing",
    "offsets_from_counts",
    "validate_offsets",
]


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("kiln's ops take torch tensors: install torch (`pip install torch`)") from e
    return torch


def _check_offsets(offsets, experts: int, rows: int, device):
    """kiln's offsets: int32 [E + 1] starting at 0 (torch's cumulative ends [E] are accepted too,
    a 0 prepended on the GPU). Offsets on the CPU are checked here (non-decreasing, within x's
    rows) and copied to x's GPU; offsets already on the GPU are not read on the host, which would
    synchronise: check them with `validate_offsets` where they come from untrusted code."""
    check.require_dtype("offsets", offsets, ("i32",), "the expert offsets")
    check.require_rank("offsets", offsets, 1, "(one entry per expert, plus one)")
    if offsets.shape[0] not in (experts, experts + 1):
        raise ValueError(
            f"`offsets` has {offsets.shape[0]} entries for {experts} experts; give E + 1 offsets "
            f"(starting at 0) or E cumulative ends"
        )
    on_cpu = getattr(offsets.device, "type", str(offsets.device)) == "cpu"
    if on_cpu:
        validate_offsets(offsets.tolist(), experts, rows)
    torch = _torch()
    if offsets.shape[0] == experts:
        offsets = torch.cat([offsets.new_zeros(1), offsets])
    if on_cpu:
        offsets = offsets.to(device, non_blocking=True)
    return offsets.contiguous()


def _offsets_for(offsets, experts: int, rows: int, device):
    """`offsets` as the kernels read them: already so (int32 [E + 1] on a GPU) costs nothing;
    the other accepted forms go through `_check_offsets`."""
    if getattr(offsets.device, "type", None) == "cuda" and tuple(offsets.shape) == (experts + 1,):
        return offsets
    return _check_offsets(offsets, experts, rows, device)


def validate_offsets(values, experts: int, rows: int) -> None:
    """Raises ValueError unless `values` (E + 1 from 0, or E ends) are non-decreasing and end
    within `rows`."""
    v = list(values)
    if len(v) == experts:
        v = [0] + v
    if v and v[0] != 0:
        raise ValueError(f"`offsets` starts at {v[0]}; the first offset must be 0")
    for e in range(len(v) - 1):
        if v[e + 1] < v[e]:
            raise ValueError(f"`offsets` decreases at expert {e}: {v[e]} then {v[e + 1]}; offsets must be non-decreasing")
    if v and v[-1] > rows:
        raise ValueError(f"`offsets` ends at {v[-1]} but `x` has {rows} rows; the offsets overrun x")


def offsets_from_counts(counts):
    """Offsets [E + 1] (int32, from 0) from per-expert row counts [E], on the GPU."""
    torch = _torch()
    out = torch.zeros(counts.shape[0] + 1, dtype=torch.int32, device=counts.device)
    torch.cumsum(counts, 0, out=out[1:])
    return out


def _direct(call, *args):
    """The direct road of an MoE op: `call(*args)` in the extension, which reads, checks,
    allocates and launches in one native call (a warm call costs about what a torch op does).
    None where it refuses the arguments (a TypeError or ValueError): the op's own road then
    converts what it accepts (offsets as E cumulative ends or on the CPU, ids on the CPU) and
    says in its words what is wrong with the rest."""
    try:
        return call(*args)
    except (TypeError, ValueError):
        return None


def grouped_gemm(x, w, offsets):
    """Y[rows of e] = X[rows of e] @ W[e]^T for every expert e: `x` [rows, K] sorted by expert,
    `w` [E, N, K], `offsets` int32 (E + 1 from 0, or E cumulative ends). Returns y [rows, N];
    rows outside every expert are left unwritten (torch.empty)."""
    if not through_torch(x, w, offsets):
        y = _direct(native().grouped_gemm, x, w, offsets)
        if y is not None:
            return y
    check.require_rank("w", w, 3, "[experts, N, K]")
    offsets = _offsets_for(offsets, w.shape[0], x.shape[0], x.device)
    if through_torch(x, w, offsets):
        return _torch().ops.kiln.grouped_gemm(x, w, offsets)
    return native().grouped_gemm(x, w, offsets)


def swiglu(x, w13, offsets, routing_weights=None, *, w3=None, layout: str = "concat"):
    """H = silu(X @ W1^T) * (X @ W3^T) [* routing weight per row] per expert, fused.

    Weights: with `w3`, `w13` is W1 [E, N, K] and `w3` W3 [E, N, K]. Without it, `w13` is
    [E, 2N, K]: `layout="concat"` (transformers' gate_up_proj: rows 0..N gate, N..2N up) or
    `layout="interleaved"` (kiln's blocks of 128 gate rows then 128 up rows). `routing_weights`
    is one f32 per row of x. Returns h [rows, N]."""
    direct = not through_torch(x, w13, w3, offsets, routing_weights) and layout in ("concat", "interleaved")
    if direct:
        h = _direct(native().swiglu, x, w13, w3, offsets, routing_weights, w3 is None and layout == "concat")
        if h is not None:
            return h
    check.require_rank("w13", w13, 3, "[experts, 2N, K]")
    if w3 is not None:
        w1 = w13
    elif layout == "concat":
        if w13.shape[1] % 2:
            raise ValueError(f"`w13` has {w13.shape[1]} rows per expert; gate and up need an even count")
        n = w13.shape[1] // 2
        w1, w3 = w13[:, :n, :], w13[:, n:, :]
    elif layout == "interleaved":
        w1 = w13
    else:
        raise ValueError(f"`layout` is {layout!r}; use 'concat' or 'interleaved'")
    offsets = _offsets_for(offsets, w13.shape[0], x.shape[0], x.device)
    if through_torch(x, w1, w3, offsets, routing_weights):
        return _torch().ops.kiln.swiglu(x, w1, w3, offsets, routing_weights)
    return native().swiglu(x, w1, w3, offsets, routing_weights)


def _check_weights(x, w13, w2, names=("x", "w13", "w2")):
    """x [T, H], w13 [E, 2I, H], w2 [E, H, I], one dtype (bf16 or f16); returns (T, E, H, I)."""
    xn, n13, n2 = names
    check.require_dtype(xn, x, ("bf16", "f16"), "kiln's MoE layer")
    check.require_rank(xn, x, 2, "[tokens, hidden]")
    check.require_rank(n13, w13, 3, "[experts, 2 intermediate, hidden] (transformers' gate_up_proj)")
    check.require_rank(n2, w2, 3, "[experts, hidden, intermediate] (transformers' down_proj)")
    for name, w in ((n13, w13), (n2, w2)):
        if check.dtype_name(w) != check.dtype_name(x):
            raise TypeError(f"`{name}` is {check.dtype_name(w)} but `{xn}` is {check.dtype_name(x)}; give both the same dtype")
    t, h = x.shape
    e, two_i, h13 = w13.shape
    if h13 != h:
        raise ValueError(f"`{n13}` has shape {tuple(w13.shape)}; expected ({e}, 2 * intermediate, {h}) for `{xn}` of hidden size {h}")
    if two_i % 2:
        raise ValueError(f"`{n13}` has {two_i} rows per expert; gate and up rows need an even count")
    i = two_i // 2
    if tuple(w2.shape) != (e, h, i):
        raise ValueError(f"`{n2}` has shape {tuple(w2.shape)}; expected ({e}, {h}, {i})")
    if h % 8 or i % 8:
        raise ValueError(f"hidden size {h} and intermediate {i}: kiln's MoE layer needs both to be multiples of 8")
    if e > 1024:
        raise ValueError(f"`{n13}` has {e} experts; kiln's MoE layer takes at most 1024")
    return t, e, h, i


def _check_top_k(top_k_index, top_k_weights, tokens, experts):
    """top_k_index [T, k] (int64 or int32), top_k_weights [T, k] or [T, E] (f32, bf16 or f16);
    returns k."""
    check.require_rank("top_k_index", top_k_index, 2, "[tokens, k]")
    if check.dtype_name(top_k_index) not in ("int64", "i32"):
        raise TypeError(f"`top_k_index` is {check.dtype_name(top_k_index)}; expert indices are int64 (torch.topk's) or int32")
    t, k = top_k_index.shape
    if t != tokens:
        raise ValueError(f"`x` has {tokens} tokens but `top_k_index` has {t}")
    if not 1 <= k <= experts:
        raise ValueError(f"`top_k_index` picks {k} experts per token but there are {experts}; top_k must be 1 to the number of experts")
    check.require_dtype("top_k_weights", top_k_weights, ("f32", "bf16", "f16"), "the routing weights")
    if tuple(top_k_weights.shape) not in ((tokens, k), (tokens, experts)):
        raise ValueError(
            f"`top_k_weights` has shape {tuple(top_k_weights.shape)}; expected ({tokens}, {k}) or ({tokens}, {experts})"
        )
    return k


def _on_cpu(t) -> bool:
    return getattr(t.device, "type", str(t.device)) == "cpu"


def _check_index_values(top_k_index, experts, check_indices):
    """Indices on the CPU are checked here; on the GPU only with `check_indices` (a host sync):
    otherwise a pair whose index is out of range is dropped and its token's output is NaN."""
    if not (_on_cpu(top_k_index) or check_indices):
        return
    if hasattr(top_k_index, "aminmax"):
        if not top_k_index.numel():
            return
        lo, hi = (int(v) for v in top_k_index.aminmax())
    else:
        values = top_k_index.tolist()
        flat = [v for row in values for v in (row if isinstance(row, list) else [row])]
        lo, hi = (min(flat), max(flat)) if flat else (0, 0)
    if lo < 0 or hi >= experts:
        bad = lo if lo < 0 else hi
        raise ValueError(f"`top_k_index` holds expert {bad}; the layer has experts 0 to {experts - 1}")


def experts(
    x, w13, w2, top_k_index, top_k_weights, *, layout: str = "concat", combine: str = "atomic", check_indices: bool = False, weights=None
):
    """A whole expert layer, as transformers' experts forward computes it: for every token and
    each of its top-k experts e, silu(x W1[e]^T) * (x W3[e]^T) @ W2[e]^T times its routing weight,
    summed over the k experts. `x` [T, H]; `w13` [E, 2I, H] (transformers' gate_up_proj: gate
    rows then up rows; `layout="interleaved"`: kiln's blocks of 128, see `swiglu`); `w2`
    [E, H, I]; `top_k_index` [T, k] (int64 or int32); `top_k_weights` [T, k] or [T, E]. Returns
    [T, H] in x's dtype. One kiln pipeline, no host sync, CUDA-graph capturable: the routing
    kernel sorts the pairs by expert, the gate/up GEMM gathers x's rows in its loads, the down
    projection adds each weighted row into its token's f32 row (`combine="atomic"`), or
    `combine="ordered"` sums each token's rows in a fixed order (the same bits every run).
    Indices on the CPU are checked; on the GPU an index out of range drops its pair and makes
    its token's row NaN (`check_indices=True` checks them first, at the cost of a host sync).
    `weights="nvfp4"` or `"mxfp4"`: `w13` and `w2` are the `Fp4Experts` pair that
    `quantize_experts` made from gate_up_proj and down_proj; one kiln call routes, copies the
    rows into the experts' order, runs kiln's 4-bit fused SwiGLU and grouped GEMM on them and
    sums each token's weighted rows (in pair order whatever `combine` says). `weights="fp8"`:
    the `Fp8Experts` pair (e4m3 with 128x128 block scales); x's rows are cast to e4m3 per token
    and 128 columns, the SwiGLU's output likewise, in one kiln call summed in pair order."""
    if weights is not None and str(weights).lower() == "fp8":
        return _experts_fp8(x, w13, w2, top_k_index, top_k_weights, layout, combine, check_indices)
    if weights is not None:
        return _experts_fp4(x, w13, w2, top_k_index, top_k_weights, weights, layout, combine, check_indices)
    if layout == "concat" and not check_indices and not through_torch(x, w13, w2, top_k_index, top_k_weights):
        out = _direct(native().moe_layer, x, w13, w2, None, None, top_k_index, top_k_weights, 0, "softmax", False, 0, 0, 1.0, combine)
        if out is not None:
            return out
    check.same_device({"x": x, "w13": w13, "w2": w2, "top_k_weights": top_k_weights})
    t, e, h, i = _check_weights(x, w13, w2) if layout == "concat" else _check_interleaved(x, w13, w2)
    _check_top_k(top_k_index, top_k_weights, t, e)
    if combine not in ("atomic", "ordered"):
        raise ValueError(f"`combine` is {combine!r}; use 'atomic' or 'ordered'")
    _check_index_values(top_k_index, e, check_indices)
    torch = _torch()
    if _on_cpu(top_k_index):
        top_k_index = top_k_index.to(x.device, non_blocking=True)
    check.same_device({"x": x, "top_k_index": top_k_index})
    if layout == "interleaved":
        return _experts_sorted_in_torch(x, w13, w2, top_k_index, top_k_weights)
    from . import _moe_ops  # noqa: F401 (registers kiln::moe_layer)

    return torch.ops.kiln.moe_layer(
        x.contiguous(), w13, w2, None, None, top_k_index.contiguous(), top_k_weights.contiguous(), 0, "softmax", False, 0, 0, 1.0, combine
    )


def _check_prepared(x, weights, top_k_index, top_k_weights, e, layout_why, combine_mode, check_indices):
    """The checks the 4-bit and FP8 layers' checking road shares (after their weights' own):
    layout, top-k, combine, devices and index values; returns top_k_index on x's device."""
    layout, why = layout_why
    if layout != "concat":
        raise ValueError(f"`layout` is {layout!r}; {why} ('concat')")
    _check_top_k(top_k_index, top_k_weights, x.shape[0], e)
    if combine_mode not in ("atomic", "ordered"):
        raise ValueError(f"`combine` is {combine_mode!r}; use 'atomic' or 'ordered'")
    check.same_device({"x": x, "w13": weights[0], "w2": weights[1], "top_k_weights": top_k_weights})
    _check_index_values(top_k_index, e, check_indices)
    if _on_cpu(top_k_index):
        top_k_index = top_k_index.to(x.device, non_blocking=True)
    check.same_device({"x": x, "top_k_index": top_k_index})
    return top_k_index


def _experts_fp4(x, w13, w2, top_k_index, top_k_weights, weights, layout, combine_mode, check_indices):
    from . import _moe_fp4

    if layout == "concat" and not check_indices and combine_mode in ("atomic", "ordered") and not through_torch(
        x, top_k_index, top_k_weights
    ):
        out = _moe_fp4.direct_layer(x, w13, w2, top_k_index, top_k_weights, weights)
        if out is not None:
            return out
    e, _, _ = _moe_fp4.check_experts(x, w13, w2, weights)
    why = "4-bit weights are prepacked from gate_up_proj as it is"
    top_k_index = _check_prepared(x, (w13.data, w2.data), top_k_index, top_k_weights, e, (layout, why), combine_mode, check_indices)
    if not through_torch(x, top_k_index, top_k_weights):
        return _moe_fp4.layer(x.contiguous(), w13, w2, top_k_index.contiguous(), top_k_weights.contiguous())
    r = route(top_k_index, top_k_weights, num_experts=e)
    return combine(_moe_fp4.experts(x.contiguous(), w13, w2, r), r)


def _experts_fp8(x, w13, w2, top_k_index, top_k_weights, layout, combine_mode, check_indices):
    from . import _moe_fp8

    if layout == "concat" and not check_indices and combine_mode in ("atomic", "ordered") and not through_torch(
        x, top_k_index, top_k_weights
    ):
        out = _moe_fp8.direct_layer(x, w13, w2, top_k_index, top_k_weights)
        if out is not None:
            return out
    e, _, _ = _moe_fp8.check_experts(x, w13, w2)
    why = "FP8 weights hold gate and up apart"
    top_k_index = _check_prepared(x, (w13.weight, w2.weight), top_k_index, top_k_weights, e, (layout, why), combine_mode, check_indices)
    if through_torch(x, top_k_index, top_k_weights):
        raise ValueError("kiln's FP8 experts are for inference: call them on plain tensors under torch.no_grad() (no backward, no torch.compile trace)")
    return _moe_fp8.layer(x.contiguous(), w13, w2, top_k_index.contiguous(), top_k_weights.contiguous())


def _check_interleaved(x, w13, w2):
    if w13.shape[1] % 256:
        raise ValueError(f"`w13` has {w13.shape[1]} rows per expert; the interleaved layout needs a multiple of 256")
    return _check_weights(x, w13, w2)


def layer(
    hidden_states,
    router_logits,
    gate_up_proj,
    down_proj,
    *,
    top_k: int,
    scoring: str = "softmax",
    renormalize: bool = False,
    n_group=None,
    topk_group=None,
    bias=None,
    routed_scaling: float = 1.0,
    combine: str = "atomic",
):
    """A whole MoE layer routed by kiln from the router's logits: scores (softmax over the
    experts, or a sigmoid each), the top-k (DeepSeek-V3's grouped top-k with `n_group` groups of
    which `topk_group` are kept; `bias` [E] f32 added for the choice only, as
    e_score_correction_bias is), the k weights renormalised to sum to 1 if asked and times
    `routed_scaling`; equal scores go to the lower expert index. Then the experts as in
    `experts`. `hidden_states` [T, H]; `router_logits` [T, E] (bf16, f16 or f32);
    `gate_up_proj` [E, 2I, H]; `down_proj` [E, H, I]. Returns [T, H]."""
    if not through_torch(hidden_states, router_logits, gate_up_proj, down_proj, bias) and _plain_options(
        top_k, n_group, topk_group, routed_scaling
    ):
        out = _direct(
            native().moe_layer, hidden_states, gate_up_proj, down_proj, router_logits, bias, None, None, top_k,
            scoring, bool(renormalize), int(n_group or 0), int(topk_group or 0), float(routed_scaling), combine,
        )
        if out is not None:
            return out
    names = ("hidden_states", "gate_up_proj", "down_proj")
    check.same_device({"hidden_states": hidden_states, "router_logits": router_logits, "gate_up_proj": gate_up_proj, "down_proj": down_proj, "bias": bias})
    t, e, h, i = _check_weights(hidden_states, gate_up_proj, down_proj, names)
    _check_logits(router_logits, bias, t, e, top_k, scoring, n_group, topk_group, routed_scaling)
    if combine not in ("atomic", "ordered"):
        raise ValueError(f"`combine` is {combine!r}; use 'atomic' or 'ordered'")
    from . import _moe_ops  # noqa: F401 (registers kiln::moe_layer)

    return _torch().ops.kiln.moe_layer(
        hidden_states.contiguous(),
        gate_up_proj,
        down_proj,
        router_logits.contiguous(),
        None if bias is None else bias.contiguous(),
        None,
        None,
        int(top_k),
        scoring,
        bool(renormalize),
        int(n_group or 0),
        int(topk_group or 0),
        float(routed_scaling),
        combine,
    )


def _plain_options(top_k, n_group, topk_group, routed_scaling) -> bool:
    """Whether the routing options are of the types the extension takes as they are (else the
    checks below name what is wrong)."""
    ints = all(v is None or (type(v) is int and v >= 0) for v in (n_group, topk_group))
    return type(top_k) is int and top_k >= 1 and ints and (n_group is None) == (topk_group is None) and isinstance(routed_scaling, (int, float))


def _check_logits(router_logits, bias, tokens, experts, top_k, scoring, n_group, topk_group, routed_scaling):
    check.require_dtype("router_logits", router_logits, ("bf16", "f16", "f32"), "kiln's routing")
    check.require_shape("router_logits", router_logits, (tokens, experts), "[tokens, experts]")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= experts:
        raise ValueError(f"`top_k` is {top_k!r}; it must be 1 to the number of experts ({experts})")
    if scoring not in ("softmax", "sigmoid"):
        raise ValueError(f"`scoring` is {scoring!r}; use 'softmax' or 'sigmoid'")
    if (n_group is None) != (topk_group is None):
        raise ValueError("give both `n_group` and `topk_group` for the grouped top-k, or neither")
    if n_group is not None:
        if not 1 <= n_group <= 32 or experts % n_group:
            raise ValueError(f"`n_group` is {n_group}; it must divide the {experts} experts and be 1 to 32")
        if not 1 <= topk_group <= n_group or topk_group * (experts // n_group) < top_k:
            raise ValueError(f"`topk_group` is {topk_group}; it must be 1 to n_group ({n_group}) and keep at least top_k experts")
    if bias is not None:
        check.require_dtype("bias", bias, ("f32",), "the selection bias")
        check.require_shape("bias", bias, (experts,), "one f32 per expert")
    if not math.isfinite(routed_scaling):
        raise ValueError(f"`routed_scaling` is {routed_scaling}; give a finite factor")


class Routing:
    """The routing's tables on the GPU (int32 unless said): `counts` [E] rows per expert,
    `offsets` [E + 1] (from 0), `row_token` [T k] each expert-sorted row's token (the first
    offsets[E] are real), `row_weight` [T k] f32 its routing weight, `pair_row` [T k] each
    (token, slot) pair's sorted row (-1: dropped), `topk_ids` / `topk_weights` [T, k]."""

    def __init__(self, workspace, layout, tokens, top_k):
        import torch

        def part(name, dtype=None):
            off, n = layout[name]
            v = workspace[off // 4 : off // 4 + n]
            return v.view(dtype) if dtype is not None else v

        self.workspace = workspace
        self.tokens, self.top_k = tokens, top_k
        self.counts, self.offsets = part("counts"), part("offsets")
        self.row_token, self.pair_row = part("row_token"), part("pair_row")
        self.row_weight = part("row_weight", torch.float32)
        self.topk_ids = part("topk_ids").view(tokens, top_k)
        self.topk_weights = part("topk_weights", torch.float32).view(tokens, top_k)


def route(top_k_index=None, top_k_weights=None, *, num_experts: int, router_logits=None, top_k=None, scoring="softmax",
          renormalize=False, n_group=None, topk_group=None, bias=None, routed_scaling=1.0) -> Routing:
    """kiln's routing alone, on the GPU without a host sync: from transformers' `top_k_index` /
    `top_k_weights`, or from `router_logits` with the options of `layer`. Returns the `Routing`
    tables (what `kiln.distributed.ExpertParallelMoE` sends rows by)."""
    from ._native import native, stream_of

    torch = _torch()
    if router_logits is not None:
        t = router_logits.shape[0]
        _check_logits(router_logits, bias, t, num_experts, top_k, scoring, n_group, topk_group, routed_scaling)
        args = (router_logits.contiguous(), None if bias is None else bias.contiguous(), None, None)
        k = top_k
    else:
        if top_k_index is None or top_k_weights is None:
            raise ValueError("give `router_logits`, or `top_k_index` with `top_k_weights`")
        t = top_k_index.shape[0]
        k = _check_top_k(top_k_index, top_k_weights, t, num_experts)
        args = (None, None, top_k_index.contiguous(), top_k_weights.contiguous())
        top_k = k
    dev = (args[0] if args[0] is not None else args[2]).device.index or 0
    groups = None if n_group is None else (int(n_group), int(topk_group))
    route_args = tuple(None if a is None else check.describe(a) for a in args) + (
        int(top_k), scoring, bool(renormalize), groups, float(routed_scaling))
    layout = native().moe_route_layout(dev, num_experts, route_args)
    if layout is None:
        raise ValueError("there are no tokens to route")
    ws = torch.empty(((layout["bytes"] + 3) // 4,), dtype=torch.int32, device=f"cuda:{dev}")
    native().moe_route(dev, stream_of(dev), num_experts, check.describe(ws), route_args)
    return Routing(ws, layout, t, k)


def combine(rows, routing: Routing, *, weighted: bool = True, out=None):
    """Each token's output row from its k rows of `rows` ([R, H], the expert-sorted order of
    `routing`): the sum over its pairs, in pair order, of (routing weight if `weighted`) x row.
    Returns [T, H] in rows' dtype (or fills `out`). A token with a dropped pair is NaN."""
    from ._native import native, stream_of

    torch = _torch()
    check.require_rank("rows", rows, 2, "[rows, hidden]")
    if out is None:
        out = torch.empty((routing.tokens, rows.shape[1]), dtype=rows.dtype, device=rows.device)
    dev = rows.device.index or 0
    native().moe_combine(
        dev,
        stream_of(dev),
        check.describe(rows.contiguous()),
        check.describe(routing.pair_row),
        check.describe(routing.row_weight) if weighted else None,
        check.describe(out),
    )
    return out


def _experts_sorted_in_torch(x, w13, w2, top_k_index, top_k_weights):
    """`experts` for the interleaved W13 (kiln's own layout, which the layer's pipeline does not
    read): the rows sorted by expert in torch, kiln's SwiGLU and grouped GEMM, the combine by
    kiln's routing tables."""
    torch = _torch()
    tokens, top_k = top_k_index.shape
    n_experts = w13.shape[0]
    r = route(top_k_index, top_k_weights, num_experts=n_experts)
    rows = r.row_token.clamp(0, tokens - 1)  # (rows past the routed ones hold no token)
    xs = x.index_select(0, rows)
    h = swiglu(xs, w13, r.offsets, layout="interleaved")
    y = grouped_gemm(h, w2, r.offsets)
    return combine(y, r)
