"""Mixture-of-experts on kiln's grouped kernels: the grouped GEMM, the fused SwiGLU dual GEMM
and a whole expert layer (route, gate/up, down, combine) over transformers-style weights."""

from __future__ import annotations

from . import _check as check
from ._dispatch import through_torch
from ._native import native

__all__ = ["grouped_gemm", "swiglu", "experts", "offsets_from_counts", "validate_offsets"]


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


def grouped_gemm(x, w, offsets):
    """Y[rows of e] = X[rows of e] @ W[e]^T for every expert e: `x` [rows, K] sorted by expert,
    `w` [E, N, K], `offsets` int32 (E + 1 from 0, or E cumulative ends). Returns y [rows, N];
    rows outside every expert are left unwritten (torch.empty)."""
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


def experts(x, w13, w2, top_k_index, top_k_weights, *, layout: str = "concat"):
    """A whole expert layer, as transformers' experts forward computes it: for every token and
    each of its top-k experts e, silu(x W1[e]^T) * (x W3[e]^T) @ W2[e]^T times its routing weight,
    summed over the k experts. `x` [T, K]; `w13` [E, 2I, K] (see `swiglu`'s layouts); `w2`
    [E, K, I]; `top_k_index` [T, k] (int64 or int32); `top_k_weights` [T, k] or [T, E]. Returns
    [T, K] in x's dtype. Routing (sort by expert, offsets) runs on the GPU without a host sync."""
    check.same_device({"x": x, "w13": w13, "w2": w2, "top_k_index": top_k_index, "top_k_weights": top_k_weights})
    check.require_rank("top_k_index", top_k_index, 2, "[tokens, k]")
    tokens, top_k = top_k_index.shape
    if x.shape[0] != tokens:
        raise ValueError(f"`x` has {x.shape[0]} tokens but `top_k_index` has {tokens}")
    n_experts = w13.shape[0]
    check.require_rank("w2", w2, 3, "[experts, K, I]")
    if w2.shape[0] != n_experts or w2.shape[1] != x.shape[1]:
        raise ValueError(f"`w2` has shape {tuple(w2.shape)}; expected ({n_experts}, {x.shape[1]}, I)")
    if tuple(top_k_weights.shape) not in ((tokens, top_k), (tokens, n_experts)):
        raise ValueError(
            f"`top_k_weights` has shape {tuple(top_k_weights.shape)}; expected ({tokens}, {top_k}) or ({tokens}, {n_experts})"
        )
    torch = _torch()
    flat_expert = top_k_index.reshape(-1)
    token_of = torch.arange(tokens, device=x.device).repeat_interleave(top_k)
    if tuple(top_k_weights.shape) == (tokens, top_k):
        weight_of = top_k_weights.reshape(-1)
    else:
        weight_of = top_k_weights[token_of, flat_expert]
    order = torch.argsort(flat_expert, stable=True)
    # histc, not bincount: bincount sizes its output from the data, a host sync.
    counts = torch.histc(flat_expert.float(), bins=n_experts, min=0, max=n_experts - 1).to(torch.int32)
    offsets = offsets_from_counts(counts)
    rows = token_of[order]
    xs = x.index_select(0, rows)
    h = swiglu(xs, w13, offsets, weight_of[order].to(torch.float32).contiguous(), layout=layout)
    y = grouped_gemm(h, w2, offsets)
    out = torch.zeros_like(x)
    out.index_add_(0, rows, y)
    return out
