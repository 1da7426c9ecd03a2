// GEMM on Hopper tensor cores through WGMMA (sm_90a), fed by cp.async: the first wgmma rung.
// One warpgroup (128 threads) computes a 128 x 128 block tile as two m64n128k16 accumulators
// (fp32, 2 x 64 registers per thread), reading A and B straight from shared memory through
// matrix descriptors. K runs in steps of 64 through a KILN_STAGES-deep cp.async pipeline: every
// thread copies 16-byte chunks into 128B-swizzled tiles (the swizzle written here by hand, the
// same pattern TMA's 128B mode produces), so wgmma reads the tiles with the hardware swizzle.
//
// Shared tiles: units of 64 rows x 128 bytes (8 KB, 1024-byte aligned); 16-byte chunk c of row r
// lives at r * 128 + ((c ^ (r % 8)) * 16).
//   K-major operand (A row-major, B column-major): a 128-row tile, row = M/N index, 64 K per row.
//   MN-major operand: two units, unit u holding M/N 64u .. 64u + 63, row = K index.
// Edges: cp.async reads only the in-range bytes of each chunk (src-size 0..16) and zero-fills the
// rest, so any M, N, K works given 16-byte aligned operand bases and row strides (host-checked);
// the epilogue stores only in-range elements and never reads C when beta == 0.
//
// Pipeline per K tile kt: wait for tile kt's copies (own), fence them to the async proxy, block
// barrier; issue the tile's wgmmas; refill the stage tile kt - 1 used with tile kt + STAGES - 1
// while they run; wait for them. The wait at the end of each tile is what makes the refill of
// stage (kt - 1) safe after the next barrier: one K tile of wgmma at a time.
#include "common/gemm_args.cuh"
#include "common/cp_async.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"
#include "common/wgmma_ss.cuh"
#include "common/wgmma_epilogue.cuh"

#if !defined(KILN_STAGES) || !defined(KILN_GROUP_M) || !defined(KILN_SMEM)
#error "KILN_STAGES, KILN_GROUP_M and KILN_SMEM must be defined by the host"
#endif

constexpr int BM = 128, BN = 128, BK = 64, STAGES = KILN_STAGES, THREADS = 128;
constexpr u32 UNIT_BYTES = 64 * 128;  // 64 rows of 128 bytes
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int TA = KILN_A_ROW ? 0 : 1;  // wgmma transpose flags: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;
static_assert(STAGES >= 2, "the pipeline needs at least two stages");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES, "KILN_SMEM (declared by the host) is smaller than the stages need");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

// Copies one operand's K tile: UNITS units of 64 rows x 8 chunks. Thread t copies chunk t % 8 of
// rows t / 8 + 16i (i = 0..3) of every unit; all those rows have the same row % 8, so the same
// swizzled chunk. MN = false (K-major): row r of unit u is M/N index mn0 + 64u + r, chunk c holds
// K elements k0 + 8c ..; MN = true: row r is K index k0 + r, chunk c holds M/N elements
// mn0 + 64u + 8c ... Chunks with nothing in range read nothing (src-size 0) from `g`.
template <int UNITS, bool MN>
__device__ __forceinline__ void load_tile(u32 dst, const in_t* g, i64 ld, int mn0, int mn_lim, int k0, int k_lim) {
  const int c = threadIdx.x % 8, r0 = threadIdx.x / 8;
  const u32 sw = swizzle128_offset(r0, c);
#pragma unroll
  for (int u = 0; u < UNITS; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + 16 * i;
      int n;
      i64 off;
      if (MN) {
        const int k = k0 + r, mn = mn0 + 64 * u + 8 * c;
        n = k < k_lim ? min(max(mn_lim - mn, 0), 8) : 0;
        off = (i64)k * ld + mn;
      } else {
        const int mn = mn0 + 64 * u + r, k = k0 + 8 * c;
        n = mn < mn_lim ? min(max(k_lim - k, 0), 8) : 0;
        off = (i64)mn * ld + k;
      }
      cp_async16_zfill_nohint(dst + u * UNIT_BYTES + i * 16 * 128 + sw, n > 0 ? (const void*)(g + off) : (const void*)g, n * 2);
    }
  }
}

// Both operands of K tile `kt` into the stage at shared address `st`.
__device__ __forceinline__ void load_stage(u32 st, const GemmArgs& p, int m0, int n0, int kt) {
  const in_t* a = static_cast<const in_t*>(p.a);
  const in_t* b = static_cast<const in_t*>(p.b);
  const int k0 = kt * BK;
  load_tile<BM / 64, !KILN_A_ROW>(st, a, p.lda, m0, p.m, k0, p.k);
  load_tile<BN / 64, (bool)KILN_B_ROW>(st + A_BYTES, b, p.ldb, n0, p.n, k0, p.k);
}

// Tile (tm, tn) of block `pid`: column-major within groups of KILN_GROUP_M tile rows, so blocks
// running together share A and B panels in L2. Mirrored by `block_tile` in
// src/ops/gemm/wgmma_cp_async.rs.
__device__ __forceinline__ void block_tile(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = KILN_GROUP_M * tiles_n;
  const int group = pid / per_group;
  const int first = group * KILN_GROUP_M;
  const int rows = min(tiles_m - first, KILN_GROUP_M);
  const int in_group = pid - group * per_group;
  tm = first + in_group % rows;
  tn = in_group / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) gemm_wgmma_cp_async(const GemmArgs p) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;

  // (x - 1) / T + 1 rounds up without overflowing for extents near INT_MAX.
  const int tiles_m = (p.m - 1) / BM + 1, tiles_n = (p.n - 1) / BN + 1;
  int tm, tn;
  block_tile(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int ktiles = (p.k - 1) / BK + 1;

  float acc[2][BN / 2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.0f;

  // Prologue: tiles 0 .. STAGES-2 in flight, one commit group each (empty past the end of K, so
  // that wait_group<STAGES-2> at tile kt always means "tile kt has landed").
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(base + s * STAGE_BYTES, p, m0, n0, s);
    cp_async_commit();
  }

  int read = 0, write = STAGES - 1;
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    // This thread's completed copies become visible to the async proxy (wgmma's operand reads).
    fence_proxy_async_shared();
    // Every thread's copies of tile kt are visible to wgmma, and every warp has finished tile
    // kt - 1's wgmmas (waited below), so its stage may be refilled.
    __syncthreads();

    const u32 sa = base + read * STAGE_BYTES, sb = sa + A_BYTES;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[h][i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      // K-major: step 16 elements (32 B) along the 128-byte row; SBO = 1024 between 8-row groups.
      // MN-major: step 16 K rows (2 KB); LBO = 8 KB between 64-wide units, SBO = 1024 between
      // 8-deep K groups. Rows 64h.. of A start 8 KB in for either layout.
      const u64 db = TB ? wgmma_desc_sw128(sb + kk * 2048, UNIT_BYTES, 1024) : wgmma_desc_sw128(sb + kk * 32, 16, 1024);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const u32 a = sa + h * UNIT_BYTES;
        const u64 da = TA ? wgmma_desc_sw128(a + kk * 2048, UNIT_BYTES, 1024) : wgmma_desc_sw128(a + kk * 32, 16, 1024);
        wgmma_m64k16<in_t, BN, TA, TB>(acc[h], da, db, 1);
      }
    }
    wgmma_commit();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[h][i]);

    // Refill while the tensor cores work: the stage tile kt - 1 used gets tile kt + STAGES - 1.
    if (kt + STAGES - 1 < ktiles) load_stage(base + write * STAGE_BYTES, p, m0, n0, kt + STAGES - 1);
    cp_async_commit();
    read = read + 1 == STAGES ? 0 : read + 1;
    write = write + 1 == STAGES ? 0 : write + 1;

    wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[h][i]);
  }
  cp_async_wait<0>();  // only empty groups can be left; drain them before exit

#pragma unroll
  for (int h = 0; h < 2; ++h) wgmma_store_m64<out_t, BN>(acc[h], p, m0 + 64 * h, n0, threadIdx.x);
}
