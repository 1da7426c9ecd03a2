#!/usr/bin/env bash
# On the GPU machine (binary carried in .carry/): the measurements committed under results/ for
# the GEMM issues. Writes JSON and logs into $OUT; prints the summary tables last.
set -uo pipefail
: "${OUT:?run on the device machine, where OUT is set}"
K="bash scripts/device.sh"
$K --json devices > "$OUT/devices.json"
$K peak 2>&1 | tee "$OUT/peak.txt"
$K suite --verify "${KILN_VERIFY_SUITE:-full}" --save "$OUT/suite.json" > "$OUT/suite.txt" 2>&1
echo "suite exit: $?" >> "$OUT/suite.txt"
$K --json bench --set targets --version wgmma_tma_ws > "$OUT/targets.json" 2> "$OUT/targets.err"

tail -30 "$OUT/suite.txt"
tail -3 "$OUT/targets.err"
