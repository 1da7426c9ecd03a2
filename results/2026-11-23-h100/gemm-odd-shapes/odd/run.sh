#!/usr/bin/env bash
# Session 13 run 6: why 3000^3 (0.49x) and 1000^3 (0.69x) lose so much (survey/): leading
# dimensions 16-byte but not 32-byte aligned (6000 B, 2000 B rows). Default vs every forced
# config, the L2 promotion overrides, the older rungs; 2992^3 (5984 B rows, 32-byte aligned,
# off 128-byte lines) and 3072^3 as controls. Then small-M CC (A's rows 16 / 64 B: not "on
# lines", so no ping-pong) with the ping-pong tiles forced. Main f6be432.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln-f6be432; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s13/commit-f6)"; } > $OUT/machine.txt
: > $OUT/odd.jsonl
run() { local tag="$1" s=$2 l=$3; shift 3; r=$(env "$@" timeout 90 $B --no-store bench --shape $s --layout $l --reps 20 --json 2>>$OUT/err.txt); echo "{\"shape\":\"$s $l\",\"v\":\"$tag\",\"r\":$r}" >> $OUT/odd.jsonl; }
for s in 3000 1000 2992 3072; do
  run dflt $s RC X=1
  for cfg in large pair small tiny tiny64 pingpong pingpong64; do run cfg-$cfg $s RC KILN_WGMMA_CFG=$cfg; done
  for pr in none 64 128 256; do run prom-$pr $s RC KILN_TMA_PROMOTION=$pr; done
  for v in wgmma_tma mma_sync; do
    r=$(timeout 90 $B --no-store bench --shape $s --layout RC --version $v --reps 20 --json 2>>$OUT/err.txt); echo "{\"shape\":\"$s RC\",\"v\":\"ver-$v\",\"r\":$r}" >> $OUT/odd.jsonl
  done
done
for s in 8x4096x4096 32x4096x4096 16x4096x4096; do
  run dflt $s CC X=1
  for cfg in pingpong-tiny pingpong64 pingpong tiny64; do run cfg-$cfg $s CC KILN_WGMMA_CFG=$cfg; done
done
python3 - $OUT/odd.jsonl <<'PY' | tee $OUT/summary.txt
import json, re, sys
txt = open(sys.argv[1]).read()
for rec in re.split(r'\n(?=\{"shape")', txt):
    try: d = json.loads(rec)
    except Exception: print("bad:", rec[:60].replace("\n", " ")); continue
    r = d["r"]; r = r[0] if isinstance(r, list) else r
    k, ratio = r["versions"][0]; c = r["vendor"]
    print(f"{d['shape']:18s} {d['v']:16s} {k['version']:13s} kiln {k['median_ms']*1e3:8.2f} us  cublas {c['median_ms']*1e3:8.2f} us  ratio {ratio:.3f}")
PY
