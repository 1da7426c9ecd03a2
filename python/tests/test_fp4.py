"""kiln.fp4's argument checks, without torch or a GPU: every bad input (K not whole blocks, codes
or scales of the wrong shape or dtype, a bad tensor scale, M outside the GEMV) is one TypeError or
ValueError naming the argument."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402


def packed(rows=64, k=256, block=16, codes_dtype="uint8", scales_shape=None):
    codes = Tensor((rows, k // 2), dtype=codes_dtype)
    scales = Tensor(scales_shape or (rows, k // block), dtype="uint8")
    return codes, scales


class Fp4Checks(unittest.TestCase):
    def test_quantise_k_not_whole_blocks(self):
        with self.assertRaisesRegex(ValueError, r"K = 40 is not a multiple of 16.*pad K with zeros to 48"):
            kiln.fp4.quantize_nvfp4(Tensor((4, 40)))
        with self.assertRaisesRegex(ValueError, r"K = 48 is not a multiple of 32.*to 64"):
            kiln.fp4.quantize_mxfp4(Tensor((4, 48)))

    def test_quantise_wrong_dtype_rank_and_layout(self):
        with self.assertRaisesRegex(TypeError, r"`x` is i32; the nvfp4 quantiser takes bf16 or f16 or f32"):
            kiln.fp4.quantize_nvfp4(Tensor((4, 64), dtype="int32"))
        with self.assertRaisesRegex(ValueError, r"`x` has shape \(64,\); expected 2 dimensions"):
            kiln.fp4.quantize_nvfp4(Tensor((64,)))
        with self.assertRaisesRegex(ValueError, r"`x` has strides \(1, 4\).*contiguous"):
            kiln.fp4.quantize_nvfp4(Tensor((4, 64), strides=(1, 4)))
        with self.assertRaisesRegex(ValueError, r"`x` is on the cpu device"):
            kiln.fp4.quantize_nvfp4(Tensor((4, 64), device="cpu"))

    def test_tensor_scales(self):
        for g in (0.0, -1.0, float("nan"), float("inf"), 1e-39):
            with self.assertRaisesRegex(ValueError, r"the nvfp4 tensor scale is .*at least 2\^-126"):
                kiln.fp4.quantize_nvfp4(Tensor((4, 64)), tensor_scale=g)
        with self.assertRaisesRegex(ValueError, r"mxfp4 has no tensor scale"):
            kiln.fp4._quantize(Tensor((4, 64)), "mxfp4", 1.0)

    def test_packed_operands(self):
        codes, scales = packed()
        with self.assertRaisesRegex(ValueError, r"`scales` has shape \(64, 8\); expected \(64, 16\)"):
            kiln.fp4.Nvfp4Tensor(codes, Tensor((64, 8), dtype="uint8"), 1.0)
        with self.assertRaisesRegex(TypeError, r"`codes` is bf16; nvfp4 codes takes uint8"):
            kiln.fp4.Nvfp4Tensor(Tensor((64, 128)), scales, 1.0)
        with self.assertRaisesRegex(ValueError, r"tensor scale is 0.0"):
            kiln.fp4.Nvfp4Tensor(codes, scales, 0.0)
        with self.assertRaisesRegex(ValueError, r"K = 40 is not a multiple of 16"):
            kiln.fp4.Nvfp4Tensor(Tensor((4, 20), dtype="uint8"), Tensor((4, 2), dtype="uint8"), 1.0)
        with self.assertRaisesRegex(ValueError, r"`scales` is on cuda:1 but `codes` is on cuda:0"):
            kiln.fp4.Nvfp4Tensor(codes, Tensor((64, 16), dtype="uint8", device="cuda:1"), 1.0)
        w = kiln.fp4.Nvfp4Tensor(codes, scales, 0.5)
        self.assertEqual(w.shape, (64, 256))

    def test_dequantise_arguments(self):
        codes, scales = packed(block=32)
        with self.assertRaisesRegex(ValueError, r"the 4-bit format is 'fp4'"):
            kiln.fp4.dequantize(codes, scales, format="fp4")
        with self.assertRaisesRegex(TypeError, r"the output dtype is i32"):
            kiln.fp4.dequantize(codes, scales, format="mxfp4", dtype="i32")
        with self.assertRaisesRegex(ValueError, r"`out` has shape \(64, 128\); expected \(64, 256\)"):
            kiln.fp4.dequantize(codes, scales, format="mxfp4", out=Tensor((64, 128)))
        with self.assertRaisesRegex(ValueError, r"`scales` has shape \(64, 8\); expected \(64, 16\)"):
            kiln.fp4.dequantize(codes, scales, format="nvfp4")

    def test_gemv_arguments(self):
        codes, scales = packed(rows=512, k=256)
        w = kiln.fp4.Nvfp4Tensor(codes, scales, 1.0)
        with self.assertRaisesRegex(ValueError, r"`x` has M = 17; the NVFP4 GEMV takes 1 to 16 rows"):
            kiln.fp4.nvfp4_gemv(Tensor((17, 256)), w)
        with self.assertRaisesRegex(TypeError, r"`x` is f16; the NVFP4 GEMV takes bf16"):
            kiln.fp4.nvfp4_gemv(Tensor((1, 256), dtype="float16"), w)
        with self.assertRaisesRegex(ValueError, r"`x` has K = 128 but `w` is \(512, 256\)"):
            kiln.fp4.nvfp4_gemv(Tensor((1, 128)), w)
        with self.assertRaisesRegex(TypeError, r"`w` is tuple; the NVFP4 GEMV takes an Nvfp4Tensor"):
            kiln.fp4.nvfp4_gemv(Tensor((1, 256)), (codes, scales))
        with self.assertRaisesRegex(ValueError, r"`out` has shape \(1, 256\); expected \(1, 512\)"):
            kiln.fp4.nvfp4_gemv(Tensor((1, 256)), w, out=Tensor((1, 256)))
        with self.assertRaisesRegex(TypeError, r"writes bf16 or f16"):
            kiln.fp4.nvfp4_gemv(Tensor((1, 256)), w, out_dtype="f32")
        odd = kiln.fp4.Nvfp4Tensor(Tensor((8, 8), dtype="uint8"), Tensor((8, 1), dtype="uint8"), 1.0)
        with self.assertRaisesRegex(ValueError, r"K = 16 is not a multiple of 32"):
            kiln.fp4.nvfp4_gemv(Tensor((1, 16)), odd)

    def test_gemv_layout_arguments(self):
        codes, scales = packed(rows=64, k=160)
        w = kiln.fp4.Nvfp4Tensor(codes, scales, 1.0)
        with self.assertRaisesRegex(ValueError, r"K = 160 is not a multiple of 128: the GEMV layout"):
            kiln.fp4.to_gemv_layout(w)
        with self.assertRaisesRegex(ValueError, r"K = 160 is not a multiple of 128: the GEMV layout"):
            kiln.fp4.Nvfp4Tensor(codes, scales, 1.0, layout="gemv")
        with self.assertRaisesRegex(ValueError, r"the layout is 'blocked'"):
            kiln.fp4.Nvfp4Tensor(codes, scales, 1.0, layout="blocked")
        with self.assertRaisesRegex(TypeError, r"`w` is tuple; the GEMV layout takes an Nvfp4Tensor"):
            kiln.fp4.to_gemv_layout((codes, scales))
        with self.assertRaisesRegex(ValueError, r"K = 160 is not a multiple of 128: the GEMV layout"):
            kiln.fp4.quantize_nvfp4(Tensor((4, 160)), layout="gemv")
        codes, scales = packed(rows=64, k=256)
        g = kiln.fp4.Nvfp4Tensor(codes, scales, 1.0, layout="gemv")
        self.assertIs(kiln.fp4.to_gemv_layout(g), g)
        with self.assertRaisesRegex(ValueError, r"GEMV layout, which only the GEMV reads"):
            g.dequantize()


if __name__ == "__main__":
    unittest.main()
