// MoE grouped FP8 GEMM, block-scaled (sm_90a): for every expert e,
//   Y[rows of e] = dequant(X[rows of e]) · dequant(W[e])ᵀ
// with X e4m3 [x_rows, K] and 1x128 scales per row and K block, W e4m3 [E, N, K] with 128x128
// scales per expert, Y bf16 (or f16 / f32, KILN_OUT), in one persistent launch. The rows are
// kiln's: the contiguous layout (E + 1 offsets, any count per expert, no padding) or the masked
// one (X [E, max_rows, K] with E counts on the device; one launch or CUDA graph serves any
// counts). moe_tile_prefix turns either into the tables of moe/sched.cuh first.
//
// The mainloop and promotion are the dense FP8 kernel's (gemm/fp8_wgmma.cu, KILN_PIPE = 1;
// common/fp8_promote.cuh): 384 threads, warpgroup 0 the TMA producer, warpgroups 1 and 2 the
// consumers, 64 rows of the 128 x BN tile each, m64nBNk32 e4m3 wgmmas from 128B-swizzled stages
// of one 128-deep K block, each block's sums promoted into fp32 with its scales while the next
// block's wgmmas run. The scheduling is the bf16 grouped GEMM's (moe/grouped_gemm.cu): a flat
// tile index, persistent CTAs, the expert found by binary search over the m-tile prefix sums, X
// one 2D map over all its rows (32-row boxes: a tile loads only the boxes holding its valid
// rows), W one 3D map over [E, N, K] (the expert is a coordinate). A tile's rows past its
// expert's end hold other rows' data, weigh 0 in the promotion and are never stored; a consumer
// whose 64 rows all lie past the end issues no wgmma.
#include "common/fp8_promote.cuh"
#include "common/tma_3d.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/epilogue.cuh"
#include "moe/fp8_args.cuh"
#include "moe/sched.cuh"

#if !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM) || !defined(KILN_OUT)
#error "fp8_grouped.cu needs KILN_BN, KILN_STAGES, KILN_MAX_EXPERTS, KILN_SMEM and KILN_OUT (src/ops/moe/fp8_grouped.rs)"
#endif

constexpr int BM = 128, BN = KILN_BN, BK = 128, STAGES = KILN_STAGES;
constexpr int XBOX = 32;  // X rows per TMA box
constexpr u32 X_BYTES = BM * BK, W_BYTES = BN * BK, STAGE_BYTES = X_BYTES + W_BYTES;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 1) * 4;
static_assert(BN == 128, "the pipelined promotion keeps three BN-wide arrays: 128 columns fit the registers");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages and tables need");
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_fp8_grouped(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_w, const Fp8MoeArgs p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);
  const MbarRing<STAGES> ring{base + STAGES * STAGE_BYTES};
  int* table = reinterpret_cast<int*>(smem_raw + (ring.bars - raw) + 2 * STAGES * 8);
  const int E = p.experts;
  if (threadIdx.x == 0) {
    ring.init(8);  // lane 0 of each consumer warp
    mbar_fence_init();
  }
  moe_load_tables(table, p.sched, E);
  __syncthreads();
  const int tiles_m = table[E], units = tiles_m * p.tiles_n, kblocks = (p.k + BK - 1) / BK;
  const int wg = warpgroup_index();

  ws_roles<PRODUCER_REGS, CONSUMER_REGS>(
      wg,
      [&] {
        tma_prefetch(&tma_x);
        tma_prefetch(&tma_w);
        u32 it = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
          const MoeTile tile = moe_tile(table, E, u, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          const int boxes = min((tile.valid_rows + XBOX - 1) / XBOX, BM / XBOX);
          for (int kb = 0; kb < kblocks; ++kb, ++it) {
            ws_fill(ring, it, W_BYTES + boxes * XBOX * 128u, [&](int s, u32 bar) {
              const u32 sx = base + s * STAGE_BYTES;
              for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, kb * BK, tile.row0 + b * XBOX);
              tma_load_3d(sx + X_BYTES, &tma_w, bar, kb * BK, tile.n0, tile.expert);
            });
          }
        }
      },
      [&](int c) {
        const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
        out_t* y = static_cast<out_t*>(p.y);
        auto release = [&](int s) { ring.release(s, lane); };
        const u64 da0 = wgmma_desc_sw128(base + c * 64 * 128, 16, 1024);
        const u64 db0 = wgmma_desc_sw128(base + X_BYTES, 16, 1024);
        float fin[BN / 2], acc[BN / 2], acc2[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = acc2[i] = 0.0f;  // defined before their first wgmma
        u32 it = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
          const MoeTile tile = moe_tile(table, E, u, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          if (64 * c >= tile.valid_rows) {
            // No valid rows here: keep the stage barriers in step, issue no wgmma, store nothing.
            for (int kb = 0; kb < kblocks; ++kb, ++it) release(ring.wait_full(it));
            continue;
          }
          const int r0 = 64 * c + 16 * w + lane / 4;  // this thread's tile rows: r0, r0 + 8
          const int nb = tile.n0 / 128;                // BN = 128: one W scale block per tile
          auto scales = [&](int kb) {
            Fp8BlockScales sc{0.0f, 0.0f, 0.0f, 0.0f};
            if (kb < kblocks) {
              sc.a0 = fp8_moe_x_scale(p, kb, tile.row0, r0, tile.valid_rows);
              sc.a1 = fp8_moe_x_scale(p, kb, tile.row0, r0 + 8, tile.valid_rows);
              sc.b0 = fp8_moe_w_scale(p.sw, p, tile.expert, nb, kb);
            }
            return sc;
          };
          fp8_promoted_kloop<BN, STAGES, STAGE_BYTES>(ring, it, kblocks, da0, db0, fin, acc, acc2, BN / 8, scales, release);

          // Register i holds row r0 + 8((i>>1)&1), column 8(i>>2) + 2q + (i&1).
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = r0 + 8 * h;
            const bool row_ok = r < tile.valid_rows;
#pragma unroll
            for (int j0 = 0; j0 < BN / 8; j0 += 4) {
              float e[4][2];
#pragma unroll
              for (int s = 0; s < 4; ++s) {
                e[s][0] = fin[4 * (j0 + s) + 2 * h];
                e[s][1] = fin[4 * (j0 + s) + 2 * h + 1];
              }
              quad_transpose(e, q);
              if (row_ok) moe_store8(y, p.ldy, p.n, (i64)(tile.row0 + r), tile.n0 + 8 * (j0 + q), e);
            }
          }
        }
      });
}
