#!/usr/bin/env bash
# MoE development sweep on the lent GPU (issue 7), one call: verify every MoE version on the quick
# suite (each swap-AB tile shape and the two SwiGLU mainloops too), then time the issue's shapes
# with every candidate kernel and the torch peer in the same run. Carry: .carry/moe with kiln,
# this script, moe_peer.py and jit/ (a JIT cache built on the CPU machine with the same NVRTC).
#   cd .carry/moe && bash gpu-moe-sweep.sh
# $OUT gets summary.txt, verify.txt and raw.tgz (every JSON).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/moe-sweep}
RAW=$OUT/raw
mkdir -p "$RAW"
BIN=$HERE/kiln
chmod +x "$BIN"
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
[ -d "$HERE/jit" ] && { mkdir -p /tmp/kiln-jit; cp -r "$HERE/jit/." /tmp/kiln-jit/; }
PY=python3
[ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
t0=$SECONDS
status=0
stamp() { echo "[$((SECONDS - t0)) s] $*"; }

vsum() { "$PY" - "$1" <<'PYEOF'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no verify JSON ({e})"); sys.exit(1)
bad = [r for r in rows if not r["passed"]]
for r in bad:
    print(f'FAIL {r["version"]} {r["mode"]} {r["problem"]}: {r["message"]}')
print(f"{len(rows)} checks, {len(bad)} failed, versions {sorted(set(r['version'] for r in rows))}")
sys.exit(1 if bad else 0)
PYEOF
}
verify() { # name, env..., -- args
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 200 "$BIN" --json moe verify "$@" >"$RAW/verify-$name.json" 2>"$RAW/verify-$name.err"
  local rc=$?
  echo "verify $name (rc $rc): $(vsum "$RAW/verify-$name.json" | tail -3 | tr '\n' ' ')" | tee -a "$OUT/verify.txt"
  [ $rc -ne 0 ] && status=1
  return $rc
}
stamp "verify"
verify all KILN_NONE=1 -- --suite ${MOE_SUITE:-full}; v_all=$?
TILES=""
for t in ${VERIFY_TILES:-128x256 128x128 64x256 128x256c2 128x128c2 64x256c2}; do
  # only shapes that verified are timed (a hang would eat the whole call)
  verify "tile$t" KILN_MOE_TILE=$t -- --suite quick --version grouped_gemm && TILES="$TILES $t"
done
for t in 256x128 128x128; do
  verify "swap$t" KILN_MOE_SWAP=$t -- --suite quick --version grouped_swapab
done
if [ $v_all -eq 11 ] || [ $v_all -eq 124 ]; then stamp "verify hung: no benchmarks"; exit 1; fi

kb() { # tag, env..., -- kiln bench args
  local tag=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 60 "$BIN" --json moe bench "$@" >"$RAW/kiln-$tag.json" 2>"$RAW/kiln-$tag.err" || { status=1; echo "kiln $tag failed: $(tail -c 300 "$RAW/kiln-$tag.err")"; }
}
peer() { local tag=$1; shift; timeout 90 "$PY" "$HERE/moe_peer.py" "$@" >"$RAW/peer-$tag.json" 2>"$RAW/peer-$tag.err" || { status=1; echo "peer $tag failed"; }; }

PREFILL=1512,1091,539,772,779,979,880,964
SMALL1=40,248,112,176,64,200,136,96
SMALL2=40,196,88,152,64,120,180,104
DECODE=16,16,16,16,16,16,16,16
MID=384,384,384,384,384,384,384,384
stamp "bench"
for s in "small_m_4096x7168 $SMALL1 4096 7168" "small_m_7168x2048 $SMALL2 7168 2048" "decode16_4096x7168 $DECODE 4096 7168" "mid384_4096x7168 $MID 4096 7168" "prefill $PREFILL 3072 4096"; do
  set -- $s
  name=$1 c=$2 n=$3 k=$4
  kb "$name-default" KILN_NONE=1 -- --counts "$c" --n "$n" --k "$k"
  # the fixed group of 8 (the order before group_for), to time the tile order alone
  kb "$name-group8" KILN_MOE_GROUP=8 -- --counts "$c" --n "$n" --k "$k"
  for t in ${BENCH_TILES:-}; do
    kb "$name-tile$t" KILN_MOE_TILE=$t -- --counts "$c" --n "$n" --k "$k"
  done
  peer "$name" --counts "$c" --n "$n" --k "$k"
  kb "$name-default2" KILN_NONE=1 -- --counts "$c" --n "$n" --k "$k"
done
stamp "ffn"
kb ffn_prefill-default KILN_NONE=1 -- --counts $PREFILL --n 3072 --k 4096 --swiglu
kb ffn_prefill_interleaved-default KILN_NONE=1 -- --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved
peer ffn_prefill --counts $PREFILL --n 3072 --k 4096 --swiglu
stamp "ncu"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$NCU" ] && [ "${MOE_NCU:-1}" != 0 ]; then
  for v in "rowtiled KILN_NONE=1" "swapab KILN_MOE_GROUPED=grouped_swapab"; do
    set -- $v
    env "$2" timeout 120 "$NCU" --clock-control none -k regex:moe_grouped --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum \
      "$BIN" --no-store moe bench --counts $SMALL1 --n 4096 --k 7168 --reps 1 --warmup 2 >"$OUT/ncu-small_m-$1.txt" 2>&1 || echo "ncu $1 failed (rc $?)"
  done
fi
stamp "summary"

"$PY" - "$RAW" <<'PYEOF' | tee "$OUT/summary.txt"
import json, os, sys
raw = sys.argv[1]
def load(f):
    try: return json.load(open(os.path.join(raw, f)))
    except Exception as e: return {"error": str(e)}
dev = None
print(f"{'shape / variant':44} {'piece':12} {'tile':18} {'ms':>8} {'TF':>7} {'torch ms':>9} {'x torch':>8}")
for f in sorted(os.listdir(raw)):
    if not (f.startswith("kiln-") and f.endswith(".json")): continue
    tag = f[5:-5]; shape, var = tag.rsplit("-", 1)
    k = load(f); p = load(f"peer-{shape}.json")
    if "error" in p and shape.startswith("ffn_prefill"): p = load("peer-ffn_prefill.json")
    dev = dev or k.get("device")
    for r in k.get("rows", []):
        key = {"grouped_gemm": "grouped_mm", "swiglu_dual": "swiglu", "down_proj": "down_proj", "ffn": "ffn"}[r["piece"]]
        t = p.get(key, {}).get("median_ms")
        ratio = f"{t / r['median_ms']:.3f}" if t else "-"
        print(f"{shape + ' / ' + var:44} {r['piece']:12} {r['tile']:18} {r['median_ms']:8.4f} {r['tflops']:7.1f} {t if t else float('nan'):9.4f} {ratio:>8}")
    if "rows" not in k: print(f"{tag:44} missing: {k.get('error', '')}")
print(f"device: {dev}; torch {next((load(f).get('torch') for f in os.listdir(raw) if f.startswith('peer-')), '?')}")
PYEOF
tar -C "$OUT" -czf "$OUT/raw.tgz" raw && rm -rf "$RAW"
stamp "done, exit $status"
exit $status
