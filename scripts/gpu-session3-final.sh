#!/usr/bin/env bash
# Session 3's last device run (merged main): every op's quick verify with the merged binary, then a
# same-run A/B of fa3_wgmma configurations at head dims 64 and 128 (issue 6: the defaults, the
# tuner's d64 pick with and without the work counter, lazy rescaling), two interleaved rounds,
# with SDPA's cuDNN timed between them, so the defaults rest on one machine's comparison.
# Here: cargo build --release && cp target/release/kiln .carry/lead/kiln
# Device: BIN=.carry/lead/kiln bash scripts/gpu-session3-final.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
L=$OUT/final; mkdir -p "$L"
export KILN_STORE="$OUT/kiln.db" KILN_CACHE_DIR=/tmp/kiln-jit
BIN=${BIN:-.carry/lead/kiln}; chmod +x "$BIN"
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader; date -u; } | tee "$L/device.txt"
fail=0
timeout 200 "$BIN" verify --suite quick > "$L/verify-gemm.txt" 2>&1 || fail=1; tail -2 "$L/verify-gemm.txt"
timeout 150 "$BIN" attn verify --suite full > "$L/verify-attn.txt" 2>&1 || fail=1; tail -2 "$L/verify-attn.txt"
timeout 150 "$BIN" moe verify --suite quick > "$L/verify-moe.txt" 2>&1 || fail=1; tail -2 "$L/verify-moe.txt"
D64="bn=128,cwg=3,stages=4,overlap=1,dynamic=2 bn=176,cwg=3,stages=2,overlap=0,dynamic=2 bn=176,cwg=3,stages=2,overlap=0,dynamic=0,persist=1 bn=176,cwg=3,stages=2,overlap=0,dynamic=2,lazy=8"
D128="dynamic=1,lazy=0 dynamic=0,lazy=0 dynamic=1,lazy=8"
vq() { # d cfg
  { env KILN_FA3_D$1=$2 timeout 60 "$BIN" --no-store attn verify --version fa3_wgmma --suite quick --dim $1 \
    && env KILN_FA3_D$1=$2 timeout 60 "$BIN" --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim $1 --causal \
    && env KILN_FA3_D$1=$2 timeout 60 "$BIN" --no-store attn verify --version fa3_wgmma --batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --dim $1 --layout BHSD --dtype f16 --causal \
    && env KILN_FA3_D$1=$2 timeout 60 "$BIN" --no-store attn verify --version fa3_wgmma --batch 2 --heads 4 --seqlen-q 700 --seqlen-kv 300 --dim $1 --causal; } > "$L/verify-d$1-$2.txt" 2>&1 || { fail=1; echo "verify d$1 $2 failed"; }
}
for cfg in $D64; do vq 64 $cfg; done
for cfg in $D128; do vq 128 $cfg; done
echo "verify failures: $fail" | tee "$L/verified.txt"
[ $fail = 0 ] || exit 1
bench() { # d cfg b s causal
  rows=$(env KILN_FA3_D$1="$2" timeout 60 "$BIN" --no-store --json attn bench --batch $3 --heads 16 --seqlen $4 --dim $1 $5 --version fa3_wgmma --reps 10 --warmup 3 2>>"$L/bench.err" | tr -d '\n')
  echo "{\"d\": $1, \"cfg\": \"$2\", \"b\": $3, \"s\": $4, \"causal\": $([ -n "$5" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> "$L/bench.jsonl"
}
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
shapes=""; for d in 64 128; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do
  b=${bs%,*}; s=${bs#*,}; shapes="$shapes;$b,16,$s,$d$c"; done; done; done
timeout 30 "$BIN" --no-store attn bench --batch 2 --heads 16 --seqlen 8192 --dim 128 --version fa3_wgmma --reps 50 --warmup 10 > /dev/null 2>&1
for round in 1 2; do
  timeout 100 $PY scripts/attention_peer.py --reps 10 --shapes "${shapes#;}" >> "$L/peer.jsonl" 2>> "$L/peer.err"
  for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    for cfg in $D64; do bench 64 "$cfg" $1 $2 "$c"; done
    for cfg in $D128; do bench 128 "$cfg" $1 $2 "$c"; done
  done; done
done
python3 - "$L" <<'PYEOF' | tee "$L/summary.txt"
import json, sys, os, statistics as st
res, peer = {}, {}
for line in open(os.path.join(sys.argv[1], "peer.jsonl")):
    if line.startswith("{"):
        r = json.loads(line)
        if r.get("cudnn_tflops"): peer.setdefault((r["dim"], r["batch"], r["seqlen"], r["causal"]), []).append(r["cudnn_tflops"])
for line in open(os.path.join(sys.argv[1], "bench.jsonl")):
    r = json.loads(line)
    if r["rows"]:
        res.setdefault((r["d"], r["b"], r["s"], r["causal"]), {}).setdefault(r["cfg"], []).append(r["rows"][0]["tflops"])
for k in sorted(res):
    cud = st.mean(peer[k]) if peer.get(k) else float("nan")
    print(f"d{k[0]} B{k[1]} S{k[2]}{' causal' if k[3] else ''} cuDNN {cud:.1f} {[round(x) for x in peer.get(k, [])]}")
    for c, v in res[k].items():
        print(f"    {c:60} {st.mean(v):6.1f} ({', '.join(f'{x:.0f}' for x in v)})  x cuDNN {st.mean(v) / cud:.3f}")
PYEOF
cd "$OUT" && tar czf final.tgz final && rm -rf final
