// GEMM, warp-specialised persistent WGMMA + TMA (sm_90a). 384 threads: warpgroup 0 is the
// producer (40 registers; one thread issues TMA loads of A and B tiles into a ring of KILN_STAGES
// shared buffers guarded by full/empty mbarriers); warpgroups 1 and 2 are consumers (232
// registers) that together compute a 128 x KILN_BN block tile, each 64 rows with
// wgmma.m64nBNk16 from 128B-swizzled shared tiles, fp32 accumulators. The grid is persistent:
// block b takes tiles b, b + gridDim.x, ... in a grouped order (KILN_GROUP_M tile-rows at a time,
// for L2 reuse). Edges: the tensor maps carry the true M/N/K, so TMA zero-fills what lies
// outside; the epilogue stores only in-range elements and never reads C when beta == 0.
//
// Shared tiles (each 1024-byte aligned, rows of 128 bytes = 64 elements, 128B swizzle):
//   K-major operand (A row-major, B column-major): one box {64 k, rows}, row r = M/N index.
//   MN-major operand: boxes {64 m|n, 64 k} of 8 KB, one per 64 elements of M/N, row r = k.
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

#ifndef KILN_BN
#define KILN_BN 256
#endif
#ifndef KILN_STAGES
#define KILN_STAGES 4
#endif
#ifndef KILN_GROUP_M
#define KILN_GROUP_M 8
#endif

constexpr int BM = 128, BN = KILN_BN, BK = 64, STAGES = KILN_STAGES;
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr u32 BOX64_BYTES = 64 * BK * 2;  // one 64 x 64 box: 64 rows of 128 bytes
constexpr int TA = KILN_A_ROW ? 0 : 1;    // wgmma transpose flag: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;
static_assert(BN == 128 || BN == 256, "KILN_BN is 128 or 256");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");

// Tile t of the grouped order: KILN_GROUP_M tile-rows are swept column by column, then the next
// group. Mirrors `tile_coords` in src/ops/gemm/wgmma_tma_ws.rs.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = KILN_GROUP_M * tiles_n;
  const int group = t / per_group;
  const int first_m = group * KILN_GROUP_M;
  const int rows = min(tiles_m - first_m, KILN_GROUP_M);
  const int r = t - group * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

// Stores acc * alpha (+ beta * C) for C(m, n) and C(m, n + 1), whichever are in range.
__device__ __forceinline__ void store_pair(out_t* c, const GemmArgs& p, int m, int n, float v0, float v1) {
  if (m >= p.m || n >= p.n) return;
  const i64 idx = (i64)m * p.ldc + n;
  const bool pair = n + 1 < p.n && (reinterpret_cast<u64>(c + idx) % (2 * sizeof(out_t))) == 0;
  if (!pair) {
    store_scaled(c, idx, v0, p.alpha, p.beta);
    if (n + 1 < p.n) store_scaled(c, idx + 1, v1, p.alpha, p.beta);
    return;
  }
  v0 *= p.alpha;
  v1 *= p.alpha;
  if (p.beta != 0.0f) {
    v0 += p.beta * to_float(c[idx]);
    v1 += p.beta * to_float(c[idx + 1]);
  }
#if KILN_OUT == 2
  float2 v;
  v.x = v0;
  v.y = v1;
  *reinterpret_cast<float2*>(c + idx) = v;
#else
  *reinterpret_cast<u32*>(c + idx) = pack2<out_t>(v0, v1);
#endif
}

extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_tma_ws(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b, const GemmArgs p) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle pattern follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 bars = base + STAGES * STAGE_BYTES;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);   // the producer's arrive.expect_tx
      mbar_init(empty(s), 8);  // lane 0 of each of the 8 consumer warps
    }
    mbar_fence_init();
  }
  __syncthreads();

  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;

  if (wg == 0) {
    warpgroup_reg_dec<40>();
    if (threadIdx.x != 0) return;
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    u32 it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int tm, tn;
      tile_coords(t, tiles_m, tiles_n, tm, tn);
      const int m0 = tm * BM, n0 = tn * BN;
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const int s = it % STAGES;
        mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);  // fresh barriers: parity 1 passes
        mbar_arrive_expect_tx(full(s), STAGE_BYTES);  // full boxes, even where zero-filled
        const u32 sa = base + s * STAGE_BYTES, sb = sa + A_BYTES;
        const int k0 = kb * BK;
#if KILN_A_ROW
        tma_load_2d(sa, &tma_a, full(s), k0, m0);
#else
#pragma unroll
        for (int j = 0; j < BM / 64; ++j) tma_load_2d(sa + j * BOX64_BYTES, &tma_a, full(s), m0 + 64 * j, k0);
#endif
#if KILN_B_ROW
#pragma unroll
        for (int j = 0; j < BN / 64; ++j) tma_load_2d(sb + j * BOX64_BYTES, &tma_b, full(s), n0 + 64 * j, k0);
#else
        tma_load_2d(sb, &tma_b, full(s), k0, n0);
#endif
      }
    }
    return;
  }

  warpgroup_reg_inc<232>();
  const int c = wg - 1;  // this consumer's rows: 64c .. 64c + 63 of the block tile
  const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  out_t* cout = static_cast<out_t*>(p.c);
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

  u32 it = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    int prev = 0;
    for (int kb = 0; kb < kblocks; ++kb, ++it) {
      const int s = it % STAGES;
      mbar_wait(full(s), (it / STAGES) & 1);
      // Rows 64c.. of A: the K-major tile puts them 64 rows (8 KB) in; the MN-major tile keeps
      // them in box c, also 8 KB in.
      const u32 sa = base + s * STAGE_BYTES + c * BOX64_BYTES, sb = base + s * STAGE_BYTES + A_BYTES;
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // K-major: step 16 elements (32 B) along the 128-byte row. MN-major: step 16 rows of K.
        const u64 da = TA ? wgmma_desc_sw128(sa + kk * 2048, BOX64_BYTES, 1024) : wgmma_desc_sw128(sa + kk * 32, 16, 1024);
        const u64 db = TB ? wgmma_desc_sw128(sb + kk * 2048, BOX64_BYTES, 1024) : wgmma_desc_sw128(sb + kk * 32, 16, 1024);
        wgmma_m64k16<in_t, BN, TA, TB>(acc, da, db, (kb > 0 || kk > 0) ? 1 : 0);
      }
      wgmma_commit();
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
      // Keep one batch in flight: once the previous one is done, its stage can be refilled.
      wgmma_wait<1>();
      if (kb > 0 && lane == 0) mbar_arrive(empty(prev));
      prev = s;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
    if (lane == 0) mbar_arrive(empty(prev));

    // Epilogue: register i holds row 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1).
    const int row = tm * BM + 64 * c + 16 * w + lane / 4;
    const int col = tn * BN + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      store_pair(cout, p, row, col + 8 * j, acc[4 * j], acc[4 * j + 1]);
      store_pair(cout, p, row + 8, col + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}
