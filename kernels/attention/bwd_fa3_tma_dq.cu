// Attention backward, FlashAttention-3 style with dQ added by one TMA tensor reduce per
// warpgroup and query block (sm_90a; head dim 64 or 128): bwd_fa3_bulk_dq.cu's block (128 keys
// of one (batch, key/value head), a producer warp, two MMA warpgroups of 64 keys each, keys as
// the M of every product, dK and dV in registers, LSE and D read ahead of the wgmma waits), with
// what its H200 profile (2026-11-29, B2 H16 S8192 d128) blamed changed: about a fifth of its
// stall samples sat in the loop where 16 lanes of every warp issued one 256-byte bulk
// reduce-add each (elect, R2UR, UBLKRED, branch, flush: 16 a warp, one after another).
//   dQ    the warpgroup's fp32 partial (64 query rows x QN columns) is staged in a tile that a
//         rank-5 map over the accumulator describes ([B, H, Sq, D/32, 32]: each row cut into
//         128-byte pieces, one swizzle row each; box [64 rows][QN/32][32], 128B swizzle, so the
//         stores of 8 rows x 4 lanes spread over the banks without padding). Each warp stores
//         its 16 rows and fences them for the async proxy; warps 1-3 arrive at the warpgroup's
//         named barrier and go on, warp 0 waits there and one thread adds the whole tile with
//         `cp.reduce.async.bulk.tensor` (rows past Sq dropped by the map). That thread waits for
//         the tile to have been read before the next block's dSᵀ barrier, which every writer
//         passes before it rewrites the tile: one staging tile a warpgroup. The deterministic
//         mode keeps the ordered red.global adds on the counters (bwd_fa3_wgmma's order).
// dQ's split between the warpgroups (KILN_DQ_SPLIT): d128 by columns (both meet once every dSᵀ
// row is stored) or by keys (KILN_BWD_DQ_KEYS=1 on the host: all 128 columns of its own 64
// keys, twice the adds, one dSᵀ buffer); d64 by keys. KILN_BWD_PP 1 (KILN_BWD_PINGPONG=1 on the
// host): the warpgroups take turns to issue Sᵀ and dPᵀ (bwd_block), so that one's exponentials
// run under the other's products; with the key split nothing realigns them every block.
#include "attention/bwd_fa3_block.cuh"
#include "common/tma_5d.cuh"

#if !defined(KILN_BWD_PP)
#error "KILN_BWD_PP (the warpgroups' turns at Sᵀ and dPᵀ: 0 or 1) must be defined by the host"
#endif

constexpr int DQ_PIECES = QN / 32;  // 128-byte pieces of a staging row (dim 1 of the map)
// dSᵀ buffers: two, or one for d128 split by keys (two would pass 227 KB; bwd_block).
constexpr int DS_BUFS = !SPLIT_N && D == 128 ? 1 : 2;
constexpr u32 DQ_BYTES = BM * QN * 4;  // one consumer's dQ staging tile [BM][DQ_PIECES][32] fp32, swizzled
constexpr u32 OFF_DS = 2 * KV_BYTES + STAGES * STAGE_BYTES;
constexpr u32 OFF_DQ = OFF_DS + DS_BUFS * DS_BYTES;  // 1024-aligned: the tiles' swizzle follows address bits
constexpr u32 OFF_VEC = OFF_DQ + 2 * DQ_BYTES;       // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_BARS = OFF_VEC + STAGES * 2 * BM * 4;
static_assert(QN % 32 == 0 && OFF_DQ % 1024 == 0 && DQ_BYTES % 1024 == 0, "staging tiles of 128-byte pieces on the swizzle repeat");
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_tma_dq(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                        const __grid_constant__ TmaMap tdo, const __grid_constant__ TmaMap tdq, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const BwdSmem sm = bwd_start(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, &tdq);
  const u32 sdq = smem_align1024(smem_raw) + OFF_DQ;
  const BwdWalk k = bwd_walk(p);

  ws_roles<PRODUCER_REGS, CONSUMER_REGS, 32>(
      threadIdx.x / 128, [&] { bwd_produce<true>(p, k, sm, &tq, &tk, &tv, &tdo); },
      [&](int c) {
        const u32 sdqc = sdq + c * DQ_BYTES;
        const int col0 = SPLIT_N ? c * QN : 0;  // this consumer's first dQ column
        // The thread that adds this warpgroup's tile (warp 0, lane 0).
        const bool adder = threadIdx.x % 128 == 0;
        // It waits until the previous block's add has read the tile: every writer of the tile
        // passes the dSᵀ barrier after this before it stores its rows again.
        auto before_meet = [&] {
          if (adder) tma_store_wait_read<0>();
        };
        auto add_dq = [&](const float (&dq)[QN / 2], const BwdThread& th, int h, int m0, u32* sem) {
          if (sem != nullptr) {
            add_dq_atomics(dq, p, k, th, h, m0, sem);  // bwd_fa3_wgmma's atomics, in its order
            return;
          }
          // The warp's rows 16w .. 16w + 15 into the tile: row r, column x is in 128-byte piece
          // r·DQ_PIECES + x/32, 16-byte chunk (x % 32)/4 of it, swizzled as the map's 128B.
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
#pragma unroll
            for (int j = 0; j < QN / 8; ++j) {
              const int piece = (th.krow + 8 * hf) * DQ_PIECES + j / 4, chunk = 2 * (j % 4) + th.t / 2;
              asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sdqc + swizzle128_offset(piece, chunk) + 8 * (th.t & 1)),
                           "f"(dq[4 * j + 2 * hf]), "f"(dq[4 * j + 2 * hf + 1]));
            }
          fence_proxy_async_shared();
          // Warps 1-3 signal and go on; warp 0 waits for them, and one thread adds the tile.
          if (th.w != 0) {
            named_barrier_arrive(4 + c, 128);
          } else {
            named_barrier_sync(4 + c, 128);
            if (adder) {
              tma_reduce_add_5d(&tdq, sdqc, 0, col0 / 32, m0, h, k.b);
              tma_store_commit();
            }
          }
        };
        // the last add done before the block's memory goes
        bwd_consume<true, DS_BUFS, KILN_BWD_PP != 0>(c, p, k, sm, before_meet, add_dq, [&] {
          if (adder) tma_store_wait<0>();
        });
      });
}
