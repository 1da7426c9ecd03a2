#!/usr/bin/env bash
# Session 23 run 1 (binary 97f9b4a, .carry/lean): unsplit launches of the cooperative 128-row
# tiles now run a variant without the split-K and stream-K code (KILN_SPLITK=0, ledger #91).
# (a) verify: the full suite, and every cooperative tile forced (unsplit: the lean variants) in
# two layouts, two outputs, beta 0 / 0.5 (and the register epilogue), plus forced split-K and
# stream-K launches (the split variants); (b) compile on this host: the default 128x256 variant
# without and with the split code, alternated, one at a time; `kiln check` of wgmma_tma_ws
# (1443 variants) 16 at a time, medians per kind (ckstat.py).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/lean; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/lean; S=$D/kiln; chmod +x $S; R=results/2026-11-24-h100/session23/lean
save() { tar czf $FINAL/lean.tgz -C /tmp lean; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; nproc; lscpu | grep -E "Model name|MHz"; date -u; echo "binary: $(cat $D/COMMIT)"; } > $OUT/machine.txt
export NVRTC_LIB=/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13
KD=kernels python3 $R/nvab.py 8 $R/opts-large-rc.txt -DKILN_SPLITK=0 -DKILN_SPLITK=1 > $OUT/nvab.txt 2>&1
python3 - $OUT/nvab.txt <<'PY' | tee $OUT/summary.txt
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    w = l.split()
    if len(w) > 8 and w[3] == '0': d[w[1]].append(float(w[8]))
for k, v in d.items(): print(f"one at a time, 128x256 RC bf16 {k}: n={len(v)} CPU median {st.median(v):.0f} ms, all {[int(x) for x in v]}")
PY
save
t0=$SECONDS
timeout 240 $S --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
echo "full suite rc $? ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)" | tee -a $OUT/summary.txt
save
n=0; fails=0
v() {
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  env "${envs[@]}" timeout 30 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify.txt 2>&1
  local rc=$?
  if [ $rc != 0 ]; then fails=$((fails+1)); echo "FAIL rc $rc: $name $*" | tee -a $OUT/fails.txt; fi
}
t0=$SECONDS
for l in RC CC; do
  for o in f32 bf16; do
    for c in large medium pair medium-pair wide n168 n224 small tiny tiny64; do
      for beta in 0 0.5; do
        v "$c $l $o beta $beta" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout $l --out $o --alpha 0.75 --beta $beta
      done
    done
    if [ $fails -gt 3 ]; then break 2; fi
  done
  save
done
for c in large medium pair wide small tiny; do
  v "$c register epilogue" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 KILN_WGMMA_EPI=0 -- --shape 1000x1504x700 --layout RR --out bf16 --beta 1
done
for l in RC CR; do
  v "large split 3 $l" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --beta -1.5
  v "medium split 4 $l" KILN_WGMMA_CFG=medium KILN_WGMMA_SPLITS=4 -- --shape 600x1344x2048 --layout $l
  v "small stream-K $l" KILN_WGMMA_CFG=small KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --beta 2
  v "pair split 2 $l" KILN_WGMMA_CFG=pair KILN_WGMMA_SPLITS=2 -- --shape 1000x1504x1400 --layout $l --out f32
done
echo "forced checks ($((SECONDS - t0)) s): $n run, $fails failed" | tee -a $OUT/summary.txt
save
rm -rf /tmp/kc16
t0=$SECONDS
KILN_CACHE_DIR=/tmp/kc16 timeout 300 $S --no-store --json check --version wgmma_tma_ws > $OUT/check16.json 2> $OUT/check16.err
echo "check rc $? ($((SECONDS - t0)) s)" | tee -a $OUT/summary.txt
python3 $R/ckstat.py $OUT/check16.json | tee -a $OUT/summary.txt
save
