// The argument block of the attention backward's three kernels (bwd_prep.cu's preprocess and
// postprocess, bwd_fa2_mma_sync.cu's main kernel); mirrored by `AttnBwdArgs` in
// src/ops/attention_backward/mod.rs (a unit test pins the offsets). Strides are in elements.
#pragma once
#include "common/types.cuh"

struct AttnBwdArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;  // dO, in Q's layout
  const float* lse;  // [batch, heads_q, sq], natural log, as the forward writes it
  float* delta;      // [batch, heads_q, sq]: rowsum(dO * O), written by the preprocess
  float* dq_acc;     // [batch, heads_q, sq, d] fp32, zeroed by the preprocess
  void* dq;          // Q's layout
  void* dk;          // K's layout
  void* dv;
  u32* dq_sem;       // deterministic mode: [batch, heads_q, m_blocks] counters; null: any order
  i64 q_sb, q_sh, q_ss;    // Q, O, dO and dQ
  i64 kv_sb, kv_sh, kv_ss; // K, V, dK and dV
  int batch, heads_q, group, sq, skv, d;
  int causal;        // query i sees keys j <= i + (skv - sq)
  float scale_log2;  // softmax scale * log2(e)
  float scale;
  int m_block;       // the main kernel's query rows per block (the counters' granularity)
  int m_blocks;      // ceil(sq / m_block)
  int dtype;         // preprocess and postprocess: 0 bf16, 1 f16
  // The deterministic mode's order of dQ adds with a dQ writer warp (bwd_fa3_lookahead.cu with
  // KILN_BWD_DET_WRITER): 0 key blocks ascending, 1 rotated walks in groups of det_sms blocks
  // (non-causal), 2 key blocks descending (causal); ignored by the other kernels.
  int det_order;
  int det_sms;       // blocks that run at once (one per SM): the groups of order 1
  int win_left;      // KILN_BWD_WINDOW: query i sees keys i + skv - sq - win_left ..=
  int win_right;     //   i + skv - sq + win_right (causal folded in; unbounded: 1 << 30)
  const int* cu_q;   // KILN_BWD_VARLEN: cumulative query and key offsets, [sequences + 1] (grid z:
  const int* cu_k;   //   the sequence); batch is then 1 and sq, skv the packed rows
  u32* errors;       // KILN_BWD_VARLEN: a host-mapped word set to 1 when the offsets are bad; or null
  // The WGMMA kernels' block order (bwd_fa3_block.cuh's bwd_walk): 0 the grid's (key blocks
  // fastest); g > 0 (KILN_BWD_LPT, causal) chunks of g (key/value head, batch) pairs, the key
  // blocks slowest within a chunk, so that the longest walks start first.
  int lpt_heads;
  // KILN_BWD_DET_WRITER's writer warps (bwd_dq_tile.cuh's dq_writer): 2 (KILN_BWD_DET_WRITERS=2)
  // warps 1 and 2 take the blocks in turn; else warp 1 takes them all.
  int det_writers;
  // KILN_BWD_TAIL (bwd_tail.cuh; a 1D grid when tail_parts > 0): blocks before tail_full take a
  // whole key block, each later key block is tail_parts blocks; tail_sem: a counter per split key
  // block (zero between launches), tail_acc: the parts' fp32 dK and dV partials.
  int tail_parts;
  int tail_full;
  u32* tail_sem;     // (bwd_fa3_d256.cu's KILN_D256_PERSIST: [0] the next key block, [1] CTAs done)
  float* tail_acc;
  // A diagnostic (the host's --det-trace; null otherwise): the d256 ordered adds' time stamps,
  // written only by bwd_fa3_d256.cu compiled with KILN_D256_TRACE (d256_trace).
  u32* det_trace;
};
