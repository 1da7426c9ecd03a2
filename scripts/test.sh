#!/usr/bin/env bash
# The test command (CI runs it through .ci/run): set up NVRTC, then every test of the crate,
# including the NVRTC compile check of every kernel variant for sm_90a (tests/compile.rs, never
# skipped), then the examples' build (kiln-candle's too) and the Python package's wheel and CPU
# tests, and the count of tests skipped for want of a GPU or a tool.
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_BROWSER_TESTS=1 bash scripts/setup.sh
export KILN_CACHE_DIR="${KILN_CACHE_DIR:-$PWD/target/kiln-jit-cache}"
export KILN_STORE="${KILN_STORE:-$PWD/target/kiln-test.db}"
export KILN_REQUIRE_NVRTC=1
# The committed wgmma wrappers must be what their generator writes (a hand edit would be lost).
python3 scripts/gen_wgmma.py --check
# The examples build (they run on a GPU), and the Python package builds, imports and checks its
# arguments without one.
cargo build --release --locked --examples
# kiln in candle (kiln-candle, docs/candle.md): built with the CUDA 13 pieces from PyPI wheels
# (scripts/candle.sh), so that CI proves it compiles and links; it runs on a GPU (gpu.sh candle).
# About 7-10 minutes on a 2-core box, most of it candle-kernels' nvcc; KILN_CANDLE_BUILD=0
# skips it. Its CPU tests (the ops' argument checks, the 4-bit prepack) add a few seconds.
if [ "${KILN_CANDLE_BUILD:-1}" != 0 ]; then
  bash scripts/candle.sh build --release --locked -p kiln-candle --examples
  bash scripts/candle.sh test --release --locked -p kiln-candle --lib
fi
bash scripts/python.sh
# Tests that cannot run here (no GPU, say) skip through tests/common and add a line to this file.
skipped=target/tmp/kiln-skipped-tests.txt
rm -f "$skipped"
cargo test --release --locked
if [ -s "$skipped" ]; then
  echo "$(wc -l <"$skipped") tests skipped (what they need is missing here):"
  sed 's/^/  /' "$skipped"
fi
