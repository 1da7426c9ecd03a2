// MoE grouped GEMM (sm_90a): for every expert e, Y[rows of e] = X[rows of e] · W[e]ᵀ in one
// persistent launch. X holds the tokens sorted by expert, contiguous, any number of rows per
// expert (0 included, no padding to the tile height); W is [E, N, K], K-major.
//
// 384 threads: warpgroup 0 is the producer (one thread issues the TMA loads into a ring of
// KILN_STAGES stages guarded by full/empty mbarriers), warpgroups 1 and 2 consume with
// wgmma.m64nWNk16 into fp32 accumulators. BM = 128: each consumer takes 64 rows and all BN
// columns; BM = 64: both take the 64 rows and BN / 2 columns each.
//
// Scheduling: moe_tile_prefix has written the m-tile prefix sums on the GPU; each CTA copies them
// to shared memory and walks the flat tile index t = blockIdx.x, + gridDim.x, ... in a grouped
// order; a binary search over the prefix sums gives the expert of t's m-tile. X is one 2D map over
// all its rows, W one 3D map over [E, N, K] (coordinate e picks the expert; nothing is rewritten
// per group). A tile's rows past its expert's end load the next expert's rows (or zeros past X)
// and are masked in the epilogue: each output row depends only on its own X row.
//
// KILN_CLUSTER = 2: CTA pairs (clusters along N) take the two n-tiles of one X tile together;
// each CTA loads half of the X tile's rows and multicasts it to both, and its own W tile, so X
// crosses L2 once per pair. Short-expert shapes (tens to hundreds of rows per expert) are bound
// by L2-to-SM traffic (every n-tile re-reads its X rows), which this cuts by a quarter at 128x128.
// A stage is refilled only when the consumers of both CTAs have released it (empty barriers count
// both CTAs' consumer warps; each releases on both). An odd last n-tile's partner loads a W box
// wholly past N (zero-filled) and stores nothing.
//
// X in 32-row boxes (KILN_CLUSTER = 1): the producer loads only the boxes that hold the tile's
// valid rows, and expect_tx counts only those. An expert's last m-tile of 40 rows then takes 64
// rows of X into the SM instead of 128; the rows not loaded keep an earlier tile's data (rows
// past the expert's end are garbage either way, masked in the epilogue). Small-M shapes are
// bound by the bytes the SMs take in (E=8, 40-248 rows per expert: X is half of them at 128x128),
// so this cuts a tenth of the traffic there; prefill loses nothing (4 TMA issues per stage
// instead of 1, from an otherwise idle producer).
//
// A consumer whose 64 rows of the tile are all past the expert's end (BM = 128, an expert's last
// tile with at most 64 rows) issues no wgmma: it only follows the stage barriers. The tensor
// cores then serve the other consumer alone, so a short tile costs half a full one.
//
// The MoE layer (rows are the expert-sorted (token, expert) pairs):
//   KILN_GATHER = 1   row r reads X row p.row_map[r] (moe/gather.cuh: one 1-row TMA box per row,
//                     issued by the producer warp's lanes) instead of X's rows in 32-row boxes;
//   KILN_COMBINE = 1  the down projection's combine: row r times its routing weight p.route[r] is
//                     added (f32 reductions) into row p.row_map[r] (its token) of the f32 output;
//   KILN_COMBINE = 2  row r is stored times p.route[r] in its own row (the rows the ordered,
//                     deterministic combine then sums per token).
// Single CTAs only (KILN_CLUSTER = 1); KILN_GATHER = KILN_COMBINE = 0 is the plain kernel.
//
// KILN_MOE_TRACE = 1 (`kiln moe bench --weights F --timeline`: kiln's bf16 kernel beside the 4-bit
// one, never dispatched; the plain kernel only): the CTAs stamp their phases into a last
// parameter (moe/trace.cuh).
#include "common/tma_3d.cuh"
#include "common/wgmma_ss.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/epilogue.cuh"
#include "moe/gather.cuh"
#include "moe/sched.cuh"
#include "moe/trace.cuh"

#if !defined(KILN_BM) || !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_CLUSTER) || \
    !defined(KILN_SMEM) || !defined(KILN_GATHER) || !defined(KILN_COMBINE)
#error "KILN_BM, KILN_BN, KILN_STAGES, KILN_MAX_EXPERTS, KILN_CLUSTER, KILN_SMEM, KILN_GATHER and KILN_COMBINE must be defined by the host"
#endif

constexpr int BM = KILN_BM, BN = KILN_BN, BK = 64, STAGES = KILN_STAGES;
constexpr bool SPLIT_N = BM == 64;          // both consumers share the rows, split the columns
constexpr int CLUSTER = KILN_CLUSTER;       // CTAs along N sharing (multicasting) the X tile
constexpr int X_PART = BM / CLUSTER;        // X rows each CTA of the cluster loads
constexpr int XBOX = 32;                    // CLUSTER = 1: X rows per TMA box
constexpr bool GATHER = KILN_GATHER;
constexpr int COMBINE = KILN_COMBINE;
static_assert(CLUSTER == 1 || CLUSTER == 2, "KILN_CLUSTER is 1 or 2");
static_assert(CLUSTER == 1 || (!GATHER && COMBINE == 0), "the MoE layer's row maps run on single CTAs");
static_assert(COMBINE == 0 || COMBINE == 1 || COMBINE == 2, "KILN_COMBINE is 0, 1 or 2");
static_assert(COMBINE != 1 || KILN_OUT == 2, "the combine adds into an f32 accumulator");
// setmaxnreg split (128 x producer + 256 x consumer <= 65536): the multicast producer needs more
// than 40 (at 40 the 128x256 pair variant spilled 4 bytes), as in gemm/wgmma_tma_ws.cu.
constexpr int PRODUCER_REGS = CLUSTER > 1 ? 56 : 40, CONSUMER_REGS = CLUSTER > 1 ? 224 : 232;
constexpr int WN = SPLIT_N ? BN / 2 : BN;   // columns one consumer computes
constexpr u32 X_BYTES = BM * BK * 2, W_BYTES = BN * BK * 2, STAGE_BYTES = X_BYTES + W_BYTES;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 1) * 4;
static_assert(BM == 64 || BM == 128, "KILN_BM is 64 or 128");
static_assert(WN == 128 || WN == 192 || WN == 256, "a consumer computes 128, 192 or 256 columns");
static_assert(!SPLIT_N || WN != 192, "BM = 64 splits 256 columns");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages and tables need");

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_grouped_gemm(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_w, const MoeArgs p
#if KILN_MOE_TRACE
                     , u64* moe_trace
#endif
    ) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzle follows absolute address bits
  const MbarRing<STAGES> ring{base + STAGES * STAGE_BYTES};
  int* table = reinterpret_cast<int*>(smem_raw + (ring.bars - raw) + 2 * STAGES * 8);

  const int E = p.experts;
  const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
#if KILN_MOE_TRACE
  static_assert(CLUSTER == 1 && !GATHER && COMBINE == 0, "the stamps are the plain kernel's");
  if (threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_ENTRY);
#endif
  if (threadIdx.x == 0) {
    ring.init(8 * CLUSTER);  // lane 0 of each consumer warp of every CTA sharing X
    mbar_fence_init();
  }
#if KILN_MOE_TRACE
  if (threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_SETUP);
#endif
  moe_load_tables(table, p.sched, E);
  __syncthreads();
#if KILN_MOE_TRACE
  if (threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_TABLES);
#endif
  if (CLUSTER > 1) cluster_sync();  // peers' barriers exist before any multicast or remote arrive

  // The cluster walks units of one m-tile by CLUSTER n-tiles; CTA `rank` takes n-tile `rank`.
  const int tiles_m = table[E], units_n = (p.tiles_n + CLUSTER - 1) / CLUSTER;
  const int units = tiles_m * units_n, kblocks = (p.k + BK - 1) / BK;
  const int cid = blockIdx.x / CLUSTER, nclusters = gridDim.x / CLUSTER;
  const int wg = warpgroup_index();  // warp-uniform for ptxas (common/wgmma.cuh)

  ws_roles<PRODUCER_REGS, CONSUMER_REGS, GATHER ? 32 : 1>(
      wg,
      [&] {
        if constexpr (GATHER) {
          // (the whole first warp: see moe/gather.cuh)
          const int lane = threadIdx.x;
          if (lane == 0) {
            tma_prefetch(&tma_x);
            tma_prefetch(&tma_w);
          }
          GatherRows<BM / 32> g;
          u32 it = 0;
          for (int u = cid; u < units; u += nclusters) {
            const MoeTile tile = moe_tile(table, E, u, tiles_m, units_n, p.group_m, p.by_expert, BM, BN);
            g.load(p.row_map, tile.row0, tile.valid_rows, lane);
            for (int kb = 0; kb < kblocks; ++kb, ++it) {
              const int s = decltype(ring)::slot(it);
              const u32 sx = base + s * STAGE_BYTES, bar = ring.full(s);
              if (lane == 0) {
                ring.acquire(it, W_BYTES + (u32)g.rows * 128u);
                tma_load_3d(sx + X_BYTES, &tma_w, bar, kb * BK, tile.n0, tile.expert);
              }
              __syncwarp();  // the stage is free before any lane loads into it
              g.issue(&tma_x, bar, kb * BK, lane, [&](int r) { return sx + r * 128u; });
            }
          }
          return;
        }
        tma_prefetch(&tma_x);
        tma_prefetch(&tma_w);
        u32 it = 0;
        for (int u = cid; u < units; u += nclusters) {
          const MoeTile tile = moe_tile(table, E, u, tiles_m, units_n, p.group_m, p.by_expert, BM, CLUSTER * BN);
          const int n0 = tile.n0 + rank * BN;
          const int boxes = min((tile.valid_rows + XBOX - 1) / XBOX, BM / XBOX);
          for (int kb = 0; kb < kblocks; ++kb, ++it) {
            // CLUSTER = 2: both X halves and the W tile; else the W tile and the X boxes loaded (zero
            // fill past X counts either way).
            const u32 bytes = CLUSTER > 1 ? STAGE_BYTES : W_BYTES + boxes * XBOX * 128u;
            ws_fill(ring, it, bytes, [&](int s, u32 bar) {
              const u32 sx = base + s * STAGE_BYTES;
              if (CLUSTER > 1) {
                tma_load_2d_multicast(sx + rank * X_PART * 128u, &tma_x, bar, kb * BK, tile.row0 + rank * X_PART,
                                      (1 << CLUSTER) - 1);
              } else {
                for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, kb * BK, tile.row0 + b * XBOX);
              }
              tma_load_3d(sx + X_BYTES, &tma_w, bar, kb * BK, n0, tile.expert);
            });
#if KILN_MOE_TRACE
            if (it == 0) moe_stamp(moe_trace, blockIdx.x, MT_FIRST_LOADS);
#endif
          }
        }
#if KILN_MOE_TRACE
        moe_stamp(moe_trace, blockIdx.x, MT_LAST_LOADS);
#endif
      },
      [&](int c) {
        const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
        out_t* y = static_cast<out_t*>(p.y);
        // Frees stage s: one arrival per warp, on every CTA that multicasts into it.
        auto release = [&](int s) { ring.template release<CLUSTER>(s, lane); };
        const u32 x_off = SPLIT_N ? 0u : c * 64u * 128u;         // this consumer's rows of the X tile
        const u32 w_off = X_BYTES + (SPLIT_N ? c * WN * 128u : 0u);  // its rows (columns of Y) of W
        float acc[WN / 2];
#pragma unroll
        for (int i = 0; i < WN / 2; ++i) acc[i] = 0.0f;

        u32 it = 0;
        for (int u = cid; u < units; u += nclusters) {
          MoeTile tile = moe_tile(table, E, u, tiles_m, units_n, p.group_m, p.by_expert, BM, CLUSTER * BN);
          tile.n0 += rank * BN;
          if (!SPLIT_N && 64 * c >= tile.valid_rows) {
            // No valid rows here: keep the stage barriers in step, issue no wgmma, store nothing.
            for (int kb = 0; kb < kblocks; ++kb, ++it) release(ring.wait_full(it));
            continue;
          }
          auto mma = [&](int s, int kb, bool acc_live, bool) {
            const u32 sa = base + s * STAGE_BYTES + x_off, sb = base + s * STAGE_BYTES + w_off;
#pragma unroll
            for (int i = 0; i < WN / 2; ++i) wgmma_fence_operand(acc[i]);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
              const u64 da = wgmma_desc_sw128(sa + kk * 32, 16, 1024);
              const u64 db = wgmma_desc_sw128(sb + kk * 32, 16, 1024);
              wgmma_m64k16<in_t, WN, 0, 0>(acc, da, db, (acc_live || kk > 0) ? 1 : 0);
            }
            wgmma_commit();
#pragma unroll
            for (int i = 0; i < WN / 2; ++i) wgmma_fence_operand(acc[i]);
          };
#if KILN_MOE_TRACE
          const bool stamps = c == 0 && threadIdx.x % 128 == 0;
          const MoeTracedRing<decltype(ring)> traced{ring, moe_trace, (u32)kblocks - 1,
                                                     stamps && it == 0 ? 0u : MOE_STAMP_NEVER};
          const int prev = ws_kloop(traced, it, kblocks, c, mma, release);
#else
          const int prev = ws_kloop(ring, it, kblocks, c, mma, release);
#endif
          wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < WN / 2; ++i) wgmma_fence_operand(acc[i]);
          release(prev);
#if KILN_MOE_TRACE
          if (stamps) moe_stamp(moe_trace, blockIdx.x, MT_MAIN_END);
#endif

          // Register i holds row 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2q + (i&1).
          const int r0 = (SPLIT_N ? 0 : 64 * c) + 16 * w + lane / 4;
          const int col0 = tile.n0 + (SPLIT_N ? c * WN : 0);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = r0 + 8 * h;
            const bool row_ok = r < tile.valid_rows;
            const i64 row = (i64)(tile.row0 + r);
            // The layer's combine: the row's routing weight, and (1) the token it goes to.
            const float wt = (COMBINE != 0 && row_ok) ? p.route[row] : 1.0f;
            const i64 dst = (COMBINE == 1 && row_ok) ? (i64)p.row_map[row] : row;
#pragma unroll
            for (int j0 = 0; j0 < WN / 8; j0 += 4) {
              float e[4][2];
#pragma unroll
              for (int s = 0; s < 4; ++s) {
                e[s][0] = acc[4 * (j0 + s) + 2 * h];
                e[s][1] = acc[4 * (j0 + s) + 2 * h + 1];
              }
              if constexpr (COMBINE != 0) {
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                  e[s][0] *= wt;
                  e[s][1] *= wt;
                }
              }
              quad_transpose(e, q);
              if constexpr (COMBINE == 1) {
                if (row_ok && dst >= 0) moe_red8_f32(reinterpret_cast<float*>(p.y), p.ldy, p.n, dst, col0 + 8 * (j0 + q), e);
              } else {
                if (row_ok) moe_store8(y, p.ldy, p.n, row, col0 + 8 * (j0 + q), e);
              }
            }
          }
        }
#if KILN_MOE_TRACE
        if (threadIdx.x % 128 == 0) moe_stamp(moe_trace, blockIdx.x, c == 0 ? MT_C0_END : MT_C1_END);
#endif
      });
  if (CLUSTER > 1) cluster_sync();  // no CTA exits while its peer may still multicast or arrive
}
