#!/usr/bin/env bash
# Session 13 run 3: hypothesis: kiln's tensor maps, passed as kernel parameters, are fetched cold
# by every launch, while descriptors at a fixed global address stay in the TMA descriptor cache
# across launches (run 2: without ncu's cache flush cuBLAS's kernel is 0.8 us faster at 512^3,
# kiln's 0.03). Experiment binary (732be8e + KILN_EXP_TMAP, ping-pong kernel only): `global` =
# the three maps in a device buffer uploaded once per content; `fence` = the same plus
# fence.proxy.tensormap::generic.acquire of each at entry. Verified, then rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln-exp; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s13/commit) + KILN_EXP_TMAP experiment"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite quick); v tiny-global KILN_WGMMA_CFG=pingpong-tiny KILN_EXP_TMAP=global
VA=(--suite quick); v pp-global KILN_WGMMA_CFG=pingpong KILN_EXP_TMAP=global
VA=(--suite quick); v tiny-fence KILN_WGMMA_CFG=pingpong-tiny KILN_EXP_TMAP=fence
: > $OUT/ab.jsonl
CASES="64x64x64:RC 256x256x256:RC 512x512x512:RC 512x512x512:CC 1024x1024x1024:RC 128x4096x4096:RC 512x4096x4096:RC"
V="dflt global fence"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=X=1; [ $v != dflt ] && E=KILN_EXP_TMAP=$v
      r=$(env $E timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
NCU=$(command -v ncu)
: > $OUT/ncu.csv
for v in dflt global fence; do
  E=X=1; [ $v != dflt ] && E=KILN_EXP_TMAP=$v
  echo "== $v" >> $OUT/ncu.csv
  env $E timeout 120 $NCU --cache-control none --clock-control none --metrics gpu__time_duration.sum -k regex:'gemm_wgmma' --launch-skip 5 -c 5 --csv --page raw $B --no-store bench --shape 512 --reps 10 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 - $OUT/ncu.csv <<'PY' | tee -a $OUT/summary.txt
import csv, sys, statistics as st, collections
tag = None; hdr = None; t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); t[tag].append(float(d['gpu__time_duration.sum'].replace(',', '')) / 1e3)
for k, v in t.items(): print(f"ncu 512^3 none {k:8s} median {st.median(v):6.2f} us {sorted(v)}")
PY
