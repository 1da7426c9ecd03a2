#!/usr/bin/env bash
# The MoE GPU session in one command (issue 7), for the lent GPU machine, which has no cargo.
# Here, first:   cargo build --release && mkdir -p .carry/moe && cp target/release/kiln .carry/moe/
# Then on the GPU (the device `run` tool, carry [".carry/moe"]):   bash scripts/gpu-moe.sh
# It compiles every MoE variant, verifies the quick suite (MOE_SUITE=full for the full one),
# benchmarks the issue's shapes with kiln and with the torch peer (scripts/moe_peer.py) in the same
# run, prints the ratio table and leaves in $OUT: verify.json, results.json (every kiln and torch
# timing), summary.txt and kiln.db. Exit 0 only if everything verified and every command ran.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/moe-out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-jit}
BIN=${KILN_BIN:-.carry/moe/kiln}
PY=${PYTHON:-python3}
[ -x /opt/torch/.venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=/opt/torch/.venv/bin/python
chmod +x "$BIN" 2>/dev/null
status=0

echo "== compile check =="
"$BIN" --no-store moe check | tail -1 || status=1

echo "== verify (${MOE_SUITE:-quick} suite) =="
timeout 300 "$BIN" --json moe verify --suite "${MOE_SUITE:-quick}" >"$OUT/verify.json"
vrc=$?
[ $vrc -ne 0 ] && status=1
if [ $vrc -eq 11 ] || [ $vrc -eq 124 ]; then
  # A hung kernel would hang every benchmark too: stop here, with the verify log.
  echo "verify hung (exit $vrc): benchmarks skipped; rerun one case under 'compute-sanitizer --tool synccheck'"
  exit 1
fi
"$PY" - "$OUT/verify.json" <<'EOF' || status=1
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"verify produced no JSON ({e}); rerun without --json to see why")
bad = [r for r in rows if not r["passed"]]
for r in rows:
    err = r["rel_error"] if r["rel_error"] is not None else float("nan")
    note = r["message"] if not r["passed"] else ("skipped: " + r["skipped"] if r["skipped"] else "")
    print(f'{"ok  " if r["passed"] else "FAIL"} {r["version"]:12} {r["mode"]:6} err {err:.2e} <= {r["bound"]:.0e}  {r["problem"]}  {note}')
print(f"{len(rows)} checks, {len(bad)} failed")
sys.exit(1 if bad else 0)
EOF

# The issue's shapes: prefill (E=8, 7516 rows uneven, N=3072, K=4096) and the seeds' small-M ones.
PREFILL=1512,1091,539,772,779,979,880,964
SMALL1=40,248,112,176,64,200,136,96
SMALL2=40,196,88,152,64,120,180,104
bench() { # name, kiln args..., -- peer args...
  local name=$1; shift
  local kargs=() pargs=()
  while [ "$1" != "--" ]; do kargs+=("$1"); shift; done; shift
  pargs=("$@")
  echo "== $name =="
  timeout 120 "$BIN" --json moe bench "${kargs[@]}" >"$WORK/kiln-$name.json" || { status=1; echo "kiln bench $name failed"; }
  timeout 180 "$PY" scripts/moe_peer.py "${pargs[@]}" >"$WORK/peer-$name.json" || { status=1; echo "peer $name failed: $(head -c 400 "$WORK/peer-$name.json")"; }
}
bench prefill --counts $PREFILL --n 3072 --k 4096 -- --counts $PREFILL --n 3072 --k 4096
bench small_m_4096x7168 --counts $SMALL1 --n 4096 --k 7168 -- --counts $SMALL1 --n 4096 --k 7168
bench small_m_7168x2048 --counts $SMALL2 --n 7168 --k 2048 -- --counts $SMALL2 --n 7168 --k 2048
bench ffn_prefill --counts $PREFILL --n 3072 --k 4096 --swiglu -- --counts $PREFILL --n 3072 --k 4096 --swiglu
bench ffn_prefill_interleaved --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved -- --counts $PREFILL --n 3072 --k 4096 --swiglu

# Every compiled tile shape of the grouped GEMM on the plain shapes (MOE_SWEEP=0 skips): is the
# wave-quantisation choice the fastest?
if [ "${MOE_SWEEP:-1}" != 0 ]; then
  for shape in "prefill $PREFILL 3072 4096" "small_m_4096x7168 $SMALL1 4096 7168" "small_m_7168x2048 $SMALL2 7168 2048"; do
    set -- $shape
    for tile in 128x256 128x192 128x128 64x256; do
      KILN_MOE_TILE=$tile timeout 120 "$BIN" --no-store --json moe bench --counts "$2" --n "$3" --k "$4" >"$WORK/sweep-$1-$tile.json" || echo "sweep $1 $tile failed"
    done
  done
fi

"$PY" - "$WORK" "$OUT/results.json" <<'EOF' | tee "$OUT/summary.txt" || status=1
import json, os, sys
work, dest = sys.argv[1], sys.argv[2]
def load(p):
    try:
        return json.load(open(os.path.join(work, p)))
    except Exception as e:
        return {"error": f"no result ({e})"}
names = ["prefill", "small_m_4096x7168", "small_m_7168x2048", "ffn_prefill", "ffn_prefill_interleaved"]
res = {n: {"kiln": load(f"kiln-{n}.json"), "torch": load(f"peer-{n}.json")} for n in names}
sweep = {}
for f in sorted(os.listdir(work)):
    if f.startswith("sweep-"):
        shape, tile = f[len("sweep-"):-len(".json")].rsplit("-", 1)
        r = load(f)
        sweep.setdefault(shape, {})[tile] = r["rows"][0] if r.get("rows") else r
json.dump({"shapes": res, "tile_sweep": sweep}, open(dest, "w"), indent=2)
# (shape, kiln piece, torch key, target ratio torch_ms / kiln_ms)
rows = [("prefill", "grouped_gemm", "grouped_mm", 1.05), ("small_m_4096x7168", "grouped_gemm", "grouped_mm", 1.05),
        ("small_m_7168x2048", "grouped_gemm", "grouped_mm", 1.05), ("ffn_prefill", "swiglu_dual", "swiglu", 1.35),
        ("ffn_prefill_interleaved", "swiglu_dual", "swiglu", 1.35), ("ffn_prefill", "down_proj", "down_proj", 1.05),
        ("ffn_prefill", "ffn", "ffn", None)]
dev = next((r["kiln"].get("device") for r in res.values() if "device" in r["kiln"]), "?")
print(f"device: {dev}; torch {next((r['torch'].get('torch') for r in res.values() if 'torch' in r['torch']), '?')}")
print(f"{'shape':26} {'piece':13} {'kiln ms':>9} {'kiln TF':>8} {'torch ms':>9} {'torch TF':>9} {'x torch':>8} {'target':>7}")
for shape, piece, tkey, target in rows:
    k = next((t for t in res[shape]["kiln"].get("rows", []) if t["piece"] == piece), None)
    t = res[shape]["torch"].get(tkey)
    if not k or not t:
        print(f"{shape:26} {piece:13} missing: kiln {res[shape]['kiln'].get('error', '')} torch {res[shape]['torch'].get('error', '')}")
        continue
    ratio = t["median_ms"] / k["median_ms"]
    verdict = "" if target is None else ("met" if ratio >= target else "MISSED")
    print(f"{shape:26} {piece:13} {k['median_ms']:9.4f} {k['tflops']:8.1f} {t['median_ms']:9.4f} {t['tflops']:9.1f} {ratio:8.3f} {'' if target is None else target:>7} {verdict:6} {k.get('tile', '')}")
for shape, tiles in sweep.items():
    print(f"tile sweep {shape}: " + ", ".join(f"{t} {r.get('median_ms', float('nan')):.4f} ms" for t, r in sorted(tiles.items())))
EOF
rm -rf "$WORK"
echo "results in $OUT (verify.json, results.json, summary.txt, kiln.db); exit $status"
exit $status
