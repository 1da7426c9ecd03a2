#!/usr/bin/env bash
# One rule for an idle consumer (consumer_idle, used by the producer's count and the consumer's
# own test; 12 CUBINs changed): verify (full suite, the multi-item problems), then kiln-s6c
# (36d7e79) / new at the d128 and d64 shapes at S 4k and 8k, order rotated, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
B=$L/kiln-idle
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; cat $L/commit-idle; } > $OUT/machine.txt
V="timeout 120 $B --no-store attn verify --version fa3_wgmma"
{
$V; echo "attn full exit $?"
for d in 128 64; do
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "B2 H16 S1000 d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "B2 H16 S1000 causal d$d exit $?"
  $V --batch 1 --heads 8 --seqlen 4096 --dim $d --causal; echo "B1 H8 S4096 causal d$d exit $?"
  $V --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv 1024 --dim $d; echo "B4 H16 S4096/1024 d$d exit $?"
  $V --batch 2 --heads 16 --seqlen-q 1000 --seqlen-kv 300 --dim $d --causal; echo "causal sq1000 skv300 d$d exit $?"
  env KILN_FA3_D$d=dynamic=0 $V --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "static causal S1000 d$d exit $?"
  env KILN_FA3_D$d=dynamic=0,persist=2 $V --batch 2 --heads 16 --seqlen-q 1000 --seqlen-kv 300 --dim $d --causal; echo "static persistent causal sq1000 skv300 d$d exit $?"
  env KILN_FA3_D$d=dynamic=0,persist=0 $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "one block per item S1000 d$d exit $?"
done
env KILN_FA3_D128=cwg=2,bn=128,stages=2,overlap=1 $V --batch 2 --heads 16 --seqlen 1000 --dim 128 --causal; echo "cwg2 overlap qbuf2 causal S1000 exit $?"
env KILN_FA3_D128=cwg=2,bn=128,stages=2,overlap=1,pingpong=1 $V --batch 2 --heads 16 --seqlen 1000 --dim 128; echo "cwg2 pingpong qbuf2 S1000 exit $?"
$V --batch 1 --heads 9 --seqlen 2048 --dim 256; echo "B1 H9 S2048 d256 exit $?"
env KILN_FA3_D256=dynamic=0,persist=2 $V --batch 2 --heads 16 --seqlen-q 1000 --seqlen-kv 300 --dim 256 --causal; echo "d256 static persistent causal sq1000 skv300 exit $?"
env KILN_FA3_D256=dynamic=0,persist=0 $V --batch 2 --heads 16 --seqlen-q 1000 --seqlen-kv 300 --dim 256 --causal; echo "d256 one block per item causal sq1000 skv300 exit $?"
env KILN_FA3_D128=dynamic=0,persist=0 $V --batch 2 --heads 16 --seqlen-q 1000 --seqlen-kv 300 --dim 128 --causal; echo "d128 one block per item causal sq1000 skv300 exit $?"
} > $OUT/verify.txt 2>&1
grep exit $OUT/verify.txt
if grep -q "exit [^0]" $OUT/verify.txt; then echo "verification failed: no timing"; exit 1; fi
: > $OUT/bench.jsonl
run() {  # bin tag args...
  local bin=$1 tag=$2; shift 2
  r=$($L/kiln-$bin --no-store --json attn bench --version fa3_wgmma --reps 30 --warmup 5 "$@" 2>>$OUT/err.txt | tr -d '\n')
  echo "{\"bin\":\"$bin\",\"tag\":\"$tag\",\"r\":${r:-null}}" >> $OUT/bench.jsonl
}
for round in 1 2; do
  [ $round = 1 ] && bins="s6c idle" || bins="idle s6c"
  for d in 128 64; do for s in "4 4096" "2 8192"; do set -- $s; for c in "" "--causal"; do
    for bin in $bins; do run $bin "d$d B$1 S$2 $c" --batch $1 --heads 16 --seqlen $2 --dim $d $c; done
  done; done; done
done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/oldnew.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d['r']: t[(d['tag'], d['bin'])].append(d['r'][0]['median_ms'])
print(f"{'case':28s} {'old ms':>8s} {'new ms':>8s} {'speed-up':>9s}")
for tag in dict.fromkeys(k[0] for k in t):
    a, c = st.median(t[(tag, 's6c')]), st.median(t[(tag, 'idle')])
    print(f"{tag:28s} {a:8.4f} {c:8.4f} {a / c:9.3f}")
PY
