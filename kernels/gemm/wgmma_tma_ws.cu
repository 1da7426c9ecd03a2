// GEMM, warp-specialised persistent WGMMA + TMA (sm_90a). 384 threads: warpgroup 0 is the
// producer (40 registers, 56 with clusters; one thread issues TMA loads of A and B tiles into a
// ring of KILN_STAGES shared buffers guarded by full/empty mbarriers); warpgroups 1 and 2 are
// consumers (232 registers, 224 with clusters) that together compute a 128 x KILN_BN block tile,
// each 64 rows with
// wgmma.m64nBNk16 from 128B-swizzled shared tiles, fp32 accumulators. The grid is persistent:
// cluster b (one CTA, or KILN_CLUSTER = 2 CTAs along M that share the B tile through TMA
// multicast) takes tiles b, b + clusters, ... in a grouped order (KILN_GROUP_M tile-rows at a
// time, for L2 reuse). Edges: the tensor maps carry the true M/N/K, so TMA zero-fills what lies
// outside; the epilogue stores only in-range elements and never reads C when beta == 0.
//
// Shared tiles (each 1024-byte aligned, rows of 128 bytes = 64 elements, 128B swizzle):
//   K-major operand (A row-major, B column-major): one box {64 k, rows}, row r = M/N index
//     (B: one box per CTA of the cluster, each BN / KILN_CLUSTER rows).
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
#ifndef KILN_CLUSTER
#define KILN_CLUSTER 1
#endif

constexpr int BM = 128, BN = KILN_BN, BK = 64, STAGES = KILN_STAGES;
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr u32 BOX64_BYTES = 64 * BK * 2;  // one 64 x 64 box: 64 rows of 128 bytes
constexpr int TA = KILN_A_ROW ? 0 : 1;    // wgmma transpose flags: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;
// Cluster of CLUSTER CTAs along M sharing one B tile: each loads BN / CLUSTER of its rows (N)
// and multicasts them to all; each loads its own A tile.
constexpr int CLUSTER = KILN_CLUSTER, B_PART = BN / CLUSTER;
static_assert(CLUSTER == 1 || CLUSTER == 2, "KILN_CLUSTER is 1 or 2");
// Register split (setmaxnreg; 128 x producer + 256 x consumer <= 65536): the multicast producer
// needs a few more registers than 40.
constexpr int PRODUCER_REGS = CLUSTER > 1 ? 56 : 40, CONSUMER_REGS = CLUSTER > 1 ? 224 : 232;
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 65536, "register file overcommitted");
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

// Epilogue helpers. In the accumulator fragment, lane quad q (= lane % 4) of a row holds columns
// 8j + 2q and 8j + 2q + 1 for every j. A 4 x 4 transpose across the quad of four consecutive j
// (two xor-shuffle rounds, each swapping one bit of the lane index with one bit of the j index)
// leaves lane q with the 8 consecutive columns 8(j0 + q) .. 8(j0 + q) + 7: one 16-byte store.
__device__ __forceinline__ void quad_transpose(float (&e)[4][2], int q) {
#pragma unroll
  for (int bit = 2; bit >= 1; bit >>= 1) {
    const bool hi = (q & bit) != 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if (s & bit) continue;  // the pair (s, s | bit)
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float send = hi ? e[s][x] : e[s | bit][x];
        const float recv = __shfl_xor_sync(0xffffffffu, send, bit);
        if (hi) e[s][x] = recv;
        else e[s | bit][x] = recv;
      }
    }
  }
}

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

extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_tma_ws(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b, const GemmArgs p) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle pattern follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 bars = base + STAGES * STAGE_BYTES;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

  const int wg = threadIdx.x / 128;
  const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);             // the producer's arrive.expect_tx
      mbar_init(empty(s), 8 * CLUSTER);  // lane 0 of each consumer warp of every CTA sharing B
    }
    mbar_fence_init();
  }
  if (CLUSTER > 1) cluster_sync();  // peers' barriers exist before any multicast or remote arrive
  else __syncthreads();

  // The cluster walks cluster tiles of CLUSTER x 1 block tiles; its CTA `rank` takes row `rank`.
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER;
  const int ctiles = ctiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;
  const int cid = blockIdx.x / CLUSTER, nclusters = gridDim.x / CLUSTER;

  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      tma_prefetch(&tma_a);
      tma_prefetch(&tma_b);
      u32 it = 0;
      for (int t = cid; t < ctiles; t += nclusters) {
        int ctm, tn;
        tile_coords(t, ctiles_m, tiles_n, ctm, tn);
        const int m0 = (ctm * CLUSTER + rank) * BM, n0 = tn * BN;
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % STAGES;
          // Fresh barriers: parity 1 passes. With a cluster, this also waits for the peers'
          // consumers, whose stage s this CTA's multicast overwrites.
          mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);
          // Full boxes count even where zero-filled; with a cluster, the peers' parts of B
          // complete bytes here too.
          mbar_arrive_expect_tx(full(s), STAGE_BYTES);
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
          for (int jj = 0; jj < B_PART / 64; ++jj) {
            const int j = rank * (B_PART / 64) + jj;  // this CTA's boxes of the B tile
            if (CLUSTER > 1) tma_load_2d_multicast(sb + j * BOX64_BYTES, &tma_b, full(s), n0 + 64 * j, k0, (1 << CLUSTER) - 1);
            else tma_load_2d(sb + j * BOX64_BYTES, &tma_b, full(s), n0 + 64 * j, k0);
          }
#else
          const u32 dst = sb + rank * B_PART * 128;  // rows of 128 bytes
          if (CLUSTER > 1) tma_load_2d_multicast(dst, &tma_b, full(s), k0, n0 + rank * B_PART, (1 << CLUSTER) - 1);
          else tma_load_2d(dst, &tma_b, full(s), k0, n0);
#endif
        }
      }
    }
  } else {
    warpgroup_reg_inc<CONSUMER_REGS>();
    const int c = wg - 1;  // this consumer's rows: 64c .. 64c + 63 of the block tile
    const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    out_t* cout = static_cast<out_t*>(p.c);
    // Frees stage s: one arrival per warp, on every CTA that multicasts into it.
    auto release = [&](int s) {
      if (lane != 0) return;
      if (CLUSTER == 1) mbar_arrive(empty(s));
      else
        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(mbar_peer(empty(s), r));
    };
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

    u32 it = 0;
    for (int t = cid; t < ctiles; t += nclusters) {
      int ctm, tn;
      tile_coords(t, ctiles_m, tiles_n, ctm, tn);
      const int tm = ctm * CLUSTER + rank;
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
        if (kb > 0) release(prev);
        prev = s;
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
      release(prev);

      // Epilogue: register i holds row 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1).
      const int q = lane % 4;
      const int row = tm * BM + 64 * c + 16 * w + lane / 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += 4) {
          float e[4][2];
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            e[s][0] = acc[4 * (j0 + s) + 2 * h];
            e[s][1] = acc[4 * (j0 + s) + 2 * h + 1];
          }
          quad_transpose(e, q);
          store8(cout, p, row + 8 * h, tn * BN + 8 * (j0 + q), e);
        }
      }
    }
  }
  // No CTA may leave while a peer can still arrive on its barriers.
  if (CLUSTER > 1) {
    __syncwarp();
    cluster_sync();
  }
}
