#!/usr/bin/env bash
# 16-byte O stores (quad transpose) on fa3_wgmma's direct path (d256, whose single Q buffer has
# no room for O; the top causal block's straddling consumer at d64/d128): verify (full suite,
# multi-item and causal problems at d256 / d128 / d64), then old (kiln-s6b) / new, order rotated,
# two rounds: the key-length sweep at d256 (per-launch fixed cost) and the six d256 shapes and
# d128 causal S4k (short protocol).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
B=$L/kiln-st16
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; cat $L/commit-st16; } > $OUT/machine.txt
V="timeout 120 $B --no-store attn verify --version fa3_wgmma"
{
$V; echo "attn full exit $?"
for d in 256 128 64; do
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "B2 H16 S1000 d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "B2 H16 S1000 causal d$d exit $?"
  $V --batch 2 --heads 16 --seqlen-q 1000 --seqlen-kv 300 --dim $d --causal; echo "causal sq1000 skv300 d$d exit $?"
  env KILN_FA3_D$d=dynamic=0 $V --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "static causal S1000 d$d exit $?"
done
$V --batch 1 --heads 9 --seqlen 2048 --dim 256; echo "B1 H9 S2048 d256 exit $?"
$V --batch 1 --heads 8 --seqlen 4096 --dim 256 --causal; echo "B1 H8 S4096 causal d256 exit $?"
$V --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv 1024 --dim 256; echo "B4 H16 S4096/1024 d256 exit $?"
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
  [ $round = 1 ] && bins="s6b st16" || bins="st16 s6b"
  for kv in 1024 2048 4096 8192; do for bin in $bins; do run $bin "kv d256 $kv" --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv $kv --dim 256; done; done
  for s in "4 4096" "2 8192" "1 16384"; do set -- $s; for c in "" "--causal"; do for bin in $bins; do
    run $bin "d256 B$1 S$2 $c" --batch $1 --heads 16 --seqlen $2 --dim 256 $c
  done; done; done
  for bin in $bins; do run $bin "d128 B4 S4096 --causal" --batch 4 --heads 16 --seqlen 4096 --dim 128 --causal; done
done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/oldnew.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d['r']: t[(d['tag'], d['bin'])].append(d['r'][0]['median_ms'])
print(f"{'case':28s} {'old ms':>8s} {'new ms':>8s} {'speed-up':>9s}")
fits = collections.defaultdict(list)
for tag in dict.fromkeys(k[0] for k in t):
    a, c = st.median(t[(tag, 's6b')]), st.median(t[(tag, 'st16')])
    print(f"{tag:28s} {a:8.4f} {c:8.4f} {a / c:9.3f}")
    if tag.startswith('kv'):
        kv = int(tag.split()[2]); fits['old'].append((kv, a)); fits['new'].append((kv, c))
for k, pts in fits.items():
    n = len(pts); mx = sum(x for x, _ in pts) / n; my = sum(y for _, y in pts) / n
    sl = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    print(f"fit d256 {k}: {(my - sl * mx) * 1000:.1f} us + {sl * 1024 * 1000:.1f} us/1024 keys")
PY
