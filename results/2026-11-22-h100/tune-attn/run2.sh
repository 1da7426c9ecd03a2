#!/usr/bin/env bash
# Issue 4, attention target, second GPU run: (1) the default dispatch reading the cache tuned by
# run 1 (its store carried as run1.db), against KILN_NO_TUNED=1 and the KILN_FA3_D<d> override;
# (2) the tuned configs verified at full problems (quick suite, GQA causal, BHSD f16); (3) the
# evolutionary (model) search on the GPU; (4) more exhaustive landscapes, time permitting.
set -uo pipefail
B=.carry/tuner/kiln; chmod +x $B
cp .carry/tuner/run1.db $OUT/kiln.db
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
BUDGET=${BUDGET:-270}; T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
R=$OUT/run2; mkdir -p $R
{ echo "date: $(date -u)"; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader;
  echo "kiln commit: $(cat .carry/tuner/COMMIT 2>/dev/null)"; } | tee $R/device.txt
# (1) dispatch: store (tuned), KILN_NO_TUNED=1 (default), override = the default config (precedence)
for round in 1 2; do for d in 64 128; do for c in "" "--causal"; do
  if [ $d = 64 ]; then ov="KILN_FA3_D64=bn=128,cwg=3,stages=4,overlap=1,persist=1"; else ov="KILN_FA3_D128=bn=128,cwg=2,stages=3,persist=1"; fi
  for env in "X=tuned" "KILN_NO_TUNED=1" "$ov"; do
    t=$(env $env timeout 20 $B --no-store --json attn bench --version fa3_wgmma --batch 4 --heads 16 --seqlen 4096 --dim $d $c --reps 30 2>>$R/dispatch.err | python3 -c 'import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; print(r.get("tflops", r))' 2>>$R/dispatch.err)
    echo "round $round d$d ${c:-plain} [$env] $t" | tee -a $R/dispatch.txt
  done
done; done; done
# (2) verify the tuned configs at full problems
V() { echo "== $1" >> $R/verify.txt; env $1 timeout 60 $B --no-store attn verify --version fa3_wgmma "${@:2}" >> $R/verify.txt 2>&1; echo "rc $? $1 ${*:2}" | tee -a $R/verify.txt; }
for cfg in "KILN_FA3_D64=bn=176,cwg=3,stages=2,overlap=0,persist=1" "KILN_FA3_D128=bn=128,cwg=3,stages=2,overlap=0,emu=8,persist=1" "KILN_FA3_D128=bn=176,cwg=2,stages=2,persist=1"; do
  d=${cfg#KILN_FA3_D}; d=${d%%=*}
  V "$cfg" --suite quick
  V "$cfg" --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim $d --causal
  V "$cfg" --batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --dim $d --layout BHSD --dtype f16 --causal
done
# (3) the model-guided evolutionary search on the GPU (15% budget), seeds 1 and 2
for it in "64 plain 1" "64 causal 1" "128 causal 1" "64 plain 2"; do set -- $it
  c=""; [ $2 = causal ] && c="--causal"
  [ "$(left)" -lt 30 ] && break
  timeout $(( $(left) - 10 )) $B tune attn --batch 4 --heads 16 --seqlen 4096 --dim $1 $c --search evo --seed $3 --timeout-floor 3 --top 5 > $R/evo-d$1-$2-seed$3.txt 2>&1
  tail -4 $R/evo-d$1-$2-seed$3.txt
done
# (4) more landscapes
for it in "2 8192 64 plain" "2 8192 64 causal" "4 4096 256 plain"; do set -- $it
  c=""; [ $4 = causal ] && c="--causal"; tag="d$3-b$1-s$2-$4"
  L=$(left); [ "$L" -lt 30 ] && { echo "skip $tag" >> $R/skipped.txt; continue; }
  timeout -k 5 $((L - 12)) $B tune attn --batch $1 --heads 16 --seqlen $2 --dim $3 $c --search exhaustive --timeout-floor 3 --top 15 --landscape $R/landscape-$tag.json > $R/tune-$tag.txt 2>&1
  echo "rc $?" >> $R/tune-$tag.txt; tail -5 $R/tune-$tag.txt
done
cp $KILN_STORE $R/kiln.db 2>/dev/null
tar czf $OUT/run2.tgz -C $OUT run2 && rm -rf $R
echo "total $(( $(date +%s) - T0 )) s"
