#!/usr/bin/env bash
# Session 11 run 10: why kiln's multicast pairs lose. The same binary (experiment: SMALL_PAIR in
# the space, KILN_WGMMA_NOMC=1 = pairs launched as clusters but each CTA loading its whole B
# itself, local releases only) times single CTAs, multicast pairs and non-multicast pairs, three
# rotated rounds; then ncu duration / L2 sectors / tensor pipe of the three at 512x4096x4096.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln-nomc; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "main $(cat .carry/s11/commit-final) + .carry/s11/nomc.diff"; } > $OUT/machine.txt
: > $OUT/verify.txt
for E in "KILN_WGMMA_CFG=small_pair KILN_WGMMA_NOMC=1" "KILN_WGMMA_CFG=pair KILN_WGMMA_NOMC=1"; do
  env $E timeout 200 $B --no-store verify --version wgmma_tma_ws --suite full >> $OUT/verify.txt 2>&1; echo "verify $E rc $? $(tail -1 $OUT/verify.txt)"
done
: > $OUT/ab.jsonl
CASES="512x4096x4096:RC:small 2048x2048x2048:RC:pair 512x4096x14336:CR:small 4096x4096x4096:RC:pair"
V="d mc nomc"
for round in 1 2 3; do
  for c in $CASES; do
    IFS=: read s l cfg <<< "$c"
    for v in $V; do
      case $v in d) E="X=1";; mc) E="KILN_WGMMA_CFG=$cfg";; nomc) E="KILN_WGMMA_CFG=$cfg KILN_WGMMA_NOMC=1";; esac
      [ $cfg = small ] && E="${E/CFG=small/CFG=small_pair}"
      r=$(env $E timeout 60 $B --no-store bench --shape $s --layout $l --reps 60 --json 2>>$OUT/verify.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s11/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
NCU=$(command -v ncu)
M=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_requests_srcunit_tex.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second
for v in d mc nomc; do
  case $v in d) E="X=1";; mc) E="KILN_WGMMA_CFG=small_pair";; nomc) E="KILN_WGMMA_CFG=small_pair KILN_WGMMA_NOMC=1";; esac
  echo "== $v" >> $OUT/ncu.txt
  env $E timeout 100 $NCU --clock-control none --metrics $M -k regex:gemm_wgmma -c 3 --csv --page raw $B --no-store bench --shape 512x4096x4096 --layout RC --reps 2 --warmup 1 2>/dev/null | grep -E 'gemm_wgmma|Kernel Name' >> $OUT/ncu.txt
done
python3 - $OUT/ncu.txt <<'PY' | tee -a $OUT/summary.txt
import csv, sys
hdr = None; tag = None
for line in open(sys.argv[1]):
    if line.startswith('=='): tag = line.split()[1]; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if not hdr or len(r) != len(hdr): continue
    d = dict(zip(hdr, r)); g = lambda k: float(d[k].replace(',', '')) if d.get(k, '').replace(',', '').replace('.', '').isdigit() else float('nan')
    print(f"{tag:5} {g('gpu__time_duration.sum')/1e3:6.2f} us tensor {d['sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed']}% L2 sectors {g('lts__t_sectors.sum')*32/1e6:6.1f} MB (from SMs {g('lts__t_sectors_srcunit_tex.sum')*32/1e6:6.1f}, fabric {g('lts__t_sectors_srcunit_ltcfabric.sum')*32/1e6:6.1f}) requests from SMs {g('lts__t_requests_srcunit_tex.sum')/1e6:5.2f} M dram {g('dram__bytes_read.sum')/1e6:5.1f} MB")
PY
