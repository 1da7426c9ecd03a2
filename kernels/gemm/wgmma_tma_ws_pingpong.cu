// GEMM, warp-specialised persistent WGMMA + TMA with ping-pong consumers (sm_90a). 384 threads:
// warpgroup 0 is the producer (40 registers; one thread loads A and B tiles by TMA into a ring of
// KILN_STAGES shared buffers guarded by full/empty mbarriers); warpgroups 1 and 2 are consumers
// (232 registers) that each compute whole KILN_BM x KILN_BN tiles (128 x 128, 128 x 64: two
// wgmma.m64nBNk16 per k step; 64 x 64: one) and take the CTA's tiles in turn: consumer 0 its
// 1st, 3rd, .. tile, consumer 1 its 2nd, 4th, ... Their K loops take turns on the tensor cores (two named
// barriers: a consumer starts its K loop once the other has issued its last wgmmas), so one
// consumer's epilogue runs under the other's K loop, where the cooperative kernel
// (wgmma_tma_ws.cu: both consumers on one 128 x 256 tile) leaves the tensor cores idle at every
// tile end (CUTLASS's ping-pong schedule against its cooperative one). The grid is persistent:
// CTA b takes tiles b, b + grid, .. of the grouped order (common/gemm_ws.cuh). No split-K and no
// clusters. Epilogues as the cooperative kernel's: KILN_EPI = 1 staging chunks stored by TMA
// (beta == 0) or added to C by TMA (beta == 1; stmatrix for 16-bit C, st.shared.v2 for f32),
// else from registers.
// Edges: the tensor maps carry the true M/N/K (TMA zero-fills loads and drops stores outside);
// the register epilogue stores only in-range elements.
//
// Shared tiles (1024-byte aligned, rows of 128 bytes = 64 elements, 128B swizzle), as in
// wgmma_tma_ws.cu: a K-major operand is one box {64 k, rows}; an MN-major one is boxes
// {64 m|n, 64 k} of 8 KB, one per 64 rows of M or N.
#include "common/c_staging.cuh"
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"
#include "common/gemm_ws.cuh"
#include "common/grid_dep.cuh"
#include "common/mbarrier.cuh"
#include "common/quad_transpose.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"
#include "common/wgmma_ss.cuh"

#ifndef KILN_BM
#define KILN_BM 128
#endif
#ifndef KILN_BN
#define KILN_BN 128
#endif
#ifndef KILN_STAGES
#define KILN_STAGES 6
#endif
#ifndef KILN_EPI
#define KILN_EPI 1
#endif

constexpr int BM = KILN_BM, BN = KILN_BN, BK = 64, STAGES = KILN_STAGES;
static_assert(BN == 64 || BN == 128, "KILN_BN is 64 or 128: one consumer holds the whole BM x BN tile");
static_assert(BM == 128 || (BM == 64 && BN == 64), "KILN_BM is 128, or 64 with KILN_BN = 64");
constexpr bool TWO_HALVES = BM == 128;  // a 128-row tile: two m64 wgmmas per k step
static_assert(STAGES >= 2, "KILN_STAGES is at least 2");
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr u32 BOX64_BYTES = 64 * BK * 2;  // one 64 x 64 box; also rows 64.. of a K-major A tile
constexpr int TA = KILN_A_ROW ? 0 : 1;    // wgmma transpose flags: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 168 * 384, "register pool overcommitted");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
// KILN_EPI = 2 (beta other than 0 and 1): each chunk's old C is loaded by TMA into its staging
// buffer first, as in the cooperative kernel.
constexpr bool TMA_EPI = KILN_EPI != 0, C_LOAD = KILN_EPI == 2;
// A staging chunk: 64 rows of 128 bytes, 64 columns of 16-bit C or 32 of f32.
constexpr int C_COLS = KILN_OUT == 2 ? 32 : 64;
constexpr u32 C_CHUNK_BYTES = 64 * 128;
// Two staging chunks per consumer: its epilogue runs while the other consumer's K loop does.
constexpr u32 C_BYTES = TMA_EPI ? 2 * 2 * C_CHUNK_BYTES : 0;
// C_LOAD: one mbarrier per staging buffer, after the ring's.
constexpr u32 C_BARS = C_LOAD ? 4 : 0;
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + C_BYTES + (2 * STAGES + C_BARS) * 8,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");
// Named barriers: 1 + c, consumer c's epilogue; TURN + c, consumer c's turn on the tensor cores
// (its 128 threads sync, the other consumer's 128 arrive).
constexpr u32 TURN = 3;

// The parameters are the cooperative kernel's, so that one launch path serves both; `ex` (split-K
// and stream-K) is unused here.
extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_tma_ws_pingpong(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b,
                               const __grid_constant__ TmaMap tma_c, const GemmArgs p, const Extras ex) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle pattern follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 cstage = base + STAGES * STAGE_BYTES;  // C staging buffers (TMA_EPI), 1024-aligned
  const u32 bars = cstage + C_BYTES;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
  const u32 cbars = bars + 16u * STAGES;  // C_LOAD: staging buffer b's at 8b

  // Launched as the dependent of a copy kiln made of an operand or C (`transpose_rows`,
  // `pack_rows`), the CTAs get here while the copy runs and wait for it; else a no-op.
  grid_dependency_wait();
  const int wg = warpgroup_index();
  if (threadIdx.x == 0) {
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);   // the producer's arrive.expect_tx
      mbar_init(empty(s), 4);  // lane 0 of each warp of the consumer whose tile the stage holds
    }
    if (C_LOAD)
      for (int b = 0; b < 4; ++b) mbar_init(cbars + 8u * b, 1);  // the loading leader's arrival
    mbar_fence_init();
  }
  __syncthreads();

  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;
  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      // The CTA's tiles in order, whichever consumer takes each: the ring holds them in the order
      // the turns consume them.
      // A K-major A box may be shorter than the tile (a_box_rows).
      const u32 stage_tx = (KILN_A_ROW ? a_box_rows<BM>(p.m) * BK * 2 : A_BYTES) + B_BYTES;
      u32 it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        const int m0 = tm * BM, n0 = tn * BN;
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);  // fresh barriers: parity 1 passes
          mbar_arrive_expect_tx(full(s), stage_tx);        // zero-filled boxes count in full
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
    }
  } else {
    warpgroup_reg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const bool leader = (threadIdx.x % 128) == 0;
    out_t* cout = static_cast<out_t*>(p.c);
    auto release = [&](int s) {
      if (lane == 0) mbar_arrive(empty(s));
    };
#if KILN_EPI  // TMA_EPI
    u32 epi_chunks = 0;  // chunks staged so far: picks the staging buffer
#if KILN_OUT != 2
    const int srow = 16 * w + (lane & 15);  // the 16-bit staging row this lane addresses
#endif
    // Chunk ch (C_COLS columns) of a 64 x BN half tile, accumulators a, to C at
    // (m0, n0 + C_COLS ch) through this consumer's staging buffers (common/c_staging.cuh).
    // KILN_EPI = 1 sees beta 0 or 1 (the host's choice): with beta == 1 chunks are added to C.
    // KILN_EPI = 2: chunk ch's old C is in the buffer (load_first_chunks, or two chunks back)
    // and chunk ch + 2 (of nch) is loaded into it once its store has read it; chunk count e
    // waits on parity (e >> 1) & 1 of its buffer's barrier (wgmma_tma_ws.cu: the same scheme).
    auto store_chunk = [&](int ch, int nch, int m0, int n0, const float(&a)[BN / 2]) {
      const u32 buf = cstage + (2 * c + (epi_chunks & 1)) * C_CHUNK_BYTES;
      const u32 cbar = cbars + 8u * (2 * c + (epi_chunks & 1));
      if (C_LOAD) mbar_wait(cbar, (epi_chunks >> 1) & 1);
      store_staged_chunk(&tma_c, buf, 1 + c, leader, n0 + C_COLS * ch, m0, !C_LOAD && p.beta != 0.0f, [&] {
#if KILN_EPI == 2 && KILN_OUT == 2
        stage_chunk_f32_blend(buf, ch, w, lane, p.beta, [&](int i) { return p.alpha * a[i]; });
#elif KILN_EPI == 2
        stage_chunk_16_blend<out_t>(buf, ch, srow, w, lane, p.beta, [&](int i) { return p.alpha * a[i]; });
#elif KILN_OUT == 2
        stage_chunk_f32(buf, ch, w, lane, [&](int i) { return p.alpha * a[i]; });
#else
        stage_chunk_16(buf, ch, srow, lane, [&](int J, int x) {
          return pack2<out_t>(p.alpha * a[8 * J + 2 * x], p.alpha * a[8 * J + 2 * x + 1]);
        });
#endif
      });
      // After the last chunk the wait frees both buffers for the next tile's first loads; not
      // after the one before it, whose buffer nothing reloads in this tile.
      if (C_LOAD && leader && ch + 2 != nch) {
        tma_store_wait_read<0>();
        if (ch + 2 < nch) load_c_chunk(&tma_c, buf, cbar, n0 + C_COLS * (ch + 2), m0);
      }
      ++epi_chunks;
    };
    // C_LOAD: the old C of a half tile's first two chunks, into this consumer's two buffers: the
    // first half's under the tile's first K block, so the loads' latency hides behind the mainloop;
    // the second half's once the first half's stores have read the buffers (each half's last
    // store_chunk waits for that; that wait after the mainloop never returned on an H100: ledger
    // #82).
    auto load_first_chunks = [&](int nch, int m0, int n0) {
      if (C_LOAD && leader)
        load_first_c_chunks(&tma_c, cstage, cbars, c, epi_chunks, nch, m0, n0, C_COLS);
    };
#endif
    // The chunks of the tile at column n0 that hold columns of C.
    auto tile_chunks = [&](int n0) { return min(BN / C_COLS, (p.n - n0 + C_COLS - 1) / C_COLS); };
    // Rows 64h .. 64h + 63 of the tile at (tm, tn), from accumulators a (register i: row
    // 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1)).
    auto store_half = [&](const float(&a)[BN / 2], int h, int tm, int tn) {
#if KILN_EPI
      const int m0 = tm * BM + 64 * h, n0 = tn * BN;
      if (m0 >= p.m) return;
      const int nch = tile_chunks(n0);
      if (h == 1) load_first_chunks(nch, m0, n0);  // the first half's: under the first K block
#pragma unroll
      for (int ch = 0; ch < BN / C_COLS; ++ch)
        if (ch < nch)
          store_chunk(ch, nch, m0, n0, a);
#else
      store_acc_groups<0>(cout, p, tm * BM + 64 * h + 16 * w + lane / 4, tn * BN, a, lane % 4);
#endif
    };

    float acc0[BN / 2], acc1[BN / 2];  // rows 0..63 and 64..127 of the tile (acc1: BM = 128)
    // Stage 0's descriptors; rows 64.. of A are 8 KB further in both A layouts (K-major: 64 rows
    // of 128 bytes; MN-major: the second box). A stage and a k step only move the start address.
    const u32 sa0 = base, sb0 = base + A_BYTES;
    const u64 da0 = TA ? wgmma_desc_sw128(sa0, BOX64_BYTES, 1024) : wgmma_desc_sw128(sa0, 16, 1024);
    const u64 db0 = TB ? wgmma_desc_sw128(sb0, BOX64_BYTES, 1024) : wgmma_desc_sw128(sb0, 16, 1024);
    // Consumer 0 has the first turn.
    if (c == 1) named_barrier_arrive(TURN, 256);
    u32 it = c * kblocks;  // the ring iteration of this consumer's tile's first K block
    for (int t = blockIdx.x + c * gridDim.x; t < tiles; t += 2 * gridDim.x, it += 2 * kblocks) {
      int tm, tn;  // C_LOAD: known before the K loop, for the first C loads under its first K block
      tile_coords(t, tiles_m, tiles_n, tm, tn);
      // Wait for the turn: the other consumer has issued its K loop, so it has also waited on
      // every fill before this tile's. (That is also why the full barriers' parities cannot
      // alias here: no consumer waits on a stage's fill while the fill before it is unconsumed.)
      named_barrier_sync(TURN + c, 256);
      int prev = 0;  // the stage of the batch in flight
      for (int kb = 0; kb < kblocks; ++kb) {
        const u32 i = it + kb;
        const int s = i % STAGES;
        mbar_wait(full(s), (i / STAGES) & 1);
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) {
          wgmma_fence_operand(acc0[r]);
          if (TWO_HALVES) wgmma_fence_operand(acc1[r]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          // K-major: step 16 elements (32 B) along the 128-byte row. MN-major: step 16 rows of K.
          const u64 da = wgmma_desc_add(da0, s * STAGE_BYTES + kk * (TA ? 2048 : 32));
          const u64 db = wgmma_desc_add(db0, s * STAGE_BYTES + kk * (TB ? 2048 : 32));
          const int acc_live = (kb > 0 || kk > 0) ? 1 : 0;
          wgmma_m64k16<in_t, BN, TA, TB>(acc0, da, db, acc_live);
          if (TWO_HALVES) wgmma_m64k16<in_t, BN, TA, TB>(acc1, wgmma_desc_add(da, BOX64_BYTES), db, acc_live);
        }
        wgmma_commit();
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) {
          wgmma_fence_operand(acc0[r]);
          if (TWO_HALVES) wgmma_fence_operand(acc1[r]);
        }
#if KILN_EPI == 2
        // The first K block's wgmmas run while the leader loads the first half's first two
        // chunks of old C (after the turn: not against the other consumer's start).
        if (kb == 0 && tm * BM < p.m) load_first_chunks(tile_chunks(tn * BN), tm * BM, tn * BN);
#endif
        // Keep one batch in flight: once the previous one is done, its stage can be refilled.
        wgmma_wait<1>();
        if (kb > 0) release(prev);
        prev = s;
      }
      // The other consumer's turn (if this CTA has a next tile): its first wgmmas queue behind
      // this tile's last, while this consumer drains and stores.
      if (t + (int)gridDim.x < tiles) named_barrier_arrive(TURN + (1 - c), 256);
      wgmma_wait<0>();
#pragma unroll
      for (int r = 0; r < BN / 2; ++r) {
        wgmma_fence_operand(acc0[r]);
        if (TWO_HALVES) wgmma_fence_operand(acc1[r]);
      }
      release(prev);
      store_half(acc0, 0, tm, tn);
      if (TWO_HALVES) store_half(acc1, 1, tm, tn);
    }
    // Bulk stores still in flight must finish before the block's shared memory goes away.
    if (TMA_EPI && leader) tma_store_wait<0>();
  }
}
