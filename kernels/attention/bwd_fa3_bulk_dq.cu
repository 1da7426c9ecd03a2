// Attention backward, FlashAttention-3 style with dQ leaving through shared memory (sm_90a; head
// dim 64 or 128): bwd_fa3_wgmma.cu's block (128 keys of one (batch, key/value head), a producer
// warp, two MMA warpgroups of 64 keys each, keys as the M of every product, dK and dV in
// registers), with what its H200 profile (2026-11-29, 69f1c67) blamed changed:
//   dQ    about a fifth of the consumers' stall samples waited on the per-thread
//         red.global.add.v2.f32 (their source registers held until the L2 took them, the next
//         block's address registers waiting behind them). Here each warp stores its 16 rows of
//         the warpgroup's dQ partial (fp32) into a staging buffer of the warpgroup's own (rows
//         padded by 8 floats: the stores' 8 rows x 4 lanes fall on distinct banks) and 16 of
//         its lanes add one row each into the accumulator with a bulk reduce
//         (cp.reduce.async.bulk .add.f32, 256 bytes a row): the warp moves on at once and only
//         waits, one block later, for the rows to be read. No tensor map: rows of the
//         accumulator [B, H, Sq, D] are contiguous, and rows past Sq are not added. The
//         deterministic mode keeps bwd_fa3_wgmma's ordered red.global adds on the counters.
//   LSE   the consumers' reads of LSE·log2e and D waited behind the warpgroup's wgmmas for the
//         shared-memory pipe; they are loaded into registers before the wgmmas are waited for.
//   ring  the producer starts a block's TMA (expect_tx without arriving) before its lanes'
//         global loads of LSE and D, which it used to wait for first; d64 takes a 4th stage.
// dQ's split between the warpgroups (KILN_DQ_SPLIT): d128 by columns as bwd_fa3_wgmma (both meet
// once every dSᵀ row is stored) or by keys (KILN_BWD_DQ_KEYS=1 on the host: each warpgroup adds
// its own 64 keys' partial of all 128 columns, twice the adds, no meeting, so the two can drift
// out of phase; dK is waited for before dQ, and one dSᵀ buffer fits); d64 by keys.
#include "attention/bwd_fa3_block.cuh"
#include "common/bulk_copy.cuh"

constexpr int DQ_ROW = QN + 8;  // staging row (floats), padded against conflicts
// dSᵀ buffers: two, or one for d128 split by keys (two would pass 227 KB; bwd_block).
constexpr int DS_BUFS = !SPLIT_N && D == 128 ? 1 : 2;
constexpr u32 DQ_BYTES = BM * DQ_ROW * 4;  // one consumer's dQ staging [BM][DQ_ROW] fp32
constexpr u32 OFF_DS = 2 * KV_BYTES + STAGES * STAGE_BYTES;
constexpr u32 OFF_VEC = OFF_DS + DS_BUFS * DS_BYTES;  // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_DQ = OFF_VEC + STAGES * 2 * BM * 4;
constexpr u32 OFF_BARS = OFF_DQ + 2 * DQ_BYTES;
static_assert((DQ_ROW * 4) % 16 == 0 && (QN * 4) % 16 == 0 && OFF_DQ % 16 == 0, "bulk rows 16-byte aligned");
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_bulk_dq(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                         const __grid_constant__ TmaMap tdo, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bwd_kernel<true>(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, nullptr, p, [&](int c, const BwdWalk& k, const BwdSmem& sm) {
        const u32 sdqc = smem_align1024(smem_raw) + OFF_DQ + c * DQ_BYTES;
        const int col0 = SPLIT_N ? c * QN : 0;  // this consumer's first dQ column
        const int lane = threadIdx.x % 32;
        auto add_dq = [&](const float (&dq)[QN / 2], const BwdThread& th, int h, int m0, u32* sem) {
          if (sem != nullptr) {
            add_dq_atomics(dq, p, k, th, h, m0, sem);  // bwd_fa3_wgmma's atomics, in its order
            return;
          }
          // The warp's rows 16w .. 16w + 15 through its part of the staging buffer, once the
          // previous block's bulk adds (issued by lanes 0..15, one row each) have read it.
          if (th.lane < 16) tma_store_wait_read<0>();
          __syncwarp();
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
#pragma unroll
            for (int j = 0; j < QN / 8; ++j)
              asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sdqc + ((th.krow + 8 * hf) * DQ_ROW + 8 * j + 2 * th.t) * 4),
                           "f"(dq[4 * j + 2 * hf]), "f"(dq[4 * j + 2 * hf + 1]));
          fence_proxy_async_shared();
          __syncwarp();
          const int row = 16 * th.w + th.lane;
          if (th.lane < 16 && m0 + row < p.sq) {
            bulk_reduce_add_f32(p.dq_acc + (((i64)k.b * p.heads_q + h) * p.sq + m0 + row) * D + col0, sdqc + row * DQ_ROW * 4, QN * 4);
            tma_store_commit();
          }
        };
        // the last bulk adds done before the block's memory goes
        bwd_consume<true, DS_BUFS, false>(c, p, k, sm, [] {}, add_dq, [&] {
          if (lane < 16) tma_store_wait<0>();
        });
  });
}
