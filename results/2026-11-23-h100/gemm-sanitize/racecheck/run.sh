#!/usr/bin/env bash
# Session 18 run 3 (binary n): the racecheck reports of run 2 in full. Three flagged setups, two
# of them again with the deferred epilogue off (KILN_WGMMA_DEFER=0), and a clean one with several
# split units per CTA, each verify under racecheck with every hazard printed.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/rc; mkdir -p $OUT $FINAL  # many files: one tarball back
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s18/kiln-n; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: n = d1f96d5 + sanitize --configs"; } > $OUT/machine.txt
rc() {  # tag shape layout env...
  local tag=$1 s=$2 l=$3; shift 3
  timeout 120 env "$@" /usr/local/cuda/bin/compute-sanitizer --tool racecheck --racecheck-report all --print-limit 40 \
    $K --no-store verify --version wgmma_tma_ws --shape $s --layout $l > $OUT/$tag.txt 2>&1
  echo "$tag rc $?: $(grep -E 'RACECHECK SUMMARY' $OUT/$tag.txt | tail -1) | $(grep -E '^\| wgmma_tma_ws ' $OUT/$tag.txt | tail -1)"
}
rc n224-tail 300x2000x200 RC KILN_WGMMA_CFG=n224 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4
rc n224-tail-nodefer 300x2000x200 RC KILN_WGMMA_CFG=n224 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 KILN_WGMMA_DEFER=0
rc tiny-split 300x2000x200 RC KILN_WGMMA_CFG=tiny KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0
rc tiny-split-nodefer 300x2000x200 RC KILN_WGMMA_CFG=tiny KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 KILN_WGMMA_DEFER=0
rc medium-sk 300x2000x200 RC KILN_WGMMA_CFG=medium KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4
rc large-split-grid4 600x1344x640 RC KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 KILN_WGMMA_GRID=4
rc large-tail-f32 600x1344x640 RC KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 KILN_WGMMA_EPI=0
for f in $OUT/*.txt; do echo "== $f"; grep -E "Race reported|Write access|Read access|^=========     (at|in)" $f | head -12; done
cp -r /tmp/kiln-jit $OUT/jit  # the CUBINs, for the report's offsets
tar czf $FINAL/racecheck.tgz -C /tmp rc
