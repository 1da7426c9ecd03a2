"""4-bit weights on kiln's kernels: NVFP4 (e2m1, one e4m3 scale per 16 along K, an fp32 tensor
scale) and MXFP4 (e2m1, one E8M0 scale per 32) in the standard layout: codes uint8 [rows, K/2]
(two e2m1 per byte, element 0 in the low nibble), scales uint8 [rows, K/block] (the e4m3 or
E8M0 bit patterns). Quantising and dequantising are bit for bit kiln's CPU formats; both wait for
the stream (they refuse NaN inputs and scales with no value). The NVFP4 GEMV takes bf16 x with
M 1..16 and only enqueues; `to_gemv_layout` writes an NVFP4 weight (K a multiple of 128) in the
GEMV layout, each 32-bit word's bits placed for the GEMV's faster decode and each 16-row tile's
steps contiguous, once at load time.
"""

from __future__ import annotations

from typing import Optional

from . import _check as check

__all__ = ["Nvfp4Tensor", "quantize_nvfp4", "quantize_mxfp4", "dequantize", "nvfp4_gemv", "to_gemv_layout"]

_BLOCK = {"nvfp4": 16, "mxfp4": 32}
_OUT = {"bf16", "f16", "f32"}


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("kiln's ops take torch tensors: install torch (`pip install torch`)") from e
    return torch


def _format(format: str) -> str:
    f = str(format).lower()
    if f not in _BLOCK:
        raise ValueError(f"the 4-bit format is {format!r}; kiln knows 'nvfp4' and 'mxfp4'")
    return f


def _require_k(format: str, k: int) -> None:
    b = _BLOCK[format]
    if k % b:
        raise ValueError(f"K = {k} is not a multiple of {b}: {format} scales blocks of {b} along K, so pad K with zeros to {(k + b - 1) // b * b}")


def _require_contiguous(name: str, t) -> None:
    if tuple(t.stride()) != check.packed_strides(t.shape) and len(t.shape) and min(t.shape) > 0 and t.shape[0] > 1:
        raise ValueError(f"`{name}` has strides {tuple(t.stride())}; pass a contiguous row-major tensor (call `.contiguous()`)")
    check.require_last_stride_one(name, t)


def _require_tensor_scale(g: float) -> None:
    if not (g == g and abs(g) != float("inf") and g >= 2.0**-126):
        raise ValueError(f"the nvfp4 tensor scale is {g}: it must be a finite float of at least 2^-126 (the recipe uses amax / 2688)")


def _require_packed(format: str, codes, scales, rows: Optional[int] = None) -> tuple:
    """(rows, K) of packed codes [rows, K/2] and scales [rows, K/block], both uint8 and contiguous."""
    check.require_dtype("codes", codes, ("uint8",), f"{format} codes")
    check.require_dtype("scales", scales, ("uint8",), f"{format} scales")
    check.require_rank("codes", codes, 2, "(codes are [rows, K/2], two e2m1 per byte)")
    check.require_rank("scales", scales, 2, f"(scales are [rows, K/{_BLOCK[format]}])")
    r, half = codes.shape
    k = 2 * half
    _require_k(format, k)
    if rows is not None and r != rows:
        raise ValueError(f"`codes` has {r} rows; expected {rows}")
    check.require_shape("scales", scales, (r, k // _BLOCK[format]), f"one {format} scale per block of {_BLOCK[format]} along K")
    _require_contiguous("codes", codes)
    _require_contiguous("scales", scales)
    return r, k


def _bytes(t) -> tuple:
    return (int(t.data_ptr()), int(t.shape[0]) * int(t.shape[1]))


def _launch(fn_name: str, dev: int, *args):
    from ._native import native, stream_of

    return getattr(native(), fn_name)(dev, stream_of(dev), *args)


class Nvfp4Tensor:
    """An NVFP4 matrix [rows, K]: `codes` uint8 [rows, K/2], `scales` uint8 [rows, K/16] (e4m3
    bit patterns), `tensor_scale` a float (the value is e2m1 x e4m3 x tensor_scale). `layout`
    "standard" (element 2i in the low nibble of byte i) or "gemv" (`to_gemv_layout`: the GEMV
    reads it faster; nothing else takes it)."""

    def __init__(self, codes, scales, tensor_scale: float, layout: str = "standard"):
        self.rows, self.k = _require_packed("nvfp4", codes, scales)
        check.same_device({"codes": codes, "scales": scales})
        _require_tensor_scale(float(tensor_scale))
        if layout not in ("standard", "gemv"):
            raise ValueError(f"the layout is {layout!r}; NVFP4 codes are 'standard' or 'gemv' (to_gemv_layout)")
        if layout == "gemv" and self.k % 128:
            raise ValueError(f"K = {self.k} is not a multiple of 128: the GEMV layout is read by the GEMV's rings, which need it; keep the standard layout")
        self.codes, self.scales, self.tensor_scale = codes, scales, float(tensor_scale)
        self.layout = layout

    @property
    def shape(self) -> tuple:
        return (self.rows, self.k)

    @property
    def device(self):
        return self.codes.device

    def dequantize(self, dtype="bf16", out=None):
        """The values as bf16, f16 or f32 (each the exact product rounded once)."""
        if self.layout != "standard":
            raise ValueError("these codes are in the GEMV layout, which only the GEMV reads: dequantise the standard codes (keep them, or quantise again)")
        return dequantize(self.codes, self.scales, format="nvfp4", tensor_scale=self.tensor_scale, dtype=dtype, out=out)

    def __repr__(self) -> str:
        return f"Nvfp4Tensor(shape={self.shape}, tensor_scale={self.tensor_scale}, layout={self.layout!r}, device={self.device})"


def _quantize(x, format: str, tensor_scale: Optional[float]):
    dev = check.same_device({"x": x})
    check.require_dtype("x", x, ("bf16", "f16", "f32"), f"the {format} quantiser")
    check.require_rank("x", x, 2, "(x is [rows, K])")
    _require_contiguous("x", x)
    rows, k = x.shape
    _require_k(format, k)
    if tensor_scale is not None:
        if format == "mxfp4":
            raise ValueError("mxfp4 has no tensor scale: its E8M0 block scales cover the whole range")
        _require_tensor_scale(float(tensor_scale))
    torch = _torch()
    codes = torch.empty((rows, k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((rows, k // _BLOCK[format]), dtype=torch.uint8, device=x.device)
    g = _launch("fp4_quantize", dev, check.describe(x), format, None if tensor_scale is None else float(tensor_scale), _bytes(codes), _bytes(scales))
    return codes, scales, g


def quantize_nvfp4(x, tensor_scale: Optional[float] = None, layout: str = "standard") -> Nvfp4Tensor:
    """x [rows, K] (bf16, f16, f32; K a multiple of 16) in NVFP4 with NVIDIA's recipe: the tensor
    scale amax / 2688 unless given, block scales e4m3(amax_block / 6 / g), codes rounded to nearest
    even and saturated at 6. NaN or infinite elements are refused with their position. `layout`
    "gemv" (K a multiple of 128) returns the codes in the GEMV layout (`to_gemv_layout`), for
    weights that only the GEMV reads."""
    if layout not in ("standard", "gemv"):
        raise ValueError(f"the layout is {layout!r}; NVFP4 codes are 'standard' or 'gemv' (to_gemv_layout)")
    if layout == "gemv" and len(x.shape) == 2 and x.shape[1] % 128:
        raise ValueError(f"K = {x.shape[1]} is not a multiple of 128: the GEMV layout is read by the GEMV's rings, which need it; keep the standard layout")
    codes, scales, g = _quantize(x, "nvfp4", tensor_scale)
    w = Nvfp4Tensor(codes, scales, g)
    return to_gemv_layout(w) if layout == "gemv" else w


def quantize_mxfp4(x) -> tuple:
    """x [rows, K] (K a multiple of 32) in MXFP4 with the OCP recipe: (codes uint8 [rows, K/2],
    scales uint8 [rows, K/32] as E8M0 exponents)."""
    codes, scales, _ = _quantize(x, "mxfp4", None)
    return codes, scales


def _out_name(dtype) -> str:
    name = dtype if isinstance(dtype, str) else check.DTYPE_NAMES.get(str(dtype), str(dtype))
    if name not in _OUT:
        raise TypeError(f"the output dtype is {name}; dequantising writes bf16, f16 or f32")
    return name


def dequantize(codes, scales, *, format: str = "nvfp4", tensor_scale: float = 1.0, dtype="bf16", out=None):
    """Packed codes [rows, K/2] and scales back to a [rows, K] tensor of `dtype` (or into `out`):
    each value e2m1 x scale (x the NVFP4 tensor scale) rounded once. A scale with no value (a
    negative or NaN e4m3, E8M0's 0xff) is refused."""
    format = _format(format)
    rows, k = _require_packed(format, codes, scales)
    dev = check.same_device({"codes": codes, "scales": scales, "out": out})
    if format == "nvfp4":
        _require_tensor_scale(float(tensor_scale))
    if out is None:
        name = _out_name(dtype)
        torch = _torch()
        torch_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]
        out = torch.empty((rows, k), dtype=torch_dtype, device=codes.device)
    else:
        check.require_dtype("out", out, tuple(sorted(_OUT)), "dequantising")
        check.require_shape("out", out, (rows, k), "the dequantised matrix")
        _require_contiguous("out", out)
    _launch("fp4_dequantize", dev, format, rows, k, _bytes(codes), _bytes(scales), float(tensor_scale), check.describe(out))
    return out


def to_gemv_layout(w: Nvfp4Tensor) -> Nvfp4Tensor:
    """`w` (K a multiple of 128) in the GEMV layout, in new codes and scales: each 32-bit word's
    bits placed so that the GEMV decodes a word in 9 instructions against 13, and in each whole
    16-row tile a step of 128 K's codes and scales contiguous, so that the GEMV's copies read
    whole lines (bit for bit kiln's CPU layout). Enqueued on the current stream."""
    if not isinstance(w, Nvfp4Tensor):
        raise TypeError(f"`w` is {type(w).__name__}; the GEMV layout takes an Nvfp4Tensor (kiln.fp4.quantize_nvfp4)")
    if w.layout == "gemv":
        return w
    if w.k % 128:
        raise ValueError(f"K = {w.k} is not a multiple of 128: the GEMV layout is read by the GEMV's rings, which need it; keep the standard layout")
    dev = check.same_device({"codes": w.codes, "scales": w.scales})
    torch = _torch()
    codes, scales = torch.empty_like(w.codes), torch.empty_like(w.scales)
    _launch("nvfp4_gemv_layout", dev, w.rows, w.k, _bytes(w.codes), _bytes(w.scales), _bytes(codes), _bytes(scales))
    return Nvfp4Tensor(codes, scales, w.tensor_scale, layout="gemv")


def nvfp4_gemv(x, w: Nvfp4Tensor, *, out=None, out_dtype=None):
    """x [M, K] bf16 (M 1..16) @ w.T for NVFP4 `w` [N, K]: [M, N] in `out_dtype` (bf16 or f16,
    default bf16) or into `out`; weights decoded in registers, fp32 accumulation. `w` in the GEMV
    layout (`to_gemv_layout`) runs the faster decode."""
    if not isinstance(w, Nvfp4Tensor):
        raise TypeError(f"`w` is {type(w).__name__}; the NVFP4 GEMV takes an Nvfp4Tensor (kiln.fp4.quantize_nvfp4)")
    dev = check.same_device({"x": x, "codes": w.codes, "out": out})
    check.require_dtype("x", x, ("bf16",), "the NVFP4 GEMV")
    check.require_rank("x", x, 2, "(x is [M, K])")
    _require_contiguous("x", x)
    m, k = x.shape
    if k != w.k:
        raise ValueError(f"`x` has K = {k} but `w` is {w.shape}; x is [M, K] and w [N, K]")
    if not 1 <= m <= 16:
        raise ValueError(f"`x` has M = {m}; the NVFP4 GEMV takes 1 to 16 rows (dequantise w for larger M)")
    if k % 32:
        raise ValueError(f"K = {k} is not a multiple of 32: the NVFP4 GEMV reads 16-byte weight rows, so pad K with zeros to {(k + 31) // 32 * 32}")
    if out is None:
        name = "bf16" if out_dtype is None else _out_name(out_dtype)
        if name == "f32":
            raise TypeError("the NVFP4 GEMV writes bf16 or f16")
        torch = _torch()
        out = torch.empty((m, w.rows), dtype=torch.bfloat16 if name == "bf16" else torch.float16, device=x.device)
    else:
        check.require_dtype("out", out, ("bf16", "f16"), "the NVFP4 GEMV output")
        check.require_shape("out", out, (m, w.rows), "x @ w.T")
        _require_contiguous("out", out)
    _launch("nvfp4_gemv", dev, check.describe(x), w.rows, w.k, _bytes(w.codes), _bytes(w.scales), w.tensor_scale, check.describe(out), w.layout == "gemv")
    return out
