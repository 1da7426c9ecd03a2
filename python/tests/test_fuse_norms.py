"""kiln's transformers norm and rotary patches on the CPU (skipped without torch and
transformers): with kiln's kernels stood in for by torch ops of the same contract (the
residual summed in place, q and k rotated in place), every supported model family computes
the same logits and hidden states as unpatched, each patch is reached, and unpatching (or a
tensor kiln cannot take, as a CPU tensor) runs transformers' own forwards."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

try:
    import torch
    import transformers
except ImportError:  # the CPU tests run without torch: nothing to check here then
    torch = None

import kiln  # noqa: E402
from kiln.integrations import transformers as ktf  # noqa: E402

FAMILIES = [
    ("LlamaConfig", {}),
    ("Qwen2Config", {}),
    ("Qwen3Config", dict(head_dim=16)),
    ("Qwen3MoeConfig", dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    ("MistralConfig", {}),
    ("MixtralConfig", dict(num_local_experts=4)),
]


def build(cls, kw):
    cfg = getattr(transformers, cls)(vocab_size=100, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                     num_key_value_heads=2, num_hidden_layers=2, **kw)
    torch.manual_seed(0)
    return getattr(transformers, cls.replace("Config", "ForCausalLM"))(cfg).eval()


@unittest.skipIf(torch is None, "skipped: needs torch and transformers")
class FuseNorms(unittest.TestCase):
    def setUp(self):
        self.calls = {"norm": 0, "residual": 0, "rope": 0}
        calls = self.calls

        def rms_norm(x, w, eps=1e-6, *, residual=None, out=None):
            if residual is not None:
                residual.add_(x)
                x = residual
                calls["residual"] += 1
            calls["norm"] += 1
            xf = x.float()
            return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

        def apply_rotary(q, k, cos, sin, interleaved=False):
            def rh(x):
                return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), -1)

            calls["rope"] += 1
            c, s = cos.unsqueeze(1), sin.unsqueeze(1)
            q.copy_(q * c + rh(q) * s)
            k.copy_(k * c + rh(k) * s)
            return q, k

        self.saved = (kiln.rms_norm, kiln.apply_rotary, ktf._kiln_can)
        kiln.rms_norm, kiln.apply_rotary = rms_norm, apply_rotary

    def tearDown(self):
        kiln.rms_norm, kiln.apply_rotary, ktf._kiln_can = self.saved

    def run_model(self, model, ids):
        with torch.no_grad():
            return model(ids, output_hidden_states=True)

    def test_every_family_computes_what_it_did(self):
        for cls, kw in FAMILIES:
            with self.subTest(cls):
                model = build(cls, kw)
                ids = torch.randint(0, 100, (2, 7))
                ref = self.run_model(model, ids)
                ktf._kiln_can = lambda x, w=None: True
                n = ktf.fuse_norms(model)
                got = self.run_model(model, ids)
                ktf.fuse_norms(model, enable=False)
                back = self.run_model(model, ids)
                norms = 5 + (4 if "Qwen3" in cls else 0)
                self.assertEqual(n, norms + 2)  # the norms and the two layers
                # a forward: the input norms, the fused post-attention ones, the final norm
                self.assertEqual(self.calls["residual"], 2)
                self.assertEqual(self.calls["norm"], norms)
                self.assertEqual(self.calls["rope"], 2)
                self.assertTrue(torch.equal(ref.logits, got.logits))
                for a, b in zip(ref.hidden_states, got.hidden_states):
                    self.assertTrue(torch.equal(a, b))  # the layers' inputs left intact
                self.assertTrue(torch.equal(ref.logits, back.logits))
                for k in self.calls:
                    self.calls[k] = 0

    def test_tensors_kiln_cannot_take_run_transformers_forwards(self):
        model = build("LlamaConfig", {})
        ids = torch.randint(0, 100, (2, 7))
        ref = self.run_model(model, ids)
        ktf.fuse_norms(model)  # CPU tensors: kiln is never called
        got = self.run_model(model, ids)
        ktf.fuse_norms(model, enable=False)
        self.assertEqual(self.calls, {"norm": 0, "residual": 0, "rope": 0})
        self.assertTrue(torch.equal(ref.logits, got.logits))


if __name__ == "__main__":
    unittest.main()
