#!/usr/bin/env bash
# Q double buffer (fa3_wgmma KILN_QBUF=2 where it fits: d64, d128): verify the new binary (full
# attention suite; multi-item problems with the counter and the static order), then old
# (kiln-s6: one Q buffer) against new, short protocol, alternating, two rounds: the key-length
# sweep at 4096 query rows (per-item fixed cost) and the d64/d128 issue shapes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
B=$L/kiln-qbuf
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat $L/commit-qbuf; } > $OUT/machine.txt
V="timeout 120 $B --no-store attn verify --version fa3_wgmma"
{
$V; echo "attn full exit $?"
for d in 128 64; do
  $V --batch 1 --heads 8 --seqlen 4096 --dim $d; echo "B1 H8 S4096 d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "B2 H16 S1000 d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "B2 H16 S1000 causal d$d exit $?"
  $V --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv 1024 --dim $d; echo "B4 H16 S4096/1024 d$d exit $?"
  env KILN_FA3_D$d=dynamic=0 $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "static B2 H16 S1000 d$d exit $?"
  env KILN_FA3_D$d=dynamic=0 $V --batch 1 --heads 8 --seqlen 4096 --dim $d --causal; echo "static causal B1 H8 S4096 d$d exit $?"
done
env KILN_FA3_D128=cwg=2,bn=128,stages=2,overlap=1 $V --batch 2 --heads 16 --seqlen 1000 --dim 128; echo "cwg2 overlap qbuf2 S1000 exit $?"
} > $OUT/verify.txt 2>&1
grep exit $OUT/verify.txt
: > $OUT/bench.jsonl
run() {  # bin tag args...
  local bin=$1 tag=$2; shift 2
  r=$($L/kiln-$bin --no-store --json attn bench --version fa3_wgmma --reps 30 --warmup 5 "$@" 2>>$OUT/err.txt | tr -d '\n')
  echo "{\"bin\":\"$bin\",\"tag\":\"$tag\",\"r\":${r:-null}}" >> $OUT/bench.jsonl
}
for round in 1 2; do
  for d in 128 64; do for kv in 1024 2048 4096 8192 16384; do for bin in s6 qbuf; do
    run $bin "kv d$d $kv" --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv $kv --dim $d
  done; done; done
  for d in 128 64; do for s in "4 4096" "2 8192" "1 16384"; do set -- $s; for c in "" "--causal"; do for bin in s6 qbuf; do
    run $bin "d$d B$1 S$2 $c" --batch $1 --heads 16 --seqlen $2 --dim $d $c
  done; done; done; done
done
python3 - $OUT/bench.jsonl <<'PY'
import sys, json, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d['r']: t[(d['tag'], d['bin'])].append(d['r'][0]['median_ms'])
tags = list(dict.fromkeys(k[0] for k in t))
print(f"{'case':28s} {'old ms':>8s} {'new ms':>8s} {'new/old speed':>14s}")
fits = collections.defaultdict(list)
for tag in tags:
    a, b = st.median(t[(tag, 's6')]), st.median(t[(tag, 'qbuf')])
    print(f"{tag:28s} {a:8.4f} {b:8.4f} {a / b:14.3f}")
    if tag.startswith('kv'):
        _, d, kv = tag.split(); fits[(d, 's6')].append((int(kv), a)); fits[(d, 'qbuf')].append((int(kv), b))
for k, pts in sorted(fits.items()):
    n = len(pts); mx = sum(x for x, _ in pts) / n; my = sum(y for _, y in pts) / n
    sl = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    print(f"fit {k[0]} {k[1]}: {(my - sl * mx) * 1000:.1f} us + {sl * 1024 * 1000:.1f} us/1024 keys")
PY
