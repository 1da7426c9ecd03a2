#!/usr/bin/env bash
# The GPU check to run after any change to kernels/gemm/wgmma_tma_ws*.cu or the common/ headers
# they include (session 18, ledger #75-#77): the full GEMM suite, the MoE quick suite (swiglu_dual
# shares common/split_k.cuh), and compute-sanitizer over every tile config (`kiln sanitize
# --configs`: 48 setups x 4 layouts x 4 tools, each at a problem `kiln plan` shows it runs).
# About 6 minutes on an H100.
# Here, first: cargo build --release && mkdir -p .carry/check && cp target/release/kiln .carry/check/
#   (and `kiln check --version wgmma_tma_ws`: no variant may spill)
# Then on the GPU (the device `run` tool, carry [".carry/check"]): bash scripts/gpu-ws-check.sh
# The device tool returns few files: everything goes back as one tarball, ws-check.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-/tmp/ws-check-out}
OUT=/tmp/ws-check
mkdir -p "$OUT" "$FINAL"
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=${K:-.carry/check/kiln}
chmod +x "$K"
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $K ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"; } > "$OUT/machine.txt"
status=0
t0=$SECONDS
timeout 300 "$K" --no-store verify --version wgmma_tma_ws --suite full > "$OUT/verify-full.txt" 2>&1 || status=1
echo "full suite ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' "$OUT/verify-full.txt" | tail -1)"
t0=$SECONDS
timeout 200 "$K" --no-store moe verify --suite quick > "$OUT/moe-verify.txt" 2>&1 || status=1
echo "MoE quick suite ($((SECONDS - t0)) s): $(tail -1 "$OUT/moe-verify.txt")"
t0=$SECONDS
timeout 400 "$K" --no-store sanitize --configs --jobs 8 --timeout 120 > "$OUT/sanitize-configs.txt" 2>&1 || status=1
echo "sanitize --configs ($((SECONDS - t0)) s): $(tail -1 "$OUT/sanitize-configs.txt")"
grep -E "errors|FAILED|TIMED OUT|NOT COVERED" "$OUT/sanitize-configs.txt" | head -20
tar czf "$FINAL/ws-check.tgz" -C /tmp ws-check
echo "exit $status"
exit $status
