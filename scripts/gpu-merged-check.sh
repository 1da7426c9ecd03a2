#!/usr/bin/env bash
# After merging the session's branches: every op verified on its quick suite with the merged
# binary, and cold compile times on the GPU host measured serially and in parallel (issue 4),
# with a count of compiles that report no registers (an anomaly seen earlier on this host).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT/log"
export KILN_STORE="$OUT/kiln.db"
BIN=${BIN:-.carry/kiln}
chmod +x "$BIN"
{ "$BIN" devices; nproc; lscpu | grep -i "model name"; } | tee "$OUT/log/machine.txt"
summ() { python3 -c "
import json,sys,statistics
d=json.load(open('$1')); xs=[r['compile_ms'] for r in d if not r['cached']]
z=sum(1 for r in d if r['resources']['registers']==0)
print('$2', 'n', len(d), 'cold', len(xs), 'median ms', round(statistics.median(xs)) if xs else None, 'zero-register results', z)"; }
for v in simt_tiled mma_sync wgmma_tma_ws; do
  RAYON_NUM_THREADS=1 KILN_CACHE_DIR=/tmp/s1-$v "$BIN" --no-store check --version $v --json > "$OUT/log/serial-$v.json" 2>"$OUT/log/serial-$v.err"
  summ "$OUT/log/serial-$v.json" "serial $v" | tee -a "$OUT/log/compile.txt"
done
KILN_CACHE_DIR=/tmp/all "$BIN" --no-store check --json > "$OUT/log/parallel-all.json" 2>"$OUT/log/parallel-all.err"
summ "$OUT/log/parallel-all.json" "parallel all" | tee -a "$OUT/log/compile.txt"
t0=$(date +%s%N); KILN_CACHE_DIR=/tmp/all "$BIN" --no-store check | tail -1 | tee -a "$OUT/log/compile.txt"
echo "warm check wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$OUT/log/compile.txt"
export KILN_CACHE_DIR=/tmp/all
"$BIN" verify --suite quick 2>&1 | tee "$OUT/log/verify-gemm.txt" | tail -9
"$BIN" attn verify --suite quick 2>&1 | tee "$OUT/log/verify-attn.txt" | tail -6
"$BIN" moe verify --suite quick 2>&1 | tee "$OUT/log/verify-moe.txt" | tail -6
cd "$OUT" && tar czf results.tgz log && rm -rf log
