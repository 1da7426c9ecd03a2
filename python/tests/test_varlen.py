"""flash_attn_varlen_func's and window_size's argument checks, without torch or a GPU: one
TypeError or ValueError naming the argument (tensor stand-ins from fakes.py)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402


def packed(total, heads=4, d=128, **kw):
    return Tensor((total, heads, d), **kw)


def offsets(*values, **kw):
    return Tensor((len(values),), dtype=kw.pop("dtype", "int32"), values=values, **kw)


class VarlenChecks(unittest.TestCase):
    def call(self, q=None, k=None, cu_q=None, cu_k=None, max_q=70, max_k=70, **kw):
        q = q if q is not None else packed(100)
        k = k if k is not None else packed(100)
        cu_q = cu_q if cu_q is not None else offsets(0, 30, 100)
        cu_k = cu_k if cu_k is not None else offsets(0, 30, 100)
        return kiln.flash_attn_varlen_func(q, k, k, cu_q, cu_k, max_q, max_k, **kw)

    def test_passes_the_checks_to_torch(self):
        try:
            self.call()
        except (ImportError, AttributeError, RuntimeError, TypeError) as e:
            self.assertNotIsInstance(e, ValueError)

    def test_rank(self):
        with self.assertRaisesRegex(ValueError, r"`q` has shape \(2, 50, 4, 128\); expected 3 dimensions"):
            self.call(q=Tensor((2, 50, 4, 128)))

    def test_offsets_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`cu_seqlens_q` is int64; kiln.s packed attention \(cumulative offsets\) takes i32"):
            self.call(cu_q=offsets(0, 30, 100, dtype="int64"))

    def test_offsets_on_cpu(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_k` is on the cpu device"):
            self.call(cu_k=offsets(0, 30, 100, device="cpu"))

    def test_offsets_start_at_zero(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_q`\[0\] is 5"):
            self.call(cu_q=offsets(5, 30, 100))

    def test_offsets_decrease(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_k` decreases at entry 2 \(20 after 30\)"):
            self.call(cu_k=offsets(0, 30, 20, 100))

    def test_offsets_overrun(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_q` ends at 120 but packed `q` has 100 rows"):
            self.call(cu_q=offsets(0, 30, 120))

    def test_batches_differ(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_q` has 3 entries and `cu_seqlens_k` 4"):
            self.call(cu_k=offsets(0, 30, 60, 100))

    def test_max_seqlen_too_small(self):
        with self.assertRaisesRegex(ValueError, r"`max_seqlen_k` is 40 but the longest sequence has 70 rows"):
            self.call(max_k=40)

    def test_heads(self):
        with self.assertRaisesRegex(ValueError, r"`q` has 4 heads and `k` 3"):
            self.call(k=packed(100, heads=3))

    def test_head_dim(self):
        with self.assertRaisesRegex(ValueError, r"head_dim 96 is not one kiln's attention takes"):
            self.call(q=packed(100, d=96), k=packed(100, d=96))

    def test_dtypes(self):
        with self.assertRaisesRegex(TypeError, r"`q`, `k` and `v` must have one dtype"):
            self.call(k=packed(100, dtype="float16"))

    def test_window(self):
        with self.assertRaisesRegex(ValueError, r"`window_size` left is -2"):
            self.call(window_size=(-2, 0))
        with self.assertRaisesRegex(ValueError, r"`window_size` is 5; give \(left, right\)"):
            self.call(window_size=5)


class WindowOnFlashAttnFunc(unittest.TestCase):
    def test_window_checked(self):
        q = Tensor((2, 64, 4, 128))
        with self.assertRaisesRegex(ValueError, r"`window_size` right is -3"):
            kiln.flash_attn_func(q, q, q, window_size=(16, -3))

    def test_window_passes_the_checks(self):
        q = Tensor((2, 64, 4, 128))
        try:
            kiln.flash_attn_func(q, q, q, window_size=(16, 0))
        except (ImportError, AttributeError, RuntimeError, TypeError) as e:
            self.assertNotIsInstance(e, ValueError)


if __name__ == "__main__":
    unittest.main()
