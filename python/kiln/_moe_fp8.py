"""The FP8 expert weights of `kiln.moe`: e4m3 codes with one f32 scale per 128x128 block of each
expert (DeepSeek-V3's format; `quantize_experts(..., format="fp8")` makes them from
transformers' tensors), and the expert layer on them (`experts(..., weights="fp8")`): one kiln
call routes, copies the rows in expert order cast to e4m3 per token, runs the FP8 fused SwiGLU
(its output cast to e4m3 in the epilogue) and the FP8 down projection, and sums each token's
weighted rows in pair order."""

from __future__ import annotations

from . import _check as check


class Fp8Experts:
    """One projection of a layer's experts in FP8: `weight` [E, N, K] float8_e4m3fn and `scale`
    [E, ceil(N/128), ceil(K/128)] float32 (dequantised weight = code x its block's scale: a
    checkpoint's weight_scale_inv). The gate/up projection also holds `up_weight` and `up_scale`
    of the same shapes (`weight` is then the gate's); down_proj has N = hidden, K = intermediate."""

    def __init__(self, weight, scale, up_weight=None, up_scale=None):
        if (up_weight is None) != (up_scale is None):
            raise ValueError("`up_weight` and `up_scale` come together (the up half of gate_up_proj), or neither")
        for name, t, rank in (("weight", weight, 3), ("scale", scale, 3), ("up_weight", up_weight, 3), ("up_scale", up_scale, 3)):
            if t is not None:
                check.require_rank(name, t, rank, "[experts, rows or row blocks, columns or column blocks]")
        for name, t in (("weight", weight), ("up_weight", up_weight)):
            if t is not None:
                check.require_dtype(name, t, ("e4m3",), "Fp8Experts")
        for name, t in (("scale", scale), ("up_scale", up_scale)):
            if t is not None:
                check.require_dtype(name, t, ("f32",), "Fp8Experts")
        if up_weight is not None and tuple(up_weight.shape) != tuple(weight.shape):
            raise ValueError(f"`up_weight` has shape {tuple(up_weight.shape)}; the gate's `weight` is {tuple(weight.shape)}")
        self.weight, self.scale = weight, scale
        self.up_weight, self.up_scale = up_weight, up_scale

    @property
    def swiglu(self) -> bool:
        return self.up_weight is not None

    @property
    def shape(self) -> tuple:
        """The shape of the tensor it stands for (gate_up_proj's [E, 2N, K] for a gate/up pair)."""
        e, n, k = self.weight.shape
        return (int(e), (2 if self.swiglu else 1) * int(n), int(k))

    @property
    def device(self):
        return self.weight.device

    def __repr__(self) -> str:
        what = "gate_up_proj" if self.swiglu else "down_proj"
        return f"Fp8Experts({what} {self.shape}, {self.device})"


def quantize_blocks(w):
    """[E, N, K] float -> (e4m3 codes [E, N, K], f32 scales [E, ceil(N/128), ceil(K/128)]): each
    128x128 block of each expert scaled by its absolute maximum / 448 (e4m3's largest finite)."""
    import torch

    e, n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    padded = torch.zeros((e, nb * 128, kb * 128), dtype=torch.float32, device=w.device)
    padded[:, :n, :k] = w.float()
    blocks = padded.view(e, nb, 128, kb, 128)
    amax = blocks.abs().amax(dim=(2, 4)).clamp_min(1e-12)
    scale = amax / 448.0
    codes = (blocks / scale[:, :, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return codes.view(e, nb * 128, kb * 128)[:, :n, :k].contiguous(), scale.contiguous()


def quantize_experts(gate_up_proj, down_proj, device=None):
    """transformers' gate_up_proj [E, 2I, H] and down_proj [E, H, I] -> (w13, w2) `Fp8Experts`
    with 128x128 block scales, on `device` (default: gate_up_proj's GPU, else the current one)."""
    import torch

    if device is None:
        device = gate_up_proj.device if gate_up_proj.device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    i = gate_up_proj.shape[1] // 2
    g = gate_up_proj.detach().to(device)
    gate, gate_s = quantize_blocks(g[:, :i])
    up, up_s = quantize_blocks(g[:, i:])
    down, down_s = quantize_blocks(down_proj.detach().to(device))
    return Fp8Experts(gate, gate_s, up, up_s), Fp8Experts(down, down_s)


def check_experts(x, w13, w2) -> tuple:
    """(E, H, I) after checking x [T, H] and the FP8 w13, w2."""
    for name, w, swiglu in (("w13", w13, True), ("w2", w2, False)):
        if not isinstance(w, Fp8Experts):
            raise TypeError(f"`{name}` is {type(w).__name__}; with weights='fp8' pass the Fp8Experts that kiln.moe.quantize_experts(..., format='fp8') returns")
        if w.swiglu != swiglu:
            want = "the gate/up projection (with up_weight)" if swiglu else "the down projection (no up_weight)"
            raise ValueError(f"`{name}` must be {want}")
    check.require_dtype("x", x, ("bf16", "f16"), "kiln's FP8 experts")
    check.require_rank("x", x, 2, "[tokens, hidden]")
    e, i, h = (int(d) for d in w13.weight.shape)
    if x.shape[1] != h:
        raise ValueError(f"`x` has hidden size {x.shape[1]} but `w13` is gate_up_proj {w13.shape} (hidden {h})")
    if tuple(w2.weight.shape) != (e, h, i):
        raise ValueError(f"`w2` is down_proj {tuple(w2.weight.shape)}; expected ({e}, {h}, {i}) to match `w13`")
    return e, h, i


def layer(x, w13, w2, top_k_index, top_k_weights):
    """The layer in one kiln call (warm and at addresses seen before, one replayed graph)."""
    from ._native import native, stream_of

    torch = __import__("torch")
    dev = x.device.index if x.device.index is not None else 0
    out = torch.empty_like(x)
    route_args = (None, None, check.describe(top_k_index), check.describe(top_k_weights), int(top_k_index.shape[1]),
                  "softmax", False, None, 1.0)
    d = check.describe
    native().fp8_moe_layer(dev, stream_of(dev), d(x), (d(w13.weight), d(w13.scale)), (d(w13.up_weight), d(w13.up_scale)),
                           (d(w2.weight), d(w2.scale)), route_args, d(out))
    return out


def direct_layer(x, w13, w2, top_k_index, top_k_weights):
    """`layer` where the extension takes the arguments as they are (its checks are the same as
    the checking road's); None where it refuses them, and the checking road then says why."""
    if not (isinstance(w13, Fp8Experts) and isinstance(w2, Fp8Experts)) or not w13.swiglu or w2.swiglu:
        return None
    try:
        return layer(x, w13, w2, top_k_index, top_k_weights)
    except (TypeError, ValueError, ImportError):  # (ImportError: no torch, no tensors to launch on)
        return None
