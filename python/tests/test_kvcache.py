"""`kiln.flash_attn_with_kvcache`'s argument checks, without torch or a GPU: every bad input
gets one TypeError or ValueError naming the argument (tensor stand-ins from fakes.py)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import kiln  # noqa: E402
from fakes import Tensor  # noqa: E402


def args(**kw):
    """A valid decode step (batch 2, 1 query token, 8 heads over 2 KV heads, d128, pages of
    16), with `kw` replacing arguments."""
    a = dict(
        q=Tensor((2, 1, 8, 128)),
        k_cache=Tensor((10, 16, 2, 128)),
        v_cache=Tensor((10, 16, 2, 128)),
        cache_seqlens=Tensor((2,), dtype="int32"),
        block_table=Tensor((2, 5), dtype="int32"),
    )
    a.update(kw)
    return a


class KvCacheChecks(unittest.TestCase):
    def refused(self, exc, pattern, **kw):
        with self.assertRaisesRegex(exc, pattern):
            kiln.flash_attn_with_kvcache(**args(**kw))

    def test_valid_arguments_pass_the_checks(self):
        from kiln.kvcache import check_args

        a = args()
        scale = check_args(a["q"], a["k_cache"], a["v_cache"], None, None, a["cache_seqlens"], a["block_table"], None)
        self.assertAlmostEqual(scale, 128 ** -0.5)

    def test_cpu_tensor(self):
        self.refused(ValueError, r"`k_cache` is on the cpu device", k_cache=Tensor((10, 16, 2, 128), device="cpu"))

    def test_q_dtype(self):
        self.refused(TypeError, r"`q` is f32; kiln's decode takes bf16 or f16", q=Tensor((2, 1, 8, 128), dtype="float32"))

    def test_cache_dtype_differs(self):
        self.refused(TypeError, r"`v_cache` is f16 but `q` is bf16", v_cache=Tensor((10, 16, 2, 128), dtype="float16"))

    def test_unpaged_cache(self):
        self.refused(ValueError, r"`k_cache` has shape \(2, 16, 128\); expected 4 dimensions", k_cache=Tensor((2, 16, 128)))

    def test_page_size_not_taken(self):
        c = Tensor((10, 32, 2, 128))
        self.refused(ValueError, r"pages of 32 tokens; kiln's decode takes 16, 64 or 256", k_cache=c, v_cache=c)

    def test_head_dim(self):
        c = Tensor((10, 16, 2, 96))
        self.refused(ValueError, r"head_dim 96 is not one", q=Tensor((2, 1, 8, 96)), k_cache=c, v_cache=c)

    def test_gqa_ratio(self):
        c = Tensor((10, 16, 3, 128))
        self.refused(ValueError, r"`q` has 8 heads and `k_cache` 3", k_cache=c, v_cache=c)

    def test_too_many_query_tokens(self):
        self.refused(ValueError, r"`q` has 17 query tokens per sequence; kiln's decode takes 1 to 16",
                     q=Tensor((2, 17, 8, 128)))

    def test_no_block_table(self):
        self.refused(ValueError, r"`block_table` is None", block_table=None)

    def test_block_table_dtype(self):
        self.refused(TypeError, r"`block_table` is int64; the block table takes i32", block_table=Tensor((2, 5), dtype="int64"))

    def test_block_table_rows(self):
        self.refused(ValueError, r"`block_table` has 3 rows but `q` has batch 2", block_table=Tensor((3, 5), dtype="int32"))

    def test_cache_seqlens_missing_or_wrong(self):
        self.refused(ValueError, r"`cache_seqlens` must be an int32 tensor", cache_seqlens=None)
        self.refused(ValueError, r"`cache_seqlens` has shape \(3,\); expected \(2,\)", cache_seqlens=Tensor((3,), dtype="int32"))

    def test_k_without_v(self):
        self.refused(ValueError, r"give both `k` and `v`", k=Tensor((2, 1, 2, 128)))

    def test_new_tokens_shape(self):
        t = Tensor((2, 1, 4, 128))
        self.refused(ValueError, r"`k` has shape \(2, 1, 4, 128\); expected \(2, seqlen_new, 2, 128\)", k=t, v=t)

    def test_strided_cache(self):
        c = Tensor((10, 16, 2, 128), strides=(16 * 2 * 256, 2 * 256, 256, 1))
        self.refused(ValueError, r"`k_cache` has strides .* reads it packed", k_cache=c, v_cache=c)

    def test_bad_scale(self):
        self.refused(ValueError, r"`softmax_scale` is -1.0", softmax_scale=-1.0)


if __name__ == "__main__":
    unittest.main()
