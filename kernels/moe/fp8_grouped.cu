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
//
// KILN_SSCALE = 1 (the dense kernel's `t`, 2026-11-29): the scales ride the ring. With each
// stage the producer thread loads the tile's 128 X scales of the K block by TMA (a map over all
// of X's scales as one row, box of 132 starting on the tile's first scale rounded down to 4:
// 16 bytes of global memory) and the tile's W scale by a 4-byte cp.async that arrives on the
// stage's full barrier; the consumers read them from the stage's slot once it has landed, where
// the default loads them from global memory two K blocks ahead (the 128-wide grouped profile,
// H200 2026-11-29: the W scale's R2UR and the scale product's FMUL 7 % of the stall samples, the
// scale addressing a dozen instructions a K block).
// KILN_CLUSTER = 2: pairs of CTAs along M sharing the W tile (the dense kernel's `m`): the
// tables are built for 256-row pair tiles (an expert's rows in ceil(rows / 256) pairs, never
// across experts), CTA r of a pair takes the pair's rows 128 r .. 128 r + 127 and loads W rows
// 64 r .. 64 r + 63 of the tile, multicast to both; a stage is free once both CTAs' consumers
// have read it. A pair's second tile past its expert's rows loads no X and only feeds its W half.
// KILN_BN = 256 (with both: the dense kernel's `256tmh`): the 128 x 256 tile, each CTA of a pair
// loading 128 of its W rows; a consumer's 64 x 256 runs a K block in two halves of 128 columns,
// each half's four wgmmas into one 64-register accumulator, drained and promoted into its half
// of 128 registers of sums (two arrays of 128 beside them would not fit); the stage is freed
// after the second half. A tile spans two W scale blocks: the slot carries both.
// KILN_XFEED (the 128 x 256 tile: docs/fp8.md ledger rows 81, 84, 100 and 130): 3 (`tm256bh`,
// the default from row 102 to row 163) takes two parts of the dense `256tmd`'s feed, 0 neither.
// Bit 0: a tile whose 128 rows are all its expert's loads them as one box of 128 rows, as the
// dense tile loads A, through the fourth map (X in 128-row boxes; the 128B swizzle repeats every
// 8 rows, so the stage holds the same bytes as four 32-row boxes). Bit 1: the X scales' slot
// offset kept in registers across the K loop, where the one box alone (`tm256b`, deleted in row
// 130) rederived it every K block between the full-stage wait and the first wgmma (S2R, LDC of
// x_rows, the valid-row predicates: a dependent chain of a dozen instructions, ~4 % of the stall
// samples in `tm256`'s ncu), and the dense loop's scales take one LEA before the wait and the
// loads after it. Here a thread's row offset is fixed, the box's offset (kb x_rows + row0) mod 4
// advances by x_rows mod 4 a K block, and every row's scale is read (a row past its expert's end
// is never stored). The scales stay read before the batch: reading them under it (`tm256s`,
// rows 81 and 84) cost 10-15 %.
// KILN_XFEED = 11 (`tm256bht`, the default since it won three rounds; ledger rows 133 and 163): `tm256bh` with
// the last wave's tiles in halves (TAIL: tail_units). 4 x 8192 rows make 2,048 pair tiles over 66
// pairs, 31.03 waves: two pairs run a 32nd tile while 64 wait (3.1 % of the busiest pair's time).
// As four half tiles of 256 x 128 on four pairs they take half a tile's time. A half unit's W
// rows are one pair part, which its rank loads and multicasts (the other loads none: the stage
// expects half the W bytes); its consumers run one half's four wgmmas a K block and store 128
// columns from registers.
// (KILN_XFEED = 15, `tm256bhto`: the register epilogue under the next tile's first K block, lost
// two rounds by 4-5 % and 16 % masked, its 9,440-instruction kernel missing the instruction cache;
// deleted in ledger row 190.)
// KILN_NOSTORE = 1 (KILN_FP8_GROUPED_NOSTORE, a diagnostic, never verified: Y is not written):
// every store of Y skipped at run time (behind a test that never holds, so the sums are still
// made), to time the epilogue's share of the kernel.
#include "common/cp_async.cuh"
#include "common/fp8_promote.cuh"
#include "common/mem_ops.cuh"
#include "common/tma_3d.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/epilogue.cuh"
#include "moe/fp8_args.cuh"
#include "moe/sched.cuh"

#if !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM) || \
    !defined(KILN_OUT) || !defined(KILN_SSCALE) || !defined(KILN_CLUSTER) || !defined(KILN_XFEED) ||          \
    !defined(KILN_NOSTORE)
#error "fp8_grouped.cu needs KILN_BN, KILN_STAGES, KILN_MAX_EXPERTS, KILN_SMEM, KILN_OUT, KILN_SSCALE, KILN_CLUSTER, KILN_XFEED and KILN_NOSTORE (src/ops/moe/fp8_grouped.rs)"
#endif

constexpr int BM = 128, BN = KILN_BN, BK = 128, STAGES = KILN_STAGES;
constexpr int XBOX = 32;  // X rows per TMA box
constexpr bool STAGED = KILN_SSCALE != 0;
constexpr int CM = KILN_CLUSTER;      // CTAs of a pair along M sharing the W tile
constexpr int W_PART = BN / CM;       // W rows each CTA of a pair loads (and multicasts)
constexpr int SX_BOX = BM + 4;        // staged X scales: the box from the first rounded down to 4
constexpr u32 SW_AT = SX_BOX * 4;     // the W scales' place in a stage's slot
constexpr int NSW = BN / 128;         // W scale blocks a tile spans (its n0 is a multiple of BN)
constexpr u32 X_BYTES = BM * BK, W_BYTES = BN * BK, STAGE_BYTES = X_BYTES + W_BYTES;
constexpr u32 SLOT_BYTES = STAGED ? (SW_AT + 4 * NSW + 127) / 128 * 128 : 0;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 1) * 4;
constexpr bool X_ONE_BOX = (KILN_XFEED & 1) != 0, HOIST = (KILN_XFEED & 2) != 0;
constexpr bool TAIL = (KILN_XFEED & 8) != 0;
static_assert(KILN_XFEED == 0 || ((KILN_XFEED == 3 || KILN_XFEED == 11) && BN == 256),
              "KILN_XFEED is 0, 3 (one X box and the X scales' offset kept across the K loop: the 128 x 256 tile) "
              "or 11 (3 with the last wave's tiles in halves)");
static_assert(KILN_NOSTORE == 0 || KILN_NOSTORE == 1, "KILN_NOSTORE is 0 or 1 (the diagnostic without Y's stores)");
constexpr bool NOSTORE = KILN_NOSTORE != 0;
static_assert(BN == 128 || (BN == 256 && STAGED && CM == 2),
              "128 columns (the pipelined promotion's three arrays fit), or 256 in drained halves with the scales "
              "in the ring, in pairs");
static_assert(KILN_SSCALE == 0 || KILN_SSCALE == 1, "KILN_SSCALE is 0 (scales from global memory) or 1 (in the ring)");
static_assert(CM == 1 || CM == 2, "KILN_CLUSTER is 1 or 2 (pairs along M)");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * (STAGE_BYTES + SLOT_BYTES) + 2 * STAGES * 8 + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages and tables need");
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

// TAIL: the units the pairs walk. The t = units % stride tiles past the last whole wave of pairs
// run as 2t half tiles (128 columns each) where they fit one wave (2t <= stride): the busiest
// pair's last unit then takes half a tile's time. Unit v is tile tail_unit(v, .., h) whole
// (h = -1) or its half h.
__device__ __forceinline__ int tail_units(int units, int stride) {
  const int t = units % stride;
  return TAIL && t > 0 && 2 * t <= stride ? units + t : units;
}
__device__ __forceinline__ int tail_unit(int v, int units, int stride, int& h) {
  const int t = units % stride, whole = units - t;
  h = -1;
  if (!TAIL || v < whole || 2 * t > stride) return v;  // (not split: v < units)
  h = (v - whole) & 1;
  return whole + ((v - whole) >> 1);
}

// Work unit u's tile for CTA `rank` of its pair (rank 0 without pairs): the tables count pair
// tiles of CM * BM rows, the CTA takes its BM of them (valid_rows 0 past its expert's rows).
__device__ __forceinline__ MoeTile fp8_moe_cta_tile(const int* table, const Fp8MoeArgs& p, int u, int tiles_m, int rank) {
  MoeTile t = moe_tile(table, p.experts, u, tiles_m, p.tiles_n, p.group_m, p.by_expert, CM * BM, BN);
  if (CM > 1) {
    t.row0 += rank * BM;
    t.valid_rows = min(max(t.valid_rows - rank * BM, 0), BM);
  }
  return t;
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_fp8_grouped(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_w,
                    const __grid_constant__ TmaMap tma_sx, const __grid_constant__ TmaMap tma_x128,
                    const Fp8MoeArgs p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);
  const u32 slots = base + STAGES * STAGE_BYTES;  // KILN_SSCALE's scale slots
  const MbarRing<STAGES> ring{slots + STAGES * SLOT_BYTES};
  int* table = reinterpret_cast<int*>(smem_raw + (ring.bars - raw) + 2 * STAGES * 8);
  const int E = p.experts;
  if (threadIdx.x == 0) {
    // lane 0 of each consumer warp of both CTAs of a pair; the W scale's cp.async arrives too
    ring.init(8 * CM, STAGED ? 2 : 1);
    mbar_fence_init();
  }
  moe_load_tables(table, p.sched, E);
  // the peer's barriers exist before any multicast or remote arrive
  if constexpr (CM > 1) cluster_sync();
  else __syncthreads();
  const int tiles_m = table[E], units = tiles_m * p.tiles_n, kblocks = (p.k + BK - 1) / BK;
  const int wg = warpgroup_index();
  const int first = blockIdx.x / CM, stride = gridDim.x / CM;  // pairs walk the units together
  const int nbs = (p.n + 127) / 128;

  ws_roles<PRODUCER_REGS, CONSUMER_REGS>(
      wg,
      [&] {
        tma_prefetch(&tma_x);
        tma_prefetch(&tma_w);
        if (STAGED) tma_prefetch(&tma_sx);
        if (X_ONE_BOX) tma_prefetch(&tma_x128);
        const int rank = CM > 1 ? (int)cluster_ctarank() : 0;
        u32 it = 0;
        // (one X box: the stride reread from %nctaid each tile, which ptxas else spilled at the
        // producer's 40 registers)
        auto next_stride = [&]() {
          if constexpr (!X_ONE_BOX) return stride;
          u32 n;
          asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(n));
          return (int)n / CM;
        };
        for (int v = first; v < tail_units(units, next_stride()); v += next_stride()) {
          int h;  // TAIL: a half tile's half (its W rows are part h, which rank h loads), else -1
          const int u = tail_unit(v, units, next_stride(), h);
          const MoeTile tile = fp8_moe_cta_tile(table, p, u, tiles_m, rank);
          const int boxes = min((tile.valid_rows + XBOX - 1) / XBOX, BM / XBOX);
          const int nb = tile.n0 / 128;
          const float* sw = p.sw + ((i64)tile.expert * nbs + nb) * kblocks;
          const u32 bytes = (h < 0 ? W_BYTES : W_BYTES / 2) + boxes * XBOX * 128u + (STAGED ? SX_BOX * 4u : 0u);
          for (int kb = 0; kb < kblocks; ++kb, ++it) {
            ws_fill(ring, it, bytes, [&](int s, u32 bar) {
              const u32 sx = base + s * STAGE_BYTES;
              if (X_ONE_BOX && boxes == BM / XBOX) tma_load_2d(sx, &tma_x128, bar, kb * BK, tile.row0);
              else
                for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, kb * BK, tile.row0 + b * XBOX);
              if constexpr (CM > 1) {
                if (!TAIL || h < 0 || h == rank)
                  tma_load_3d_multicast(sx + X_BYTES + rank * W_PART * 128u, &tma_w, bar, kb * BK, tile.n0 + rank * W_PART,
                                        tile.expert, (u16)((1 << CM) - 1));
              }
              else
                tma_load_3d(sx + X_BYTES, &tma_w, bar, kb * BK, tile.n0, tile.expert);
              if constexpr (STAGED) {
                const u32 sl = slots + s * SLOT_BYTES;
                tma_load_2d(sl, &tma_sx, bar, (kb * p.x_rows + tile.row0) & ~3, 0);
#pragma unroll
                for (int i = 0; i < NSW; ++i)  // (a block past N: zero, its columns never stored)
                  cp_async4_zfill(sl + SW_AT + 4 * i, sw + (nb + i < nbs ? i * kblocks : 0) + kb, nb + i < nbs ? 4 : 0);
                cp_async_mbar_arrive_noinc(bar);
              }
            });
          }
        }
      },
      [&](auto c) {  // (generic: the branches of the other tile widths are not instantiated)
        const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
        out_t* y = static_cast<out_t*>(p.y);
        auto release = [&](int s) { ring.template release<CM>(s, lane); };
        const u64 da0 = wgmma_desc_sw128(base + c * 64 * 128, 16, 1024);
        const u64 db0 = wgmma_desc_sw128(base + X_BYTES, 16, 1024);
        constexpr int AR = BN == 256 ? 64 : BN / 2;  // a K block's accumulator (a half's, 256 wide)
        float fin[BN / 2], acc[AR], acc2[BN == 256 ? 1 : AR];
#pragma unroll
        for (int i = 0; i < AR; ++i) acc[i] = 0.0f;  // defined before their first wgmma
#pragma unroll
        for (int i = 0; i < (BN == 256 ? 1 : AR); ++i) acc2[i] = 0.0f;
        // HOIST: this thread's first row's place in a slot's X scales (fixed: r0 below), and
        // x_rows mod 4 in bytes, the step of the box's offset from one K block to the next
        const u32 row_at = 4u * (u32)(64 * c + 16 * w + lane / 4), x_step = 4u * ((u32)p.x_rows & 3u);
        // NOSTORE: a test that never holds (n >= 1) but that ptxas cannot fold, so fin stays live
        const bool store = !NOSTORE || p.n < 0;
        u32 it = 0;
        const int vend = tail_units(units, stride);
        for (int v = first; v < vend; v += stride) {
          int h;  // TAIL: a half tile's half, else -1
          const int u = tail_unit(v, units, stride, h);
          const MoeTile tile = fp8_moe_cta_tile(table, p, u, tiles_m, CM > 1 ? (int)cluster_ctarank() : 0);
          if (64 * c >= tile.valid_rows) {
            // No valid rows here: keep the stage barriers in step, issue no wgmma, store nothing.
            for (int kb = 0; kb < kblocks; ++kb, ++it) release(ring.wait_full(it));
            continue;
          }
          const int r0 = 64 * c + 16 * w + lane / 4;  // this thread's tile rows: r0, r0 + 8
          const int nb = tile.n0 / 128;                // BN = 128: one W scale block per tile
          if constexpr (BN == 256) {
            // Two drained halves a K block: half h's four wgmmas (W rows 128 h on), waited for,
            // promoted with W scale block h into fin's registers 64 h on; the stage freed after
            // the second. (fp8_issue_block waits for the stage; the second wait passes at once.)
            const u64 db1 = wgmma_desc_add(db0, 128 * 128);
            auto none = [](int) { return Fp8BlockScales{0.0f, 0.0f, 0.0f, 0.0f}; };
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) fin[i] = 0.0f;
            // HOIST: block kb's X scales start (kb x_rows + row0) mod 4 scales into the slot
            u32 x_at = 4u * ((u32)tile.row0 & 3u);
            // block kb's scales from stage s's slot
            auto read_scales = [&](int kb, int s) {
              const u32 sl = slots + s * SLOT_BYTES;
              Fp8BlockScales v;
              if constexpr (HOIST) {
                const u32 sa = sl + x_at + row_at;
                v.a0 = ld_shared_f32(sa);
                v.a1 = ld_shared_f32(sa + 32u);
                x_at = (x_at + x_step) & 12u;
              } else {
                const u32 sa = sl + 4u * ((u32)(kb * p.x_rows + tile.row0) & 3u);
                v.a0 = r0 < tile.valid_rows ? ld_shared_f32(sa + 4u * r0) : 0.0f;
                v.a1 = r0 + 8 < tile.valid_rows ? ld_shared_f32(sa + 4u * (r0 + 8)) : 0.0f;
              }
              v.b0 = ld_shared_f32(sl + SW_AT);
              v.b1 = ld_shared_f32(sl + SW_AT + 4);
              return v;
            };
            if (TAIL && h >= 0) {
              // a half tile: half h's four wgmmas a K block (W part h, its scale block), promoted
              // into fin's first 64 registers, stored as 128 columns from n0 + 128 h
              const u64 dbh = h ? db1 : db0;
              for (int kb = 0; kb < kblocks; ++kb, ++it) {
                const Fp8BlockScales sc = fp8_issue_block<128, STAGES, STAGE_BYTES>(
                    ring, it, acc, da0, dbh, [&](int s) { return read_scales(kb, s); });
                const float b = h ? sc.b1 : sc.b0;
                wgmma_wait<0>();
                release(MbarRing<STAGES>::slot(it));
                fp8_promote_part<128, BN>(fin, acc, sc.a0 * b, sc.a1 * b, 0);
              }
              if (store) moe_store_fragment<128>(y, p.ldy, p.n, tile.row0, tile.valid_rows, r0, tile.n0 + 128 * h, q, fin);
              continue;
            }
            for (int kb = 0; kb < kblocks; ++kb, ++it) {
              const Fp8BlockScales sc = fp8_issue_block<128, STAGES, STAGE_BYTES>(
                  ring, it, acc, da0, db0, [&](int s) { return read_scales(kb, s); });
              wgmma_wait<0>();
              fp8_promote_part<128, BN>(fin, acc, sc.a0 * sc.b0, sc.a1 * sc.b0, 0);
              fp8_issue_block<128, STAGES, STAGE_BYTES>(ring, it, acc, da0, db1, none);
              wgmma_wait<0>();
              release(MbarRing<STAGES>::slot(it));
              fp8_promote_part<128, BN>(fin, acc, sc.a0 * sc.b1, sc.a1 * sc.b1, 1);
            }
          } else if constexpr (STAGED) {
            // block kb's scales from its stage's slot: X's from the box's start rounded down
            auto scales = [&](int kb, int s) {
              const u32 sl = slots + s * SLOT_BYTES + 4u * ((u32)(kb * p.x_rows + tile.row0) & 3u);
              Fp8BlockScales sc;
              sc.a0 = r0 < tile.valid_rows ? ld_shared_f32(sl + 4u * r0) : 0.0f;
              sc.a1 = r0 + 8 < tile.valid_rows ? ld_shared_f32(sl + 4u * (r0 + 8)) : 0.0f;
              sc.b0 = ld_shared_f32(slots + s * SLOT_BYTES + SW_AT);
              sc.b1 = 0.0f;
              return sc;
            };
            fp8_promoted_kloop<BN, STAGES, STAGE_BYTES, true>(ring, it, kblocks, da0, db0, fin, acc, acc2, BN / 8, scales,
                                                              release);
          } else {
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
          }

          // Y from registers (moe/epilogue.cuh), rows past the expert's end never stored
          if (store) moe_store_fragment<BN>(y, p.ldy, p.n, tile.row0, tile.valid_rows, r0, tile.n0, q, fin);
        }
      });
  // No CTA of a pair may leave while its peer can still arrive on its barriers or multicast into it.
  if constexpr (CM > 1) {
    __syncwarp();
    cluster_sync();
  }
}
