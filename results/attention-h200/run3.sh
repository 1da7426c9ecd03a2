#!/bin/bash
# Final device run: verify every fa3_wgmma configuration, time only the verified ones, then peers.
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/attn/kiln; chmod +x $B
ok=""
for cfg in "0 2" "1 2" "1 3"; do
  set -- $cfg
  export KILN_FA3_OVERLAP=$1 KILN_FA3_STAGES=$2
  echo "== verify fa3_wgmma overlap=$1 stages=$2"
  if $B --no-store attn verify --version fa3_wgmma --suite full \
     && $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim 128 --causal \
     && $B --no-store attn verify --version fa3_wgmma --batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --dim 128 --layout BHSD --dtype f16 --causal \
     && $B --no-store attn verify --version fa3_wgmma --batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --dim 128; then
    ok="$ok $1:$2"
  fi
done
echo "== verified configs:$ok"
unset KILN_FA3_OVERLAP KILN_FA3_STAGES
for cfg in $ok; do
  o=${cfg%:*}; s=${cfg#*:}
  for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    echo "== bench overlap=$o stages=$s b=$1 s=$2 $c"
    if [ "$cfg" = "1:2" ]; then V="--version composed --version fa2_mma_sync --version fa3_wgmma"; else V="--version fa3_wgmma"; fi
    KILN_FA3_OVERLAP=$o KILN_FA3_STAGES=$s $B --no-store attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 $c $V --reps 10 --warmup 3
  done; done
done
echo "== peers"
PYTHONUNBUFFERED=1 python3 scripts/attention_peer.py --reps 10 --shapes "4,16,4096,128;2,16,8192,128;1,16,16384,128;4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal"
