"""FP8 on kiln's Hopper kernels, with DeepGEMM's signatures and layouts: e4m3 operands K-major,
fp32 scales 1x128 on the activations ([M, ceil(K/128)] M-major, as `per_token_cast_to_fp8`
returns them) and 128x128 on the weights, bf16 out, promotion into fp32 every 128 of K.

Scales given on the CPU are checked here (finite and positive) and copied to the GPU; scales on
the GPU are not read on the host (that would synchronise), so a NaN there gives NaN results.
"""

from __future__ import annotations

import math

from . import _check as check

__all__ = [
    "gemm_fp8_fp8_bf16_nt",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
]


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("kiln's ops take torch tensors: install torch (`pip install torch`)") from e
    return torch


def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _require_k(name: str, k: int) -> None:
    if k % 16:
        raise ValueError(
            f"`{name}` has K = {k}, not a multiple of 16: FP8 rows must be whole 16-byte units for TMA; "
            f"pad K with zeros to {(k + 15) // 16 * 16}"
        )


def _require_e4m3(name: str, t, rank: int, doc: str) -> None:
    check.require_dtype(name, t, ("e4m3",), "kiln's FP8 GEMM")
    check.require_rank(name, t, rank, doc)
    expected = check.packed_strides(t.shape)
    if tuple(t.stride()) != expected and math.prod(t.shape) > 1:
        raise ValueError(f"`{name}` has strides {tuple(t.stride())}; FP8 operands are read K-major (call `.contiguous()`)")


def _require_m_major(name: str, s, rows: int, kb: int) -> None:
    """1x128 scales: [rows, kb] with strides (1, rows), or the same memory as [kb, rows]."""
    shape, stride = tuple(s.shape), tuple(s.stride())
    m_major = shape == (rows, kb) and (stride == (1, rows) or kb == 1 or rows == 1)
    stacked = shape == (kb, rows) and (stride == (rows, 1) or kb == 1 or rows == 1)
    if not (m_major or stacked):
        raise ValueError(
            f"`{name}` has shape {shape} and strides {stride}; the 1x128 scales of {rows} rows and {kb} K blocks "
            f"are ({rows}, {kb}) M-major (strides (1, {rows}), as per_token_cast_to_fp8 returns them) or a "
            f"contiguous ({kb}, {rows})"
        )


def _require_block(name: str, s, expected: tuple) -> None:
    check.require_shape(name, s, expected, "128x128 scales: one per 128 rows and 128 of K")
    if tuple(s.stride()) != check.packed_strides(s.shape) and math.prod(s.shape) > 1:
        raise ValueError(f"`{name}` has strides {tuple(s.stride())}; 128x128 scales are read row-major (call `.contiguous()`)")


def _scales(name: str, s, device):
    """fp32 scales on `device`: CPU scales are checked for NaN, infinite or non-positive values
    and copied (keeping their strides)."""
    check.require_dtype(name, s, ("f32",), "FP8 scales")
    if getattr(s.device, "type", str(s.device)) == "cpu":
        for i, v in enumerate(_flat(s.tolist())):
            if not math.isfinite(v) or v <= 0.0:
                raise ValueError(f"`{name}` holds {v} (element {i}): scales must be finite and positive (re-quantise the operand)")
        if device is None:
            return s
        return s.to(device, non_blocking=True)
    return s


def _device(tensors: dict) -> int:
    """The GPU of every tensor in `tensors` (scales and rows may come from the CPU: not listed)."""
    return check.same_device(tensors)


def _launch(fn_name: str, dev: int, *args):
    from ._native import native, stream_of

    getattr(native(), fn_name)(dev, stream_of(dev), *args)


def gemm_fp8_fp8_bf16_nt(lhs, rhs, out):
    """out [M, N] bf16 = dequant(a) @ dequant(b).T with lhs = (a [M, K] e4m3, sa 1x128 scales) and
    rhs = (b [N, K] e4m3, sb [ceil(N/128), ceil(K/128)] fp32)."""
    (a, sa), (b, sb) = lhs, rhs
    dev = _device({"a": a, "b": b, "out": out})
    _require_e4m3("a", a, 2, "(a is [M, K])")
    _require_e4m3("b", b, 2, "(b is [N, K], K-major)")
    (m, k), n = a.shape, b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"`b` has shape {tuple(b.shape)} but `a` has K = {k}; b is [N, K]")
    _require_k("a", k)
    kb = (k + 127) // 128
    _require_m_major("sa", sa, m, kb)
    _require_block("sb", sb, ((n + 127) // 128, kb))
    check.require_dtype("out", out, ("bf16",), "kiln's FP8 GEMM output")
    check.require_shape("out", out, (m, n), "the product a @ b.T")
    sa, sb = _scales("sa", sa, a.device), _scales("sb", sb, a.device)
    _launch("fp8_gemm_nt", dev, *map(check.describe, (a, sa, b, sb, out)))
    return out


def _grouped(lhs, rhs, out, rows, masked: bool):
    (x, sx), (w, sw) = lhs, rhs
    rows_name = "masked_m" if masked else "offsets"
    dev = _device({"x": x, "w": w, "out": out})
    _require_e4m3("w", w, 3, "(w is [E, N, K])")
    e, n, k = w.shape
    if masked:
        _require_e4m3("x", x, 3, "(the masked x is [E, max_m, K])")
        if x.shape[0] != e or x.shape[2] != k:
            raise ValueError(f"`x` has shape {tuple(x.shape)} but `w` is {tuple(w.shape)}; the masked x is [E, max_m, K]")
        x_rows, out_shape = e * x.shape[1], (e, x.shape[1], n)
    else:
        _require_e4m3("x", x, 2, "(x is [rows, K])")
        if x.shape[1] != k:
            raise ValueError(f"`x` has shape {tuple(x.shape)} but `w` has K = {k}")
        x_rows, out_shape = x.shape[0], (x.shape[0], n)
    _require_k("w", k)
    kb = (k + 127) // 128
    _require_m_major("sx", sx, x_rows, kb)
    _require_block("sw", sw, (e, (n + 127) // 128, kb))
    check.require_dtype(rows_name, rows, ("i32",), "the expert rows")
    check.require_shape(rows_name, rows, (e,) if masked else (e + 1,), "counts [E]" if masked else "offsets [E + 1] from 0")
    check.require_dtype("out", out, ("bf16",), "kiln's FP8 grouped GEMM output")
    check.require_shape("out", out, out_shape, "one row per row of x")
    sx, sw = _scales("sx", sx, x.device), _scales("sw", sw, x.device)
    if getattr(rows.device, "type", str(rows.device)) == "cpu":
        rows = rows.to(x.device, non_blocking=True)
    _launch("fp8_grouped_gemm", dev, *map(check.describe, (x, sx, w, sw, rows, out)), masked)
    return out


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, offsets):
    """For every expert e: out[rows of e] = dequant(x[rows of e]) @ dequant(w[e]).T, with x [rows, K]
    sorted by expert and `offsets` int32 [E + 1] (kiln's layout: any count per expert, no padding to
    128 rows; DeepGEMM's m_indices are not needed), w [E, N, K], sw [E, ceil(N/128), ceil(K/128)]."""
    return _grouped(lhs, rhs, out, offsets, masked=False)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked_m, expected_m=None):
    """The masked (decode, CUDA-graph) layout: x [E, max_m, K] with masked_m[e] (int32 [E], read on the
    GPU) valid rows per expert; sx the 1x128 scales of x viewed as [E * max_m, K]; out [E, max_m, N].
    `expected_m` is accepted for DeepGEMM compatibility and unused (kiln's tiles do not depend on it)."""
    del expected_m
    return _grouped(lhs, rhs, out, masked_m, masked=True)


def _cast(x, per_block: bool):
    dev = _device({"x": x})
    check.require_dtype("x", x, ("bf16", "f16", "f32"), "the FP8 casts")
    check.require_rank("x", x, 2, "(x is [rows, cols])")
    check.require_last_stride_one("x", x)
    torch = _torch()
    rows, cols = x.shape
    kb = (cols + 127) // 128
    codes = torch.empty((rows, cols), dtype=torch.float8_e4m3fn, device=x.device)
    if per_block:
        scales = torch.empty(((rows + 127) // 128, kb), dtype=torch.float32, device=x.device)
    else:
        scales = torch.empty((kb, rows), dtype=torch.float32, device=x.device)
    _launch("fp8_cast", dev, *map(check.describe, (x, codes, scales)), per_block)
    return codes, (scales if per_block else scales.t())


def per_token_cast_to_fp8(x):
    """x [rows, cols] (bf16, f16, f32) to (e4m3 codes [rows, cols], fp32 scales [rows, ceil(cols/128)]
    M-major): one scale per row and 128 columns, amax / 448, on kiln's quantisation kernel."""
    return _cast(x, per_block=False)


def per_block_cast_to_fp8(x):
    """x [rows, cols] to (e4m3 codes, fp32 scales [ceil(rows/128), ceil(cols/128)]): one scale per
    128x128 block (the weights' layout)."""
    return _cast(x, per_block=True)
