#!/usr/bin/env bash
# MoE session 3, H100 run 1 (moe-s3, code of commit ab13122): verify every changed tile path, then
# time the small-M variants (and the other plain shapes' defaults) against torch in the same run.
# Device: bash .carry/moe/run.sh   (carry [".carry/moe"]). Every timed config passed verify first.
set -uo pipefail
BIN=.carry/moe/kiln
chmod +x "$BIN"
PY=/opt/torch/.venv/bin/python
OUT=${OUT:-/tmp/moe-out}
R=$OUT/r; mkdir -p "$R"
export KILN_CACHE_DIR=/tmp/kiln-jit KILN_STORE=$R/kiln.db KILN_COMMIT=${KILN_COMMIT:-moe-s3}
LOG=$OUT/log.txt
log() { echo "$*" | tee -a "$LOG"; }
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 ))s; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv >"$R/machine.txt" 2>&1
log "machine: $(tail -1 "$R/machine.txt")"
log "[$(el)] compile: $("$BIN" --no-store moe check 2>&1 | tail -1)"
declare -A OK
vq() { # name suite env...
  local name=$1 suite=$2; shift 2
  env "$@" timeout 100 "$BIN" --no-store moe verify --suite "$suite" >"$R/verify-$name.txt" 2>&1
  local rc=$?
  log "[$(el)] verify $name ($suite; $*) rc=$rc: $(grep -c FAIL "$R/verify-$name.txt") FAIL lines; $(tail -1 "$R/verify-$name.txt")"
  [ $rc -eq 0 ] && OK[$name]=1
}
vq default quick
vq t128x192 quick KILN_MOE_TILE=128x192 KILN_MOE_SWAP=256x128
vq t128x128 quick KILN_MOE_TILE=128x128 KILN_MOE_SWAP=128x128
vq t128x256 quick KILN_MOE_TILE=128x256 KILN_MOE_LPT=0
vq t64x256 quick KILN_MOE_TILE=64x256 KILN_MOE_SWAP=128x256
vq full192 full KILN_MOE_TILE=128x192

S1=40,248,112,176,64,200,136,96
S2=40,196,88,152,64,120,180,104
PF=1512,1091,539,772,779,979,880,964
kb() { # name needs counts n k env...
  local name=$1 need=$2 c=$3 n=$4 k=$5; shift 5
  for v in $need; do [ -n "${OK[$v]:-}" ] || { log "skip $name: $v not verified"; return; }; done
  env "$@" timeout 60 "$BIN" --no-store --json moe bench --counts "$c" --n "$n" --k "$k" >"$R/bench-$name.json" 2>"$R/bench-$name.err"
  log "[$(el)] $name ($*): $("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; print(f\"{r['median_ms']:.4f} ms {r['tflops']:.1f} TF {r.get('tile','')}\")" "$R/bench-$name.json" 2>&1 | tail -1)"
}
pe() { # name counts n k
  timeout 90 "$PY" scripts/moe_peer.py --counts "$2" --n "$3" --k "$4" >"$R/peer-$1.json" 2>"$R/peer-$1.err"
  log "[$(el)] torch $1: $("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['grouped_mm']; print(f\"{r['median_ms']:.4f} ms {r['tflops']:.1f} TF\")" "$R/peer-$1.json" 2>&1 | tail -1)"
}
kb s1_default "default t128x192" $S1 4096 7168
pe s1 $S1 4096 7168
kb s1_192_g12 "t128x192" $S1 4096 7168 KILN_MOE_TILE=128x192 KILN_MOE_GROUP=12
kb s1_128 "t128x128" $S1 4096 7168 KILN_MOE_TILE=128x128
kb s1_256 "t128x256" $S1 4096 7168 KILN_MOE_TILE=128x256
kb s1_64 "t64x256" $S1 4096 7168 KILN_MOE_TILE=64x256
kb s1_swap256_lpt "default t64x256" $S1 4096 7168 KILN_MOE_GROUPED=grouped_swapab KILN_MOE_SWAP=128x256
kb s1_swap256_nolpt "t128x256" $S1 4096 7168 KILN_MOE_GROUPED=grouped_swapab KILN_MOE_SWAP=128x256 KILN_MOE_LPT=0
kb s1_swap128_lpt "t128x128" $S1 4096 7168 KILN_MOE_GROUPED=grouped_swapab KILN_MOE_SWAP=128x128
kb s1_swapw256_lpt "t128x192" $S1 4096 7168 KILN_MOE_GROUPED=grouped_swapab KILN_MOE_SWAP=256x128
kb s2_default "default" $S2 7168 2048
pe s2 $S2 7168 2048
kb s2_swap256_lpt "default" $S2 7168 2048 KILN_MOE_GROUPED=grouped_swapab
kb pf_default "default" $PF 3072 4096
pe pf $PF 3072 4096
pe s1_again $S1 4096 7168
kb s1_default_again "default t128x192" $S1 4096 7168
log "[$(el)] done"
tar -C "$OUT" -czf "$OUT/r1.tgz" r && rm -rf "$R"
