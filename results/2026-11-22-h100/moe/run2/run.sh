#!/usr/bin/env bash
# MoE session 3, H100 run 2 (moe-s3): the issue's shapes vs torch with the new defaults (128x192
# tiles, one group of m-tiles up to 24 MiB of X), through scripts/gpu-moe.sh with the full verify
# suite first; then two variants, each verified before it is timed.
# Device: bash .carry/moe/run.sh   (carry [".carry/moe"]).
set -uo pipefail
ROOT=$PWD
BIN=$ROOT/.carry/moe/kiln
chmod +x "$BIN"
PY=/opt/torch/.venv/bin/python
OUT=${OUT:-/tmp/moe-out}
R=$OUT/r; mkdir -p "$R"
LOG=$OUT/log.txt
log() { echo "$*" | tee -a "$LOG"; }
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 ))s; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv >"$R/machine.txt" 2>&1
log "machine: $(tail -1 "$R/machine.txt")"
export KILN_CACHE_DIR=/tmp/kiln-jit
log "[$(el)] compile: $("$BIN" --no-store moe check 2>&1 | tail -1)"
declare -A OK
vq() { # name env...
  local name=$1; shift
  env "$@" timeout 60 "$BIN" --no-store moe verify --suite quick >"$R/verify-$name.txt" 2>&1
  local rc=$?
  log "[$(el)] verify $name ($*) rc=$rc: $(tail -1 "$R/verify-$name.txt")"
  [ $rc -eq 0 ] && OK[$name]=1
}
# the tile sweep of gpu-moe.sh times each single-CTA tile at the issue's shapes: verify each first
SWEEP=1
for t in 128x256 128x192 128x128 64x256; do vq sweep$t KILN_MOE_TILE=$t; [ -n "${OK[sweep$t]:-}" ] || SWEEP=0; done
MOE_SWEEP=$SWEEP MOE_SUITE=full KILN_BIN=$BIN OUT=$R/moe timeout 200 bash .carry/moe/scripts/gpu-moe.sh >"$R/moe.txt" 2>&1
log "[$(el)] gpu-moe.sh exit $?"
tail -16 "$R/moe.txt" | tee -a "$LOG"
export KILN_STORE=$R/extra.db
S1=40,248,112,176,64,200,136,96
kb() { # name need env...
  local name=$1 need=$2; shift 2
  [ -n "${OK[$need]:-}" ] || { log "skip $name: $need not verified"; return; }
  env "$@" timeout 40 "$BIN" --no-store --json moe bench --counts $S1 --n 4096 --k 7168 >"$R/bench-$name.json" 2>"$R/bench-$name.err"
  log "[$(el)] $name ($*): $("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; print(f\"{r['median_ms']:.4f} ms {r['tflops']:.1f} TF {r.get('tile','')}\")" "$R/bench-$name.json" 2>&1 | tail -1)"
}
vq pair192 KILN_MOE_TILE="128x192 c2"
vq t128g12 KILN_MOE_TILE=128x128 KILN_MOE_GROUP=12
vq t192g8 KILN_MOE_TILE=128x192 KILN_MOE_GROUP=8
kb s1_pair192 pair192 KILN_MOE_TILE="128x192 c2"
kb s1_128_g12 t128g12 KILN_MOE_TILE=128x128 KILN_MOE_GROUP=12
kb s1_192_g8 t192g8 KILN_MOE_TILE=128x192 KILN_MOE_GROUP=8
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r and all(x['passed'] for x in r) else 1)" "$R/moe/verify.json" && OK[default]=1
kb s1_default_again default
timeout 60 "$PY" .carry/moe/scripts/moe_peer.py --counts $S1 --n 4096 --k 7168 >"$R/peer-s1_again.json" 2>"$R/peer-s1_again.err"
log "[$(el)] torch s1 again: $("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['grouped_mm']; print(f\"{r['median_ms']:.4f} ms\")" "$R/peer-s1_again.json" 2>&1 | tail -1)"
log "[$(el)] done"
tar -C "$OUT" -czf "$OUT/r2.tgz" r && rm -rf "$R"
