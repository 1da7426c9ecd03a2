"""The Python package's argument checks, without torch or a GPU: every bad input gets one
TypeError or ValueError naming the argument (tensor stand-ins from fakes.py)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402


class GemmChecks(unittest.TestCase):
    def test_cpu_tensor(self):
        with self.assertRaisesRegex(ValueError, r"`a` is on the cpu device"):
            kiln.gemm(Tensor((4, 8), device="cpu"), Tensor((8, 4)))

    def test_two_devices(self):
        with self.assertRaisesRegex(ValueError, r"`b` is on cuda:1 but `a` is on cuda:0"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4), device="cuda:1"))

    def test_wrong_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`a` is f32; kiln's GEMM takes bf16 or f16"):
            kiln.gemm(Tensor((4, 8), dtype="float32"), Tensor((8, 4), dtype="float32"))

    def test_unknown_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`b` is float64; kiln's views are"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4), dtype="float64"))

    def test_out_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`out_dtype` is i32; kiln's GEMM writes bf16, f16 or f32"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4)), out_dtype=Tensor((1,), dtype="int32").dtype)

    def test_mixed_dtypes(self):
        with self.assertRaisesRegex(TypeError, r"`b` is f16 but `a` is bf16"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4), dtype="float16"))

    def test_inner_dimensions(self):
        with self.assertRaisesRegex(ValueError, r"`a` is 4x8 but `b` is 16x4: inner dimensions differ"):
            kiln.gemm(Tensor((4, 8)), Tensor((16, 4)))

    def test_neither_row_nor_column_major(self):
        with self.assertRaisesRegex(ValueError, r"`a` has strides \[16, 2\]"):
            kiln.gemm(Tensor((4, 8), strides=(16, 2)), Tensor((8, 4)))

    def test_out_shape(self):
        with self.assertRaisesRegex(ValueError, r"`out` is 4x5 but `a` @ `b` is 4x4"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4)), out=Tensor((4, 5)))

    def test_out_strides(self):
        # (row- and column-major outputs are both written in place; other orders are refused)
        with self.assertRaisesRegex(ValueError, r"`out` has strides \[8, 2\]"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4)), out=Tensor((4, 4), strides=(8, 2)))

    def test_out_overlaps_an_input(self):
        a = Tensor((4, 4))
        with self.assertRaisesRegex(ValueError, r"`out` overlaps `a`"):
            kiln.gemm(a, Tensor((4, 4)), out=Tensor((4, 4), ptr=a.data_ptr()))

    def test_c_shape(self):
        with self.assertRaisesRegex(ValueError, r"`c` has shape \(3, 4\)"):
            kiln.gemm(Tensor((4, 8)), Tensor((8, 4)), c=Tensor((3, 4)), beta=1.0)

    def test_transposed_views_pass_the_checks(self):
        # A transposed b (column-major) is a valid operand: the checks let it through to torch.
        try:
            kiln.gemm(Tensor((4, 8)), Tensor((4, 8)).t())
        except (ImportError, AttributeError, RuntimeError, TypeError) as e:
            self.assertNotIsInstance(e, ValueError)


class AttentionChecks(unittest.TestCase):
    def q(self, **kw):
        return Tensor((2, 64, 8, 128), **kw)

    def test_rank(self):
        with self.assertRaisesRegex(ValueError, r"`q` has 3 dimensions .*takes 4-D `q`, `k`, `v` and `out`"):
            kiln.flash_attn_func(Tensor((64, 8, 128)), self.q(), self.q())

    def test_head_dim(self):
        with self.assertRaisesRegex(ValueError, r"`q` has head dim 96; kiln's attention takes head dims 64, 128 or 256"):
            t = Tensor((2, 64, 8, 96))
            kiln.flash_attn_func(t, t, t)

    def test_gqa_ratio(self):
        k = Tensor((2, 64, 3, 128))
        with self.assertRaisesRegex(ValueError, r"`q` has 8 heads and `k` 3"):
            kiln.flash_attn_func(self.q(), k, k)

    def test_kv_mismatch(self):
        with self.assertRaisesRegex(ValueError, r"`v` is \[2, 32, 8, 128\] but `k` is \[2, 64, 8, 128\]"):
            kiln.flash_attn_func(self.q(), self.q(), Tensor((2, 32, 8, 128)))

    def test_views_are_read_in_place_and_only_unaddressable_ones_copied(self):
        import fakes

        def copied(q, k):
            """The arguments of a call that the extension copied before its checks passed."""
            del fakes.COPIES[:]
            try:
                kiln.flash_attn_func(q, k, k)
            except (ImportError, RuntimeError):  # the extension missing, or no GPU
                pass
            return [id(t) for t in fakes.COPIES]

        # transformers' key from a BHSD cache, seen [B, S, H, D]; a slice of a fused QKV row
        cache = Tensor((2, 8, 64, 128)).transpose(1, 2)
        fused = Tensor((2, 64, 8, 128), strides=(64 * 24 * 128, 24 * 128, 128, 1))
        for t in (cache, fused, self.q()):
            self.assertEqual(copied(self.q(), t), [])
        for bad in (Tensor((2, 64, 8, 128), strides=(65536, 1024, 128, 2)),  # last stride 2
                    Tensor((2, 64, 8, 128), strides=(64 * 8 * 132, 8 * 132, 132, 1)),  # 264-byte rows
                    Tensor((2, 64, 8, 128), offset=4)):  # starts 8 bytes in
            self.assertEqual(copied(bad, self.q()), [id(bad)])

    def test_out_must_be_addressable_where_it_lies(self):
        bad = Tensor((2, 64, 8, 128), strides=(65536, 1024, 128, 2))
        with self.assertRaisesRegex(ValueError, r"`out` has stride 2 on head_dim; kiln's attention reads head_dim contiguously"):
            kiln.flash_attn_func(self.q(), self.q(), self.q(), out=bad)

    def test_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`v` is f32"):
            kiln.flash_attn_func(self.q(), self.q(), self.q(dtype="float32"))

    def test_out_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`out` is f16"):
            kiln.flash_attn_func(self.q(), self.q(), self.q(), out=self.q(dtype="float16"))


class MoeChecks(unittest.TestCase):
    def test_offsets_count(self):
        with self.assertRaisesRegex(ValueError, r"`offsets` has 3 entries for 4 experts"):
            kiln.moe.grouped_gemm(Tensor((10, 64)), Tensor((4, 32, 64)), Tensor((3,), dtype="int32"))

    def test_offsets_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`offsets` is int64"):
            kiln.moe.grouped_gemm(Tensor((10, 64)), Tensor((4, 32, 64)), Tensor((5,), dtype="int64"))

    def test_offsets_decrease(self):
        off = Tensor((5,), dtype="int32", device="cpu", values=[0, 4, 2, 8, 10])
        with self.assertRaisesRegex(ValueError, r"`offsets` decreases at expert 1: 4 then 2"):
            kiln.moe.grouped_gemm(Tensor((10, 64)), Tensor((4, 32, 64)), off)

    def test_offsets_overrun(self):
        off = Tensor((5,), dtype="int32", device="cpu", values=[0, 4, 6, 8, 12])
        with self.assertRaisesRegex(ValueError, r"ends at 12 but `x` has 10 rows"):
            kiln.moe.grouped_gemm(Tensor((10, 64)), Tensor((4, 32, 64)), off)

    def test_k_mismatch(self):
        with self.assertRaisesRegex(ValueError, r"`x` has K = 64 but `w` has K = 32"):
            kiln.moe.grouped_gemm(Tensor((10, 64)), Tensor((4, 32, 32)), Tensor((5,), dtype="int32"))

    def test_swiglu_layout(self):
        with self.assertRaisesRegex(ValueError, r"`layout` is 'zigzag'"):
            kiln.moe.swiglu(Tensor((10, 64)), Tensor((4, 512, 64)), Tensor((5,), dtype="int32"), layout="zigzag")

    def test_swiglu_interleaved_rows(self):
        with self.assertRaisesRegex(ValueError, r"needs a multiple of 256"):
            kiln.moe.swiglu(Tensor((10, 64)), Tensor((4, 384, 64)), Tensor((5,), dtype="int32"), layout="interleaved")

    def test_routing_weights_shape(self):
        with self.assertRaisesRegex(ValueError, r"`routing_weights` has 9 weights but `x` has 10 rows"):
            kiln.moe.swiglu(
                Tensor((10, 64)), Tensor((4, 512, 64)), Tensor((5,), dtype="int32"), Tensor((9,), dtype="float32")
            )

    def test_experts_top_k_weights(self):
        with self.assertRaisesRegex(ValueError, r"`top_k_weights` has shape \(10, 3\)"):
            kiln.moe.experts(
                Tensor((10, 64)),
                Tensor((4, 512, 64)),
                Tensor((4, 64, 256)),
                Tensor((10, 2), dtype="int64"),
                Tensor((10, 3), dtype="float32"),
            )


class MoeLayerChecks(unittest.TestCase):
    """kiln.moe.experts and kiln.moe.layer: each bad argument is one exception naming it."""

    def experts(self, **kw):
        args = dict(
            x=Tensor((10, 64)),
            w13=Tensor((4, 256, 64)),
            w2=Tensor((4, 64, 128)),
            top_k_index=Tensor((10, 2), dtype="int64"),
            top_k_weights=Tensor((10, 2), dtype="float32"),
        )
        args.update(kw)
        return kiln.moe.experts(**args)

    def layer(self, **kw):
        args = dict(
            hidden_states=Tensor((10, 64)),
            router_logits=Tensor((10, 8), dtype="float32"),
            gate_up_proj=Tensor((8, 256, 64)),
            down_proj=Tensor((8, 64, 128)),
            top_k=2,
        )
        args.update(kw)
        return kiln.moe.layer(**args)

    def test_index_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`top_k_index` is f32; expert indices are int64"):
            self.experts(top_k_index=Tensor((10, 2), dtype="float32"))

    def test_top_k_larger_than_experts(self):
        with self.assertRaisesRegex(ValueError, r"`top_k_index` picks 5 experts per token but there are 4"):
            self.experts(top_k_index=Tensor((10, 5), dtype="int64"), top_k_weights=Tensor((10, 5), dtype="float32"))

    def test_weights_that_disagree(self):
        with self.assertRaisesRegex(ValueError, r"`w2` has shape \(4, 64, 64\); expected \(4, 64, 128\)"):
            self.experts(w2=Tensor((4, 64, 64)))
        with self.assertRaisesRegex(TypeError, r"`w13` is f16 but `x` is bf16"):
            self.experts(w13=Tensor((4, 256, 64), dtype="float16"))
        with self.assertRaisesRegex(ValueError, r"`w13` has shape \(4, 256, 32\)"):
            self.experts(w13=Tensor((4, 256, 32)))

    def test_indices_out_of_range_on_the_host(self):
        idx = Tensor((2, 2), dtype="int64", device="cpu", values=[[0, 1], [3, 4]])
        with self.assertRaisesRegex(ValueError, r"`top_k_index` holds expert 4; the layer has experts 0 to 3"):
            self.experts(x=Tensor((2, 64)), top_k_index=idx, top_k_weights=Tensor((2, 2), dtype="float32"))

    def test_combine_mode(self):
        with self.assertRaisesRegex(ValueError, r"`combine` is 'fast'"):
            self.experts(combine="fast")

    def test_layer_options(self):
        with self.assertRaisesRegex(ValueError, r"`top_k` is 9; it must be 1 to the number of experts \(8\)"):
            self.layer(top_k=9)
        with self.assertRaisesRegex(ValueError, r"`scoring` is 'relu'"):
            self.layer(scoring="relu")
        with self.assertRaisesRegex(ValueError, r"`n_group` is 3"):
            self.layer(n_group=3, topk_group=1)
        with self.assertRaisesRegex(ValueError, r"give both `n_group` and `topk_group`"):
            self.layer(n_group=2)
        with self.assertRaisesRegex(ValueError, r"`router_logits` has shape \(10, 7\)"):
            self.layer(router_logits=Tensor((10, 7), dtype="float32"))
        with self.assertRaisesRegex(TypeError, r"`bias` is bf16"):
            self.layer(bias=Tensor((8,)))


class Import(unittest.TestCase):
    def test_imports_without_a_gpu(self):
        self.assertTrue(kiln.__version__)
        self.assertFalse(kiln.available() and os.environ.get("KILN_EXPECT_NO_GPU"))




def _native():
    try:
        from kiln import _kiln
    except ImportError:
        if os.environ.get("KILN_REQUIRE_NATIVE"):
            raise
        return None
    return _kiln


class NativeChecks(unittest.TestCase):
    """The compiled extension's own checks (kiln::api::raw::check_*), which run before any GPU
    is touched; on a machine without one, a valid call ends in one RuntimeError."""

    def setUp(self):
        self.k = _native()
        if self.k is None:
            self.skipTest("skipped: the extension is not built (scripts/python.sh builds it)")

    def t(self, shape, dtype="bf16", strides=None, ptr=0x100000):
        if strides is None:
            strides, acc = [], 1
            for d in reversed(shape):
                strides.insert(0, acc)
                acc *= d
        return (ptr, dtype, list(shape), list(strides))

    def gemm(self, a, b, out):
        return self.k.gemm(a, b, out, None, 1.0, 0.0, None)

    def test_gemm_inner_dimensions(self):
        with self.assertRaisesRegex(ValueError, r"`b`"):
            self.gemm(Tensor((64, 32)), Tensor((16, 64)), Tensor((64, 64)))

    def test_gemm_dtype_is_a_type_error(self):
        with self.assertRaises(TypeError):
            self.gemm(Tensor((64, 32), "int32"), Tensor((32, 64)), Tensor((64, 64)))

    def test_unknown_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`a` is float64"):
            self.gemm(Tensor((64, 32), "float64"), Tensor((32, 64)), Tensor((64, 64)))

    def test_attention_head_dim(self):
        q = Tensor((1, 64, 4, 96))
        with self.assertRaisesRegex(ValueError, r"96"):
            self.k.flash_attn(q, q, q, 0.1, False)

    def test_attention_mixed_orders_pass_and_odd_strides_are_refused(self):
        # q in BSHD memory, k and v in BHSD memory (viewed [B, S, H, D]): read in place, so the
        # call reaches the GPU (or its absence) instead of a layout error
        q = Tensor((1, 64, 4, 128))
        kv = Tensor((1, 2, 64, 128)).transpose(1, 2)
        if not self.k.gpu_available():
            with self.assertRaisesRegex(RuntimeError, r"GPU|driver"):
                self.k.flash_attn(q, kv, kv, 0.1, False)
        # a stride the kernels cannot address is copied (a key), or refused (an output)
        odd = Tensor((1, 64, 4, 128), strides=(64 * 4 * 132, 4 * 132, 132, 1))
        with self.assertRaisesRegex(ValueError, r"`out` has stride 132 on heads"):
            self.k.flash_attn(q, kv, kv, 0.1, False, False, odd)

    def test_dense_decode_cache_rows_must_be_the_batch(self):
        q = Tensor((2, 1, 8, 128))
        c = Tensor((3, 300, 2, 128))
        with self.assertRaisesRegex(ValueError, r"`k_cache` .* one sequence per row"):
            self.k.flash_attn_kvcache(q, c, c)

    def test_valid_call_without_a_gpu(self):
        if self.k.gpu_available():
            self.skipTest("skipped: a GPU is present")
        with self.assertRaisesRegex(RuntimeError, r"GPU|driver"):
            self.gemm(Tensor((64, 32)), Tensor((32, 64)), Tensor((64, 64)))

    def test_moe_direct_road_takes_valid_calls_whole(self):
        # int64 ids, transformers' gate_up_proj halves read in Rust, the layer's routing options:
        # each valid call passes the extension's checks and stops only for want of a GPU
        if self.k.gpu_available():
            self.skipTest("skipped: a GPU is present")
        x, w13, w2 = Tensor((10, 64)), Tensor((4, 256, 64)), Tensor((4, 64, 128))
        ids, wts = Tensor((10, 2), dtype="int64"), Tensor((10, 2), dtype="float32")
        offsets = Tensor((5,), dtype="int32")
        calls = [
            lambda: self.k.moe_layer(x, w13, w2, None, None, ids, wts, 0, "softmax", False, 0, 0, 1.0, "atomic"),
            lambda: self.k.moe_layer(
                x, w13, w2, Tensor((10, 4), dtype="float32"), None, None, None, 2, "softmax", True, 0, 0, 1.0, "ordered"
            ),
            lambda: self.k.swiglu(x, w13, None, offsets, None, True),
            lambda: self.k.grouped_gemm(x, Tensor((4, 128, 64)), offsets),
        ]
        for call in calls:
            with self.assertRaisesRegex(RuntimeError, r"GPU|driver"):
                call()

    def test_moe_direct_road_names_bad_arguments(self):
        x, w13 = Tensor((10, 64)), Tensor((4, 256, 64))
        ids, wts = Tensor((10, 2), dtype="int64"), Tensor((10, 2), dtype="float32")
        with self.assertRaisesRegex(ValueError, r"`down_proj`"):
            self.k.moe_layer(x, w13, Tensor((4, 64, 64)), None, None, ids, wts, 0, "softmax", False, 0, 0, 1.0, "atomic")
        with self.assertRaisesRegex(TypeError, r"`offsets` is int64"):
            self.k.grouped_gemm(x, Tensor((4, 32, 64)), Tensor((5,), dtype="int64"))


if __name__ == "__main__":
    unittest.main()


class AttentionBackwardChecks(unittest.TestCase):
    """`flash_attn_backward` (and the checks autograd runs) refuses bad input by name."""

    def args(self, **kw):
        q, kv = (2, 64, 8, 128), (2, 96, 2, 128)
        a = {
            "dout": Tensor(q),
            "q": Tensor(q),
            "k": Tensor(kv),
            "v": Tensor(kv),
            "out": Tensor(q),
            "lse": Tensor((2, 8, 64), dtype="float32"),
        }
        a.update(kw)
        return a

    def test_missing_lse(self):
        with self.assertRaisesRegex(ValueError, r"needs the forward's `lse`"):
            kiln.flash_attn_backward(**self.args(lse=None))

    def test_lse_shape(self):
        with self.assertRaisesRegex(ValueError, r"`lse` has shape \(2, 64, 8\); expected \(2, 8, 64\)"):
            kiln.flash_attn_backward(**self.args(lse=Tensor((2, 64, 8), dtype="float32")))

    def test_lse_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`lse` is bf16"):
            kiln.flash_attn_backward(**self.args(lse=Tensor((2, 8, 64))))

    def test_dout_shape(self):
        with self.assertRaisesRegex(ValueError, r"`dout` has shape \(2, 64, 8, 64\); expected \(2, 64, 8, 128\)"):
            kiln.flash_attn_backward(**self.args(dout=Tensor((2, 64, 8, 64))))

    def test_dout_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`dout` is f16 but `q` is bf16"):
            kiln.flash_attn_backward(**self.args(dout=Tensor((2, 64, 8, 128), dtype="float16")))

    def test_dout_device(self):
        with self.assertRaisesRegex(ValueError, r"`q` is on cuda:0 but `dout` is on cuda:1"):
            kiln.flash_attn_backward(**self.args(dout=Tensor((2, 64, 8, 128), device="cuda:1")))

    def test_out_shape(self):
        with self.assertRaisesRegex(ValueError, r"`out` has shape \(2, 63, 8, 128\)"):
            kiln.flash_attn_backward(**self.args(out=Tensor((2, 63, 8, 128))))

    def test_kv_heads(self):
        kv = Tensor((2, 96, 3, 128))
        with self.assertRaisesRegex(ValueError, r"heads_k dividing 8"):
            kiln.flash_attn_backward(**self.args(k=kv, v=kv))

    def test_deterministic_is_a_bool(self):
        with self.assertRaisesRegex(TypeError, r"`deterministic` is str; expected True or False"):
            kiln.flash_attn_backward(**self.args(), deterministic="yes")
        t = Tensor((2, 64, 8, 128))
        with self.assertRaisesRegex(TypeError, r"`deterministic` is int"):
            kiln.flash_attn_func(t, t, t, deterministic=1)

    def test_window_size_is_checked_before_the_launch(self):
        # the backward takes the forward's window (it no longer refuses one): a bad one is named
        with self.assertRaisesRegex(ValueError, r"`window_size` left is -2"):
            kiln.flash_attn_backward(**self.args(), window_size=(-2, 0))
        with self.assertRaisesRegex(ValueError, r"`window_size` is 7; give \(left, right\)"):
            kiln.flash_attn_backward(**self.args(), window_size=7)


class PointwiseChecks(unittest.TestCase):
    def test_rms_norm_dtype(self):
        with self.assertRaisesRegex(TypeError, r"`x` is f32; RMSNorm takes bf16 or f16 rows"):
            kiln.rms_norm(Tensor((4, 64), dtype="float32"), Tensor((64,), dtype="float32"))

    def test_rms_norm_weight_shape(self):
        with self.assertRaisesRegex(ValueError, r"`weight` is \[32\] .*needs a contiguous \[64\]"):
            kiln.rms_norm(Tensor((4, 64)), Tensor((32,)))

    def test_rms_norm_residual_shape(self):
        with self.assertRaisesRegex(ValueError, r"`residual` is \[4, 32\] but `x` is \[4, 64\]"):
            kiln.rms_norm(Tensor((4, 64)), Tensor((64,)), residual=Tensor((4, 32)))

    def test_rms_norm_cpu_tensor(self):
        with self.assertRaisesRegex(ValueError, r"`weight` is on the cpu device"):
            kiln.rms_norm(Tensor((4, 64)), Tensor((64,), device="cpu"))

    def test_rope_rank(self):
        with self.assertRaisesRegex(ValueError, r"`q` has 3 dimensions .*\[batch, heads, seq, head_dim\]"):
            kiln.apply_rotary(Tensor((2, 9, 64)), Tensor((2, 2, 9, 64)), Tensor((9, 64)), Tensor((9, 64)))

    def test_rope_odd_rotary_dims(self):
        q, k = Tensor((2, 4, 9, 64)), Tensor((2, 2, 9, 64))
        with self.assertRaisesRegex(ValueError, r"`cos` rotates 66 dims of heads of 64"):
            kiln.apply_rotary(q, k, Tensor((9, 66)), Tensor((9, 66)))

    def test_rope_table_dtype(self):
        q, k = Tensor((2, 4, 9, 64)), Tensor((2, 2, 9, 64))
        with self.assertRaisesRegex(TypeError, r"`cos` is f16; cos and sin are bf16 \(q's dtype\) or f32"):
            kiln.apply_rotary(q, k, Tensor((9, 64), dtype="float16"), Tensor((9, 64), dtype="float16"))
