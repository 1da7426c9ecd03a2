#!/usr/bin/env bash
# Runs kiln on the lent GPU machine: the release binary built here travels in .carry/ (no cargo
# there). Usage on the device: bash scripts/device.sh <kiln args...>; all output also lands in $OUT.
set -uo pipefail
export KILN_STORE=${OUT:-/tmp}/kiln.db
export KILN_CACHE_DIR=/tmp/kiln-jit
BIN=${KILN_BIN:-.carry/kiln}
chmod +x "$BIN"
"$BIN" "$@"
