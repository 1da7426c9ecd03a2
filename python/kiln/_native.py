"""The compiled extension, loaded on first use: `import kiln` works where it cannot load (no
GPU, no driver), and the first op called there raises one clear error."""

from __future__ import annotations

_native = None


def native():
    """The `kiln._kiln` extension module."""
    global _native
    if _native is None:
        from . import _kiln  # noqa: PLC0415 (import on first use, by design)

        _native = _kiln
    return _native


def stream_of(device_index: int) -> int:
    """The raw CUDA stream torch's current stream on `device_index` wraps: kiln launches there."""
    import torch

    # (torch.cuda.current_stream builds a Stream object: ~20x the cost of the raw handle)
    return torch._C._cuda_getCurrentRawStream(device_index)
