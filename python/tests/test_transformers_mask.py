"""kiln's transformers mask function on the CPU (skipped without torch and transformers): the
compact decode mask (each sequence's first key and end, made without reading anything back)
stands for exactly the mask sdpa would build whenever the padding is one run of keys ending at
the queries, marks every other row bad (first key -1), and leaves what it does not reduce to
sdpa's mask function."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

try:
    import torch
    from transformers.masking_utils import causal_mask_function, sdpa_mask, sliding_window_causal_mask_function
except ImportError:  # the CPU tests run without torch: nothing to check here then
    torch = None

from kiln.integrations.transformers import dense_mask, is_compact, kiln_mask  # noqa: E402


@unittest.skipIf(torch is None, "skipped: needs torch and transformers")
class CompactMask(unittest.TestCase):
    def sdpa(self, b, q, kv, offset, pad):
        return sdpa_mask(batch_size=b, q_length=q, kv_length=kv, q_offset=offset, attention_mask=pad,
                         allow_is_causal_skip=False, device="cpu")

    def test_left_padding_under_a_static_cache(self):
        # a static cache of 12 slots; 7 tokens seen before this step (a tensor, as StaticLayer
        # keeps it); sequence 0 left-padded by 3, sequence 1 not, sequence 2 by 6
        seen, kv = torch.tensor(7), 12
        for q in (1, 3):
            width = 7 + q
            pad = torch.ones(3, width, dtype=torch.bool)
            pad[0, :3] = False
            pad[2, :6] = False
            m = kiln_mask(3, q, kv, q_offset=seen, attention_mask=pad.long(), device="cpu")
            self.assertTrue(is_compact(m))
            self.assertEqual(m[0, 0, 0].tolist(), [3, 0, 6])
            self.assertEqual(m[0, 0, 1].tolist(), [7 + q] * 3)
            self.assertTrue(torch.equal(dense_mask(m, q, kv), self.sdpa(3, q, kv, 7, pad)))

    def test_a_row_that_is_not_one_run_is_marked_bad(self):
        pad = torch.ones(2, 8, dtype=torch.bool)
        pad[1, 4] = False  # a hole
        m = kiln_mask(2, 1, 10, q_offset=torch.tensor(7), attention_mask=pad, device="cpu")
        self.assertEqual(m[0, 0, 0].tolist(), [0, -1])
        self.assertFalse(dense_mask(m, 1, 10)[1].any())
        # right padding (the queries past the run) is not one run ending at the queries either
        pad = torch.ones(1, 8, dtype=torch.bool)
        pad[0, 5:7] = False
        m = kiln_mask(1, 1, 8, q_offset=7, attention_mask=pad, device="cpu")
        self.assertEqual(m[0, 0, 0].tolist(), [-1])

    def test_a_dynamic_cache_without_padding_needs_no_mask(self):
        self.assertIsNone(kiln_mask(2, 1, 9, q_offset=8, attention_mask=None, device="cpu"))
        # with an all-ones padding mask (as generate passes one): the whole context, no sync
        m = kiln_mask(2, 1, 9, q_offset=8, attention_mask=torch.ones(2, 9, dtype=torch.long), device="cpu")
        self.assertEqual((m[0, 0, 0].tolist(), m[0, 0, 1].tolist()), ([0, 0], [9, 9]))

    def test_what_it_does_not_reduce_goes_to_sdpa(self):
        pad = torch.ones(2, 40, dtype=torch.bool)
        pad[0, :2] = False
        # a prefill (more than 16 queries)
        m = kiln_mask(2, 40, 40, q_offset=0, attention_mask=pad, device="cpu")
        self.assertEqual(m.dtype, torch.bool)
        # a sliding window
        w = sliding_window_causal_mask_function(4)
        m = kiln_mask(2, 1, 40, q_offset=39, mask_function=w, attention_mask=pad, device="cpu")
        self.assertTrue(m.dtype == torch.bool or m is None)
        # a head dim kiln's kernels do not take
        cfg = type("Cfg", (), {"head_dim": 96})()
        m = kiln_mask(2, 1, 40, q_offset=39, mask_function=causal_mask_function, attention_mask=pad, device="cpu",
                      config=cfg)
        self.assertEqual(m.dtype, torch.bool)


def _decode_reference(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
                      causal=False, return_softmax_lse=False, check_tables=False, cache_leftpad=None):
    """flash_attn_with_kvcache's meaning over a dense cache, in torch on the CPU: sequence b's
    queries (its last tokens before cache_seqlens[b]) see keys cache_leftpad[b] .. on."""
    b, sq, hq, d = q.shape
    s = k_cache.shape[1]
    ends = cache_seqlens if cache_seqlens is not None else torch.full((b,), s)
    starts = cache_leftpad if cache_leftpad is not None else torch.zeros(b, dtype=torch.int32)
    j = torch.arange(s)
    last = ends[:, None].long() - sq + torch.arange(sq)[None, :] if causal else (ends[:, None].long() - 1).expand(b, sq)
    allowed = (j[None, None, :] >= starts[:, None, None].long()) & (j[None, None, :] <= last[:, :, None])
    rep = hq // k_cache.shape[2]
    kk = k_cache.transpose(1, 2).repeat_interleave(rep, 1).float()
    vv = v_cache.transpose(1, 2).repeat_interleave(rep, 1).float()
    scores = q.transpose(1, 2).float() @ kk.transpose(-1, -2) * (softmax_scale or d ** -0.5)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    probs = scores.softmax(-1).nan_to_num(0.0)  # a row without a key comes out 0, as kiln's
    return (probs @ vv).transpose(1, 2).to(q.dtype)


@unittest.skipIf(torch is None, "skipped: needs torch and transformers")
class StaticCacheDecodeThroughThePlugin(unittest.TestCase):
    """A Llama with a static cache generating from a left-padded batch: with kiln's decode
    replaced by a torch reference of its meaning, the plug-in's logits match sdpa's, and every
    decode step reached kiln's decode with the compact mask (none fell back to sdpa)."""

    def test_logits_match_sdpa(self):
        import kiln
        from transformers import LlamaConfig, LlamaForCausalLM

        from kiln.integrations import transformers as plug

        plug.register()
        cfg = LlamaConfig(vocab_size=97, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
        ids = torch.randint(0, 97, (2, 6))
        pad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
        calls = []

        def counted(*a, **kw):
            calls.append(kw.get("cache_leftpad") is not None)
            return _decode_reference(*a, **kw)

        real = kiln.flash_attn_with_kvcache
        kiln.flash_attn_with_kvcache = counted
        try:
            logits = {}
            for impl in ("sdpa", "kiln"):
                model.config._attn_implementation = impl
                with torch.no_grad():
                    out = model.generate(ids, attention_mask=pad, max_new_tokens=4, do_sample=False,
                                         cache_implementation="static", output_logits=True,
                                         return_dict_in_generate=True)
                logits[impl] = torch.stack(out.logits)
        finally:
            kiln.flash_attn_with_kvcache = real
        self.assertTrue(torch.allclose(logits["kiln"], logits["sdpa"], atol=1e-4, rtol=1e-4),
                        (logits["kiln"] - logits["sdpa"]).abs().max())
        # the prefill (6 query tokens, left-padded) and 3 decode steps, x 2 layers, each with the
        # compact mask
        self.assertEqual(calls, [True] * 8)


if __name__ == "__main__":
    unittest.main()
