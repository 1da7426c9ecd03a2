// MoE grouped GEMM with swapped operands (sm_90a), for experts of few rows (decode, small-M
// prefill): Y[rows of e] = X[rows of e] · W[e]ᵀ computed as Yᵀ = W[e] · Xᵀ, so the weight rows
// fill wgmma's fixed M = 64 and an expert's tokens become the instruction's N, which can be any
// multiple of 16. A tile is BW weight rows (output columns) x up to TT tokens of one expert; its
// wgmma width is the tile's token count rounded up to 16, chosen per tile at run time, so an
// expert of 40 rows computes 48 columns instead of padding to a 128-row tile. At these shapes the
// kernel is bound by reading W once from HBM; the padding the row-tiled kernel computes is gone.
//
// 384 threads: warpgroup 0 produces (TMA into a ring of KILN_STAGES stages: the W box and only
// the 32-row X boxes the tile's tokens need; expect_tx counts exactly those), warpgroups 1 and 2
// consume, each KILN_WM weight rows (64: one m64 wgmma per k16; 128: two sharing the X operand).
//
// Scheduling: tile -> expert as in moe/grouped_gemm.cu (GPU-built prefix sums over token tiles,
// binary search, grouped order), but dynamic: a CTA starts at tile blockIdx.x and then takes the
// next from a global counter (zeroed by moe_tile_prefix in the same stream), so CTAs that drew
// light tiles (few tokens) take more of them; the producer publishes each tile index to the
// consumers through a 2-slot ring in shared memory. The host normally asks moe_tile_prefix for
// tables sorted heaviest expert first and a group of 1 (an expert's n-tiles one after another),
// so the counter hands out the longest tiles first and the short ones fill the tail; the
// producer maps a table position to its expert through the ids after the counter.
//
// Output: the accumulator's rows are output columns. Each lane swaps one value with lane ^ 4 so
// it holds two adjacent columns of one token and stores them as one 4-byte (8 for f32) word.
#include "common/tma_3d.cuh"
#include "common/wgmma_ss.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/sched.cuh"

#if !defined(KILN_WM) || !defined(KILN_TT) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM)
#error "KILN_WM, KILN_TT, KILN_STAGES, KILN_MAX_EXPERTS and KILN_SMEM must be defined by the host"
#endif

constexpr int WM = KILN_WM, BW = 2 * WM, TT = KILN_TT, BK = 64, STAGES = KILN_STAGES;
constexpr int MI = WM / 64;  // m64 wgmmas per consumer per k16
constexpr int XBOX = 32;     // token rows per X box: a tile loads only the boxes it needs
constexpr u32 W_BYTES = BW * BK * 2, X_BYTES = TT * BK * 2, STAGE_BYTES = W_BYTES + X_BYTES;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 2) * 4;
static_assert(WM == 64 || WM == 128, "KILN_WM is 64 or 128");
static_assert(TT % XBOX == 0 && TT <= 256, "KILN_TT is a multiple of 32 up to 256");
static_assert(MI * TT / 2 <= 128, "accumulators above 128 registers per thread do not fit");
static_assert(W_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + MOE_RING_BYTES + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, ring and tables need");

// Y(row, n), Y(row, n + 1) = a, b; only columns below n_total; one word when aligned.
template <class OutT>
__device__ __forceinline__ void swap_store2(OutT* y, i64 ldy, int n_total, i64 row, int n, float a, float b) {
  if (n >= n_total) return;
  OutT* dst = y + row * ldy + n;
  if (n + 1 < n_total && (reinterpret_cast<u64>(dst) % (2 * sizeof(OutT))) == 0) {
    if constexpr (sizeof(OutT) == 4) {
      float2 v;
      v.x = a;
      v.y = b;
      *reinterpret_cast<float2*>(dst) = v;
    } else {
      *reinterpret_cast<u32*>(dst) = pack2<OutT>(a, b);
    }
    return;
  }
  dst[0] = from_float<OutT>(a);
  if (n + 1 < n_total) dst[1] = from_float<OutT>(b);
}

struct SwapCtx {
  u32 base;
  MbarRing<STAGES> ring;
  int kblocks, c, w, lane;
};

// The K loop of one tile with wgmma width N (>= its tokens) over the stage ring, into
// acc[m][0 .. N/2); the rest of acc is left alone (the stores never read it).
template <int N>
__device__ __forceinline__ void swap_mainloop(const SwapCtx& x, float (&acc)[MI][TT / 2], u32& it) {
#pragma unroll
  for (int m = 0; m < MI; ++m)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[m][i] = 0.0f;
  int prev = 0;
  for (int kb = 0; kb < x.kblocks; ++kb, ++it) {
    const int s = x.ring.wait_full(it);
    const u32 sw = x.base + s * STAGE_BYTES + x.c * WM * 128u, sx = x.base + s * STAGE_BYTES + W_BYTES;
#pragma unroll
    for (int m = 0; m < MI; ++m)
#pragma unroll
      for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const u64 db = wgmma_desc_sw128(sx + kk * 32, 16, 1024);
#pragma unroll
      for (int m = 0; m < MI; ++m) {
        const u64 da = wgmma_desc_sw128(sw + m * 64 * 128 + kk * 32, 16, 1024);
        wgmma_m64k16<in_t, N, 0, 0>(acc[m], da, db, (kb > 0 || kk > 0) ? 1 : 0);
      }
    }
    wgmma_commit();
#pragma unroll
    for (int m = 0; m < MI; ++m)
#pragma unroll
      for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
    wgmma_wait<1>();
    if (kb > 0) x.ring.release(prev, x.lane);
    prev = s;
  }
  wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < MI; ++m)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
  x.ring.release(prev, x.lane);
}

// The K loop for a tile of `j` 16-token groups (1..J): width 16j, the smallest that covers them.
template <int J>
__device__ __forceinline__ void swap_dispatch(int j, const SwapCtx& x, float (&acc)[MI][TT / 2], u32& it) {
  if (j == J || J == 1) {
    swap_mainloop<16 * J>(x, acc, it);
  } else if constexpr (J > 1) {
    swap_dispatch<J - 1>(j, x, acc, it);
  }
}

// The stores of a tile computed at wgmma width `width` (a multiple of 16, >= its tokens). One
// copy for every width: a register's token, 8(i>>2) + 2q + (i&1), does not depend on the width,
// so the stores of width N are those of width TT cut at register N/2 (the warp-uniform break
// below). Until 2026-11-22 each of the TT/16 widths inlined its own copy of this code, and 16
// copies of it were 3/4 of the variant's 16 s compile (NVVM and ptxas on 1.8 MB of PTX).
__device__ __forceinline__ void swap_store(const SwapCtx& x, const MoeTile& tile, const MoeArgs& p,
                                           const float (&acc)[MI][TT / 2], int width) {
  // Register i of acc[m]: weight row 16w + g + 8((i>>1)&1) (g = lane/4), token 8(i>>2) + 2q + (i&1).
  // Lanes g and g^1 hold adjacent weight rows: the even one keeps token 2q's pair, the odd 2q+1's.
  out_t* y = static_cast<out_t*>(p.y);
  const int g = x.lane / 4, q = x.lane % 4;
  const bool even = (g & 1) == 0;
#pragma unroll
  for (int m = 0; m < MI; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * x.w + g + 8 * h;
      const int n = tile.n0 + x.c * WM + m * 64 + (even ? r : r - 1);
#pragma unroll
      for (int j = 0; j < TT / 8; ++j) {
        if (8 * j >= width) break;  // past the tile's width: registers its wgmma did not write
        const float v0 = acc[m][4 * j + 2 * h], v1 = acc[m][4 * j + 2 * h + 1];
        const float got = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
        const int tok = 8 * j + 2 * q + (even ? 0 : 1);
        if (tok < tile.valid_rows) {
          if (even) swap_store2(y, p.ldy, p.n, (i64)tile.row0 + tok, n, v0, got);
          else swap_store2(y, p.ldy, p.n, (i64)tile.row0 + tok, n, got, v1);
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_grouped_swapab(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_w, const MoeArgs p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzle follows absolute address bits
  const MbarRing<STAGES> stages{base + STAGES * STAGE_BYTES};
  const MoeIndexRing ring(smem_raw, raw, stages.bars + 16u * STAGES);  // the tile indices, to the consumers
  int* table = ring.slot + 2;

  const int E = p.experts;
  if (threadIdx.x == 0) {
    stages.init(8);  // lane 0 of each consumer warp
    ring.init(8);
    mbar_fence_init();
  }
  moe_load_tables(table, p.sched, E);
  __syncthreads();

  const int tiles_m = table[E], tiles = tiles_m * p.tiles_n, kblocks = (p.k + BK - 1) / BK;
  int* counter = const_cast<int*>(p.sched) + moe_table_ints(E);
  const int* ids = p.sched + moe_table_ints(E) + 1;
  const int wg = warpgroup_index();  // warp-uniform for ptxas (common/wgmma.cuh)

  ws_roles<40, 232>(
      wg,
      [&] {
        tma_prefetch(&tma_x);
        tma_prefetch(&tma_w);
        u32 it = 0;
        int t = blockIdx.x;
        for (int j = 0;; ++j) {
          ring.publish(j, t);
          if (t >= tiles) break;
          const MoeTile tile = moe_tile(table, E, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, TT, BW);
          const int expert = ids[tile.expert];  // table position -> expert (sorted tables)
          const int boxes = (tile.valid_rows + XBOX - 1) / XBOX;
          const u32 bytes = W_BYTES + boxes * XBOX * BK * 2;
          for (int kb = 0; kb < kblocks; ++kb, ++it) {
            ws_fill(stages, it, bytes, [&](int s, u32 bar) {  // zero-filled parts count too
              const u32 sw = base + s * STAGE_BYTES, sx = sw + W_BYTES;
              tma_load_3d(sw, &tma_w, bar, kb * BK, tile.n0, expert);
              for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, kb * BK, tile.row0 + b * XBOX);
            });
          }
          t = (int)gridDim.x + atomicAdd(counter, 1);
        }
      },
      [&](int c) {
        SwapCtx x;
        x.base = base;
        x.ring = stages;
        x.kblocks = kblocks;
        x.c = c;
        x.w = (threadIdx.x / 32) % 4;
        x.lane = threadIdx.x % 32;
        u32 it = 0;
        for (int j = 0;; ++j) {
          const int t = ring.take(j, x.lane);
          if (t >= tiles) break;
          const MoeTile tile = moe_tile(table, E, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, TT, BW);
          const int groups = (tile.valid_rows + 15) / 16;
          float acc[MI][TT / 2];
          swap_dispatch<TT / 16>(groups, x, acc, it);
          swap_store(x, tile, p, acc, 16 * groups);
        }
      });
}
