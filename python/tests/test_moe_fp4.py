"""kiln.moe's 4-bit experts without torch or a GPU: quantize_experts' and experts(...,
weights=...)'s argument checks (each a TypeError or ValueError naming the argument), and the
extension's host prepack of transformers' expert tensors (it needs no GPU)."""

import array
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402
from test_checks import _native  # noqa: E402 (the extension, or None where it is not built)
from kiln._moe_fp4 import Fp4Experts  # noqa: E402


def pair(e=4, h=256, i=128, format="nvfp4"):
    w13 = Fp4Experts(format, e, i, h, True, Tensor((100,), dtype="uint8"), Tensor((2 * e,), dtype="float32"), 0)
    w2 = Fp4Experts(format, e, h, i, False, Tensor((100,), dtype="uint8"), Tensor((e,), dtype="float32"), 0)
    return w13, w2


def top_k(t=8, k=2):
    return Tensor((t, k), dtype="int64"), Tensor((t, k), dtype="float32")


class QuantizeExperts(unittest.TestCase):
    def test_format_and_shapes_are_named(self):
        gu, down = Tensor((4, 256, 256)), Tensor((4, 256, 128))
        with self.assertRaisesRegex(ValueError, r"`format` is 'int4'; kiln's 4-bit experts take 'nvfp4' or 'mxfp4'"):
            kiln.moe.quantize_experts(gu, down, format="int4")
        with self.assertRaisesRegex(ValueError, r"`gate_up_proj` has shape \(256, 256\); expected 3 dimensions"):
            kiln.moe.quantize_experts(Tensor((256, 256)), down)
        with self.assertRaisesRegex(ValueError, r"`down_proj` has shape \(4, 128, 256\); expected \(4, 256, 128\)"):
            kiln.moe.quantize_experts(gu, Tensor((4, 128, 256)))
        with self.assertRaisesRegex(ValueError, r"`gate_up_proj` has 255 rows per expert"):
            kiln.moe.quantize_experts(Tensor((4, 255, 256)), down)
        with self.assertRaisesRegex(TypeError, r"`down_proj` is i32"):
            kiln.moe.quantize_experts(gu, Tensor((4, 256, 128), dtype="int32"))

    def test_k_must_be_whole_blocks(self):
        with self.assertRaisesRegex(ValueError, r"`gate_up_proj`'s hidden size is 48, not a multiple of 32: mxfp4"):
            kiln.moe.quantize_experts(Tensor((2, 64, 48)), Tensor((2, 48, 32)), format="mxfp4")
        with self.assertRaisesRegex(ValueError, r"`down_proj`'s intermediate size is 40, not a multiple of 16"):
            kiln.moe.quantize_experts(Tensor((2, 80, 64)), Tensor((2, 64, 40)))


class Fp4ExpertsChecks(unittest.TestCase):
    def test_weights_must_be_the_quantized_pair(self):
        x = Tensor((8, 256))
        idx, w = top_k()
        with self.assertRaisesRegex(ValueError, r"`weights` is 'int4'"):
            kiln.moe.experts(x, *pair(), idx, w, weights="int4")
        with self.assertRaisesRegex(TypeError, r"`w13` is Tensor; with weights='nvfp4' pass the Fp4Experts"):
            kiln.moe.experts(x, Tensor((4, 256, 256)), Tensor((4, 256, 128)), idx, w, weights="nvfp4")
        w13, w2 = pair(format="mxfp4")
        with self.assertRaisesRegex(ValueError, r"`w13` holds mxfp4 weights but weights='nvfp4'"):
            kiln.moe.experts(x, w13, w2, idx, w, weights="nvfp4")
        w13, w2 = pair()
        with self.assertRaisesRegex(ValueError, r"`w13` must be gate_up_proj's"):
            kiln.moe.experts(x, w2, w13, idx, w, weights="nvfp4")

    def test_activations_and_routing(self):
        w13, w2 = pair()
        idx, w = top_k()
        with self.assertRaisesRegex(ValueError, r"`x` has hidden size 128 but `w13` was made from gate_up_proj \(4, 256, 256\)"):
            kiln.moe.experts(Tensor((8, 128)), w13, w2, idx, w, weights="nvfp4")
        with self.assertRaisesRegex(TypeError, r"`x` is f32"):
            kiln.moe.experts(Tensor((8, 256), dtype="float32"), w13, w2, idx, w, weights="nvfp4")
        with self.assertRaisesRegex(ValueError, r"`x` has 8 tokens but `top_k_index` has 6"):
            kiln.moe.experts(Tensor((8, 256)), w13, w2, *top_k(t=6), weights="nvfp4")
        with self.assertRaisesRegex(ValueError, r"`layout` is 'interleaved'"):
            kiln.moe.experts(Tensor((8, 256)), w13, w2, idx, w, weights="nvfp4", layout="interleaved")
        _, w2_other = pair(h=512)
        with self.assertRaisesRegex(ValueError, r"`w2` was made from down_proj \(4, 512, 128\)"):
            kiln.moe.experts(Tensor((8, 256)), w13, w2_other, idx, w, weights="nvfp4")
        self.assertEqual(w13.shape, (4, 256, 256))
        self.assertEqual(w2.shape, (4, 256, 128))


class HostPrepack(unittest.TestCase):
    """The extension's prepack of transformers' layout runs on the host: sizes and factors."""

    def setUp(self):
        self.k = _native()
        if self.k is None:
            self.skipTest("skipped: the extension is not built (scripts/python.sh builds it)")

    def prepack(self, values, *args):
        buf = array.array("f", values)
        return self.k.fp4_prepack_experts((buf.buffer_info()[0], len(buf)), *args)

    def test_gate_up_and_down_prepack(self):
        e, i, h = 2, 128, 64
        gu = [((j * 37) % 101 - 50) / 16 for j in range(e * 2 * i * h)]
        data, escale, _ = self.prepack(gu, "nvfp4", e, i, h, True)
        self.assertEqual(len(escale), 2 * e)  # gate and up per expert
        self.assertTrue(all(s > 0 for s in escale))
        down, escale2, _ = self.prepack(gu[: e * h * i], "mxfp4", e, h, i, False)
        self.assertEqual(len(escale2), e)
        # 4.5 bits a weight (codes and scales) or a little more for the padding of the packing
        self.assertGreaterEqual(len(data), e * 2 * i * h * 9 // 16)
        self.assertGreaterEqual(len(down), e * h * i // 2)

    def test_wrong_sizes_and_formats_are_one_sentence(self):
        with self.assertRaisesRegex(ValueError, r"cannot be 2 experts of \[256, 64\]"):
            self.prepack([0.5] * 100, "nvfp4", 2, 128, 64, True)
        with self.assertRaisesRegex(ValueError, r"kiln knows 'nvfp4' and 'mxfp4'"):
            self.prepack([0.5] * 64, "int4", 1, 1, 64, False)


if __name__ == "__main__":
    unittest.main()
