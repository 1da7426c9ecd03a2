#!/usr/bin/env bash
# Cold/warm compile figures for issue 4 on the GPU machine (16 cores). No GPU work.
set -uo pipefail
B=.carry/tuner/kiln; chmod +x $B
export KILN_STORE=$OUT/kiln.db
{ echo "date: $(date -u)"; echo "nproc: $(nproc)"; lscpu | grep -i "model name"; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee $OUT/machine.txt
S=$(date +%s.%N)
KILN_CACHE_DIR=/tmp/jc1 $B check --arch sm_90a --json > $OUT/cold-all.json 2>$OUT/cold-all.err
RC=$?; echo "cold all: rc $RC wall $(awk -v a=$S -v b=$(date +%s.%N) "BEGIN{print b-a}") s" | tee $OUT/cold-all-wall.txt
for i in 1 2 3; do KILN_CACHE_DIR=/tmp/jc1 $B check --arch sm_90a | tail -2; done | tee $OUT/warm.txt
for t in 1 2; do for v in simt_tiled mma_sync wgmma_tma_ws fa2_mma_sync; do
  RAYON_NUM_THREADS=$t KILN_CACHE_DIR=/tmp/jc-$t-$v $B check --arch sm_90a --version $v --json > $OUT/cold-$t-$v.json 2>/dev/null
done; done
python3 - <<'PY'
import json, os, statistics, glob
out=os.environ['OUT']
def med(f, v=None):
    d=json.load(open(f)); xs=[r['compile_ms'] for r in d if not r['cached'] and (v is None or r['version']==v)]
    return (statistics.median(xs) if xs else float('nan')), len(xs)
lines=[]
allf=f"{out}/cold-all.json"
for v in ['simt_naive','simt_tiled','mma_sync','wgmma_cp_async','wgmma_tma','wgmma_tma_ws','fa2_mma_sync','fa3_wgmma','grouped_gemm','swiglu_dual']:
    m,n=med(allf,v); lines.append(f"all-parallel({os.cpu_count()}) {v:16s} n={n:3d} median {m:7.0f} ms")
m,n=med(allf); lines.append(f"all-parallel({os.cpu_count()}) {'ALL':16s} n={n:3d} median {m:7.0f} ms")
for t in (1,2):
    for v in ['simt_tiled','mma_sync','wgmma_tma_ws','fa2_mma_sync']:
        m,n=med(f"{out}/cold-{t}-{v}.json"); lines.append(f"{t} in parallel       {v:16s} n={n:3d} median {m:7.0f} ms")
open(f"{out}/summary.txt","w").write("\n".join(lines)+"\n"); print("\n".join(lines))
PY
