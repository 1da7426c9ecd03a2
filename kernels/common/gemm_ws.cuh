// What the two warp-specialised GEMM kernels (gemm/wgmma_tma_ws.cu, cooperative, and
// gemm/wgmma_tma_ws_pingpong.cu) share beside the pipeline (common/ws_pipeline.cuh) and the
// TMA-store epilogue (common/c_staging.cuh): the launch extras, the grouped tile order, a stage's
// TMA loads and wgmmas, and the register epilogue's 8-element store. Needs the problem defines
// (in_t / out_t, KILN_A_ROW, KILN_B_ROW, KILN_OUT) and KILN_GROUP_M.
//
// Shared tiles (each 1024-byte aligned, rows of 128 bytes = 64 elements, 128B swizzle):
//   K-major operand (A row-major, B column-major): one box {64 k, rows}, row r = M/N index
//     (B: one box per CTA of a cluster, each BN / CLUSTER rows).
//   MN-major operand: boxes {64 m|n, 64 k} of 8 KB, one per 64 elements of M/N, row r = k (a B
//     tile 168 or 224 wide loads whole boxes: 192 or 256 columns, the last ones unused).
#pragma once
#include "common/cp_async_tile.cuh"
#include "common/epilogue.cuh"
#include "common/gemm_args.cuh"
#include "common/mbarrier.cuh"
#include "common/mem_ops.cuh"
#include "common/quad_transpose.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/wgmma_ss.cuh"

#ifndef KILN_GROUP_M
#error "KILN_GROUP_M must be defined by the host"
#endif

constexpr int WS_BK = 64;                  // K elements per stage: one 128-byte row
constexpr u32 BOX64_BYTES = 64 * WS_BK * 2;  // one 64 x 64 box: 64 rows of 128 bytes
constexpr int TA = KILN_A_ROW ? 0 : 1;     // wgmma transpose flags: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;

// Per-launch extras beside GemmArgs (mirrors `Extras` in src/ops/gemm/wgmma_tma_ws.rs).
//   splits > 1 (split-K):
//   cluster tiles t < split_from are one unit each; the others are `splits` units each, unit
//   split_from + (t - split_from) * splits + sp taking K blocks
//   [sp * kblocks / splits, (sp + 1) * kblocks / splits). Each such unit writes its fp32 partial
//   tile to ws (in the accumulator fragment order, so no transposition), then counts itself on
//   its tile's counter; the unit that arrives last adds the other partials into its registers,
//   resets the counter to 0 for the next launch, and runs the epilogue. ws and counters are
//   indexed by split block tile: (t - split_from) * CLUSTER + rank.
//   sk_w > 0 (stream-K; single 128-row CTAs only, splits then ignored): tiles t < split_from are
//   whole units as above; the sk_w K blocks of the tiles from split_from on, laid end to end, are
//   cut into one contiguous range per CTA, CTA g taking [sk_start(g), sk_start(g + 1)). A range
//   covers the tail of one tile, whole tiles and the head of another; a tile whose K blocks lie
//   in several ranges is reduced as a split tile (partials, counter, last arriver), CTA g's
//   partial going to ws slot 2g (the tile its range starts in) or 2g + 1 (the tile it ends in),
//   its counter at t - split_from.
struct Extras {
  float* ws;
  u32* counters;
  int splits;
  int split_from;
  u32 sk_w;
  // The row-store epilogue (KILN_EPI = 0) with 16-bit C and beta = 0: 1 (KILN_WGMMA_ROWV=1, an
  // experiment, ledger #99) stores by 16-byte windows of C's rows (store_rows_vec16 in
  // common/c_rows.cuh), 0 (the default) an element a lane.
  u32 rows_v;
};

// Rows of the K-major A box the host's tensor map holds (mirrors `a_box_rows` in
// src/ops/gemm/wgmma_tma_ws.rs): a problem with fewer rows than a tile loads only those, rounded
// up to 8 (whole swizzle atoms), so a stage's A bytes are that many rows. TMA's zero fill of the
// rest was not free: with 64-row tiles at N = K = 4096, M = 8 ran 27 % slower than M = 64 (H100,
// ledger #54). The tile's rows past the box keep whatever shared memory held; the accumulator
// rows they feed lie past M, and no epilogue stores them.
template <int BM_>
__device__ __forceinline__ u32 a_box_rows(int m) {
  return m < BM_ ? (u32)((m + 7) & ~7) : (u32)BM_;
}

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

// The register epilogue's store (its transposes: common/quad_transpose.cuh).
// C(m, n .. n + 7) = alpha * e + beta * C, storing only in-range elements; 16-byte accesses when
// all 8 are in range and aligned. C is read only when beta != 0.
__device__ __forceinline__ void store8(out_t* c, const GemmArgs& p, int m, int n, const float (&e)[4][2]) {
  if (m >= p.m || n >= p.n) return;
  const i64 idx = (i64)m * p.ldc + n;
  out_t* dst = c + idx;
  if (n + 8 > p.n || (reinterpret_cast<u64>(dst) % 16) != 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n + i < p.n) store_scaled(c, idx + i, e[i / 2][i % 2], p.alpha, p.beta);
    return;
  }
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = p.alpha * e[i / 2][i % 2];
#if KILN_OUT == 2
  float4* d4 = reinterpret_cast<float4*>(dst);
  if (p.beta != 0.0f) {
    const float4 o0 = d4[0], o1 = d4[1];
    const float o[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] += p.beta * o[i];
  }
  float4 w0, w1;
  w0.x = v[0]; w0.y = v[1]; w0.z = v[2]; w0.w = v[3];
  w1.x = v[4]; w1.y = v[5]; w1.z = v[6]; w1.w = v[7];
  d4[0] = w0;
  d4[1] = w1;
#else
  u32x4* d = reinterpret_cast<u32x4*>(dst);
  if (p.beta != 0.0f) {
    const u32x4 o = *d;
    const u32 ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out_t lo, hi;
      lo.bits = (u16)(ow[i] & 0xffff);
      hi.bits = (u16)(ow[i] >> 16);
      v[2 * i] += p.beta * to_float(lo);
      v[2 * i + 1] += p.beta * to_float(hi);
    }
  }
  u32x4 w;
  w.x = pack2<out_t>(v[0], v[1]);
  w.y = pack2<out_t>(v[2], v[3]);
  w.z = pack2<out_t>(v[4], v[5]);
  w.w = pack2<out_t>(v[6], v[7]);
  *d = w;
#endif
}

// The register epilogue's stores of 8-column groups J0.. of a consumer's 64-row accumulator
// tile (N registers, N / 4 groups; register i holds row `row` + 8((i >> 1) & 1) of the warp's
// rows, column 8(i >> 2) + 2q + (i & 1), q = lane % 4), at columns n0..: fours of groups through
// the quad transpose, then store8. A short last four (the 168- and 224-wide tiles' last columns)
// is padded with zeros that no lane stores. Every lane of the warp shuffles.
template <int J0, int N>
__device__ __forceinline__ void store_acc_groups(out_t* c, const GemmArgs& p, int row, int n0, const float (&acc)[N],
                                                 int q) {
  constexpr int G = N / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j0 = J0; j0 < G; j0 += 4) {
      float e[4][2];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int j = j0 + s < G ? j0 + s : j0;
        e[s][0] = j0 + s < G ? acc[4 * j + 2 * h] : 0.0f;
        e[s][1] = j0 + s < G ? acc[4 * j + 2 * h + 1] : 0.0f;
      }
      quad_transpose(e, q);
      if (j0 + q < G) store8(c, p, row + 8 * h, n0 + 8 * (j0 + q), e);
    }
  }
}

// The producer's TMA loads of K block k0.. of the BM x BN block tile at (m0, n0) into a stage (A
// at sa, B at sb), completing on `bar`. A K-major A box may be shorter than the tile (a_box_rows).
// In a cluster of CLUSTER CTAs along M sharing one B tile, CTA `rank` loads its share of B's rows
// (N) and multicasts it to all; each loads its own A tile. BN = 320 (wider than one TMA box of at
// most 256 rows): a K-major B is two boxes of 160 rows.
template <int BM>
__device__ __forceinline__ void ws_load_a(u32 sa, u32 bar, const TmaMap* ta, int m0, int k0) {
  if constexpr (KILN_A_ROW) {
    tma_load_2d(sa, ta, bar, k0, m0);
  } else {
#pragma unroll
    for (int j = 0; j < BM / 64; ++j) tma_load_2d(sa + j * BOX64_BYTES, ta, bar, m0 + 64 * j, k0);
  }
}
template <int BN, int CLUSTER>
__device__ __forceinline__ void ws_load_b(u32 sb, u32 bar, const TmaMap* tb, int n0, int k0, int rank) {
  constexpr int B_PART = BN / CLUSTER;
  constexpr int B_BOXES_MN = (BN + 63) / 64;  // MN-major B boxes of a tile (whole ones)
  constexpr int B_BOXES_K = BN > 256 ? 2 : 1;  // K-major B boxes per CTA, B_PART / B_BOXES_K rows each
  if constexpr (KILN_B_ROW) {
    if constexpr (CLUSTER == 1 || B_PART % 64 == 0) {
#pragma unroll
      for (int jj = 0; jj < (CLUSTER == 1 ? B_BOXES_MN : B_PART / 64); ++jj) {
        const int j = rank * (B_PART / 64) + jj;  // this CTA's boxes of the B tile
        if (CLUSTER > 1) tma_load_2d_multicast(sb + j * BOX64_BYTES, tb, bar, n0 + 64 * j, k0, (1 << CLUSTER) - 1);
        else tma_load_2d(sb + j * BOX64_BYTES, tb, bar, n0 + 64 * j, k0);
      }
    } else {
      // A share that is not whole boxes (128 x 192 in pairs: three boxes): the CTAs take
      // alternate boxes.
#pragma unroll
      for (int j = 0; j < BN / 64; ++j)
        if (j % CLUSTER == rank) tma_load_2d_multicast(sb + j * BOX64_BYTES, tb, bar, n0 + 64 * j, k0, (1 << CLUSTER) - 1);
    }
  } else {
    // A K-major share is one box of B_PART rows, placed B_PART rows (128 bytes each) into the
    // tile: whole 8-row swizzle atoms keep it on the 1024-byte pattern.
    static_assert(B_PART % 8 == 0, "each CTA's share of the B tile must be whole 8-row swizzle atoms");
    const u32 dst = sb + rank * B_PART * 128;
    if (CLUSTER > 1) tma_load_2d_multicast(dst, tb, bar, k0, n0 + rank * B_PART, (1 << CLUSTER) - 1);
    else if (B_BOXES_K > 1) {
#pragma unroll
      for (int j = 0; j < B_BOXES_K; ++j) tma_load_2d(dst + j * (BN / B_BOXES_K) * 128, tb, bar, k0, n0 + j * (BN / B_BOXES_K));
    } else tma_load_2d(dst, tb, bar, k0, n0);
  }
}
template <int BM, int BN, int CLUSTER>
__device__ __forceinline__ void ws_load_ab(u32 sa, u32 sb, u32 bar, const TmaMap* ta, const TmaMap* tb, int m0, int n0,
                                           int k0, int rank) {
  ws_load_a<BM>(sa, bar, ta, m0, k0);
  ws_load_b<BN, CLUSTER>(sb, bar, tb, n0, k0, rank);
}

// The operands a producer warpgroup copies in place (gemm/wgmma_tma_ws.cu's KILN_CPA): those whose
// rows TMA cannot address (cp_tile_bytes under 16), at their copy widths.
struct CpOperands {
  int a_bytes, b_bytes;
  __device__ __forceinline__ explicit CpOperands(const GemmArgs& p)
      : a_bytes(cp_tile_bytes(p.a, p.lda)), b_bytes(cp_tile_bytes(p.b, p.ldb)) {}
  __device__ __forceinline__ bool a() const { return a_bytes < 16; }
  __device__ __forceinline__ bool b() const { return b_bytes < 16; }
  // Each thread's arrivals per stage: one when its cp.async copies land (an operand at 4 or 8
  // bytes), one after its plain stores (an operand at 2 bytes).
  __device__ __forceinline__ bool async_arrival() const { return (a() && a_bytes > 2) || (b() && b_bytes > 2); }
  __device__ __forceinline__ bool plain_arrival() const { return a_bytes == 2 || b_bytes == 2; }
  // What a stage's full barrier counts: the TMA thread's arrive.expect_tx, and the 128 threads'
  // arrivals.
  __device__ __forceinline__ u32 full_count() const {
    return 1u + 128u * (u32)async_arrival() + 128u * (u32)plain_arrival();
  }
};

// Producer thread t (0..127) of K block k0 of the BM x BN tile at (m0, n0), a single CTA's: thread
// 0 arms the full barrier `bar` with the TMA bytes `tma_tx` and loads the operands TMA can address;
// every thread copies its share of the others (cp_tile) and arrives for it.
template <int BM, int BN>
__device__ __forceinline__ void ws_cp_load_ab(u32 sa, u32 sb, u32 bar, const TmaMap* ta, const TmaMap* tb, const GemmArgs& p,
                                              const CpOperands& cp, int m0, int n0, int k0, int t, u32 tma_tx) {
  if (t == 0) {
    mbar_arrive_expect_tx(bar, tma_tx);
    if (!cp.a()) ws_load_a<BM>(sa, bar, ta, m0, k0);
    if (!cp.b()) ws_load_b<BN, 1>(sb, bar, tb, n0, k0, 0);
  }
  // K-major: rows along M (N), 64 K; MN-major: 64 rows of K, whole 64-element boxes of M (N).
  if (cp.a()) {
    if constexpr (KILN_A_ROW) cp_tile<BM, 64>(sa, p.a, p.lda, m0, p.m, k0, p.k, cp.a_bytes, t);
    else cp_tile<64, BM>(sa, p.a, p.lda, k0, p.k, m0, p.m, cp.a_bytes, t);
  }
  if (cp.b()) {
    if constexpr (KILN_B_ROW) cp_tile<64, (BN + 63) / 64 * 64>(sb, p.b, p.ldb, k0, p.k, n0, p.n, cp.b_bytes, t);
    else cp_tile<BN, 64>(sb, p.b, p.ldb, n0, p.n, k0, p.k, cp.b_bytes, t);
  }
  if (cp.async_arrival()) cp_async_mbar_arrive_noinc(bar);
  if (cp.plain_arrival()) mbar_arrive(bar);
}

// Keeps the compiler from moving the first MI (1 or 2) accumulators' reads or writes across a
// wgmma fence or wait (register r of each, then r + 1, ...). No loop over them: a loop still
// standing when the K loop around it was optimised kept NVVM from peeling that loop.
template <int MI, int MA, int NR> __device__ __forceinline__ void fence_accs(float (&acc)[MA][NR]) {
  static_assert((MI == 1 || MI == 2) && MI <= MA, "fence_accs: one or two accumulators");
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    wgmma_fence_operand(acc[0][r]);
    if constexpr (MI > 1) wgmma_fence_operand(acc[1][r]);
  }
}

// The consumer's wgmmas on stage s (a K block of 64: four k16 steps), issued and committed:
// MI (1 or 2) m64 x N accumulators, rows 64m.. of the A tile (8 KB further on in either layout)
// against the same B columns. da0 and db0 describe stage 0's A rows and B; a stage and a k step
// only move the start address (wgmma_desc_add). acc_live: accumulate onto earlier K blocks. N =
// 320 (wider than one wgmma, n <= 256): each k step is an n192 and an n128 wgmma, the second's
// accumulators from register 96 on (column 192 in the m64n320 fragment layout), its B 192 rows
// (K-major) or three 64-column boxes (MN-major) into the stage, 24 KB either way.
template <int MI, int N, u32 STAGE_BYTES, int MA, int NR>
__device__ __forceinline__ void ws_mma_stage(float (&acc)[MA][NR], u64 da0, u64 db0, int s, bool acc_live) {
  static_assert(N <= 256 || MI == 1, "a 320-wide tile has one accumulator per consumer");
  fence_accs<MI>(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < WS_BK / 16; ++kk) {
    // K-major: step 16 elements (32 B) along the 128-byte row. MN-major: step 16 rows of K.
    const u64 da = wgmma_desc_add(da0, s * STAGE_BYTES + kk * (TA ? 2048 : 32));
    const u64 db = wgmma_desc_add(db0, s * STAGE_BYTES + kk * (TB ? 2048 : 32));
    const int live = (acc_live || kk > 0) ? 1 : 0;
    if constexpr (N > 256) {
      constexpr int N_HI = N - 192;
      wgmma_m64k16<in_t, 192, TA, TB>(acc[0], da, db, live);
      wgmma_m64k16<in_t, N_HI, TA, TB>(*reinterpret_cast<float(*)[N_HI / 2]>(&acc[0][96]), da,
                                       wgmma_desc_add(db, 192 * 128), live);
    } else {
      wgmma_m64k16<in_t, N, TA, TB>(acc[0], da, db, live);
      if constexpr (MI > 1) wgmma_m64k16<in_t, N, TA, TB>(acc[1], wgmma_desc_add(da, BOX64_BYTES), db, live);
    }
  }
  wgmma_commit();
  fence_accs<MI>(acc);
}
