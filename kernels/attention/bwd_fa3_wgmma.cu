// Attention backward, FlashAttention-3 style (sm_90a; head dim 64 or 128): warp specialisation
// with WGMMA and TMA on the skeleton of common/ws_pipeline.cuh; the block, the producer warp and
// the two MMA warpgroups' products are bwd_fa3_block.cuh's (keys as the M of every product, dK
// and dV in registers, Pᵀ and dSᵀ as register A operands, dSᵀ through shared memory for dQ).
//   This version: the producer's lanes load LSE and D before lane 0 arms and starts a stage's
//   TMA; the consumers read LSE and D where they use them; two dSᵀ buffers.
//   dQ is added into the fp32 accumulator with red.global.add.v2.f32 by every thread (the key
//   split, d64: both consumers add to every element; deterministic mode: in key block order, each
//   block waiting on the per-(head, query block) counter as bwd_fa2_mma_sync.cu does, consumer 0
//   before consumer 1), then bwd_prep.cu's postprocess scales and rounds it.
// The maps are rank 4 over [batch, heads, seq, dim] (boxes of 64 dims), their strides giving
// BSHD or BHSD; rows past a sequence's end arrive as zeros (LSE +inf there, D 0, so P is 0).
#include "attention/bwd_fa3_block.cuh"

constexpr u32 OFF_DS = 2 * KV_BYTES + STAGES * STAGE_BYTES;
constexpr u32 OFF_VEC = OFF_DS + 2 * DS_BYTES;  // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_BARS = OFF_VEC + STAGES * 2 * BM * 4;
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_wgmma(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                       const __grid_constant__ TmaMap tdo, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bwd_kernel<false>(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, nullptr, p, [&](int c, const BwdWalk& k, const BwdSmem& sm) {
    bwd_consume<false, 2, false>(
        c, p, k, sm, [] {},
        [&](const float (&dq)[QN / 2], const BwdThread& th, int h, int m0, u32* sem) { add_dq_atomics(dq, p, k, th, h, m0, sem); }, [] {});
  });
}
