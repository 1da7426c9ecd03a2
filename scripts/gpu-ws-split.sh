#!/usr/bin/env bash
# GPU run for split-K at BN = 256 (single CTAs and CTA pairs) and last-wave ("tail") splits in
# wgmma_tma_ws (issue 3), with the tuner's launch-time parameters (issue 4). From the repo root
# on the lent GPU machine, release binary at $BIN (built here, carried). Output under $OUT:
#   (a) verify: the full suite with the heuristic, then the quick suite and multi-wave shapes
#       with splits forced (every tile / the last wave only; single CTAs and pairs);
#   (b) exhaustive tuning of the 60-config space at the shapes furthest under cuBLAS, with
#       landscapes and evolutionary replays;
#   (c) the RC target set against cuBLAS with the tuned cache, and with the heuristic alone.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT/land" "$OUT/log"
export KILN_STORE="$OUT/kiln.db"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-jit}
BIN=${BIN:-.carry/kiln}
chmod +x "$BIN"
fails=0
step() { # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee "$OUT/log/$name.txt"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/log/$name.txt" | tail -3
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || fails=$((fails + 1))
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/log/$name.txt"
}
"$BIN" devices | tee "$OUT/devices.txt"
"$BIN" check --version wgmma_tma_ws >/dev/null 2>&1  # warm the JIT cache in parallel
step verify-full 240 "$BIN" verify --version wgmma_tma_ws --suite full
for forced in "large 3 0" "pair 2 0" "pair 3 1" "large 5 1" "small 4 1"; do
  set -- $forced
  export KILN_WGMMA_CFG=$1 KILN_WGMMA_SPLITS=$2 KILN_WGMMA_TAIL=$3
  step "verify-quick-$1-$2-$3" 120 "$BIN" verify --version wgmma_tma_ws --suite quick
  # more than one wave (2176 = 17 tile-rows): the tail split really leaves whole waves unsplit
  for l in RC CR RR CC; do
    step "verify-wave-$1-$2-$3-$l" 60 "$BIN" verify --version wgmma_tma_ws --shape 2176x4000x1000 --layout $l
  done
  step "verify-wave-$1-$2-$3-f32" 60 "$BIN" verify --version wgmma_tma_ws --shape 2176x4096x777 --out f32 --beta 0.5
done
unset KILN_WGMMA_CFG KILN_WGMMA_SPLITS KILN_WGMMA_TAIL
for s in 512x4096x14336 128x4096x14336 512x128256x4096 512x4096x4096 512x14336x4096 \
  4000x4000x4000 2048x2048x2048 4096x4096x4088 1024x1024x1024 512x512x512 4096x4096x4096; do
  step "tune-$s" 120 "$BIN" tune --version wgmma_tma_ws --shape "$s" --search exhaustive \
    --landscape "$OUT/land/ws-$s.json" --reps 15 --top 12
  "$BIN" tune-replay --landscape "$OUT/land/ws-$s.json" --trials 100 >>"$OUT/log/replay.txt" 2>&1
done
step bench-tuned 200 "$BIN" bench --set targets --layouts RC --reps 15
KILN_NO_TUNED=1 step bench-heuristic 200 "$BIN" bench --set targets --layouts RC --reps 15
echo "failed steps: $fails"
grep -h "^best:" "$OUT"/log/tune-*.txt
grep -h "geometric mean" "$OUT"/log/bench-*.txt
cd "$OUT" && tar czf results.tgz land log && rm -rf land log
