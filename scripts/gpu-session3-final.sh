#!/usr/bin/env bash
# Session 3's last device run (merged main): every op's quick verify with the merged binary, then a
# same-run A/B of fa3_wgmma's scheduling and rescaling at head dims 64 and 128 (issue 6), two
# interleaved rounds, so the defaults rest on one machine's comparison rather than across runs.
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
for d in 64 128; do for cfg in "dynamic=2,lazy=8" "dynamic=0,lazy=8" "dynamic=0,lazy=0"; do
  env KILN_FA3_D$d=$cfg timeout 60 "$BIN" --no-store attn verify --version fa3_wgmma --suite quick --dim $d > "$L/verify-d$d-$cfg.txt" 2>&1 || { fail=1; echo "verify d$d $cfg failed"; }
done; done
echo "verify failures: $fail" | tee "$L/verified.txt"
[ $fail = 0 ] || exit 1
bench() { # d cfg b s causal
  rows=$(env KILN_FA3_D$1="$2" timeout 60 "$BIN" --no-store --json attn bench --batch $3 --heads 16 --seqlen $4 --dim $1 $5 --version fa3_wgmma --reps 10 --warmup 3 2>>"$L/bench.err" | tr -d '\n')
  echo "{\"d\": $1, \"cfg\": \"$2\", \"b\": $3, \"s\": $4, \"causal\": $([ -n "$5" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> "$L/bench.jsonl"
}
for round in 1 2; do
  for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    for cfg in "dynamic=2,lazy=0" "dynamic=2,lazy=8" "dynamic=0,lazy=0" "dynamic=0,lazy=8"; do bench 64 "$cfg" $1 $2 "$c"; done
    for cfg in "dynamic=1,lazy=0" "dynamic=1,lazy=8" "dynamic=0,lazy=0" "dynamic=2,lazy=0"; do bench 128 "$cfg" $1 $2 "$c"; done
  done; done
done
python3 - "$L" <<'PYEOF' | tee "$L/summary.txt"
import json, sys, os, statistics as st
res = {}
for line in open(os.path.join(sys.argv[1], "bench.jsonl")):
    r = json.loads(line)
    if r["rows"]:
        res.setdefault((r["d"], r["b"], r["s"], r["causal"]), {}).setdefault(r["cfg"], []).append(r["rows"][0]["tflops"])
for k in sorted(res):
    base = st.mean(next(iter(res[k].values())))
    print(f"d{k[0]} B{k[1]} S{k[2]}{' causal' if k[3] else '       '}: " + "  ".join(f"{c} {st.mean(v):.1f}" for c, v in res[k].items()))
PYEOF
cd "$OUT" && tar czf final.tgz final && rm -rf final
