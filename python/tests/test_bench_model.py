"""kiln.bench_model's shape lists, without torch or a GPU: "" means none (as --decode ''), and a
shape that is not BxS is one sentence, not a traceback."""

import unittest

from kiln.bench_model import shapes


class Shapes(unittest.TestCase):
    def test_lists_and_none(self):
        self.assertEqual(shapes("1x4096,4x2048"), [(1, 4096), (4, 2048)])
        self.assertEqual(shapes(""), [])

    def test_a_shape_that_is_not_bxs_is_named(self):
        with self.assertRaisesRegex(SystemExit, r"the shape '4096' is not BxS"):
            shapes("4096")


if __name__ == "__main__":
    unittest.main()
