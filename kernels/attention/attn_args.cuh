// The argument block every attention kernel receives; mirrored by `AttnArgs` in
// src/ops/attention/mod.rs (a unit test pins the offsets). Strides are in elements, each tensor its
// own (Q: q_s*, K: kv_s*, V: v_s*, O: o_s*).
#pragma once
#include "common/types.cuh"

struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;       // [batch, heads_q, sq], fp32, natural log
  i64 q_sb, q_sh, q_ss;
  i64 kv_sb, kv_sh, kv_ss;  // K's (V's are v_s* below)
  int batch, heads_q, group, sq, skv;
  int causal;       // query i sees keys j <= i + (skv - sq)
  float scale_log2; // softmax scale * log2(e)
  float scale;
  u32* work;        // fa3_wgmma with KILN_DYNAMIC: [next item, blocks done], 0 between launches
  int q_row0;       // fa3_wgmma: the first row of its query blocks (0, or sq - blocks·BM < 0 when
                    // causal blocks are aligned to the last row); 0 for every other kernel
  int order_bh;     // fa3_wgmma: (batch, head) pairs per group of its work-item order (>= 1)
  float* split_ws;  // fa3_wgmma: per block, where the consumers of a split item hand over their
                    // partial softmax state and O; null: no item is split
  int parts_from;   // fa3_wgmma: the first item run in `parts` shares of its key tiles by as many
                    // blocks (the last, partial wave's items); the item count or more: none
  int parts;        // 2 or 3 (1: none)
  float* parts_ws;  // per such item, every part's partial softmax state and O
  u32* parts_done;  // per such item, parts finished; 0 between launches
  const int* cu_q;  // fa3_wgmma with KILN_VARLEN: cumulative query and key offsets, [batch + 1]
  const int* cu_k;  //   (batch: sequences; sq and skv: the longest)
  int total_q;      // KILN_VARLEN: packed query rows (LSE is [heads_q, total_q])
  int win_left;     // fa3_wgmma with KILN_WINDOW: query i sees keys i + skv - sq - win_left ..=
  int win_right;    //   i + skv - sq + win_right (causal folded in; unbounded: 1 << 30)
  int total_k;      // KILN_VARLEN: packed key rows
  i64 v_sb, v_sh, v_ss;
  i64 o_sb, o_sh, o_ss;
  u32* errors;      // KILN_VARLEN: a host-mapped word set to 1 when the offsets are bad; or null
};
