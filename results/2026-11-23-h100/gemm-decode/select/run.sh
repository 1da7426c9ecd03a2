#!/usr/bin/env bash
# Session 14 run 2: cuBLAS's algorithm selection timed back to back (binary a) or with L2
# flushed before each timed run, as the bench does (binary b), both benched with the read flush,
# alternating a b b a; then issue 3's target set in all four layouts on b (read flush, flushed
# selection), with the chosen cuBLAS algorithm per problem.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit KILN_FLUSH=read
A=.carry/s14/kiln-a; B=.carry/s14/kiln-b; chmod +x $A $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: a (4ee228a + read flush), b (a + flushed cuBLAS selection)"; } > $OUT/machine.txt
SH="8x4096x4096 64x4096x4096 128x4096x4096 128x14336x4096 128x4096x14336 128x128256x4096 512x4096x4096 512x512x512 1024x1024x1024"
: > $OUT/ab.jsonl
for s in $SH; do
  for bin in a b b a; do
    [ $bin = a ] && X=$A || X=$B
    echo "{\"bin\":\"$bin\",\"shape\":\"$s\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $s --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(list); algo = {}
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'bin' in o: tag = (o['shape'], o['bin']); continue
    r = o[0] if isinstance(o, list) else o
    res[tag + ('kiln',)].append(r['versions'][0][0]['median_ms'] * 1e3)
    res[tag + ('cublas',)].append(r['vendor']['median_ms'] * 1e3)
    algo[tag] = r.get('vendor_algorithm')
print(f"{'shape':16s} {'kiln a':>7s} {'kiln b':>7s} {'cub a':>7s} {'cub b':>7s} {'ratio a':>7s} {'ratio b':>7s}  cuBLAS algorithm (b)")
shapes = list(dict.fromkeys(k[0] for k in res))
for s in shapes:
    ka, kb, ca, cb = (st.median(res[(s, b, w)]) for b, w in (('a','kiln'),('b','kiln'),('a','cublas'),('b','cublas')))
    print(f"{s:16s} {ka:7.2f} {kb:7.2f} {ca:7.2f} {cb:7.2f} {ca/ka:7.3f} {cb/kb:7.3f}  {algo.get((s,'b'))}")
PY
$B --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/targets.txt
import json, sys, math, collections
rows = json.load(open(sys.argv[1])); t = collections.defaultdict(dict); order = []
for r in rows:
    p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
    if k not in order: order.append(k)
    t[p['layout']][k] = r['versions'][0][1]
ls = [l for l in ('RC', 'CR', 'RR', 'CC') if l in t]
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in ls))
for k in order: print(f"{k:18s} " + " ".join(f"{t[l].get(k, float('nan')):6.3f}" for l in ls))
for l in ls:
    g = list(t[l].values())
    print(f"{l}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
allg = [x for l in ls for x in t[l].values()]
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}, under 0.95: {sum(1 for x in allg if x < 0.95)}")
PY
