#!/bin/bash
# attn GPU call 3 (final): verify fa3_wgmma configuration sets (full suite + large/ragged problems per head
# dim), time only the verified ones, then the SDPA peers (cuDNN, FA2) on the same shapes.
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/attn/kiln; chmod +x $B
R=$OUT/run3; mkdir -p $R
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/device.txt
# name|d64 overrides|d128 overrides|d256 overrides ("-" = this set does not touch that dim)
SETS=(
 "fa3_wgmma|||"
 "d256_persist|-|-|persist=1"
)
# more work items than SMs (the persistent loop), GQA, ragged, Sq > Skv causal (rows with no key)
EXTRA=("--batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --causal"
       "--batch 2 --heads 16 --seqlen 4096"
       "--batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --layout BHSD --dtype f16 --causal"
       "--batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --layout BHSD --dtype f16 --causal")
dims=(64 128 256)
OKSETS=()
for s in "${SETS[@]}"; do
  IFS='|' read -r name o64 o128 o256 <<< "$s"; ov=("$o64" "$o128" "$o256")
  [ $(( $(date +%s) - T0 )) -gt 200 ] && { el "time guard: not verifying $name"; continue; }
  export KILN_FA3_D64=${o64/-/} KILN_FA3_D128=${o128/-/} KILN_FA3_D256=${o256/-/}
  el "verify $name: D64=$KILN_FA3_D64 D128=$KILN_FA3_D128 D256=$KILN_FA3_D256"
  okd=""
  timeout 150 $B --no-store attn verify --version fa3_wgmma --suite full > $R/verify_$name.txt 2>&1; rc=$?
  tail -3 $R/verify_$name.txt | sed 's/^/   /'
  # the suite finished (its table printed) and no FAIL line names this dim: that dim passed
  done_ok=0; grep -q "^| fa3_wgmma" $R/verify_$name.txt && done_ok=1
  for i in 0 1 2; do
    [ "${ov[$i]}" = "-" ] && continue
    [ $done_ok -eq 1 ] || continue
    grep -q "^FAIL .* d${dims[$i]} " $R/verify_$name.txt && { el "  FAIL suite $name d${dims[$i]}"; continue; }
    dok=1
    for x in "${EXTRA[@]}"; do
      timeout 60 $B --no-store attn verify --version fa3_wgmma $x --dim ${dims[$i]} >> $R/verify_$name.txt 2>&1 || { dok=0; el "  FAIL $name d${dims[$i]}: $x"; }
    done
    [ $dok -eq 1 ] && okd="$okd ${dims[$i]}"
  done
  el "  $name verified dims:$okd (suite rc $rc)"
  OKSETS+=("$name|$okd")
done
unset KILN_FA3_D64 KILN_FA3_D128 KILN_FA3_D256
echo "${OKSETS[@]}" > $R/verified.txt
bench() { # name dim shape-args...
  local n=$1 d=$2; shift 2
  timeout 60 $B attn bench --version fa3_wgmma --dim $d "$@" --reps 10 --warmup 3 --json 2>/dev/null | python3 -c "
import json,sys
for r in json.load(sys.stdin):
  p=r['problem']; print(json.dumps({'set':'$n','d':$d,'b':p['batch'],'s':p['seqlen_q'],'causal':p['causal'],'ms':r['median_ms'],'tf':r['tflops']}))" >> $R/bench.jsonl
}
for e in "${OKSETS[@]}"; do
  IFS='|' read -r name okd <<< "$e"
  for s in "${SETS[@]}"; do IFS='|' read -r sn o64 o128 o256 <<< "$s"; [ "$sn" = "$name" ] && break; done
  export KILN_FA3_D64=${o64/-/} KILN_FA3_D128=${o128/-/} KILN_FA3_D256=${o256/-/}
  el "bench $name on dims$okd"
  for d in $okd; do
    shapes="4:4096 2:8192 1:16384"
    for bs in $shapes; do for c in "" "--causal"; do
      [ $name = d256_persist ] && [ -n "$c" ] && continue  # persist=1 leaves causal unchanged
      [ $(( $(date +%s) - T0 )) -gt 320 ] && { el "time guard: skipping bench $name d$d $bs $c"; continue; }
      bench $name $d --batch ${bs%:*} --heads 16 --seqlen ${bs#*:} $c
    done; done
  done
done
unset KILN_FA3_D64 KILN_FA3_D128 KILN_FA3_D256
el "composed and fa2_mma_sync (the lower rungs, for the README table)"
for d in 64 128 256; do for bs in 4:4096 2:8192 1:16384; do for c in "" "--causal"; do
  [ $(( $(date +%s) - T0 )) -gt 330 ] && { el "time guard: skipping lower rungs d$d $bs $c"; continue; }
  timeout 60 $B attn bench --version composed --version fa2_mma_sync --dim $d --batch ${bs%:*} --heads 16 --seqlen ${bs#*:} $c --reps 10 --warmup 3 --json 2>/dev/null | python3 -c "
import json,sys
for r in json.load(sys.stdin):
  p=r['problem']; print(json.dumps({'set':r['version'],'d':$d,'b':p['batch'],'s':p['seqlen_q'],'causal':p['causal'],'ms':r['median_ms'],'tf':r['tflops']}))" >> $R/bench.jsonl
done; done; done
el "peers"
PYTHONUNBUFFERED=1 timeout 120 python3 .carry/attn/attention_peer.py --reps 10 --shapes "4,16,4096,128;2,16,8192,128;1,16,16384,128;4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal;4,16,4096,64;2,16,8192,64;1,16,16384,64;4,16,4096,64,causal;2,16,8192,64,causal;1,16,16384,64,causal;4,16,4096,256;2,16,8192,256;1,16,16384,256;4,16,4096,256,causal;2,16,8192,256,causal;1,16,16384,256,causal" > $R/peer.jsonl 2> $R/peer.err
el "done"
python3 .carry/attn/summarize.py $R/bench.jsonl $R/peer.jsonl | tee $R/summary.txt
# memcheck + synccheck + racecheck of the shipped configuration, one small ragged causal GQA problem per head dim
CS=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck synccheck racecheck; do for d in 64 128 256; do
  [ $(( $(date +%s) - T0 )) -gt 330 ] && { el "time guard: skipping sanitizer $tool d$d"; continue; }
  timeout 60 $CS --tool $tool --error-exitcode 99 $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 4 --kv-heads 2 --seqlen-q 300 --seqlen-kv 400 --dim $d --causal > $R/sanitize_${tool}_d$d.txt 2>&1
  el "sanitize $tool d$d: rc $? $(grep -h 'ERROR SUMMARY' $R/sanitize_${tool}_d$d.txt | head -1)"
done; done
# one profile for the next session: where d128 spends its time
if [ $(( $(date +%s) - T0 )) -lt 340 ]; then
  M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active
  timeout 60 $(command -v ncu || echo /usr/local/cuda/bin/ncu) --clock-control none -k regex:attn_fa3 --launch-skip 2 --launch-count 1 --metrics $M --csv $B --no-store attn bench --version fa3_wgmma --batch 2 --heads 16 --seqlen 8192 --dim 128 --reps 1 --warmup 2 > $R/ncu_d128_s8192.csv 2>&1
  el "ncu rc $?"
fi
cd $OUT && tar czf run3.tgz run3 && rm -rf run3
