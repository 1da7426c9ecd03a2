"""kiln.fp8's argument checks, without torch or a GPU: every bad input (wrong scale shapes, K not a
multiple of 16, NaN scales, wrong dtypes) is one TypeError or ValueError naming the argument."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402

E4M3 = "float8_e4m3fn"


def m_major(rows, kb, **kw):
    """1x128 scales as per_token_cast_to_fp8 returns them: [rows, kb] with strides (1, rows)."""
    return Tensor((rows, kb), dtype="float32", strides=(1, rows), **kw)


def gemm(m=256, n=512, k=1024, sa=None, sb=None, a_dtype=E4M3, out=None):
    kb = (k + 127) // 128
    a = Tensor((m, k), dtype=a_dtype)
    b = Tensor((n, k), dtype=E4M3)
    sa = sa if sa is not None else m_major(m, kb)
    sb = sb if sb is not None else Tensor(((n + 127) // 128, kb), dtype="float32")
    out = out if out is not None else Tensor((m, n))
    return kiln.fp8.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)


class Fp8GemmChecks(unittest.TestCase):
    def test_k_not_a_multiple_of_16(self):
        with self.assertRaisesRegex(ValueError, r"`a` has K = 100, not a multiple of 16.*pad K with zeros to 112"):
            gemm(k=100)

    def test_lhs_scales_not_m_major(self):
        with self.assertRaisesRegex(ValueError, r"`sa` has shape \(256, 8\) and strides \(8, 1\).*M-major"):
            gemm(sa=Tensor((256, 8), dtype="float32"))

    def test_rhs_scales_per_column(self):
        with self.assertRaisesRegex(ValueError, r"`sb` has shape \(512, 8\); expected \(4, 8\)"):
            gemm(sb=Tensor((512, 8), dtype="float32"))

    def test_nan_scale_on_the_cpu(self):
        kb = 8
        bad = Tensor((4, kb), dtype="float32", device="cpu", values=[[1.0] * kb, [1.0] * kb, [float("nan")] + [1.0] * 7, [1.0] * kb])
        with self.assertRaisesRegex(ValueError, r"`sb` holds nan \(element 16\): scales must be finite"):
            gemm(sb=bad)

    def test_zero_scale_on_the_cpu(self):
        vals = [[0.0] * 256 for _ in range(8)]
        with self.assertRaisesRegex(ValueError, r"`sa` holds 0.0 .*finite and positive"):
            gemm(sa=Tensor((8, 256), dtype="float32", device="cpu", values=vals))

    def test_bf16_operand(self):
        with self.assertRaisesRegex(TypeError, r"`a` is bf16; kiln's FP8 GEMM takes e4m3"):
            gemm(a_dtype="bfloat16")

    def test_bf16_scales(self):
        with self.assertRaisesRegex(TypeError, r"`sa` is bf16; FP8 scales takes f32"):
            gemm(sa=Tensor((8, 256)))

    def test_out_shape(self):
        with self.assertRaisesRegex(ValueError, r"`out` has shape \(256, 256\); expected \(256, 512\)"):
            gemm(out=Tensor((256, 256)))


class Fp8GroupedChecks(unittest.TestCase):
    def args(self, e=4, n=256, k=512, rows=300):
        kb = (k + 127) // 128
        x = (Tensor((rows, k), dtype=E4M3), m_major(rows, kb))
        w = (Tensor((e, n, k), dtype=E4M3), Tensor((e, (n + 127) // 128, kb), dtype="float32"))
        return x, w, Tensor((rows, n)), Tensor((e + 1,), dtype="int32")

    def test_offsets_count(self):
        x, w, out, _ = self.args()
        with self.assertRaisesRegex(ValueError, r"`offsets` has shape \(4,\); expected \(5,\)"):
            kiln.fp8.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(x, w, out, Tensor((4,), dtype="int32"))

    def test_weight_scales_shape(self):
        x, (w, _), out, offs = self.args()
        with self.assertRaisesRegex(ValueError, r"`sw` has shape \(2, 4\); expected \(4, 2, 4\)"):
            kiln.fp8.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(x, (w, Tensor((2, 4), dtype="float32")), out, offs)

    def test_k(self):
        x, w, out, offs = self.args(k=520)
        with self.assertRaisesRegex(ValueError, r"`w` has K = 520, not a multiple of 16"):
            kiln.fp8.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(x, w, out, offs)

    def test_masked_scales_cover_every_row(self):
        e, n, k = 4, 256, 512
        x = (Tensor((e, 64, k), dtype=E4M3), m_major(64, 4))
        w = (Tensor((e, n, k), dtype=E4M3), Tensor((e, 2, 4), dtype="float32"))
        with self.assertRaisesRegex(ValueError, r"the 1x128 scales of 256 rows"):
            kiln.fp8.m_grouped_gemm_fp8_fp8_bf16_nt_masked(x, w, Tensor((e, 64, n)), Tensor((e,), dtype="int32"), 32)


class Fp8CastChecks(unittest.TestCase):
    def test_int_input(self):
        with self.assertRaisesRegex(TypeError, r"`x` is i32; the FP8 casts takes bf16 or f16 or f32"):
            kiln.fp8.per_token_cast_to_fp8(Tensor((4, 128), dtype="int32"))

    def test_rank(self):
        with self.assertRaisesRegex(ValueError, r"`x` has shape \(2, 4, 128\); expected 2 dimensions"):
            kiln.fp8.per_block_cast_to_fp8(Tensor((2, 4, 128)))


if __name__ == "__main__":
    unittest.main()
