#!/usr/bin/env bash
# Per-item fixed cost of fa3_wgmma: time against the key length at a fixed number of work items
# (B4 H16, 4096 query rows: 1408 items of 192 rows at d128), kiln and SDPA cuDNN, short protocol
# (5 warm-up launches, 30 timed), two rounds. Slope = cost per key tile, intercept = per item.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s6; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; cat .carry/lead/commit; } > $OUT/machine.txt
KV="1024 2048 4096 8192 16384"
: > $OUT/kiln.jsonl; : > $OUT/peer.jsonl
for round in 1 2; do
  for d in 128 256 64; do
    sh=""
    for kv in $KV; do
      $B --no-store --json attn bench --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv $kv --dim $d --version fa3_wgmma --reps 30 --warmup 5 2>>$OUT/err.txt | tr -d '\n' >> $OUT/kiln.jsonl; echo >> $OUT/kiln.jsonl
      sh="$sh;4,16,4096:$kv,$d"
    done
    $PY scripts/attention_peer.py --backends cudnn --reps 30 --shapes "${sh#;}" >> $OUT/peer.jsonl 2>>$OUT/err.txt
  done
done
$PY - $OUT <<'PY'
import sys, json, collections, statistics as st
O = sys.argv[1]
k = collections.defaultdict(list); c = collections.defaultdict(list)
for l in open(O + '/kiln.jsonl'):
    l = l.strip()
    if not l: continue
    r = json.loads(l)[0]; p = r['problem']
    k[(p['head_dim'], p['seqlen_kv'])].append(r['median_ms'])
for l in open(O + '/peer.jsonl'):
    r = json.loads(l)
    if 'cudnn_ms' in r: c[(r['dim'], r['seqlen_kv'])].append(r['cudnn_ms'])
def fit(pts):
    n = len(pts); mx = sum(x for x, _ in pts) / n; my = sum(y for _, y in pts) / n
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return my - b * mx, b
for d in (64, 128, 256):
    print(f"d{d}: skv   kiln ms   cuDNN ms   kiln/cuDNN speed")
    pk, pc = [], []
    for kv in (1024, 2048, 4096, 8192, 16384):
        a = st.median(k[(d, kv)]) if k[(d, kv)] else float('nan'); b = st.median(c[(d, kv)]) if c[(d, kv)] else float('nan')
        pk.append((kv, a)); pc.append((kv, b))
        print(f"  {kv:6d} {a:9.4f} {b:10.4f} {b / a:8.3f}")
    (ak, bk), (ac, bc) = fit(pk), fit(pc)
    print(f"  fit: kiln {ak * 1000:.1f} us + {bk * 1024 * 1000:.1f} us/1024 keys; cuDNN {ac * 1000:.1f} us + {bc * 1024 * 1000:.1f} us/1024 keys")
PY
