#!/usr/bin/env bash
# Session 20 run 7: is the C-load "hang" the GPU or the compile? A hanging verify (binary c) in
# the background, sampled after 10 and 20 s: the process's CPU state and stack, nvidia-smi's
# utilisation; then `kiln check` of the version under a time limit (which variants compile).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r7; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; S=$D/kiln-c; chmod +x $S
save() { tar czf $FINAL/r7.tgz -C /tmp r7; }
$S --no-store verify --version wgmma_tma_ws --shape 64x64x64 --out f32 --beta 0.5 > $OUT/verify.txt 2>&1 &
PID=$!
for s in 10 20; do
  sleep 10
  { echo "== after $s s"; ps -o pid,stat,pcpu,time,wchan:30,cmd -p $PID; ps -eLo pid,tid,stat,pcpu,comm | awk -v p=$PID '$1==p'; ls /tmp/kiln-jit 2>/dev/null | head; nvidia-smi --query-gpu=utilization.gpu,clocks.sm,power.draw --format=csv;
    for t in /proc/$PID/task/*; do echo "$t: $(cat $t/stat | cut -d' ' -f3) $(cat $t/wchan 2>/dev/null)"; done; } >> $OUT/sample.txt 2>&1
done
cat $OUT/sample.txt
kill -9 $PID
save
t0=$SECONDS
rm -rf /tmp/kiln-jit2
KILN_CACHE_DIR=/tmp/kiln-jit2 timeout 150 $S --no-store --json check --version wgmma_tma_ws > $OUT/check.json 2> $OUT/check.err
echo "check: rc $?, $((SECONDS - t0)) s, $(ls /tmp/kiln-jit2 | wc -l) cached"
ls /tmp/kiln-jit2 | wc -l
grep -l "KILN_EPI=2" /tmp/kiln-jit2/*/meta.json 2>/dev/null | wc -l
tail -3 $OUT/check.err
save
