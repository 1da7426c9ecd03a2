#!/usr/bin/env bash
# Session 13 run 10: wgmma_tma_ws reads operands TMA cannot address (row strides off 16 bytes,
# bases off 16 bytes) from padded copies (cuMemcpy2DAsync into scratch, 128-byte rows) instead
# of refusing them (the dispatcher fell to mma_sync: 1023^3 0.55x, 500^3 0.32x). New binary =
# b5dec26 + repack. Full suite (the ws now takes the odd-stride problems it skipped), sanitize,
# then old vs new default, two rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s13/kiln-b5dec26; N=.carry/s13/kiln-repack; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: b5dec26; new: + repack"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 400 $N --no-store verify "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep wgmma_tma_ws $OUT/verify.txt | tail -1)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--version wgmma_tma_ws --suite full); v ws-full X=1
VA=(--version wgmma_tma_ws --suite quick); v ws-grid3 KILN_WGMMA_GRID=3
for s in 1023x1023x1023:RC 1023x1023x1023:CC 777x1234x999:CR 100x100x100:RR 4095x129x77:CC; do
  VA=(--version wgmma_tma_ws --shape ${s%:*} --layout ${s#*:}); v "ws-$s" X=1
done
timeout 280 $N --no-store sanitize --version wgmma_tma_ws --timeout 120 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -4 $OUT/sanitize.txt
: > $OUT/ab.jsonl
CASES="1023x1023x1023:RC 1023x1023x1023:CC 777x1234x999:RC 500x500x500:RC 100x100x100:RC 4095x4095x4095:RC 4096x4096x4095:RC 1000x1000x999:RC 128x4096x4095:RC"
V="old new"
for round in 1 2; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 30 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
python3 - $OUT/ab.jsonl <<'PY' | tee -a $OUT/summary.txt
import json, re, sys
seen = set()
for rec in re.split(r'\n(?=\{"shape")', open(sys.argv[1]).read()):
    d = json.loads(rec); r = d["r"]; r = r[0] if isinstance(r, list) else r
    k = (d["shape"], d["v"])
    if k not in seen: seen.add(k); print(f"{d['shape']:20s} {d['v']:4s} ran {r['versions'][0][0]['version']}")
PY
