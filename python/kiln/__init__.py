"""kiln: Hopper GEMM, attention and MoE kernels on torch tensors.

`import kiln` works anywhere (no torch, no GPU needed to import); the ops take CUDA tensors,
launch on the current stream of their device and never synchronise the host.
"""

from __future__ import annotations

from typing import Optional

from . import _check as check

__all__ = [
    "gemm",
    "flash_attn_func",
    "flash_attn_backward",
    "flash_attn_varlen_func",
    "flash_attn_varlen_backward",
    "flash_attn_with_kvcache",
    "check_errors",
    "rms_norm",
    "apply_rotary",
    "moe",
    "fp8",
    "fp4",
    "available",
    "precompile",
    "__version__",
]

try:
    from ._kiln import __version__  # noqa: F401
except ImportError:  # the extension is not built (a source checkout): the pure-Python parts work
    __version__ = "0.0.0+source"

try:
    import torch as _torch
except ImportError:  # kiln's ops need torch; importing kiln does not
    _torch = None

if _torch is not None:
    from . import _ops  # registers the kiln:: custom ops

from ._dispatch import through_torch  # noqa: E402
from ._native import native as _native  # noqa: E402

from . import moe  # noqa: E402
from . import fp8  # noqa: E402
from . import attention_backward as _attention_backward  # noqa: E402
from .attention_backward import flash_attn_backward  # noqa: E402
from .attention_varlen import flash_attn_varlen_backward, flash_attn_varlen_func, window_pair  # noqa: E402, F401
from .kvcache import check_errors, flash_attn_with_kvcache  # noqa: E402
from . import fp4  # noqa: E402


def _require_torch():
    if _torch is None:
        raise ImportError("kiln's ops take torch tensors: install torch (`pip install torch`)")


def available() -> bool:
    """Whether kiln can run here: torch with CUDA, a Hopper GPU, and the extension loaded."""
    if _torch is None or not _torch.cuda.is_available():
        return False
    try:
        from ._native import native

        return bool(native().gpu_available())
    except Exception:
        return False


def gemm(a, b, *, out=None, out_dtype=None, alpha: float = 1.0, beta: float = 0.0, c=None):
    """`alpha * (a @ b) + beta * c` on kiln's GEMM. `a` [M, K] and `b` [K, N] are bf16 or f16,
    row- or column-major (any transposed view), on one GPU; the result is [M, N] in `out_dtype`
    (default: a's dtype; bf16, f16 or f32), or written into `out` (row- or column-major). With
    `c` (shape [M, N]) and `beta`, C is added; `c` may be `out` itself."""
    if through_torch(a, b, out, c):
        if out is None:
            return _torch.ops.kiln.gemm(a, b, c, float(alpha), float(beta), out_dtype or a.dtype)
        _torch.ops.kiln.gemm_out(a, b, out, c, float(alpha), float(beta))
        return out
    return _native().gemm(a, b, out, out_dtype, alpha, beta, c)


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    return_lse: bool = False,
    out=None,
    window_size=(-1, -1),
    deterministic: bool = False,
):
    """Attention with flash-attention's layout and semantics: q [B, Sq, Hq, D], k and v
    [B, Sk, Hkv, D] (Hq a multiple of Hkv: GQA/MQA, K and V never repeated), bf16 or f16, D in
    {64, 128, 256}; causal is aligned bottom-right; `softmax_scale` defaults to 1/sqrt(D);
    `window_size` (left, right), -1 for no bound, is flash-attention's sliding window. Each of
    q, k and v is read where it lies, in its own strides (a transposed view of [B, H, S, D]
    memory, a slice of a fused projection, a cache with spare rows): only one TMA cannot
    address (a last stride other than 1, a stride or start not a multiple of 16 bytes) is
    copied first. Returns out, packed [B, Sq, Hq, D] (flash-attention's layout: the view
    transformers reshapes for free), or writes it into `out` (any strides TMA addresses), and
    the log-sum-exp [B, Hq, Sq] in f32 with `return_lse`. Differentiable in q, k and v (kiln's
    backward, the window included; `deterministic=True` makes its gradients the same bits on
    every run); the `out=` form is
    forward only. Without autograd or torch.compile the call goes straight to the extension
    (checks, allocation and launch in Rust)."""
    if through_torch(q, k, v, out):
        return _attention_backward.forward_through_torch(
            q, k, v, softmax_scale, causal, return_lse, out, window_size, deterministic
        )
    return _native().flash_attn(q, k, v, softmax_scale, causal, return_lse, out, window_size, deterministic)


def _forward_only(name: str, *tensors) -> None:
    if _torch is None or not _torch.is_grad_enabled():
        return
    if any(getattr(t, "requires_grad", False) for t in tensors):
        raise NotImplementedError(
            f"kiln.{name} has no backward yet: run it under torch.no_grad() (inference) or use torch's ops for training"
        )


def rms_norm(x, weight, eps: float = 1e-6, *, residual=None, out=None):
    """RMSNorm over x's last dim H, as transformers' RMSNorm computes it: f32 statistics,
    `x * rsqrt(mean(x^2) + eps)` rounded to x's dtype, then times `weight` [H] (same dtype,
    bf16 or f16). With `residual` (x's shape): first `residual += x` in place, and the sum is
    what is normalised (FlashInfer's fused_add_rmsnorm: the residual add of a decoder layer and
    the next norm in one pass). x's leading dims may be any view that steps by whole rows; the
    result is new (x's shape, contiguous) or written into `out`. Forward only."""
    _forward_only("rms_norm", x, weight, residual)
    if out is None and through_torch(x, weight, residual):
        if residual is None:
            return _torch.ops.kiln.rms_norm(x, weight, float(eps))
        return _torch.ops.kiln.add_rms_norm(x, residual, weight, float(eps))
    return _native().rms_norm(x, weight, float(eps), residual, out)


def apply_rotary(q, k, cos, sin, *, interleaved: bool = False):
    """The rotary position embedding applied in place to q [B, Hq, S, D] and k [B, Hk, S, D]
    (transformers' views after the projections, any strides with the last 1), both in one
    launch; returns (q, k). cos and sin are [B, S, R] (as transformers' rotary module returns
    them) or [S, R], in q's dtype or f32; the first R dims of each head become
    `x * cos + rotate_half(x) * sin` (in f32, rounded once), or with `interleaved` the pairs
    (2i, 2i + 1) rotate (GPT-J's convention, cos and sin given per dim). Forward only."""
    _forward_only("apply_rotary", q, k)
    if through_torch(q, k, cos, sin):
        _torch.ops.kiln.rope_(q, k, cos, sin, bool(interleaved))
    else:
        _native().rope(q, k, cos, sin, bool(interleaved))
    return q, k


def precompile(problems) -> int:
    """JIT-compiles what `problems` need, so that later calls (and CUDA-graph capture) compile
    nothing. `problems` is a list of dicts such as {"op": "gemm", "m": 4096, "n": 4096, "k": 4096,
    "dtype": "bf16"}; returns the number of kernels loaded."""
    _require_torch()
    from ._native import native

    dev = _torch.cuda.current_device()
    return int(native().precompile(dev, [dict(p) for p in problems]))
