// GEMM on Hopper tensor cores through WGMMA with TMA loads (sm_90a), not warp-specialised: one
// warpgroup (128 threads) computes a 128 x 128 block tile as two m64n128k16 fp32 accumulators,
// and its thread 0 also issues the TMA loads (cp.async.bulk.tensor.2d, 128B swizzle) of the K
// tiles KILN_STAGES ahead into a ring of shared stages guarded by mbarriers:
//   full[s]:  1 arrival (thread 0's arrive.expect_tx) + the stage's bytes; waited by all threads.
//   empty[s]: 4 arrivals (lane 0 of each warp, once its wgmmas reading the stage are complete);
//             waited by thread 0 before it refills the stage.
// One block per tile (non-persistent grid, grouped order for L2 reuse). Edges: the tensor maps
// carry the true M/N/K, so TMA zero-fills what lies outside (and still counts the bytes); the
// epilogue stores only in-range elements and never reads C when beta == 0.
//
// Shared tiles (1024-byte aligned, rows of 128 bytes = 64 elements, 128B swizzle by TMA):
//   K-major operand (A row-major, B column-major): one box {64 k, 128 rows}, row = M/N index.
//   MN-major operand: two boxes {64 m|n, 64 k} of 8 KB, box u holding M/N 64u .. 64u + 63,
//   row = K index.
#include "common/gemm_args.cuh"
#include "common/ring.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"
#include "common/wgmma_ss.cuh"
#include "common/wgmma_epilogue.cuh"

#if !defined(KILN_STAGES) || !defined(KILN_GROUP_M) || !defined(KILN_SMEM)
#error "KILN_STAGES, KILN_GROUP_M and KILN_SMEM must be defined by the host"
#endif

constexpr int BM = 128, BN = 128, BK = 64, STAGES = KILN_STAGES, THREADS = 128;
constexpr u32 BOX64_BYTES = 64 * BK * 2;  // one 64 x 64 box: 64 rows of 128 bytes
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int TA = KILN_A_ROW ? 0 : 1;  // wgmma transpose flags: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;
static_assert(STAGES >= 2, "the pipeline needs at least two stages");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

// Tile (tm, tn) of block `pid`: column-major within groups of KILN_GROUP_M tile rows. Mirrored
// by `block_tile` in src/ops/gemm/wgmma_tma.rs.
__device__ __forceinline__ void block_tile(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = KILN_GROUP_M * tiles_n;
  const int group = pid / per_group;
  const int first = group * KILN_GROUP_M;
  const int rows = min(tiles_m - first, KILN_GROUP_M);
  const int in_group = pid - group * per_group;
  tm = first + in_group % rows;
  tn = in_group / rows;
}

// Thread 0: loads K tile `kt` of A and B into stage `s` (whose empty phase the caller has waited
// for) and arms full[s] with the whole stage's bytes (out-of-bounds parts count too). The boxes
// issued here must add up to STAGE_BYTES: mirrored by `loads_per_stage` in the host file.
__device__ __forceinline__ void issue_stage(u32 base, u32 full_bar, const TmaMap* ta, const TmaMap* tb, int s, int m0, int n0, int kt) {
  mbar_arrive_expect_tx(full_bar, STAGE_BYTES);
  const u32 sa = base + s * STAGE_BYTES, sb = sa + A_BYTES;
  const int k0 = kt * BK;
#if KILN_A_ROW
  tma_load_2d(sa, ta, full_bar, k0, m0);
#else
#pragma unroll
  for (int u = 0; u < BM / 64; ++u) tma_load_2d(sa + u * BOX64_BYTES, ta, full_bar, m0 + 64 * u, k0);
#endif
#if KILN_B_ROW
#pragma unroll
  for (int u = 0; u < BN / 64; ++u) tma_load_2d(sb + u * BOX64_BYTES, tb, full_bar, n0 + 64 * u, k0);
#else
  tma_load_2d(sb, tb, full_bar, k0, n0);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    gemm_wgmma_tma(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b, const GemmArgs p) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle pattern follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = smem_align1024(smem_raw);
  const MbarRing<STAGES> ring{base + STAGES * STAGE_BYTES};  // full[s]: thread 0's arrive.expect_tx

  // (x - 1) / T + 1 rounds up without overflowing for extents near INT_MAX.
  const int tiles_m = (p.m - 1) / BM + 1, tiles_n = (p.n - 1) / BN + 1;
  int tm, tn;
  block_tile(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int ktiles = (p.k - 1) / BK + 1;
  const int lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    ring.init(4);  // lane 0 of each of the 4 warps
    mbar_fence_init();
  }
  __syncthreads();
  // Prologue: the first STAGES tiles into fresh stages (no empty wait needed).
  if (threadIdx.x == 0) {
    for (int kt = 0; kt < STAGES && kt < ktiles; ++kt) issue_stage(base, ring.full(kt), &tma_a, &tma_b, kt, m0, n0, kt);
  }

  float acc[2][BN / 2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.0f;

  int s = 0;
  u32 phase = 0;  // parity of the full[s] phase tile kt waits for: (kt / STAGES) & 1
  for (int kt = 0; kt < ktiles; ++kt) {
    mbar_wait(ring.full(s), phase);
    const u32 sa = base + s * STAGE_BYTES, sb = sa + A_BYTES;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[h][i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      // K-major: step 16 elements (32 B) along the 128-byte row; SBO = 1024 between 8-row groups.
      // MN-major: step 16 K rows (2 KB); LBO = 8 KB between 64-wide boxes, SBO = 1024 between
      // 8-deep K groups. Rows 64h.. of A start 8 KB in for either layout.
      const u64 db = TB ? wgmma_desc_sw128(sb + kk * 2048, BOX64_BYTES, 1024) : wgmma_desc_sw128(sb + kk * 32, 16, 1024);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const u32 a = sa + h * BOX64_BYTES;
        const u64 da = TA ? wgmma_desc_sw128(a + kk * 2048, BOX64_BYTES, 1024) : wgmma_desc_sw128(a + kk * 32, 16, 1024);
        wgmma_m64k16<in_t, BN, TA, TB>(acc[h], da, db, 1);
      }
    }
    wgmma_commit();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[h][i]);
    // Keep this tile's batch in flight; once the previous one is complete, its stage is free.
    wgmma_wait<1>();
    if (kt > 0) {
      const int ps = s == 0 ? STAGES - 1 : s - 1;  // the stage of tile kt - 1
      ring.release(ps, lane);
      // Thread 0 refills it with tile kt - 1 + STAGES once all 4 warps have released it (its
      // own warp's arrival came just above; the others arrive at this point of this iteration).
      // Use u = (kt - 1) / STAGES of the stage ended with empty phase u: parity u & 1.
      if (threadIdx.x == 0 && kt - 1 + STAGES < ktiles) {
        mbar_wait(ring.empty(ps), (u32)((kt - 1) / STAGES) & 1u);
        issue_stage(base, ring.full(ps), &tma_a, &tma_b, ps, m0, n0, kt - 1 + STAGES);
      }
    }
    if (++s == STAGES) {
      s = 0;
      phase ^= 1u;
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[h][i]);

#pragma unroll
  for (int h = 0; h < 2; ++h) wgmma_store_m64<out_t, BN>(acc[h], p, m0 + 64 * h, n0, threadIdx.x);
}
