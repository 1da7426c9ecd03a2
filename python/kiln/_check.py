"""Argument checks for kiln's ops, on anything tensor-like (torch tensors, or the stand-ins the
CPU tests use): each failure is one TypeError or ValueError that names the argument."""

from __future__ import annotations

# The dtypes kiln's kernels take, by torch's name for them.
DTYPE_NAMES = {
    "torch.bfloat16": "bf16",
    "torch.float16": "f16",
    "torch.float32": "f32",
    "torch.int32": "i32",
    "torch.float8_e4m3fn": "e4m3",
}


def dtype_name(t) -> str:
    """kiln's short name for `t.dtype` ("bf16", ...), or the torch name if kiln has none."""
    return DTYPE_NAMES.get(str(t.dtype), str(t.dtype).replace("torch.", ""))


def require_dtype(name: str, t, allowed: tuple[str, ...], what: str) -> None:
    d = dtype_name(t)
    if d not in allowed:
        raise TypeError(f"`{name}` is {d}; {what} takes {' or '.join(allowed)}")


def require_cuda(name: str, t) -> None:
    if getattr(t.device, "type", str(t.device)) != "cuda":
        raise ValueError(
            f"`{name}` is on the {t.device} device; kiln's ops run on CUDA tensors "
            f"(move it with `.cuda()`)"
        )


def same_device(tensors: dict) -> int:
    """The CUDA device index every tensor in `tensors` (name -> tensor) is on."""
    first_name, index = None, None
    for name, t in tensors.items():
        if t is None:
            continue
        require_cuda(name, t)
        i = t.device.index if t.device.index is not None else 0
        if index is None:
            first_name, index = name, i
        elif i != index:
            raise ValueError(
                f"`{name}` is on cuda:{i} but `{first_name}` is on cuda:{index}; "
                f"put every tensor of one call on the same GPU"
            )
    return 0 if index is None else index


def require_rank(name: str, t, rank: int, shape_doc: str) -> None:
    if len(t.shape) != rank:
        raise ValueError(f"`{name}` has shape {tuple(t.shape)}; expected {rank} dimensions {shape_doc}")


def require_last_stride_one(name: str, t) -> None:
    if len(t.shape) and t.shape[-1] > 1 and t.stride()[-1] != 1:
        raise ValueError(
            f"`{name}` has stride {t.stride()[-1]} in its last dimension; kiln needs it to be 1 "
            f"(call `.contiguous()`)"
        )


def require_matrix_operand(name: str, t) -> None:
    """A GEMM operand: 2-D, row-major or column-major (one of the two strides is 1)."""
    require_rank(name, t, 2, "(a matrix)")
    s0, s1 = t.stride()
    rows, cols = t.shape
    if not (s1 == 1 or cols == 1 or s0 == 1 or rows == 1):
        raise ValueError(
            f"`{name}` has strides {tuple(t.stride())}; a GEMM operand must be row-major or "
            f"column-major (a transposed view is fine), call `.contiguous()`"
        )


def require_shape(name: str, t, expected: tuple, doc: str) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"`{name}` has shape {tuple(t.shape)}; expected {tuple(expected)} ({doc})")


def packed_strides(shape) -> tuple:
    """The strides of a contiguous tensor of `shape`."""
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def describe(t) -> tuple:
    """(data pointer, dtype, shape, strides): what the Rust side receives for a tensor."""
    return (int(t.data_ptr()), dtype_name(t), [int(x) for x in t.shape], [int(x) for x in t.stride()])
