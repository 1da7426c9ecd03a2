"""The 4-bit expert weights of `kiln.moe`: transformers' gate_up_proj / down_proj quantised to
NVFP4 or MXFP4 and prepacked on the host as kiln's 4-bit expert kernels read them
(`quantize_experts`), and the expert layer on them (`experts(..., weights="nvfp4")`): kiln's
routing sorts the (token, expert) pairs, the rows are gathered in expert order, the 4-bit fused
SwiGLU and grouped GEMM run on them, and kiln's combine sums each token's weighted rows."""

from __future__ import annotations

from . import _check as check

FORMATS = ("nvfp4", "mxfp4")
# Elements along K that share a scale (FP8's 128x128 blocks may end short: K need only be whole
# 16-byte rows for TMA).
_BLOCK = {"nvfp4": 16, "mxfp4": 32, "fp8": 16}


class Fp4Experts:
    """One projection of a layer's experts in a 4-bit format, prepacked: `data` (uint8) and
    `escale` (float32, per expert and half) on one device, as `quantize_experts` makes them.
    `swiglu`: transformers' gate_up_proj ([E, 2 n, k]: gate and up, each [E, n, k]); else a
    projection [E, n, k] (down_proj: n hidden, k intermediate)."""

    def __init__(self, format, experts, n, k, swiglu, data, escale, min_scale_byte):
        self.format = format
        self.experts, self.n, self.k = int(experts), int(n), int(k)
        self.swiglu = bool(swiglu)
        self.data, self.escale = data, escale
        self.min_scale_byte = int(min_scale_byte)

    @property
    def shape(self) -> tuple:
        """The shape of the tensor it was made from."""
        return (self.experts, (2 if self.swiglu else 1) * self.n, self.k)

    @property
    def device(self):
        return self.data.device

    def __repr__(self) -> str:
        what = "gate_up_proj" if self.swiglu else "down_proj"
        return f"Fp4Experts({self.format}, {what} {self.shape}, {self.device})"


def _format(format) -> str:
    f = str(format).lower()
    if f not in FORMATS + ("fp8",):
        raise ValueError(f"`format` is {format!r}; kiln's 4-bit experts take 'nvfp4' or 'mxfp4', its FP8 experts 'fp8'")
    return f


def check_quantize(gate_up_proj, down_proj, format) -> tuple:
    """(format, E, H, I) of transformers' gate_up_proj [E, 2I, H] and down_proj [E, H, I]."""
    f = _format(format)
    for name, t in (("gate_up_proj", gate_up_proj), ("down_proj", down_proj)):
        check.require_dtype(name, t, ("bf16", "f16", "f32"), "quantize_experts")
    check.require_rank("gate_up_proj", gate_up_proj, 3, "[experts, 2 intermediate, hidden] (transformers' gate_up_proj)")
    check.require_rank("down_proj", down_proj, 3, "[experts, hidden, intermediate] (transformers' down_proj)")
    e, two_i, h = gate_up_proj.shape
    if two_i % 2:
        raise ValueError(f"`gate_up_proj` has {two_i} rows per expert; gate and up rows need an even count")
    i = two_i // 2
    if tuple(down_proj.shape) != (e, h, i):
        raise ValueError(f"`down_proj` has shape {tuple(down_proj.shape)}; expected ({e}, {h}, {i}) for `gate_up_proj` {tuple(gate_up_proj.shape)}")
    b = _BLOCK[f]
    for name, what, k in (("gate_up_proj", "hidden size", h), ("down_proj", "intermediate size", i)):
        if k % b:
            why = "FP8 rows are whole 16-byte units" if f == "fp8" else f"{f} scales blocks of {b} along K"
            raise ValueError(f"`{name}`'s {what} is {k}, not a multiple of {b}: {why}")
    if e < 1:
        raise ValueError("`gate_up_proj` has no experts")
    return f, e, h, i


def quantize_experts(gate_up_proj, down_proj, format="nvfp4", *, device=None):
    """transformers' expert tensors gate_up_proj [E, 2I, H] and down_proj [E, H, I] (bf16, f16
    or f32) quantised to `format` ('nvfp4': e4m3 scales per 16 and an f32 scale per expert and
    half; 'mxfp4': E8M0 scales per 32) with kiln's recipe, prepacked on the host and put on
    `device` (default: gate_up_proj's GPU, else the current one). Returns (w13, w2), the two
    `Fp4Experts` that `kiln.moe.experts(..., weights=format)` takes. A one-time conversion: it
    copies the weights to the host as float32. 'fp8': e4m3 codes with a scale per 128x128 block
    of each expert, made on the GPU: two `Fp8Experts` (gate and up kept apart, as checkpoints
    store them)."""
    f, e, h, i = check_quantize(gate_up_proj, down_proj, format)
    if f == "fp8":
        from ._moe_fp8 import quantize_experts as quantize_fp8

        return quantize_fp8(gate_up_proj, down_proj, device)
    import torch

    from ._native import native

    if device is None:
        device = gate_up_proj.device if gate_up_proj.device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    out = []
    for name, t, n, k, swiglu in (("gate_up_proj", gate_up_proj, i, h, True), ("down_proj", down_proj, h, i, False)):
        values = t.detach().to("cpu", torch.float32).contiguous()
        try:
            data, escale, min_byte = native().fp4_prepack_experts((int(values.data_ptr()), int(values.numel())), f, e, n, k, swiglu)
        except ValueError as err:
            raise ValueError(f"`{name}`: {err}") from None
        data = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        escale = torch.tensor(escale, dtype=torch.float32).to(device)
        out.append(Fp4Experts(f, e, n, k, swiglu, data, escale, min_byte))
    return tuple(out)


def check_experts(x, w13, w2, weights) -> tuple:
    """(E, H, I) after checking x [T, H] and the 4-bit w13, w2 against `weights`."""
    f = str(weights).lower()
    if f not in FORMATS:
        raise ValueError(f"`weights` is {weights!r}; use None for bf16/f16 tensors, or 'nvfp4' or 'mxfp4' with quantize_experts' weights")
    for name, w, swiglu in (("w13", w13, True), ("w2", w2, False)):
        if not isinstance(w, Fp4Experts):
            raise TypeError(f"`{name}` is {type(w).__name__}; with weights={f!r} pass the Fp4Experts that kiln.moe.quantize_experts returns")
        if w.format != f:
            raise ValueError(f"`{name}` holds {w.format} weights but weights={f!r}; quantize them to {f} or pass weights={w.format!r}")
        if w.swiglu != swiglu:
            want = "gate_up_proj's (the first)" if swiglu else "down_proj's (the second)"
            raise ValueError(f"`{name}` must be {want} of the pair quantize_experts returns")
    check.require_dtype("x", x, ("bf16", "f16"), "kiln's 4-bit experts")
    check.require_rank("x", x, 2, "[tokens, hidden]")
    e, i, h = w13.experts, w13.n, w13.k
    if x.shape[1] != h:
        raise ValueError(f"`x` has hidden size {x.shape[1]} but `w13` was made from gate_up_proj {w13.shape} (hidden {h})")
    if (w2.experts, w2.n, w2.k) != (e, h, i):
        raise ValueError(f"`w2` was made from down_proj {w2.shape}; expected ({e}, {h}, {i}) to match `w13`")
    return e, h, i


def _bytes(t) -> tuple:
    return (int(t.data_ptr()), int(t.numel()) * int(t.element_size()))


def _launch(x, w, offsets, out):
    from ._native import native, stream_of

    dev = x.device.index if x.device.index is not None else 0
    native().fp4_experts(
        dev, stream_of(dev), check.describe(x), _bytes(w.data), _bytes(w.escale), w.format, w.experts, w.n, w.k,
        w.swiglu, w.min_scale_byte, check.describe(offsets), None, check.describe(out),
    )
    return out


def _experts_args(w) -> tuple:
    return (_bytes(w.data), _bytes(w.escale), w.format, w.experts, w.n, w.k, w.swiglu, w.min_scale_byte)


def layer(x, w13, w2, top_k_index, top_k_weights):
    """The layer in one kiln call: routing, the sorted copy of x's rows, both 4-bit projections
    and the combine in pair order (warm and at addresses seen before, one replayed graph)."""
    from ._native import native, stream_of

    torch = __import__("torch")
    dev = x.device.index if x.device.index is not None else 0
    out = torch.empty_like(x)
    route_args = (None, None, check.describe(top_k_index), check.describe(top_k_weights), int(top_k_index.shape[1]),
                  "softmax", False, None, 1.0)
    native().fp4_moe_layer(dev, stream_of(dev), check.describe(x), _experts_args(w13), _experts_args(w2), route_args,
                           check.describe(out))
    return out


def direct_layer(x, w13, w2, top_k_index, top_k_weights, weights):
    """`layer` where the extension takes the arguments as they are (its checks are the same as
    the checking road's); None where it refuses them, and the checking road then says why."""
    f = str(weights).lower()
    if not (isinstance(w13, Fp4Experts) and isinstance(w2, Fp4Experts)) or w13.format != f or w2.format != f:
        return None
    if w13.data.device != x.device or w2.data.device != x.device:
        return None
    try:
        return layer(x, w13, w2, top_k_index, top_k_weights)
    except (TypeError, ValueError, ImportError):  # (ImportError: no torch, no tensors to launch on)
        return None


def experts(x, w13, w2, routing):
    """The layer on 4-bit weights over kiln's routing tables (`kiln.moe.route`)."""
    torch = __import__("torch")
    tokens = x.shape[0]
    rows = routing.row_token.clamp(0, max(tokens - 1, 0))  # (rows past the routed ones hold no token)
    xs = x.index_select(0, rows)
    h = _launch(xs, w13, routing.offsets, torch.empty((xs.shape[0], w13.n), dtype=x.dtype, device=x.device))
    return _launch(h, w2, routing.offsets, torch.empty((xs.shape[0], w2.n), dtype=x.dtype, device=x.device))
