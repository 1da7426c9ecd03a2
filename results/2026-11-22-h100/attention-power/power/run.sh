#!/usr/bin/env bash
# Perf per watt under sustained load (issue 6's open question): for each case, one process runs
# 2.5 s of warm-up launches then 100 timed ones while nvidia-smi samples SM clock, power,
# temperature and throttle reasons every 50 ms; the last 1.8 s of samples (all under load) are
# summarised (commands end with 100 timed launches, ~0.1-0.2 s of the window). d128 B4 S4096 non-causal: kiln's default and five other configs, cuDNN; d128 B1
# S16384 and d256 B4 S4096: kiln and cuDNN. An 8 s pre-heat first, then two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s6; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
PW=power.draw.instant; nvidia-smi --query-gpu=$PW --format=csv,noheader >/dev/null 2>&1 || PW=power.draw
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; echo "commit $(cat .carry/lead/commit 2>/dev/null); power field $PW"; } > $OUT/machine.txt
kb() { $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $3 --version fa3_wgmma --reps 100 --warmup-ms 2500 2>>$OUT/err.txt | tr -d '\n'; }
pb() { $PY scripts/attention_peer.py --backends cudnn --reps 100 --warmup-ms 2500 --shapes "$1,16,$2,$3" 2>>$OUT/err.txt | tr -d '\n'; }
# compile every config once (JIT cache) before anything is timed
for c in "" "cwg=2,bn=128,stages=3,overlap=1" "cwg=2,bn=176,stages=2,overlap=1" "dynamic=0" "lazy=0" "emu=4"; do
  env KILN_FA3_D128="$c" $B --no-store attn bench --batch 4 --heads 16 --seqlen 4096 --dim 128 --version fa3_wgmma --reps 2 --warmup 1 >/dev/null 2>>$OUT/err.txt
done
$B --no-store attn bench --batch 4 --heads 16 --seqlen 4096 --dim 256 --version fa3_wgmma --reps 2 --warmup 1 >/dev/null 2>>$OUT/err.txt
$B --no-store attn bench --batch 1 --heads 16 --seqlen 16384 --dim 128 --version fa3_wgmma --reps 30 --warmup-ms 8000 >/dev/null 2>>$OUT/err.txt  # pre-heat
: > $OUT/runs.jsonl
one() {  # tag, then the command
  local tag=$1; shift
  stdbuf -oL nvidia-smi --query-gpu=timestamp,clocks.sm,$PW,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 50 > $OUT/smi.csv 2>/dev/null &
  local P=$!
  local r; r=$("$@")
  local end; end=$(date +%s.%N)
  sleep 0.3; kill -INT $P; wait $P 2>/dev/null
  cat $OUT/smi.csv >> $OUT/smi-all.csv
  $PY - "$tag" "$r" $OUT/smi.csv $end >> $OUT/runs.jsonl <<'PY'
import sys, json, datetime, statistics as st
tag, r, f, end = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
rows = []
for l in open(f):
    x = [y.strip() for y in l.split(',')]
    if len(x) < 5: continue
    try:
        t = datetime.datetime.strptime(x[0], '%Y/%m/%d %H:%M:%S.%f').timestamp()
        rows.append((t, int(x[1].split()[0]), float(x[2].split()[0]), int(x[3]), x[4]))
    except Exception: pass
w = [x for x in rows if end - 1.9 <= x[0] <= end - 0.1]
try: res = json.loads(r)
except Exception: res = None
tf = None
if isinstance(res, list) and res: tf = res[0]['tflops']
elif isinstance(res, dict): tf = res.get('cudnn_tflops')
out = {"tag": tag, "tflops": tf, "samples": len(w),
       "clock_mhz": st.median([x[1] for x in w]) if w else None,
       "power_w": st.median([x[2] for x in w]) if w else None,
       "temp_c": st.median([x[3] for x in w]) if w else None,
       "reasons": sorted({x[4] for x in w}), "result": res}
print(json.dumps(out))
PY
}
for round in 1 2; do
  for c in "" "cwg=2,bn=128,stages=3,overlap=1" "cwg=2,bn=176,stages=2,overlap=1" "dynamic=0" "lazy=0" "emu=4"; do
    export KILN_FA3_D128="$c"; one "r$round kiln d128 S4k [$c]" kb 4 4096 128; unset KILN_FA3_D128
  done
  one "r$round cudnn d128 S4k" pb 4 4096 128
  one "r$round kiln d128 S16k" kb 1 16384 128
  one "r$round cudnn d128 S16k" pb 1 16384 128
  one "r$round kiln d256 S4k" kb 4 4096 256
  one "r$round cudnn d256 S4k" pb 4 4096 256
done
cat $OUT/machine.txt
$PY - $OUT/runs.jsonl <<'PY'
import sys, json
print(f"{'case':46s} {'TF':>6s} {'MHz':>6s} {'W':>6s} {'C':>4s} {'TF/MHz':>7s} {'GF/J':>6s} reasons")
for l in open(sys.argv[1]):
    d = json.loads(l); tf = d['tflops'] or 0; mhz = d['clock_mhz'] or 1; w = d['power_w'] or 1
    print(f"{d['tag'][:46]:46s} {tf:6.0f} {mhz:6.0f} {w:6.0f} {d['temp_c'] or 0:4.0f} {tf/mhz*1000:7.1f} {tf/w*1000:6.0f} {','.join(r[-2:] for r in d['reasons'])}")
PY
