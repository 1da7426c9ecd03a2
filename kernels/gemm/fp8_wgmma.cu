// FP8 GEMM, warp-specialised persistent WGMMA + TMA (sm_90a): C[M, N] = alpha * (A · Bᵀ) with
// A [M, K] and B [N, K] both K-major FP8 (the NT layout: the only one FP8 wgmma reads from shared
// memory), each dequantised by its scales, fp32 accumulation, C row-major bf16 / f16 / f32.
// 384 threads: warpgroup 0 is the producer (40 registers; one thread issues the TMA loads of a
// 128 x 128-byte A box and a KILN_BN x 128-byte B box per stage into a ring of KILN_STAGES
// buffers guarded by full/empty mbarriers); warpgroups 1 and 2 are consumers (232 registers),
// each computing 64 rows of the 128 x KILN_BN block tile with wgmma.m64nBNk32 from 128B-swizzled
// tiles (a 128-byte row is 128 elements: one K block of 128 is one stage, four k32 steps). The
// grid is persistent: CTA b takes work units b, b + grid, .. (tiles in the grouped order of
// common/gemm_ws.cuh, or split-K slices of them).
//
// Scales (KILN_SCALE), fp32, read from device memory (Fp8Args):
//   0 per tensor: sa[0], sb[0], applied with alpha in the epilogue.
//   1 per row / column: sa[m] (M), sb[n] (N), in the epilogue.
//   2 block: A 1x128, sa[kb * M + m] (M-major); B 128x128, sb[(n / 128) * ceil(K / 128) + kb];
//     applied per K block to that block's partial sums (needs KILN_PROMOTE = 1). A tile whose
//     columns straddle two 128-wide B blocks (KILN_BN 160, 192) takes each column group's own.
// Promotion (KILN_PROMOTE = 1): each 128-deep K block is accumulated by its four wgmmas into
// fresh registers (the first with scale-d off), then added (block scales: multiplied by its
// scales and added) into a separate fp32 accumulator on the CUDA cores: the tensor cores' FP8
// accumulation keeps about 14 significant bits, and over long K its error outgrows bf16's.
// KILN_PROMOTE = 0 accumulates the whole K in the wgmma accumulator ("fast accumulation").
// KILN_PIPE = 1 (promoted only) alternates two K-block accumulators: block kb + 1's wgmmas are
// issued before block kb is promoted (wgmma.wait_group 1), so the FFMAs of the promotion overlap
// the tensor cores' work instead of following a drained pipeline; it costs a third accumulator
// array, so it is compiled for the 128-wide tile only.
// K: any multiple of 16 (TMA's 16-byte row stride); a last partial K block is zero-filled by TMA,
// as are rows and columns past M and N, and the epilogue stores only in-range elements.
// Small M: a promoted consumer whose 64 rows all lie past M skips its wgmmas (M <= 64 runs on
// one consumer at the tensor cores' full rate), and with few tiles the host splits K
// (Fp8Args.splits: work units are tile slices, reduced through an fp32 workspace).
#include "common/gemm_args.cuh"
#include "common/gemm_ws.cuh"
#include "common/mbarrier.cuh"
#include "common/split_k.cuh"
#include "common/tma.cuh"
#include "common/wgmma_fp8.cuh"

#if !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_SCALE) || !defined(KILN_PROMOTE) || \
    !defined(KILN_FP8_A) || !defined(KILN_FP8_B) || !defined(KILN_OUT) || !defined(KILN_SMEM) ||   \
    !defined(KILN_GROUP_M) || !defined(KILN_PIPE)
#error "fp8_wgmma.cu needs every define src/ops/fp8/gemm.rs gives it"
#endif

constexpr int BM = 128, BN = KILN_BN, BK = 128, STAGES = KILN_STAGES;
constexpr int SCALE = KILN_SCALE, FA = KILN_FP8_A, FB = KILN_FP8_B;
constexpr bool PROMOTE = KILN_PROMOTE != 0, PIPE = KILN_PIPE != 0;
static_assert(!PIPE || PROMOTE, "KILN_PIPE pipelines the promotion: it needs KILN_PROMOTE = 1");
constexpr u32 A_BYTES = BM * BK, B_BYTES = BN * BK, STAGE_BYTES = A_BYTES + B_BYTES;
static_assert(SCALE >= 0 && SCALE <= 2, "KILN_SCALE is 0 (tensor), 1 (row) or 2 (block)");
static_assert(SCALE != 2 || PROMOTE, "block scales apply per K block: they need KILN_PROMOTE = 1");
static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "KILN_BN is a multiple of 16 in 16..256");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");
// A tile straddles two B scale blocks only if its width does not divide 128 (n0 = tn * BN).
constexpr bool B_STRADDLE = SCALE == 2 && (128 % BN) != 0;
static_assert(!B_STRADDLE || BN % 8 == 0, "column groups of 8 must not straddle a B scale block");
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 168 * 384, "register pool overcommitted");

// One K block's block scales: A's for this thread's two rows, B's for the tile's one or two
// 128-column blocks.
struct BlockScales {
  float a0, a1, b0, b1;
};

// Mirrors `Fp8Args` in src/ops/fp8/gemm.rs.
struct Fp8Args {
  void* c;
  const float* sa;
  const float* sb;
  int m, n, k;
  i64 ldc;
  float alpha;
  // Split-K (splits > 1): each tile's K blocks in `splits` slices, one work unit each; a
  // slice's fp32 partial tile goes to ws slot (t * splits + sp), and the slice that counts
  // last on counters[t] adds the others and runs the epilogue (common/split_k.cuh).
  int splits;
  float* ws;
  u32* counters;
};

extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_fp8_wgmma(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b, const Fp8Args p) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle pattern follows absolute address bits: tiles start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 bars = base + STAGES * STAGE_BYTES;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
  const int wg = warpgroup_index();
  if (threadIdx.x == 0) {
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);   // the producer's arrive.expect_tx
      mbar_init(empty(s), 8);  // lane 0 of each consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;
  const int splits = p.splits, units = tiles * splits;

  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      u32 it = 0;
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        int tm, tn, kb0, kb1;
        tile_coords(u / splits, tiles_m, tiles_n, tm, tn);
        split_range(u % splits, splits, kblocks, kb0, kb1);
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);  // fresh barriers: parity 1 passes
          mbar_arrive_expect_tx(full(s), STAGE_BYTES);   // whole boxes, zero fill included
          const u32 sa = base + s * STAGE_BYTES;
          tma_load_2d(sa, &tma_a, full(s), kb * BK, tm * BM);
          tma_load_2d(sa + A_BYTES, &tma_b, full(s), kb * BK, tn * BN);
        }
      }
    }
    return;
  }

  warpgroup_reg_inc<CONSUMER_REGS>();
  const int c = wg - 1;  // this consumer's rows: 64c .. 64c + 63 of the block tile
  const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
  auto release = [&](int s) {
    if (lane == 0) mbar_arrive(empty(s));
  };
  // Stage 0's descriptors (K-major, 128B swizzle): this consumer's 64 rows of A start 8 KB in.
  // A stage and a k32 step (32 bytes along the row) only move the start address.
  const u64 da0 = wgmma_desc_sw128(base + c * 64 * 128, 16, 1024);
  const u64 db0 = wgmma_desc_sw128(base + A_BYTES, 16, 1024);
  GemmArgs gp;  // what the register epilogue's store reads: C, its bounds and stride
  gp.c = p.c;
  gp.m = p.m;
  gp.n = p.n;
  gp.ldc = p.ldc;
  gp.alpha = 1.0f;
  gp.beta = 0.0f;
  out_t* cout = static_cast<out_t*>(p.c);
  const float tensor_scale = SCALE == 0 ? p.alpha * p.sa[0] * p.sb[0] : p.alpha;
  const int nblocks_b = (p.n + 127) / 128;

  float acc[BN / 2];
  float fin[BN / 2];   // the promoted sums (unused, and so not allocated, without promotion)
  float acc2[BN / 2];  // KILN_PIPE's second accumulator (likewise)
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  if constexpr (PIPE) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc2[i] = 0.0f;
  }
  u32 it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int t = u / splits, sp = u % splits;
    int tm, tn, kb0, kb1;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    split_range(sp, splits, kblocks, kb0, kb1);
    const int nk = kb1 - kb0;  // this unit's K blocks kb0 .. kb1 - 1 (at least one)
    const int m0 = tm * BM, n0 = tn * BN;
    const int row = m0 + 64 * c + 16 * w + lane / 4;  // this thread's rows: row, row + 8
    // Block scales: column groups J < jb lie in B block nb0, the rest (B_STRADDLE) in nb0 + 1.
    const int nb0 = n0 / 128, jb = (128 - n0 % 128) / 8;
    if constexpr (PROMOTE) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fin[i] = 0.0f;
    }
    // This K block's scales (block mode), loaded ahead of their use so that they arrive under
    // the wgmmas.
    auto load_scales = [&](int j) {
      BlockScales sc{0.0f, 0.0f, 0.0f, 0.0f};
      const int kb = kb0 + j;
      if (SCALE == 2 && j < nk) {
        if (row < p.m) sc.a0 = p.sa[(i64)kb * p.m + row];
        if (row + 8 < p.m) sc.a1 = p.sa[(i64)kb * p.m + row + 8];
        sc.b0 = p.sb[(i64)nb0 * kblocks + kb];
        if (B_STRADDLE && nb0 + 1 < nblocks_b) sc.b1 = p.sb[(i64)(nb0 + 1) * kblocks + kb];
      }
      return sc;
    };
    // Waits for ring iteration i's stage and issues its four wgmmas into `a` as one batch
    // (`fresh`: the first ignores a's old value).
    auto issue = [&](u32 i, float(&a)[BN / 2], bool fresh) {
      const int s = i % STAGES;
      mbar_wait(full(s), (i / STAGES) & 1);
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) wgmma_fence_operand(a[j]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 32; ++kk) {
        const u64 da = wgmma_desc_add(da0, s * STAGE_BYTES + kk * 32);
        const u64 db = wgmma_desc_add(db0, s * STAGE_BYTES + kk * 32);
        wgmma_m64k32_fp8<FA, FB, BN>(a, da, db, (kk > 0 || !fresh) ? 1 : 0);
      }
      wgmma_commit();
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) wgmma_fence_operand(a[j]);
    };
    // A finished batch's sums `a` into fin: multiplied by their block's scales, or as they are.
    auto promote = [&](float(&a)[BN / 2], const BlockScales& sc) {
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) wgmma_fence_operand(a[j]);
      if constexpr (SCALE == 2) {
        // register j: row + 8 ((j >> 1) & 1), column group j >> 2
        const float s00 = sc.a0 * sc.b0, s10 = sc.a1 * sc.b0, s01 = sc.a0 * sc.b1, s11 = sc.a1 * sc.b1;
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) {
          const bool h = (j >> 1) & 1;
          const float f = (!B_STRADDLE || (j >> 2) < jb) ? (h ? s10 : s00) : (h ? s11 : s01);
          fin[j] = fmaf(f, a[j], fin[j]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) fin[j] += a[j];
      }
    };
    if (PROMOTE && m0 + 64 * c >= p.m) {
      // All of this consumer's rows lie past M (M <= 64 in a tile): it only frees the stages,
      // leaving the tensor cores to the other consumer. (Promoted kernels only: in the
      // unpromoted ones ptxas then serialised the wgmmas, C7515.) Its sums (whatever they hold: rows
      // past M are never stored) still go through split-K, where every consumer thread counts.
      for (int j = 0; j < nk; ++j, ++it) {
        mbar_wait(full(it % STAGES), (it / STAGES) & 1);
        release(it % STAGES);
      }
    } else if constexpr (!PROMOTE) {
      // One accumulator over the whole K; one batch kept in flight: once the previous one is
      // done, its stage can be refilled.
      int prev = 0;
      for (int j = 0; j < nk; ++j, ++it) {
        issue(it, acc, j == 0);
        wgmma_wait<1>();
        if (j > 0) release(prev);
        prev = it % STAGES;
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
      release(prev);
    } else if constexpr (!PIPE) {
      // Each K block's batch drains before its promotion.
      for (int j = 0; j < nk; ++j, ++it) {
        const BlockScales sc = load_scales(j);
        issue(it, acc, true);
        wgmma_wait<0>();
        release(it % STAGES);
        promote(acc, sc);
      }
    } else {
      // Two accumulators in turn: K block j + 1's batch is issued before block j's is
      // promoted, so the tensor cores work while the CUDA cores promote. The loop body has no
      // branch, and at its top exactly block j's batch (in acc) is in flight, on entry and on
      // every lap: ptxas can then see that each promotion reads a finished batch (written with
      // a conditional issue inside the loop, it serialised every wgmma: C7514). Block scales
      // are loaded two blocks ahead of their promotion (one ahead left their latency exposed).
      BlockScales s0 = load_scales(0), s1 = load_scales(1);
      issue(it, acc, true);
      int j = 0;
      for (; j + 2 < nk; j += 2, it += 2) {
        issue(it + 1, acc2, true);
        wgmma_wait<1>();
        release(it % STAGES);
        promote(acc, s0);
        s0 = load_scales(j + 2);
        issue(it + 2, acc, true);
        wgmma_wait<1>();
        release((it + 1) % STAGES);
        promote(acc2, s1);
        s1 = load_scales(j + 3);
      }
      if (j + 1 < nk) {  // two blocks left: j (in flight in acc) and j + 1
        issue(it + 1, acc2, true);
        wgmma_wait<1>();
        release(it % STAGES);
        promote(acc, s0);
        wgmma_wait<0>();
        release((it + 1) % STAGES);
        promote(acc2, s1);
        it += 2;
      } else {  // one block left
        wgmma_wait<0>();
        release(it % STAGES);
        promote(acc, s0);
        it += 1;
      }
    }
    float(&sums)[BN / 2] = *(PROMOTE ? &fin : &acc);
    if (splits > 1) {
      // Partials through the workspace; only the slice that counts last goes on.
      const int ct = threadIdx.x - 128;
      float* tile_ws = p.ws + (i64)t * splits * (128 * BN);
      split_store_partial(tile_ws + (i64)sp * (128 * BN), ct, sums);
      if (!split_arrive(p.counters + t, splits, ct, 1)) continue;
      split_add_others(tile_ws, splits, sp, ct, sums);
    }
    // Epilogue: scale, convert, store (register i holds row + 8 ((i >> 1) & 1), column
    // n0 + 8 (i >> 2) + 2q + (i & 1)).
    auto epilogue = [&](float(&res)[BN / 2]) {
      if constexpr (SCALE == 1) {
        const float ra0 = row < p.m ? p.alpha * p.sa[row] : 0.0f;
        const float ra1 = row + 8 < p.m ? p.alpha * p.sa[row + 8] : 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int n = n0 + 8 * j + 2 * q;
          const float b0 = n < p.n ? p.sb[n] : 0.0f, b1 = n + 1 < p.n ? p.sb[n + 1] : 0.0f;
          res[4 * j] *= ra0 * b0;
          res[4 * j + 1] *= ra0 * b1;
          res[4 * j + 2] *= ra1 * b0;
          res[4 * j + 3] *= ra1 * b1;
        }
      } else {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) res[i] *= tensor_scale;
      }
      store_acc_groups<0>(cout, gp, row, n0, res, q);
    };
    epilogue(sums);
  }
}
