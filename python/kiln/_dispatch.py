"""Which road a kiln op takes: straight to the extension (a warm call then costs about what a
torch op does), or through torch's dispatcher as a `kiln::` custom op where torch must see the
call: under torch.compile, where autograd records it, and for tensor subclasses (fake,
functional, distributed tensors), which only the dispatcher knows how to run."""

from __future__ import annotations

try:
    import torch as _torch
except ImportError:  # no torch: the extension reads tensor-like objects itself
    _torch = None

if _torch is not None:
    _Tensor = _torch.Tensor
    # (a module's weights: a subclass only to be found by `parameters()`; it runs as a tensor)
    _PLAIN = (_torch.Tensor, _torch.nn.Parameter)
    _is_compiling = _torch.compiler.is_compiling
    _grad_enabled = _torch.is_grad_enabled


def through_torch(*tensors) -> bool:
    """Whether a call on `tensors` (None entries allowed) must go through the custom op."""
    if _torch is None:
        return False
    if _is_compiling():
        return True
    grad = _grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if type(t) not in _PLAIN:
            if isinstance(t, _Tensor):
                return True
            continue
        if grad and t.requires_grad:
            return True
    return False
