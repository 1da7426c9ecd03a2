"""flash_attn_varlen_func's, its backward's and window_size's argument checks, without torch or
a GPU: one TypeError or ValueError naming the argument (tensor stand-ins from fakes.py). The
offsets' contents are checked on the host only with check_offsets=True (by default the GPU
checks them: the call never reads them back)."""

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

    def checked(self, **kw):
        return self.call(check_offsets=True, **kw)

    def test_passes_the_checks_to_torch(self):
        try:
            self.call()
        except (ImportError, AttributeError, RuntimeError, TypeError) as e:
            self.assertNotIsInstance(e, ValueError)

    def test_rank(self):
        with self.assertRaisesRegex(ValueError, r"`q` has 4 dimensions .*takes 3-D `q`"):
            self.call(q=Tensor((2, 50, 4, 128)))

    def test_offsets_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`cu_seqlens_q` is int64; .*`\.int\(\)` makes"):
            self.call(cu_q=offsets(0, 30, 100, dtype="int64"))

    def test_offsets_on_cpu(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_k` is on the cpu device"):
            self.call(cu_k=offsets(0, 30, 100, device="cpu"))

    def test_offsets_start_at_zero(self):
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_q\[0\] = 5; cumulative offsets start at 0"):
            self.checked(cu_q=offsets(5, 30, 100))

    def test_offsets_decrease(self):
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_k decreases at entry 2 \(20 after 30\)"):
            self.checked(cu_k=offsets(0, 30, 20, 100), cu_q=offsets(0, 30, 60, 100))

    def test_offsets_overrun(self):
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_q ends at 120, which overruns the 100 rows of packed Q"):
            self.checked(cu_q=offsets(0, 30, 120))

    def test_batches_differ(self):
        with self.assertRaisesRegex(ValueError, r"`cu_seqlens_q` has 3 entries and `cu_seqlens_k` 4"):
            self.call(cu_k=offsets(0, 30, 60, 100))

    def test_max_seqlen_too_small(self):
        with self.assertRaisesRegex(ValueError, r"`max_seqlen_k` is 40 but the longest sequence has 70 rows"):
            self.checked(max_k=40)
        with self.assertRaisesRegex(ValueError, r"`max_seqlen_q` is -1; give the longest"):
            self.call(max_q=-1)

    def test_offsets_are_not_read_back_by_default(self):
        # no values to read: a host read would fail; the call gets past every check instead
        cu = Tensor((3,), dtype="int32")
        try:
            self.call(cu_q=cu, cu_k=cu)
        except (ImportError, AttributeError, RuntimeError) as e:
            self.assertNotIsInstance(e, (ValueError, TypeError))

    def test_heads(self):
        with self.assertRaisesRegex(ValueError, r"`q` has 4 heads and `k` 3: .* a multiple of the key/value heads"):
            self.call(k=packed(100, heads=3))

    def test_head_dim(self):
        with self.assertRaisesRegex(ValueError, r"`q` has head dim 96; kiln's attention takes head dims 64, 128 or 256"):
            self.call(q=packed(100, d=96), k=packed(100, d=96))

    def test_dtypes(self):
        with self.assertRaisesRegex(TypeError, r"`k` is f16 but `q` is bf16; .* of one dtype"):
            self.call(k=packed(100, dtype="float16"))

    def test_window(self):
        with self.assertRaisesRegex(ValueError, r"`window_size` left is -2"):
            self.call(window_size=(-2, 0))
        with self.assertRaisesRegex(ValueError, r"`window_size` is 5; give \(left, right\)"):
            self.call(window_size=5)


class VarlenBackwardChecks(unittest.TestCase):
    """flash_attn_varlen_backward's checks (the packed backward autograd runs): the Python
    layer's, then kiln's through the extension, each naming the argument."""

    def call(self, dout=None, q=None, k=None, out=None, lse=None, cu_q=None, cu_k=None, max_q=70, max_k=70,
             no_lse=False, **kw):
        q = q if q is not None else packed(100)
        k = k if k is not None else packed(100, heads=2)
        dout = dout if dout is not None else packed(100)
        out = out if out is not None else packed(100)
        if lse is None and not no_lse:
            lse = Tensor((q.shape[1], q.shape[0]), dtype="float32")
        cu_q = cu_q if cu_q is not None else offsets(0, 30, 100)
        cu_k = cu_k if cu_k is not None else offsets(0, 30, 100)
        return kiln.flash_attn_varlen_backward(dout, q, k, k, out, lse, cu_q, cu_k, max_q, max_k, **kw)

    def test_passes_the_checks(self):
        for kw in ({}, {"causal": True, "window_size": (16, 0)}, {"check_offsets": True}):
            try:
                self.call(**kw)
            except (ImportError, AttributeError, RuntimeError) as e:
                self.assertNotIsInstance(e, (ValueError, TypeError))

    def test_deterministic_is_refused_by_name(self):
        with self.assertRaisesRegex(ValueError, r"`deterministic=True`: kiln's packed backward has no deterministic"):
            self.call(deterministic=True)
        with self.assertRaisesRegex(TypeError, r"`deterministic` is str; expected True or False"):
            self.call(deterministic="yes")

    def test_lse_is_needed(self):
        with self.assertRaisesRegex(ValueError, r"needs the forward's `lse` \(f32 \[heads, total_q\]\)"):
            self.call(no_lse=True)
        with self.assertRaisesRegex(ValueError, r"`lse` is \[100, 4\]; .*\[heads, total_q\] = \[4, 100\]"):
            self.call(lse=Tensor((100, 4), dtype="float32"))

    def test_dout_and_out_like_q(self):
        with self.assertRaisesRegex(ValueError, r"`dout` is \[99, 4, 128\] but `q` is \[100, 4, 128\]"):
            self.call(dout=packed(99))
        with self.assertRaisesRegex(TypeError, r"`dout` is f16 but `q` is bf16"):
            self.call(dout=packed(100, dtype="float16"))
        with self.assertRaisesRegex(ValueError, r"`out` is \[100, 4, 64\] but `q` is"):
            self.call(out=packed(100, d=64))

    def test_dout_packed(self):
        strided = Tensor((100, 4, 128), strides=(2 * 4 * 128, 128, 1))
        with self.assertRaisesRegex(ValueError, r"`dout` has strides .*packed rows: make it contiguous"):
            self.call(dout=strided)

    def test_offsets_and_maxima(self):
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_k decreases at entry 2 \(20 after 30\)"):
            self.call(cu_k=offsets(0, 30, 20, 100), cu_q=offsets(0, 30, 60, 100), check_offsets=True)
        with self.assertRaisesRegex(ValueError, r"`max_seqlen_q` is 40 but the longest sequence has 70 rows"):
            self.call(max_q=40, check_offsets=True)
        with self.assertRaisesRegex(ValueError, r"`max_seqlen_k` is -1; give the longest"):
            self.call(max_k=-1)

    def test_head_dim_256_not_yet(self):
        with self.assertRaisesRegex(ValueError, r"`q` has head dim 256; kiln's packed backward takes head dims \[64, 128\]"):
            self.call(q=packed(100, d=256), k=packed(100, heads=2, d=256), dout=packed(100, d=256),
                      out=packed(100, d=256))

    def test_gqa_ratio_and_window(self):
        with self.assertRaisesRegex(ValueError, r"`q` has 4 heads and `k` 3: .* a multiple of the key/value heads"):
            self.call(k=packed(100, heads=3))
        with self.assertRaisesRegex(ValueError, r"`window_size` left is -2"):
            self.call(window_size=(-2, 0))

    def test_forward_refuses_deterministic(self):
        with self.assertRaisesRegex(ValueError, r"`deterministic=True`"):
            VarlenChecks.call(self, deterministic=True)
        with self.assertRaisesRegex(TypeError, r"`deterministic` is int"):
            VarlenChecks.call(self, deterministic=1)


class WindowOnFlashAttnFunc(unittest.TestCase):
    def test_window_checked(self):
        q = Tensor((2, 64, 4, 128))
        with self.assertRaisesRegex(ValueError, r"`window_size` right is -3"):
            kiln.flash_attn_func(q, q, q, window_size=(16, -3))

    def test_window_passes_the_checks(self):
        q = Tensor((2, 64, 4, 128))
        for window in ((16, 0), [16, 0]):
            try:
                kiln.flash_attn_func(q, q, q, window_size=window)
            except (ImportError, AttributeError, RuntimeError, TypeError) as e:
                self.assertNotIsInstance(e, ValueError)
        with self.assertRaisesRegex(ValueError, r"`window_size` is \(1, 2, 3\); give \(left, right\)"):
            kiln.flash_attn_func(q, q, q, window_size=(1, 2, 3))


if __name__ == "__main__":
    unittest.main()
