"""Tensor stand-ins for the CPU tests: just the attributes kiln's checks read (dtype, device,
shape, stride(), data_ptr(), tolist()), so the checks run without torch and without a GPU."""


class Dtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"

    def __eq__(self, other):
        return str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class Device:
    def __init__(self, spec):
        self.type, _, index = spec.partition(":")
        self.index = int(index) if index else None

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


def packed_strides(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


# Each stand-in has memory of its own (kiln refuses an output that overlaps an input).
_next_ptr = [0x10000000]


class Tensor:
    def __init__(self, shape, dtype="bfloat16", device="cuda:0", strides=None, values=None, ptr=None):
        self.shape = tuple(shape)
        self.dtype = Dtype(dtype)
        self.device = Device(device)
        self._strides = tuple(strides) if strides is not None else packed_strides(self.shape)
        self._values = values
        if ptr is None:
            ptr, _next_ptr[0] = _next_ptr[0], _next_ptr[0] + 0x10000000
        self._ptr = ptr

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr

    def tolist(self):
        return list(self._values)

    def t(self):
        return Tensor(self.shape[::-1], self.dtype.name, str(self.device), self._strides[::-1], ptr=self._ptr)
