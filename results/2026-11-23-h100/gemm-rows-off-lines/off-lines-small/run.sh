#!/usr/bin/env bash
# Session 15 run 11: rows off lines at one wave (binary g): pairs for one wave of 128x256 tiles
# (2048x2048x1000), 128x128 ping-pong tiles for one wave's worth of 128x64 ones (1000^3). Full
# suite and the changed shapes' default dispatch verified; then e against g, rotated (e g g e).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
E=.carry/s15/kiln-e; G=.carry/s15/kiln-g; chmod +x $E $G
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: e = 5aa934d, g = e + one-wave rules off lines"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $G --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 2048x2048x1000 1000x1000x1000 1000x1000x4000 2000x2000x2000 500x3000x1000 1000x1000x200; do
    v "default $l $s" KILN_X=0 $G --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "default $l f32 beta" KILN_X=0 $G --no-store verify --version wgmma_tma_ws --shape 1000x1000x1000 --layout $l --out f32 --beta 0.5
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for sl in 2048x2048x1000:RC 2048x2048x1000:CC 1000x1000x1000:RC 1000x1000x1000:CR 1000x1000x4000:RC 1000x1000x4000:CR 2000x2000x2000:RC 500x3000x1000:RC 3000x500x1000:RC 1000x1000x200:RC 2048x2048x2048:RC 1024x1024x1024:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in e g g e; do
    [ $bin = e ] && X=$E || X=$G
    echo "{\"bin\":\"$bin\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $s --layout $l --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(list)
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'bin' in o: tag = (o['shape'], o['bin']); continue
    r = o[0] if isinstance(o, list) else o
    res[tag + ('kiln',)].append(r['versions'][0][0]['median_ms'] * 1e3)
    res[tag + ('cublas',)].append(r['vendor']['median_ms'] * 1e3)
print(f"{'shape':20s} {'kiln e':>7s} {'kiln g':>7s} {'g/e':>6s} {'ratio e':>7s} {'ratio g':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    ke, kg, ce, cg = (st.median(res[(s, b, w)]) for b, w in (('e','kiln'),('g','kiln'),('e','cublas'),('g','cublas')))
    print(f"{s:20s} {ke:7.2f} {kg:7.2f} {kg/ke:6.3f} {ce/ke:7.3f} {cg/kg:7.3f}")
PY
