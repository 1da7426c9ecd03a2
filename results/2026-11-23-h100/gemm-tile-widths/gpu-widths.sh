#!/usr/bin/env bash
# The 128x168 and 128x224 GEMM tiles (ledger #70), built in session 16 when no GPU was lent: what
# a GPU has to settle before `WIDTHS_BY_DEFAULT` (src/ops/gemm/wgmma_tma_ws.rs) may turn on.
# Here, first: cargo build --release && mkdir -p .carry/widths && cp target/release/kiln .carry/widths/
# Then on the GPU (the device `run` tool, carry [".carry/widths"]), one phase per call (each
# under 10 minutes on an H100):
#   bash scripts/gpu-widths.sh verify   # forced in every layout and case, the full suite with the
#                                       # rule on, compute-sanitizer on both tiles
#   bash scripts/gpu-widths.sh time     # forced against the default where they make whole waves,
#                                       # then the rule on against off: issue 3's targets, survey
# One binary throughout: KILN_WGMMA_WIDTHS=1 / 0 is the rule on / off, KILN_WGMMA_CFG forces.
# Leaves verify.txt / sweep.txt / ab.txt (and their raw JSON) in $OUT; copy them to
# results/<date>-h100/<session>/widths-*/ with this script.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/widths-out}
mkdir -p "$OUT"
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=${K:-.carry/widths/kiln}
chmod +x "$K"
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $K ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"; } > "$OUT/machine.txt"

# One verify call: its tag, then env assignments and arguments; prints the version's row.
v() {
  local tag=$1; shift
  echo "== $tag" >> "$OUT/verify.txt"
  timeout 300 env "$@" >> "$OUT/verify.txt" 2>&1
  echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' "$OUT/verify.txt" | tail -1)"
}

# Timings of `cfg` labels (env assignments after the colon, `default` for none), rotated a b b a.
sweep() {
  local file=$1; shift
  local shapes=$1; shift
  for sl in $shapes; do
    local s=${sl%:*} l=${sl#*:}
    for cfg in "$@" $(printf '%s\n' "$@" | tac); do
      local envs=${cfg#*=}
      [ "$cfg" = "${cfg#*=}" ] && envs=""
      echo "{\"cfg\":\"${cfg%%=*}\",\"shape\":\"$s $l\"}" >> "$file"
      timeout 60 env ${envs//,/ } "$K" --no-store --json bench --shape "$s" --layout "$l" --reps 20 >> "$file" 2>> "$OUT/err.txt"
    done
  done
}

# The median us of kiln and cuBLAS per (shape, label), and each label's ratio to cuBLAS.
table() {
  python3 - "$1" <<'PY'
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(list); labels = []
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'cfg' in o:
        tag = (o['shape'], o['cfg']); labels += [o['cfg']] if o['cfg'] not in labels else []; continue
    r = o[0] if isinstance(o, list) else o
    res[tag + ('kiln',)].append(r['versions'][0][0]['median_ms'] * 1e3)
    res[tag + ('cublas',)].append(r['vendor']['median_ms'] * 1e3)
print(f"{'shape':22s} " + " ".join(f"{l:>9s}" for l in labels) + f" {'cublas':>9s} " + " ".join(f"{'r ' + l:>9s}" for l in labels))
for s in dict.fromkeys(k[0] for k in res):
    cb = st.median([x for l in labels for x in res[(s, l, 'cublas')]])
    us = [st.median(res[(s, l, 'kiln')]) if res[(s, l, 'kiln')] else float('nan') for l in labels]
    print(f"{s:22s} " + " ".join(f"{u:9.2f}" for u in us) + f" {cb:9.2f} " + " ".join(f"{cb / u:9.3f}" for u in us))
PY
}

case "${1:-}" in
verify)
  : > "$OUT/verify.txt"
  v "full suite, rule on" KILN_WGMMA_WIDTHS=1 "$K" --no-store verify --version wgmma_tma_ws --suite full
  for c in n168 n224; do
    for l in RC CR RR CC; do
      # 1504 and 2000 columns end inside the register-stored tail (168: 152 of 168 in the last
      # tile; 224: 160 and 208 of 224), 344 with 8 (168) or 120 (224) columns in the last tile
      for s in 1024x11008x4096 1000x1504x700 129x344x65 300x2000x1000 2048x3584x1000; do
        v "$c $l $s" KILN_WGMMA_CFG=$c "$K" --no-store verify --version wgmma_tma_ws --shape $s --layout $l
      done
      v "$c $l f16" KILN_WGMMA_CFG=$c "$K" --no-store verify --version wgmma_tma_ws --shape 700x904x1000 --layout $l --dtype f16
      v "$c $l f16 out" KILN_WGMMA_CFG=$c "$K" --no-store verify --version wgmma_tma_ws --shape 700x904x1000 --layout $l --out f16
      v "$c $l splits 3" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 "$K" --no-store verify --version wgmma_tma_ws --shape 1000x1512x2000 --layout $l
      v "$c $l tail 3 grid 4" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 "$K" --no-store verify --version wgmma_tma_ws --shape 1000x1512x2000 --layout $l
      v "$c $l stream-K grid 5" KILN_WGMMA_CFG=$c KILN_WGMMA_SK=1 KILN_WGMMA_GRID=5 "$K" --no-store verify --version wgmma_tma_ws --shape 1000x1512x2000 --layout $l
      v "$c $l grid 2" KILN_WGMMA_CFG=$c KILN_WGMMA_GRID=2 "$K" --no-store verify --version wgmma_tma_ws --shape 1000x1504x700 --layout $l
      # a C the TMA-store epilogue cannot take: the next multiple of 64 runs instead
      v "$c $l N off 8" KILN_WGMMA_CFG=$c "$K" --no-store verify --version wgmma_tma_ws --shape 1000x1501x700 --layout $l
      v "$c $l f32 beta" KILN_WGMMA_CFG=$c "$K" --no-store verify --version wgmma_tma_ws --shape 1000x1504x700 --layout $l --out f32 --beta 0.5
    done
  done
  echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' "$OUT/verify.txt") of $(grep -c '^==' "$OUT/verify.txt") pass"
  for c in n168 n224; do
    timeout 200 env KILN_WGMMA_CFG=$c "$K" --no-store sanitize --version wgmma_tma_ws --timeout 90 > "$OUT/sanitize-$c.txt" 2>&1
    echo "sanitize $c rc $?: $(tail -1 "$OUT/sanitize-$c.txt")"
  done
  ;;
time)
  : > "$OUT/sweep.jsonl"
  # forced: where 168 or 224 makes whole waves, three layouts with an MN-major B (whole boxes
  # loaded: 14 % more B), and 4096^3 as a control the rule leaves alone
  sweep "$OUT/sweep.jsonl" "1024x11008x4096:RC 2048x11008x4096:RC 1024x3584x18944:RC 2048x3584x18944:RC 4096x3584x18944:RC 512x14336x4096:RC 1024x13824x5120:RC 2048x3584x3584:RC 1024x11008x4096:CC 1024x11008x4096:RR 1024x3584x18944:CR 4096x4096x4096:RC" \
    default n168=KILN_WGMMA_CFG=n168 n224=KILN_WGMMA_CFG=n224
  table "$OUT/sweep.jsonl" | tee "$OUT/sweep.txt"
  # the rule on against off, on issue 3's target set (each shape's pick is unchanged but
  # 512x14336x4096) and the survey's shapes that it changes
  : > "$OUT/ab.jsonl"
  sweep "$OUT/ab.jsonl" "512x14336x4096:RC 512x14336x4096:CR 512x14336x4096:RR 512x14336x4096:CC 1024x11008x4096:RC 1024x11008x4096:CR 2048x11008x4096:RC 1024x3584x18944:RC 1024x3584x18944:CC" \
    off=KILN_WGMMA_WIDTHS=0 on=KILN_WGMMA_WIDTHS=1
  table "$OUT/ab.jsonl" | tee "$OUT/ab.txt"
  ;;
*)
  echo "usage: $0 verify|time (see the header)" >&2
  exit 2
  ;;
esac
