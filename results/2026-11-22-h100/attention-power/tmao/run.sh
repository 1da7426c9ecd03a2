#!/usr/bin/env bash
# O through a TMA store, fixed (a consumer whose box would start above row 0 stores directly):
# verify (full attention suite and the multi-item problems of tmao-v1), then old (kiln-s6) /
# new at d128 with the binaries' order rotated each round (short protocol), then the 18 issue
# shapes under sustained load: kiln (new) and SDPA cuDNN, each after 1000 ms of timed warm-up,
# alternating, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
B=$L/kiln-tmao
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; cat $L/commit-tmao; } > $OUT/machine.txt
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
  [ $round = 1 ] && bins="s6 tmao" || bins="tmao s6"
  for kv in 1024 2048 4096 8192; do for bin in $bins; do run $bin "kv d128 $kv" --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv $kv --dim 128; done; done
  for s in "4 4096" "2 8192" "1 16384"; do set -- $s; for c in "" "--causal"; do for bin in $bins; do
    run $bin "d128 B$1 S$2 $c" --batch $1 --heads 16 --seqlen $2 --dim 128 $c
  done; done; done
done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/oldnew.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d['r']: t[(d['tag'], d['bin'])].append(d['r'][0]['median_ms'])
print(f"{'case':28s} {'s6 ms':>8s} {'tmao ms':>8s} {'speed-up':>9s}")
for tag in dict.fromkeys(k[0] for k in t):
    a, c = st.median(t[(tag, 's6')]), st.median(t[(tag, 'tmao')])
    print(f"{tag:28s} {a:8.4f} {c:8.4f} {a / c:9.3f}")
PY
: > $OUT/sustained.jsonl
SH="128 4 4096 -;128 2 8192 -;128 1 16384 -;128 4 4096 --causal;128 2 8192 --causal;128 1 16384 --causal;64 4 4096 -;64 2 8192 -;64 1 16384 -;64 4 4096 --causal;64 2 8192 --causal;64 1 16384 --causal;256 4 4096 -;256 2 8192 -;256 1 16384 -;256 4 4096 --causal;256 2 8192 --causal;256 1 16384 --causal"
for round in 1 2; do
  IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""; pc=""; [ -n "$c" ] && pc=",causal"
    r=$(timeout 90 $B --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 30 --warmup-ms 1000 2>>$OUT/err.txt | tr -d '\n')
    p=$(timeout 120 $PY scripts/attention_peer.py --backends cudnn --reps 30 --warmup-ms 1000 --shapes "$2,16,$3,$1$pc" 2>>$OUT/err.txt | tr -d '\n')
    echo "{\"round\":$round,\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"kiln\":${r:-null},\"peer\":${p:-null}}" >> $OUT/sustained.jsonl
  done; IFS=' '
done
python3 - $OUT/sustained.jsonl <<'PY' | tee $OUT/sustained.txt
import json, sys, collections, statistics as st
k = collections.defaultdict(list); p = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l); key = (d['d'], d['b'], d['s'], d['causal'])
    if d['kiln']: k[key].append(d['kiln'][0]['tflops'])
    if d['peer'] and 'cudnn_tflops' in d['peer']: p[key].append(d['peer']['cudnn_tflops'])
print("sustained (1000 ms timed warm-up each), TFLOPS: kiln rounds | cuDNN rounds | median ratio")
for key in sorted(k):
    f = st.median(k[key]); c = st.median(p[key]) if p[key] else float('nan')
    print(f"d{key[0]} B{key[1]} S{key[2]} {'causal' if key[3] else 'full  '}: {[round(x) for x in k[key]]} | {[round(x) for x in p[key]]} | {f / c:.3f}")
PY
