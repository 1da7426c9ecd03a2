// GEMM, warp-specialised persistent WGMMA + TMA with ping-pong consumers (sm_90a), on the
// pipeline of common/ws_pipeline.cuh. 384 threads: warpgroup 0 is the producer (40 registers; one
// thread loads A and B tiles by TMA into a ring of KILN_STAGES shared buffers); warpgroups 1 and 2
// are consumers (232 registers) that each compute whole KILN_BM x KILN_BN tiles (128 x 128,
// 128 x 64: two wgmma.m64nBNk16 per k step; 64 x 64: one) and take the CTA's tiles in turn:
// consumer 0 its 1st, 3rd, .. tile, consumer 1 its 2nd, 4th, ... Their K loops take turns on the
// tensor cores (two named barriers: a consumer starts its K loop once the other has issued its
// last wgmmas), so one consumer's epilogue runs under the other's K loop, where the cooperative
// kernel (wgmma_tma_ws.cu: both consumers on one 128 x 256 tile) leaves the tensor cores idle at
// every tile end (CUTLASS's ping-pong schedule against its cooperative one; ledger #38). The grid
// is persistent: CTA b takes tiles b, b + grid, .. of the grouped order (common/gemm_ws.cuh). No
// split-K and no clusters. Epilogues as the cooperative kernel's (common/c_staging.cuh):
// KILN_EPI = 1 staging chunks stored by TMA (beta == 0) or added to C by TMA (beta == 1), 2 C
// loaded by TMA and blended (other beta), 0 from registers.
// Edges: the tensor maps carry the true M/N/K (TMA zero-fills loads and drops stores outside);
// the register epilogue stores only in-range elements. Shared tiles: common/gemm_ws.cuh.
#include "common/c_staging.cuh"
#include "common/gemm_ws.cuh"
#include "common/grid_dep.cuh"
#include "common/ws_pipeline.cuh"

#if !defined(KILN_BM) || !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_EPI) || !defined(KILN_SMEM)
#error "KILN_BM, KILN_BN, KILN_STAGES, KILN_EPI and KILN_SMEM must be defined by the host"
#endif

constexpr int BM = KILN_BM, BN = KILN_BN, BK = WS_BK, STAGES = KILN_STAGES;
static_assert(BN == 64 || BN == 128, "KILN_BN is 64 or 128: one consumer holds the whole BM x BN tile");
static_assert(BM == 128 || (BM == 64 && BN == 64), "KILN_BM is 128, or 64 with KILN_BN = 64");
constexpr bool TWO_HALVES = BM == 128;  // a 128-row tile: two m64 wgmmas per k step
constexpr int MI = BM / 64;
static_assert(STAGES >= 2, "KILN_STAGES is at least 2");
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 168 * 384, "register pool overcommitted");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
constexpr bool TMA_EPI = KILN_EPI != 0, C_LOAD = KILN_EPI == 2;
using Epi = TmaStoreEpilogue<KILN_EPI, out_t>;
constexpr int C_COLS = Epi::C_COLS;  // a staging chunk's columns: 64 of 16-bit C, 32 of f32
// Two staging chunks per consumer: its epilogue runs while the other consumer's K loop does.
constexpr u32 C_BYTES = TMA_EPI ? 2 * 2 * Epi::CHUNK_BYTES : 0;
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
  const u32 base = smem_align1024(smem_raw);
  const u32 cstage = base + STAGES * STAGE_BYTES;  // C staging buffers (TMA_EPI), 1024-aligned
  const MbarRing<STAGES> ring{cstage + C_BYTES};
  const u32 cbars = ring.bars + 16u * STAGES;  // C_LOAD: staging buffer b's at 8b

  // Launched as the dependent of a copy kiln made of an operand or C (`transpose_rows`,
  // `pack_rows`), the CTAs get here while the copy runs and wait for it; else a no-op.
  grid_dependency_wait();
  const int wg = warpgroup_index();
  if (threadIdx.x == 0) {
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    ring.init(4);  // lane 0 of each warp of the consumer whose tile the stage holds
    if (C_LOAD)
      for (int b = 0; b < 4; ++b) mbar_init(cbars + 8u * b, 1);  // the loading leader's arrival
    mbar_fence_init();
  }
  __syncthreads();

  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;
  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    // The producer: the CTA's tiles in order, whichever consumer takes each (the ring holds them in
    // the order the turns consume them). A K-major A box may be shorter than the tile (a_box_rows).
    if (threadIdx.x == 0) {
      const u32 stage_tx = (KILN_A_ROW ? a_box_rows<BM>(p.m) * BK * 2 : A_BYTES) + B_BYTES;
      u32 it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        const int m0 = tm * BM, n0 = tn * BN;
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          ws_fill(ring, it, stage_tx, [&](int s, u32 bar) {
            const u32 sa = base + s * STAGE_BYTES;
            ws_load_ab<BM, BN, 1>(sa, sa + A_BYTES, bar, &tma_a, &tma_b, m0, n0, kb * BK, 0);
          });
        }
      }
    }
  } else {
    warpgroup_reg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const bool leader = (threadIdx.x % 128) == 0;
    out_t* cout = static_cast<out_t*>(p.c);
    auto release = [&](int s) { ring.release(s, lane); };
    Epi epi(cstage, cbars, c, w, lane);
    // The chunks of the tile at column n0 that hold columns of C.
    auto tile_chunks = [&](int n0) { return min(BN / C_COLS, (p.n - n0 + C_COLS - 1) / C_COLS); };
    // Rows 64h .. 64h + 63 of the tile at (tm, tn), from accumulators a (register i: row
    // 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1)).
    auto store_half = [&](const float(&a)[BN / 2], int h, int tm, int tn) {
      if constexpr (TMA_EPI) {
        const int m0 = tm * BM + 64 * h, n0 = tn * BN;
        if (m0 >= p.m) return;
        const int nch = tile_chunks(n0);
        // C_LOAD: the old C of a half tile's first two chunks, into this consumer's two buffers:
        // the first half's under the tile's first K block (below), so the loads' latency hides
        // behind the mainloop; the second half's once the first half's stores have read the
        // buffers (each half's last store_chunk waits for that; that wait after the mainloop never
        // returned on an H100: ledger #82).
        if (h == 1) epi.load_first_chunks(&tma_c, nch, m0, n0);
#pragma unroll
        for (int ch = 0; ch < BN / C_COLS; ++ch)
          if (ch < nch) epi.store_acc_chunk(&tma_c, ch, nch, m0, n0, p.alpha, p.beta, a);
      } else {
        store_acc_groups<0>(cout, p, tm * BM + 64 * h + 16 * w + lane / 4, tn * BN, a, lane % 4);
      }
    };

    float acc[2][BN / 2];  // rows 0..63 and 64..127 of the tile (acc[1]: BM = 128)
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
        const int s = ring.wait_full(it + kb);
        ws_mma_stage<MI, BN, STAGE_BYTES>(acc, da0, db0, s, kb > 0);
        // C_LOAD: the first K block's wgmmas run while the leader loads the first half's first
        // two chunks of old C (after the turn: not against the other consumer's start).
        if (C_LOAD && kb == 0 && tm * BM < p.m)
          epi.load_first_chunks(&tma_c, tile_chunks(tn * BN), tm * BM, tn * BN);
        // Keep one batch in flight: once the previous one is done, its stage can be refilled.
        wgmma_wait<1>();
        if (kb > 0) release(prev);
        prev = s;
      }
      // The other consumer's turn (if this CTA has a next tile): its first wgmmas queue behind
      // this tile's last, while this consumer drains and stores.
      if (t + (int)gridDim.x < tiles) named_barrier_arrive(TURN + (1 - c), 256);
      wgmma_wait<0>();
      fence_accs<MI>(acc);
      release(prev);
      store_half(acc[0], 0, tm, tn);
      if (TWO_HALVES) store_half(acc[1], 1, tm, tn);
    }
    // Bulk stores still in flight must finish before the block's shared memory goes away.
    if (TMA_EPI && leader) tma_store_wait<0>();
  }
}
