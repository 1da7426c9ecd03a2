#!/usr/bin/env bash
# What branch compile-s4 could not check without a GPU (results/compile-time.md), for the lent GPU
# machine, which has no cargo. Here, first:
#   git checkout 0d8354a && cargo build --release && mkdir -p .carry/cs4/old && cp target/release/kiln .carry/cs4/old/
#   git checkout compile-s4 && cargo build --release && mkdir -p .carry/cs4/new && cp target/release/kiln .carry/cs4/new/
# Then on the GPU (the device `run` tool, carry [".carry/cs4"]):   bash scripts/gpu-compile-s4.sh
#  1. compile times on that host: `kiln check` of every variant, all cores (wall and, new binary
#     only, the compiling threads' CPU median), then a serial sample; and the warm start;
#  2. grouped_swapab (the one kernel whose SASS changed: one store epilogue for every wgmma width)
#     verified on the quick suite, and timed against the old binary at decode-like expert sizes,
#     alternating old / new so that clocks and neighbours fall on both.
# Leaves check-*.json, verify.txt and bench.txt in $OUT. About 4 minutes on an H100 host.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cs4-out}
mkdir -p "$OUT"
export KILN_STORE=$OUT/kiln.db
OLD=${OLD:-.carry/cs4/old/kiln} NEW=${NEW:-.carry/cs4/new/kiln}
chmod +x "$OLD" "$NEW" 2>/dev/null
{ nproc; nvidia-smi -L; lscpu | grep "Model name"; } | tee "$OUT/machine.txt"
for b in old new; do
  bin=$OLD; [ $b = new ] && bin=$NEW
  echo "== $b: kiln check, all cores, cold then warm twice"
  KILN_CACHE_DIR=/tmp/cs4-$b "$bin" --no-store --json check > "$OUT/check-$b.json" 2> "$OUT/check-$b.err"
  KILN_CACHE_DIR=/tmp/cs4-$b "$bin" --no-store check 2>&1 | tail -1
  KILN_CACHE_DIR=/tmp/cs4-$b "$bin" --no-store check 2>&1 | tail -1
done
python3 - "$OUT" <<'PY'
import json, statistics as st, sys
for b in ("old", "new"):
    rows = [r for r in json.load(open(f"{sys.argv[1]}/check-{b}.json")) if not r["cached"]]
    w = [r["compile_ms"] for r in rows]
    c = [r["compile_cpu_ms"] for r in rows if r.get("compile_cpu_ms") is not None]
    cpu = f", CPU median {st.median(c):.0f} ms" if c else ""
    print(f"{b}: {len(rows)} compiled, wall median {st.median(w):.0f} ms{cpu}, "
          f"{sum(1 for r in rows if r['problems'])} with problems")
PY
echo "== new: serial sample (one compile at a time)"
for v in simt_tiled mma_sync wgmma_tma_ws fa3_wgmma grouped_swapab; do
  RAYON_NUM_THREADS=1 KILN_CACHE_DIR=/tmp/cs4-serial-$v "$NEW" --no-store check --version $v 2>&1 | tail -1
done
echo "== new: grouped_swapab verify (quick suite)"
KILN_CACHE_DIR=/tmp/cs4-new "$NEW" --no-store moe verify --version grouped_swapab 2>&1 | tee "$OUT/verify.txt" | tail -8
echo "== grouped_swapab timings (opt-in: KILN_MOE_GROUPED), old / new alternating"
export KILN_MOE_GROUPED=grouped_swapab
for shape in "--counts 1,1,1,1,1,1,1,1" "--counts 3,17,40,9,64,128,5,22" "--counts 40,80,120,160,200,248,60,100" "--experts 64 --tokens 512"; do
  for b in old new old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    echo "-- $b $shape --n 4096 --k 7168"
    KILN_CACHE_DIR=/tmp/cs4-$b "$bin" --no-store moe bench $shape --n 4096 --k 7168 2>&1 | grep -E "grouped_gemm|rows per expert"
  done
done 2>&1 | tee "$OUT/bench.txt"
