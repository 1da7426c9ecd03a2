#!/usr/bin/env bash
# The main job: set up NVRTC, build kiln, run `kiln suite` (on a GPU: check, verify, bench against
# cuBLAS; without one: the compile check and the CPU references). Extra arguments go to `suite`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked
exec ./target/release/kiln suite "$@"
