#!/usr/bin/env bash
# The main job: set up NVRTC, build kiln, run `kiln suite` (it compiles the variants it runs; on a
# GPU it verifies and benches against cuBLAS; without one it runs the CPU references, the compile
# resolved for an H100). A line per version; --verbose for every row. Extra arguments go to `suite`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked
exec ./target/release/kiln suite "$@"
