"""`kiln.flash_attn_with_kvcache`'s argument checks, without torch or a GPU: every bad input
gets one TypeError or ValueError naming the argument (tensor stand-ins from fakes.py), and the
dense cache transformers keeps passes as it lies."""

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


def passes(test, **kw):
    """The call gets past every check: it ends in the GPU's absence (or the extension's), never
    in an argument error."""
    try:
        kiln.flash_attn_with_kvcache(**kw)
    except (ImportError, RuntimeError) as e:
        test.assertNotIsInstance(e, (ValueError, TypeError))


class KvCacheChecks(unittest.TestCase):
    def refused(self, exc, pattern, **kw):
        with self.assertRaisesRegex(exc, pattern):
            kiln.flash_attn_with_kvcache(**args(**kw))

    def test_valid_arguments_pass_the_checks(self):
        passes(self, **args())

    def test_cpu_tensor(self):
        self.refused(ValueError, r"`k_cache` is on the cpu device", k_cache=Tensor((10, 16, 2, 128), device="cpu"))

    def test_q_dtype(self):
        self.refused(TypeError, r"`q` is f32; kiln's decode takes bf16 or f16", q=Tensor((2, 1, 8, 128), dtype="float32"))

    def test_cache_dtype_differs(self):
        self.refused(TypeError, r"`v_cache` is f16 but `k_cache` is bf16; kiln's KV cache holds K and V of one dtype",
                     v_cache=Tensor((10, 16, 2, 128), dtype="float16"))

    def test_unpaged_cache(self):
        self.refused(ValueError, r"`k_cache` has 3 dimensions .*kiln's paged cache is 4-D", k_cache=Tensor((2, 16, 128)))

    def test_page_size_not_taken(self):
        c = Tensor((10, 32, 2, 128))
        self.refused(ValueError, r"`k_cache` has pages of 32 tokens; kiln's decode takes 16, 64 or 256", k_cache=c, v_cache=c)

    def test_head_dim(self):
        c = Tensor((10, 16, 2, 96))
        self.refused(ValueError, r"`q` has head dim 96; kiln's decode takes head dims 64, 128 or 256",
                     q=Tensor((2, 1, 8, 96)), k_cache=c, v_cache=c)

    def test_gqa_ratio(self):
        c = Tensor((10, 16, 3, 128))
        self.refused(ValueError, r"`q` has 8 heads and `k_cache` 3", k_cache=c, v_cache=c)

    def test_too_many_query_tokens(self):
        self.refused(ValueError, r"`q` has 17 query tokens per sequence; kiln's decode takes 1 to 16",
                     q=Tensor((2, 17, 8, 128)))

    def test_no_block_table_reads_a_cache_per_sequence(self):
        # without a block table, [num_pages, ...] pages are taken for [batch, seqlen, ...] rows
        self.refused(ValueError, r"`k_cache` is \[10, 16, 2, 128\] without a block table, so it holds one sequence per "
                     r"row of the batch, but `q` has batch 2", block_table=None)

    def test_block_table_dtype(self):
        self.refused(TypeError, r"`block_table` is int64; .*`\.int\(\)` makes", block_table=Tensor((2, 5), dtype="int64"))

    def test_block_table_rows(self):
        self.refused(ValueError, r"`block_table` is \[3, 5\]; batch 2 needs \[2, max_pages\]",
                     block_table=Tensor((3, 5), dtype="int32"))

    def test_cache_seqlens_missing_or_wrong(self):
        self.refused(ValueError, r"a paged cache needs `cache_seqlens`", cache_seqlens=None)
        self.refused(ValueError, r"`cache_seqlens` is \[3\]; batch 2 needs \[2\]", cache_seqlens=Tensor((3,), dtype="int32"))
        self.refused(ValueError, r"`cache_seqlens` must be an int32 tensor", cache_seqlens="all")

    def test_cache_leftpad(self):
        self.refused(ValueError, r"`cache_leftpad` is \[3\]; batch 2 needs \[2\]", cache_leftpad=Tensor((3,), dtype="int32"))
        self.refused(TypeError, r"`cache_leftpad` holds i32 first keys", cache_leftpad=Tensor((2,), dtype="float32"))
        c = Tensor((2, 2, 300, 128)).transpose(1, 2)
        self.refused(ValueError, r"`cache_leftpad` .*needs `cache_seqlens`", k_cache=c, v_cache=c, block_table=None,
                     cache_seqlens=None, cache_leftpad=Tensor((2,), dtype="int32"))
        passes(self, **args(k_cache=c, v_cache=c, block_table=None, cache_leftpad=Tensor((2,), dtype="int32")))

    def test_k_without_v(self):
        self.refused(ValueError, r"give both `k` and `v`", k=Tensor((2, 1, 2, 128)))

    def test_new_tokens_shape(self):
        t = Tensor((2, 1, 4, 128))
        self.refused(ValueError, r"`k` is \[2, 1, 4, 128\] and `v` \[2, 1, 4, 128\]; the cache takes \[batch, n_new, 2, 128\]",
                     k=t, v=t)

    def test_cache_strides_kiln_cannot_address(self):
        # rows 12 elements (24 bytes) apart: no copy can stand in for a cache kiln appends to
        c = Tensor((10, 16, 2, 128), strides=(16 * 2 * 256, 2 * 256, 12, 1))
        self.refused(ValueError, r"`k_cache` has stride 12 in dimension 2 .*copies rows 16 bytes at a time", k_cache=c, v_cache=c)
        c = Tensor((10, 16, 2, 128), offset=3)
        self.refused(ValueError, r"`v_cache` starts at 0x[0-9a-f]*6, which is not 16-byte aligned", v_cache=c)

    def test_caches_on_another_device(self):
        c = Tensor((10, 16, 2, 128), device="cuda:1")
        self.refused(ValueError, r"`v_cache` is on cuda:1 but `q` is on cuda:0", v_cache=c)

    def test_cache_dtype_is_a_type_error(self):
        c = Tensor((2, 300, 2, 128), dtype="float32")
        self.refused(TypeError, r"`k_cache` is f32; kiln's KV cache holds bf16 or f16", k_cache=c, v_cache=c, block_table=None)

    def test_bad_scale(self):
        self.refused(ValueError, r"`softmax_scale` is -1; it must be finite and positive", softmax_scale=-1.0)


class DenseCache(unittest.TestCase):
    """The dense form: transformers' [batch, heads_kv, seqlen, head_dim] cache through its
    transposed view, with or without lengths."""

    def cache(self, seq=577):
        return Tensor((2, 2, seq, 128)).transpose(1, 2)  # [2, seq, 2, 128] over BHSD memory

    def test_a_transposed_bhsd_cache_passes_as_it_lies(self):
        import fakes

        c = self.cache()
        q = Tensor((2, 8, 1, 128)).transpose(1, 2)  # transformers' query [B, H, 1, D], transposed
        for lens in (None, Tensor((2,), dtype="int32")):
            del fakes.COPIES[:]
            passes(self, q=q, k_cache=c, v_cache=c, cache_seqlens=lens, softmax_scale=0.5)
            self.assertEqual(fakes.COPIES, [])  # nothing copied

    def test_lengths_past_the_cache(self):
        with self.assertRaisesRegex(ValueError, r"`cache_seqlens` is 578; it must be 0 to the tokens the cache holds \(577\)"):
            kiln.flash_attn_with_kvcache(**args(k_cache=self.cache(), v_cache=self.cache(), block_table=None,
                                                cache_seqlens=578))

    def test_append_needs_lengths(self):
        t = Tensor((2, 1, 2, 128))
        with self.assertRaisesRegex(ValueError, r"appending `k` and `v` needs `cache_seqlens`"):
            kiln.flash_attn_with_kvcache(**args(k_cache=self.cache(), v_cache=self.cache(), block_table=None,
                                                cache_seqlens=None, k=t, v=t))


if __name__ == "__main__":
    unittest.main()
