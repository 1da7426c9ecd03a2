"""Tensor stand-ins for the CPU tests: just the attributes kiln's checks read (dtype, device,
shape, stride(), storage_offset(), data_ptr(), tolist(), and contiguous() and transpose() for
the views kiln reads in place or copies), so the checks run without torch and without a GPU."""


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


_ITEMSIZE = {"float32": 4, "int32": 4, "int64": 8, "float64": 8, "float8_e4m3fn": 1, "uint8": 1}

# Each stand-in has memory of its own (kiln refuses an output that overlaps an input).
_next_ptr = [0x10000000]

# The tensors `contiguous()` was called on, in order (tests look at which views kiln copied).
COPIES = []


class Tensor:
    def __init__(self, shape, dtype="bfloat16", device="cuda:0", strides=None, values=None, offset=0, ptr=None):
        self.shape = tuple(shape)
        self.dtype = Dtype(dtype)
        self.device = Device(device)
        self._strides = tuple(strides) if strides is not None else packed_strides(self.shape)
        self._values = values
        if ptr is None:
            ptr, _next_ptr[0] = _next_ptr[0], _next_ptr[0] + 0x10000000
        self._ptr = ptr
        self._offset = offset
        self.copied = False

    def stride(self):
        return self._strides

    def storage_offset(self):
        return self._offset

    def contiguous(self):
        """A packed copy (marked and counted, so that tests can see a copy was made)."""
        c = Tensor(self.shape, self.dtype.name, str(self.device))
        c.copied = True
        COPIES.append(self)
        return c

    def new_full(self, shape, value, dtype=None):
        t = self.new_empty(shape, dtype)
        t._values = [value] * (shape[0] if shape else 1)
        return t

    def transpose(self, a, b):
        shape, strides = list(self.shape), list(self._strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return Tensor(shape, self.dtype.name, str(self.device), strides, offset=self._offset, ptr=self._ptr)

    def new_empty(self, shape, dtype=None):
        """A new stand-in on this one's device (the extension allocates outputs so)."""
        return Tensor(tuple(shape), (dtype or self.dtype).name, str(self.device))

    def __getitem__(self, index):
        """Basic slicing (slices with step 1 and ints), as views: shape, strides and offset."""
        index = index if isinstance(index, tuple) else (index,)
        shape, strides, offset = [], [], self._offset
        for dim, (n, st) in enumerate(zip(self.shape, self._strides)):
            i = index[dim] if dim < len(index) else slice(None)
            if isinstance(i, int):
                offset += (i % n) * st
                continue
            start, stop, step = i.indices(n)
            assert step == 1, "the stand-in slices with step 1"
            shape.append(max(0, stop - start))
            strides.append(st)
            offset += start * st
        return Tensor(shape, self.dtype.name, str(self.device), strides, offset=offset, ptr=self._ptr)

    def data_ptr(self):
        return self._ptr + self._offset * _ITEMSIZE.get(self.dtype.name, 2)

    def tolist(self):
        return list(self._values)

    def t(self):
        return Tensor(self.shape[::-1], self.dtype.name, str(self.device), self._strides[::-1], ptr=self._ptr)
