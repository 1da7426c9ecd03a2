#!/bin/bash
# Dynamic persistent scheduler (persist=3) vs the defaults on the H100: verify, time, peers before and after.
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln; chmod +x $B
L=$OUT/attn2; mkdir -p $L
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $L/device.txt; git log -1 --format=%H >> $L/device.txt; date -u >> $L/device.txt
ok=""
for cfg in "persist=3" "persist=3,lazy=0"; do
  if [ "$cfg" = "persist=3" ]; then S=full; else S=quick; fi
  if KILN_FA3_D128=$cfg timeout 120 $B --no-store attn verify --version fa3_wgmma --suite $S > $L/verify-$cfg.txt 2>&1 \
     && KILN_FA3_D128=$cfg timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim 128 --causal >> $L/verify-$cfg.txt 2>&1 \
     && KILN_FA3_D128=$cfg timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --dim 128 --layout BHSD --dtype f16 --causal >> $L/verify-$cfg.txt 2>&1 \
     && KILN_FA3_D128=$cfg timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --dim 128 >> $L/verify-$cfg.txt 2>&1; then
    ok="$ok $cfg"
  fi
  tail -3 $L/verify-$cfg.txt
done
# d64/d256 share the header: their defaults (lazy 8) on the quick suite plus one big problem each.
for d in 64; do
  export KILN_FA3_D64=persist=3
  timeout 60 $B --no-store attn verify --version fa3_wgmma --suite full > $L/verify-d$d.txt 2>&1 && \
  timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim $d --causal >> $L/verify-d$d.txt 2>&1 && \
  timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --dim $d --layout BHSD --dtype f16 --causal >> $L/verify-d$d.txt 2>&1 && ok="$ok d$d"
  unset KILN_FA3_D64
done
echo "verified:$ok" | tee $L/verified.txt
shapes=""; for d in 128 64; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do
  b=${bs%,*}; s=${bs#*,}; shapes="$shapes;$b,16,$s,$d$c"; done; done; done
timeout 100 $PY scripts/attention_peer.py --reps 10 --shapes "${shapes#;}" > $L/peer.jsonl 2> $L/peer.err
bench() { # tag env-var env-value b s d causal
  rows=$(env $2="$3" timeout 60 $B --no-store --json attn bench --batch $4 --heads 16 --seqlen $5 --dim $6 $7 --version fa3_wgmma --reps 10 --warmup 3 2>>$L/bench.err | tr -d '\n')
  echo "{\"set\": \"$1\", \"b\": $4, \"s\": $5, \"d\": $6, \"causal\": $([ -n "$7" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> $L/bench.jsonl
}
for round in 1 2; do
  for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    for cfg in $ok; do case $cfg in d*) continue;; esac
      bench "$cfg" KILN_FA3_D128 "$cfg" $1 $2 128 "$c"
    done
    bench "default" X 0 $1 $2 128 "$c"
  done; done
done
for d in 64; do case "$ok" in *d$d*) ;; *) continue;; esac
  for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    bench "d$d-default" X 0 $1 $2 $d "$c"; bench "d$d-persist=3" KILN_FA3_D$d "persist=3" $1 $2 $d "$c"
  done; done
done
timeout 100 $PY scripts/attention_peer.py --reps 10 --shapes "${shapes#;}" >> $L/peer.jsonl 2>> $L/peer.err
# The counters must be back at 0 after hundreds of launches: verify again after the benches.
KILN_FA3_D128=persist=3 $B --no-store attn verify --version fa3_wgmma --suite quick > $L/verify-after.txt 2>&1; echo "verify after benches: exit $?" | tee -a $L/verified.txt

$PY - $L <<'PYEOF'
import json, sys, os, statistics
L = sys.argv[1]
peer = {}
for line in open(os.path.join(L, "peer.jsonl")):
    if line.startswith("{"):
        r = json.loads(line); peer.setdefault((r["batch"], r["seqlen"], r["dim"], r["causal"]), []).append(r.get("cudnn_tflops"))
res = {}
for line in open(os.path.join(L, "bench.jsonl")):
    r = json.loads(line)
    if not r["rows"]: continue
    res.setdefault((r["set"].replace("d64-", ""), r["b"], r["s"], r["d"], r["causal"]), []).append(r["rows"][0]["tflops"])
keys = sorted({k[1:] for k in res}, key=lambda k: (k[2], k[3], k[1]))
sets = sorted({k[0] for k in res})
print("d shape causal | " + " | ".join(sets) + " | cudnn | best/cudnn")
for k in keys:
    vals = {s: statistics.mean(res[(s,) + k]) for s in sets if (s,) + k in res}
    cl = [x for x in peer.get(k, []) if x]
    cud = statistics.mean(cl) if cl else None
    best = max(vals.values())
    print(k, " | ".join(f"{s}={v:.1f}" for s, v in vals.items()), "| cudnn", cl, "|", " ".join(f"{s}/cudnn={v / cud:.3f}" for s, v in vals.items()) if cud else None)
PYEOF
cd $OUT && tar czf attn2.tgz attn2 && rm -rf attn2
