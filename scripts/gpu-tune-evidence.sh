#!/usr/bin/env bash
# GPU evidence for the tuner (issue 4), run by the lead on the lent GPU machine from the repo root
# with the release binary in .carry/kiln (built here: cargo build --release && cp
# target/release/kiln .carry/kiln). Everything lands in $OUT: the store (kiln.db, with the
# tuning_runs / tuning_results / tuning_cache tables), each step's output, and the landscape.
#   (a) the planted run: a test-only version whose MODE=1 hangs and MODE=2 writes out of bounds;
#       both must be caught (timeout, crash), recorded and skipped, MODE=0 timed.
#   (b) the exhaustive run over the whole mma_sync space at 4096^3 bf16 RC, saving the landscape
#       to $OUT/landscape-mma_sync.json, then the replay of the evolutionary search against it.
#   (c) one evolutionary run on the GPU, and the default dispatch with and without the tuned
#       config (bench). Budget: about 4 minutes in all (EXTRA=1 adds the other layouts).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
export KILN_STORE="$OUT/kiln.db"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-jit}
BIN=${BIN:-.carry/kiln}
chmod +x "$BIN"
status=0
step() { # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee "$OUT/$name.txt"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$name.txt"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.txt"
  return "$rc"
}

"$BIN" devices | tee "$OUT/devices.txt"

# (a) planted hang + out-of-bounds: caught, recorded, skipped; the run finishes.
KILN_TEST_KERNELS=1 step planted 120 "$BIN" tune --version planted --shape 256x256x256 --search exhaustive --timeout-floor 3 || status=1
for want in "ok" "timeout" "crash"; do
  if grep -Eq "\| MODE=[0-9] +\| $want " "$OUT/planted.txt"; then
    echo "planted: found a '$want' candidate" | tee -a "$OUT/planted.txt"
  else
    echo "planted: MISSING a '$want' candidate" | tee -a "$OUT/planted.txt"
    status=1
  fi
done

# The default mma_sync path now picks 128x128 tiles where 128x256 ones leave SMs idle (small
# shapes): verify it on the quick suite (every layout and dtype).
step verify-default 150 "$BIN" verify --version mma_sync --suite quick || status=1

# (b) the whole mma_sync space at 4096^3 (cold JIT cache: the compile times are cold ones).
step exhaustive 300 "$BIN" tune --version mma_sync --shape 4096x4096x4096 --layout RC --dtype bf16 \
  --search exhaustive --landscape "$OUT/landscape-mma_sync.json" --top 40 || status=1
step replay 60 "$BIN" tune-replay --landscape "$OUT/landscape-mma_sync.json" --trials 100 || status=1
"$BIN" --json tune-replay --landscape "$OUT/landscape-mma_sync.json" --trials 100 > "$OUT/replay-mma_sync.json" || status=1

# (c) the evolutionary search for real (15% of the space; compiles are cache hits by now), and
# the default dispatch: tuned config from the cache vs the heuristic.
step evo 120 "$BIN" tune --version mma_sync --shape 4096x4096x4096 --search evo --seed 1 || status=1
step bench-tuned 60 "$BIN" bench --version mma_sync --shape 4096x4096x4096 || status=1
KILN_NO_TUNED=1 step bench-heuristic 60 "$BIN" bench --version mma_sync --shape 4096x4096x4096 || status=1

# (d) optional (EXTRA=1, about 2 more minutes): the other layouts' tiles, verified on the GPU by
# short evolutionary runs (every candidate is verified before it is timed).
if [ "${EXTRA:-0}" = 1 ]; then
  for layout in CR RR CC; do
    step "evo-$layout" 120 "$BIN" tune --version mma_sync --shape 2048x2048x2048 --layout "$layout" --search evo --budget 24 --seed 2 || status=1
  done
fi

echo "gpu-tune-evidence: $([ $status = 0 ] && echo ok || echo FAILED) (outputs in $OUT)"
exit $status
