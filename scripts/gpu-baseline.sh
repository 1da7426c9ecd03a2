#!/usr/bin/env bash
# Session-start baseline on whatever GPU is lent (issues 3, 6, 7): every op's quick verify with
# this binary, then attention (fa3_wgmma and SDPA cuDNN/FA2 at the issue's shapes), the MoE
# shapes against torch, and the GEMM target set (RC) against cuBLAS. Everything under $OUT.
# Here: cargo build --release && cp target/release/kiln .carry/lead/kiln
# Device: BIN=.carry/lead/kiln bash scripts/gpu-baseline.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT/log"
export KILN_STORE="$OUT/kiln.db" KILN_CACHE_DIR=/tmp/kiln-jit
BIN=${BIN:-.carry/lead/kiln}
chmod +x "$BIN"
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
L=$OUT/log
{ "$BIN" devices; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; git log -1 --format=%H; date -u; } | tee "$L/machine.txt"
"$BIN" --no-store check > "$L/check.txt" 2>&1; tail -1 "$L/check.txt"
timeout 200 "$BIN" verify --suite quick > "$L/verify-gemm.txt" 2>&1; echo "gemm verify exit $?"; tail -2 "$L/verify-gemm.txt"
timeout 150 "$BIN" attn verify --suite quick > "$L/verify-attn.txt" 2>&1; echo "attn verify exit $?"; tail -2 "$L/verify-attn.txt"
timeout 150 "$BIN" moe verify --suite quick > "$L/verify-moe.txt" 2>&1; echo "moe verify exit $?"; tail -2 "$L/verify-moe.txt"
if [ "${SKIP_ATTN:-0}" = 0 ]; then
  : > "$L/attn-bench.jsonl"
  for d in 128 64 256; do for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    rows=$(timeout 60 "$BIN" --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $d $c --version fa3_wgmma --reps 10 --warmup 3 2>>"$L/attn-bench.err" | tr -d '\n')
    echo "{\"batch\": $1, \"seqlen\": $2, \"dim\": $d, \"causal\": $([ -n "$c" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> "$L/attn-bench.jsonl"
  done; done; done
  shapes=""; for d in 128 64 256; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do
    b=${bs%,*}; s=${bs#*,}; shapes="$shapes;$b,16,$s,$d$c"; done; done; done
  timeout 240 "$PY" scripts/attention_peer.py --reps 10 --shapes "${shapes#;}" > "$L/attn-peer.jsonl" 2> "$L/attn-peer.err"
fi
if [ "${SKIP_MOE:-0}" = 0 ]; then
  MOE_SWEEP=0 KILN_BIN=$BIN OUT=$L/moe timeout 300 bash scripts/gpu-moe.sh > "$L/moe.txt" 2>&1; tail -12 "$L/moe.txt"
fi
if [ "${SKIP_GEMM:-0}" = 0 ]; then
  timeout 200 "$BIN" --json bench --set targets --layouts RC --version wgmma_tma_ws > "$L/gemm-targets-rc.json" 2> "$L/gemm-targets-rc.err"; tail -4 "$L/gemm-targets-rc.err"
fi
"$PY" - "$L" <<'PYEOF'
import json, sys, os
L = sys.argv[1]
def jl(p):
    out = []
    try:
        for line in open(os.path.join(L, p)):
            line = line.strip()
            if line.startswith("{") or line.startswith("["):
                try: out.append(json.loads(line))
                except Exception: pass
    except FileNotFoundError: pass
    return out
peer = {}
for r in jl("attn-peer.jsonl"):
    peer[(r.get("batch"), r.get("seqlen"), r.get("dim"), bool(r.get("causal")))] = r
print("attention (TFLOPS): shape, fa3, cudnn, ratio")
for r in jl("attn-bench.jsonl"):
    key = (r["batch"], r["seqlen"], r["dim"], r["causal"])
    tf = (r.get("rows") or [{}])[0].get("tflops")
    pr = peer.get(key, {})
    cud, fl = pr.get("cudnn_tflops"), pr.get("flash_tflops")
    print("d%d B%d S%d %s fa3 %s cudnn %s flash %s ratio %s" % (key[2], key[0], key[1], "causal" if key[3] else "      ", tf and round(tf, 1), cud, fl, round(tf / cud, 3) if tf and cud else None))
PYEOF
cd "$OUT" && tar czf log.tgz log && rm -rf log
