// MoE fused SwiGLU dual GEMM in FP8, block-scaled (sm_90a): for every expert e,
//   H[rows of e] = silu(X · W1[e]ᵀ) ⊙ (X · W3[e]ᵀ) (⊙ the row's routing weight, if given)
// with X e4m3 [x_rows, K] (1x128 scales), W1 and W3 e4m3 [E, N, K] (128x128 scales per expert),
// rows contiguous or masked as moe/fp8_grouped.cu. H is bf16 or f32 (KILN_OUT), or with
// KILN_QOUT = 1 e4m3 codes with 1x128 scales (sy[(n / 128) * x_rows + row], M-major: the layout
// the down projection's X takes), quantised in the epilogue with the arithmetic of
// quant/fp8_quant.cu (amax over the group, fp8_scale_for, round to nearest even, saturate), so the
// codes and scales are those kiln's quantisation kernel gives for the fp32 H this kernel computes.
//
// Tile: 64 rows x 128 columns of H, so that one tile holds whole 1x128 groups of its rows. A
// stage holds the 64 X rows of one 128-deep K block and, for the tile's 128 columns, W1 and W3 in
// four 64-row boxes ordered [W1 0-63 | W3 0-63 | W1 64-127 | W3 64-127]: consumer c's 128 rows
// (W1 and W3 of columns 64c .. 64c + 63) are then one K-major operand, and one m64n128k32 computes
// its [gate | up] (accumulator columns 0-63 gate, 64-127 up). Both consumers read the same X rows.
// Per multiply-add the wgmmas read as many shared bytes as the dense 128 x 128 tile's. The
// mainloop and promotion are the dense FP8 kernel's (common/fp8_promote.cuh), the gate registers
// promoted with W1's scale and the up registers with W3's. Scheduling as moe/fp8_grouped.cu.
//
// The quantised epilogue: each thread's |H| maximum over its columns of a row, reduced over the
// quad that shares the row, then across the two consumers (which hold the row's two column
// halves) through shared memory and a named barrier; two buffers alternate by tile, so the one
// barrier per tile is enough (a consumer rewrites a buffer only after both passed the next
// tile's barrier).
#include "common/fast_math.cuh"
#include "common/fp8.cuh"
#include "common/fp8_promote.cuh"
#include "common/tma_3d.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/epilogue.cuh"
#include "moe/fp8_args.cuh"
#include "moe/sched.cuh"

#if !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM) || !defined(KILN_OUT) || !defined(KILN_QOUT)
#error "fp8_swiglu.cu needs KILN_STAGES, KILN_MAX_EXPERTS, KILN_SMEM, KILN_OUT and KILN_QOUT (src/ops/moe/fp8_swiglu.rs)"
#endif

constexpr int BM = 64, BN = 128, BK = 128, STAGES = KILN_STAGES;
constexpr bool QOUT = KILN_QOUT != 0;
constexpr int XBOX = 32;        // X rows per TMA box
constexpr int WBOX = 64;        // W rows per TMA box: half of the tile's columns of W1 or W3
constexpr int WN = 2 * WBOX;    // one consumer's wgmma width: 64 gate and 64 up columns
constexpr u32 X_BYTES = BM * BK, W_BYTES = 2 * BN * BK, STAGE_BYTES = X_BYTES + W_BYTES;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 1) * 4;
constexpr u32 AMAX_BYTES = 2 * 2 * BM * 4;  // [tile parity][consumer][row]
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + AMAX_BYTES + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, buffers and tables need");
static_assert(!QOUT || sizeof(out_t) == 2, "the quantised output is compiled once, with KILN_OUT = bf16");
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
constexpr u32 AMAX_BARRIER = 1;  // named barrier of the 256 consumer threads (0 is __syncthreads)

// silu for the output: one MUFU tanh for bf16 (its ~2.5e-4 relative error hides under bf16's
// rounding), ex2 + rcp where the output keeps more (f32) or is quantised (so that the quantised
// codes are exactly those of the f32 kernel's output, which verification quantises with kiln's
// quantisation kernel to compare bit for bit).
__device__ __forceinline__ float swiglu_silu(float g) {
  if constexpr (QOUT || sizeof(out_t) == 4) return silu_fast(g);
  else return silu_tanh(g);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_fp8_swiglu(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_w1,
                   const __grid_constant__ TmaMap tma_w3, const Fp8MoeArgs p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);
  const MbarRing<STAGES> ring{base + STAGES * STAGE_BYTES};
  float* amax_buf = reinterpret_cast<float*>(smem_raw + (ring.bars - raw) + 2 * STAGES * 8);
  int* table = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(amax_buf) + AMAX_BYTES);
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
        tma_prefetch(&tma_w1);
        tma_prefetch(&tma_w3);
        u32 it = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
          const MoeTile tile = moe_tile(table, E, u, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          const int boxes = min((tile.valid_rows + XBOX - 1) / XBOX, BM / XBOX);
          for (int kb = 0; kb < kblocks; ++kb, ++it) {
            ws_fill(ring, it, W_BYTES + boxes * XBOX * 128u, [&](int s, u32 bar) {
              const u32 sx = base + s * STAGE_BYTES;
              for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, kb * BK, tile.row0 + b * XBOX);
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                const u32 sw = sx + X_BYTES + half * 2 * WBOX * 128u;
                tma_load_3d(sw, &tma_w1, bar, kb * BK, tile.n0 + half * WBOX, tile.expert);
                tma_load_3d(sw + WBOX * 128u, &tma_w3, bar, kb * BK, tile.n0 + half * WBOX, tile.expert);
              }
            });
          }
        }
      },
      [&](int c) {
        const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
        auto release = [&](int s) { ring.release(s, lane); };
        const u64 da0 = wgmma_desc_sw128(base, 16, 1024);
        const u64 db0 = wgmma_desc_sw128(base + X_BYTES + c * WN * 128u, 16, 1024);
        float fin[WN / 2], acc[WN / 2], acc2[WN / 2];
#pragma unroll
        for (int i = 0; i < WN / 2; ++i) acc[i] = acc2[i] = 0.0f;  // defined before their first wgmma
        u32 it = 0;
        int parity = 0;  // which amax buffer this tile uses
        for (int u = blockIdx.x; u < units; u += gridDim.x, parity ^= 1) {
          const MoeTile tile = moe_tile(table, E, u, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          const int r0 = 16 * w + lane / 4;  // this thread's tile rows: r0, r0 + 8
          const int nb = tile.n0 / 128;      // the tile's columns are one 128-block of W1 and W3
          auto scales = [&](int kb) {
            Fp8BlockScales sc{0.0f, 0.0f, 0.0f, 0.0f};
            if (kb < kblocks) {
              sc.a0 = fp8_moe_x_scale(p, kb, tile.row0, r0, tile.valid_rows);
              sc.a1 = fp8_moe_x_scale(p, kb, tile.row0, r0 + 8, tile.valid_rows);
              sc.b0 = fp8_moe_w_scale(p.sw, p, tile.expert, nb, kb);
              sc.b1 = fp8_moe_w_scale(p.sw3, p, tile.expert, nb, kb);
            }
            return sc;
          };
          // Column groups 0-7 (registers 0-31) are the gate's, 8-15 the up projection's.
          fp8_promoted_kloop<WN, STAGES, STAGE_BYTES>(ring, it, kblocks, da0, db0, fin, acc, acc2, WBOX / 8, scales, release);

          // H in the gate's registers: register i < 32 holds row r0 + 8((i>>1)&1), column
          // n0 + 64c + 8(i>>2) + 2q + (i&1); its up value is register i + 32.
          float route[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = r0 + 8 * h;
            route[h] = (p.route != nullptr && r < tile.valid_rows) ? p.route[tile.row0 + r] : 1.0f;
          }
#pragma unroll
          for (int i = 0; i < WN / 4; ++i) fin[i] = swiglu_silu(fin[i]) * fin[i + WN / 4] * route[(i >> 1) & 1];
          const int col0 = tile.n0 + c * WBOX;
          if constexpr (!QOUT) {
            moe_store_fragment<WBOX>(static_cast<out_t*>(p.y), p.ldy, p.n, tile.row0, tile.valid_rows, r0, col0, q, fin);
          } else {
            float* red = amax_buf + parity * 2 * BM;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float m = 0.0f;
#pragma unroll
              for (int j = 0; j < WBOX / 8; ++j) m = fmaxf(m, fmaxf(fabsf(fin[4 * j + 2 * h]), fabsf(fin[4 * j + 2 * h + 1])));
              m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
              m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
              if (q == 0) red[c * BM + r0 + 8 * h] = m;
            }
            named_barrier_sync(AMAX_BARRIER, 256);
            u8* codes = static_cast<u8*>(p.y);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = r0 + 8 * h;
              const float scale = fp8_scale_for<FP8_E4M3>(fmaxf(red[r], red[BM + r]), false);
              if (r >= tile.valid_rows) continue;
              const i64 row = tile.row0 + r;
              if (c == 0 && q == 0) p.sy[(i64)nb * p.x_rows + row] = scale;
#pragma unroll
              for (int j = 0; j < WBOX / 8; ++j) {
                const int col = col0 + 8 * j + 2 * q;
                // the host asks N to be a multiple of 16: both columns are in range or neither
                if (col >= p.n) continue;
                const u16 two = fp8x2_encode<FP8_E4M3>(div_rn(fin[4 * j + 2 * h + 1], scale), div_rn(fin[4 * j + 2 * h], scale));
                *reinterpret_cast<u16*>(codes + row * p.ldy + col) = two;
              }
            }
          }
        }
      });
}
