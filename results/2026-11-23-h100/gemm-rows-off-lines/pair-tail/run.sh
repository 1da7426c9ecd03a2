#!/usr/bin/env bash
# Session 15 run 7: a pair (rows off lines) with a sparse last wave stays a pair, unsplit
# (binary e), instead of single CTAs with the last wave split (binary b). Full suite and
# sanitize on e; default dispatch verified at the shapes that change; then b against e,
# rotated (b e e b), with controls that do not change.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s15/kiln-b; E=.carry/s15/kiln-e; chmod +x $B $E
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: b = 5045141, e = b + pairs keep a sparse last wave unsplit"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $E --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 6000x3000x3000 3000x6000x3000 3000x3000x3000; do
    v "default $l $s" KILN_X=0 $E --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
timeout 250 $E --no-store sanitize --version wgmma_tma_ws --timeout 100 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -1 $OUT/sanitize.txt
: > $OUT/ab.jsonl
for sl in 6000x3000x3000:RC 6000x3000x3000:CR 6000x3000x3000:RR 6000x3000x3000:CC 3000x6000x3000:RC 6000x6000x3000:RC 4000x4000x4000:RC 4096x4096x4096:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in b e e b; do
    [ $bin = b ] && X=$B || X=$E
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
print(f"{'shape':20s} {'kiln b':>7s} {'kiln e':>7s} {'e/b':>6s} {'ratio b':>7s} {'ratio e':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kb, ke, cb, ce = (st.median(res[(s, b, w)]) for b, w in (('b','kiln'),('e','kiln'),('b','cublas'),('e','cublas')))
    print(f"{s:20s} {kb:7.2f} {ke:7.2f} {ke/kb:6.3f} {cb/kb:7.3f} {ce/ke:7.3f}")
PY
