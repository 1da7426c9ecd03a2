"""kiln.distributed's checks without torch or a GPU: a world size that does not divide the expert
count or the FFN width, weights of the wrong shape and ranks that disagree are one ValueError
each, naming the argument."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))

from kiln import distributed  # noqa: E402
from kiln import _parallel_checks as checks  # noqa: E402


class WorldSize(unittest.TestCase):
    def test_divides(self):
        self.assertEqual(checks.divide("ffn", 14336, 4, "the FFN width"), 3584)
        self.assertEqual(checks.divide("num_experts", 8, 8, "the experts"), 1)

    def test_ffn_not_divided(self):
        with self.assertRaisesRegex(ValueError, r"`ffn` is 14336, which the world size 3 does not divide.*\(1, 2, 4, 8, 16, 32, 64\)"):
            checks.divide("ffn", 14336, 3, "the FFN width")

    def test_experts_not_divided(self):
        with self.assertRaisesRegex(ValueError, r"`num_experts` is 8, which the world size 16 does not divide.*\(1, 2, 4, 8\)"):
            checks.divide("num_experts", 8, 16, "the experts")

    def test_not_positive(self):
        for bad in (0, -4, 2.5, "8", True, None):
            with self.assertRaisesRegex(ValueError, r"`hidden` is .*; it must be a positive integer"):
                checks.divide("hidden", bad, 2, "the hidden size")

    def test_top_k(self):
        self.assertEqual(checks.top_k(2, 8), 2)
        with self.assertRaisesRegex(ValueError, r"`top_k` is 9 but there are 8 experts"):
            checks.top_k(9, 8)
        with self.assertRaisesRegex(ValueError, r"`top_k` is 0"):
            checks.top_k(0, 8)


class Sharding(unittest.TestCase):
    def test_shards_cover_the_whole_once(self):
        world, total = 4, 14336
        spans = [checks.shard(r, world, total) for r in range(world)]
        self.assertEqual(spans[0][0], 0)
        self.assertEqual(spans[-1][1], total)
        for (_, stop), (start, _) in zip(spans, spans[1:]):
            self.assertEqual(stop, start)

    def test_full_shape(self):
        checks.full_shape("w1", (14336, 4096), (14336, 4096), "gate")
        with self.assertRaisesRegex(ValueError, r"`w2` has shape \(4096, 1024\); expected \(4096, 14336\)"):
            checks.full_shape("w2", (4096, 1024), (4096, 14336), "down projection [hidden, ffn]")


class RanksAgree(unittest.TestCase):
    def test_agreeing_ranks_pass(self):
        cfg = {"hidden": 4096, "ffn": 14336, "dtype": "bf16"}
        checks.ranks_agree([dict(cfg), dict(cfg), dict(cfg)], "the layer's config")
        self.assertEqual(checks.disagreements([cfg, cfg]), [])

    def test_says_what_differed_and_where(self):
        per_rank = [
            {"x.shape": (4096, 4096), "dtype": "bf16"},
            {"x.shape": (2048, 4096), "dtype": "bf16"},
            {"x.shape": (4096, 4096), "dtype": "f16"},
        ]
        self.assertEqual(
            checks.disagreements(per_rank),
            [
                "`x.shape`: (4096, 4096) on ranks 0, 2; (2048, 4096) on rank 1",
                "`dtype`: 'bf16' on ranks 0, 1; 'f16' on rank 2",
            ],
        )
        with self.assertRaisesRegex(ValueError, r"the 3 ranks disagree on the input: `x.shape`: .* \| `dtype`: "):
            checks.ranks_agree(per_rank, "the input")

    def test_a_key_one_rank_lacks(self):
        with self.assertRaisesRegex(ValueError, r"`top_k`: 2 on rank 0; None on rank 1"):
            checks.ranks_agree([{"top_k": 2}, {}], "the layer's config")


class Module(unittest.TestCase):
    def test_imports_without_torch_and_names_its_layers(self):
        self.assertTrue(hasattr(distributed, "TensorParallelSwiGLU"))
        self.assertTrue(hasattr(distributed, "ExpertParallelMoE"))
        for name in distributed.__all__:
            self.assertTrue(hasattr(distributed, name), name)

    def test_multicast_off_in_an_environment(self):
        env = distributed.without_multicast({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"})
        self.assertEqual(env["NCCL_NVLS_ENABLE"], "0")
        self.assertEqual(env["TORCH_SYMM_MEM_DISABLE_MULTICAST"], "1")
        self.assertEqual(env["NVSHMEM_DISABLE_NVLS"], "1")
        self.assertEqual(env["PATH"], "/bin")


if __name__ == "__main__":
    unittest.main()
