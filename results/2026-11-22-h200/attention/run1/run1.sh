#!/bin/bash
# attn GPU call 1: verify fa3_wgmma configuration sets (full suite + large/ragged problems per head
# dim), time only the verified ones, then the SDPA peers (cuDNN, FA2) on the same shapes.
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/attn/kiln; chmod +x $B
R=$OUT/run1; mkdir -p $R
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/device.txt
# name|d64 overrides|d128 overrides|d256 overrides ("-" = this set does not touch that dim)
SETS=(
 "base|||"
 "pp|pingpong=1|pingpong=1|pingpong=1"
 "persist|persist=1|persist=1|persist=1"
 "pp_persist|pingpong=1,persist=1|pingpong=1,persist=1|pingpong=1,persist=1"
 "alt1|cwg=3|bn=176,stages=2|bn=64"
 "alt2|bn=192,stages=3|overlap=0,stages=2|-"
 "alt3|bn=192,stages=3,pingpong=1|-|-"
)
# more work items than SMs (the persistent loop), GQA, ragged, Sq > Skv causal (rows with no key)
EXTRA=("--batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --causal"
       "--batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --layout BHSD --dtype f16 --causal")
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
    case $name in
      base|pp) shapes="4:4096 2:8192 1:16384";;
      persist|pp_persist) shapes="4:4096 2:8192"; [ $d != 128 ] && shapes="4:4096";;
      *) shapes="2:8192";;
    esac
    for bs in $shapes; do for c in "" "--causal"; do
      [ $(( $(date +%s) - T0 )) -gt 320 ] && { el "time guard: skipping bench $name d$d $bs $c"; continue; }
      bench $name $d --batch ${bs%:*} --heads 16 --seqlen ${bs#*:} $c
    done; done
  done
done
unset KILN_FA3_D64 KILN_FA3_D128 KILN_FA3_D256
el "peers"
PYTHONUNBUFFERED=1 timeout 120 python3 .carry/attn/attention_peer.py --reps 10 --shapes "4,16,4096,128;2,16,8192,128;1,16,16384,128;4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal;4,16,4096,64;2,16,8192,64;1,16,16384,64;4,16,4096,64,causal;2,16,8192,64,causal;1,16,16384,64,causal;4,16,4096,256;2,16,8192,256;1,16,16384,256;4,16,4096,256,causal;2,16,8192,256,causal;1,16,16384,256,causal" > $R/peer.jsonl 2> $R/peer.err
el "done"
python3 .carry/attn/summarize.py $R/bench.jsonl $R/peer.jsonl | tee $R/summary.txt
cd $OUT && tar czf run1.tgz run1 && rm -rf run1
