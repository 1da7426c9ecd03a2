"""kiln.moe's FP8 experts without a GPU: Fp8Experts' and experts(..., weights="fp8")'s argument
checks name the argument before anything runs."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402


def pair(e=4, i=256, h=512):
    return (kiln.moe.Fp8Experts(Tensor((e, i, h), dtype="float8_e4m3fn"), Tensor((e, 2, 4), dtype="float32"),
                                Tensor((e, i, h), dtype="float8_e4m3fn"), Tensor((e, 2, 4), dtype="float32")),
            kiln.moe.Fp8Experts(Tensor((e, h, i), dtype="float8_e4m3fn"), Tensor((e, 4, 2), dtype="float32")))


class Fp8ExpertsChecks(unittest.TestCase):
    def test_the_pair_is_checked_by_name(self):
        w13, w2 = pair()
        self.assertTrue(w13.swiglu and not w2.swiglu)
        self.assertEqual(w13.shape, (4, 512, 512))
        with self.assertRaisesRegex(TypeError, r"`weight` is bf16; Fp8Experts takes e4m3"):
            kiln.moe.Fp8Experts(Tensor((4, 256, 512)), Tensor((4, 2, 4), dtype="float32"))
        with self.assertRaisesRegex(ValueError, r"`up_weight` and `up_scale` come together"):
            kiln.moe.Fp8Experts(w13.weight, w13.scale, w13.up_weight)
        with self.assertRaisesRegex(ValueError, r"`up_weight` has shape \(4, 128, 512\)"):
            kiln.moe.Fp8Experts(w13.weight, w13.scale, Tensor((4, 128, 512), dtype="float8_e4m3fn"), w13.up_scale)

    def test_experts_name_the_weights_and_x(self):
        w13, w2 = pair()
        x = Tensor((6, 512))
        idx, wts = Tensor((6, 2), dtype="int64"), Tensor((6, 2), dtype="float32")
        with self.assertRaisesRegex(TypeError, r"`w13` is Tensor; with weights='fp8'"):
            kiln.moe.experts(x, Tensor((4, 512, 512)), w2, idx, wts, weights="fp8")
        with self.assertRaisesRegex(ValueError, r"`w2` must be the down projection"):
            kiln.moe.experts(x, w13, w13, idx, wts, weights="fp8")
        with self.assertRaisesRegex(ValueError, r"`x` has hidden size 256"):
            kiln.moe.experts(Tensor((6, 256)), w13, w2, idx, wts, weights="fp8")
        with self.assertRaisesRegex(TypeError, r"`x` is f32"):
            kiln.moe.experts(Tensor((6, 512), dtype="float32"), w13, w2, idx, wts, weights="fp8")

    def test_quantize_names_fp8_among_the_formats(self):
        with self.assertRaisesRegex(ValueError, r"its FP8 experts 'fp8'"):
            kiln.moe.quantize_experts(Tensor((4, 256, 256)), Tensor((4, 256, 128)), format="int8")
        with self.assertRaisesRegex(ValueError, r"intermediate size is 40, not a multiple of 16: FP8 rows"):
            kiln.moe.quantize_experts(Tensor((2, 80, 64)), Tensor((2, 64, 40)), format="fp8")


if __name__ == "__main__":
    unittest.main()
