// GEMM, warp-specialised persistent WGMMA + TMA (sm_90a), on the pipeline of
// common/ws_pipeline.cuh. 384 threads: warpgroup 0 is the producer (one thread issues the TMA
// loads of A and B into a ring of KILN_STAGES stages); warpgroups 1 and 2 are consumers that
// together compute a 128 x KILN_BN block tile, 64 rows each with wgmma.m64nBNk16 from
// 128B-swizzled shared tiles (common/gemm_ws.cuh), fp32 accumulators; or (KILN_BM = 64, small
// problems) one 64-row tile, each consumer every other K block, consumer 0 adding consumer 1's
// partial sums before the epilogue (ledger #19, #44). The grid is persistent: cluster b (one CTA,
// or KILN_CLUSTER = 2 CTAs along M sharing the B tile through TMA multicast) takes work units b,
// b + clusters, ... of the grouped order: whole cluster tiles, or with KILN_SPLITK = 1 split-K
// slices and stream-K pieces too (common/gemm_units.cuh). Epilogue: KILN_EPI = 1 or 2 through
// TMA-stored staging chunks (common/c_staging.cuh), under the next unit's K loop where
// KILN_EPI_DEFER allows; KILN_EPI = 0, a C TMA cannot address, staged in shared memory and stored
// by rows (common/c_rows.cuh). KILN_CPA = 1: operands TMA cannot address copied in place by the
// producer warpgroup (below). Edges: the tensor maps carry the true M/N/K, so TMA zero-fills what
// lies outside and drops stores outside C; the copies zero-fill, the row stores keep inside C.
#include "common/c_rows.cuh"
#include "common/c_staging.cuh"
#include "common/cp_async_tile.cuh"
#include "common/gemm_trace.cuh"
#include "common/gemm_units.cuh"
#include "common/grid_dep.cuh"
#include "common/ws_pipeline.cuh"

#if !defined(KILN_BM) || !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_CLUSTER) || !defined(KILN_EPI) || \
    !defined(KILN_EPI_DEFER) || !defined(KILN_SPLITK) || !defined(KILN_SMEM)
#error "KILN_BM, KILN_BN, KILN_STAGES, KILN_CLUSTER, KILN_EPI, KILN_EPI_DEFER, KILN_SPLITK and KILN_SMEM must be defined by the host"
#endif

#ifndef KILN_CPA
#define KILN_CPA 0
#endif
// KILN_C_T = 1 (swap-AB): the host gave the kernel C^T = B^T A^T (p.m = N, p.n = M, A and B
// exchanged), and the row-store epilogue writes the tile transposed into C (common/c_rows.cuh).
#ifndef KILN_C_T
#define KILN_C_T 0
#endif
constexpr int BM = KILN_BM, BN = KILN_BN, BK = WS_BK, STAGES = KILN_STAGES, CLUSTER = KILN_CLUSTER;
// KILN_SPLITK = 0: the variant for launches that split nothing (most), without the split-K and
// stream-K code; it ignores Extras.splits and sk_w and compiles in 25-37 % less time (ledger #91).
constexpr bool SPLIT_CODE = KILN_SPLITK;
constexpr bool KSPLIT = BM == 64;  // the two consumers split each tile's K blocks
// With an odd ring a stage alternates consumers, and one a lap ahead of the other's still-landing
// fill passes its parity wait at once (wrong results, then launch failures); 2 stages deadlock
// (ledger #33).
static_assert(!KSPLIT || (STAGES % 2 == 0 && STAGES >= 4), "64-row tiles need an even KILN_STAGES >= 4");
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = KILN_B_ROW ? (BN + 63) / 64 * BOX64_BYTES : BN * BK * 2;
constexpr u32 STAGE_BYTES = A_BYTES + B_BYTES;
static_assert(BM == 128 || (BM == 64 && BN <= 128 && CLUSTER == 1), "KILN_BM is 128, or 64 with KILN_BN <= 128 in single CTAs");
static_assert(CLUSTER == 1 || CLUSTER == 2, "KILN_CLUSTER is 1 or 2");
// Register split (128 x producer + 256 x consumer <= 168 x 384): the multicast producer needs a
// few more registers than 40.
constexpr int PRODUCER_REGS = CLUSTER > 1 ? 56 : 40, CONSUMER_REGS = CLUSTER > 1 ? 224 : 232;
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 168 * 384, "register pool overcommitted");
// 168, 224 (widths that make whole waves, ledger #71, #72), 320 (one exact wave at N = 5120,
// ledger #69) and 144 (swap-AB's: 281 rows of C in two tiles of 144) only in single 128-row CTAs.
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256 ||
                  ((BN == 144 || BN == 168 || BN == 224 || BN == 320) && CLUSTER == 1 && BM == 128),
              "KILN_BN is 64, 128, 192 or 256, or 144, 168, 224 or 320 in single 128-row CTAs");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
// KILN_CPA = 1: the producer warpgroup reads an operand TMA cannot address (a row stride or base
// off 16 bytes; decided at run time from GemmArgs) in place, all 128 threads copying it into the
// stage with cp.async (common/cp_async_tile.cuh), each arriving on the stage's full barrier when
// its copies land (cp.async.mbarrier.arrive.noinc; 2-byte copies are plain stores and a plain
// arrival); the other operand still comes by TMA. Single CTAs only (a pair's B is multicast).
constexpr bool CPA = KILN_CPA;
static_assert(!CPA || CLUSTER == 1, "KILN_CPA runs in single CTAs");
// Stream-K only in single 128-row CTAs: a pair's CTAs would each need the other's range, and
// 64-row tiles already split K between their consumers.
constexpr bool SK_OK = CLUSTER == 1 && !KSPLIT && SPLIT_CODE;
// Single CTAs with tiles at least 128 wide load their first stage before the block's sync
// (ledger #37: up to -2.7 %). Not pairs, whose multicast writes into the peer before its
// barriers exist, nor the 64-wide tiles, which ran 1-6 % slower with it (not understood).
constexpr bool EARLY = CLUSTER == 1 && !KSPLIT && BN >= 128 && !CPA;
// The TMA-store epilogue (KILN_EPI 1, 2) and the register one (0) are variants of their own:
// compiled side by side they more than doubled the code and spilled the 256-wide tile's consumers
// (ledger #24).
using Epi = TmaStoreEpilogue<KILN_EPI, out_t>;
constexpr bool TMA_EPI = KILN_EPI != 0, C_LOAD = KILN_EPI == 2;
constexpr int C_COLS = Epi::C_COLS, C_NCH = BN / C_COLS;
// TMA stores whole chunks: the last C_TAIL columns of the 168- and 224-wide tiles go out from
// registers (these widths have the TMA-store epilogue only; the host runs another width else).
constexpr int C_TAIL = BN % C_COLS;
static_assert(C_TAIL == 0 || TMA_EPI || BN == 144, "128 x 168 and 128 x 224 tiles have the TMA-store epilogue only");
static_assert(!KILN_C_T || KILN_EPI == 0, "C stored transposed (KILN_C_T) by the row-store epilogue only");
// KILN_EPI_DEFER: the last DCH chunks of a tile wait packed to 16-bit pairs in registers and go
// out one per K block of the next unit, after its wgmmas are issued (ledger #22): all chunks in
// single CTAs up to 256 wide, two of the 320-wide tile's five, the last one in pairs (whose 224
// consumer registers spill with more beside the accumulators; ledger #25, #62). Not f32 C (twice
// the registers), nor C loaded.
constexpr bool DEFER = TMA_EPI && KILN_EPI_DEFER && !KSPLIT && KILN_OUT != 2 && !C_LOAD;
constexpr int DCH = !DEFER ? 0 : CLUSTER > 1 ? 1 : BN > 256 ? 2 : BN / 64, DFIRST = C_NCH - DCH;
// Shared memory after the ring: two staging chunks per consumer that runs an epilogue (KSPLIT:
// consumer 0 only; the row-store epilogue uses the first); KSPLIT: consumer 1's 64 x BN fp32
// partial tile, each thread's BN / 2 values as float4s (float4 i of thread t at 16 (128 i + t):
// conflict-free); then the ring's barriers, KSPLIT's hand-off full and free, and C_LOAD's one per
// staging buffer.
constexpr u32 C_BYTES = (KSPLIT ? 1 : 2) * 2 * Epi::CHUNK_BYTES;
// The row-store epilogue by 16-byte windows (16-bit C, beta = 0): a warp stages 8 rows of the
// tile as 16-bit pairs, 4 warps x 8 x 2BN bytes inside the consumer's two staging buffers.
constexpr bool ROWS_V = !TMA_EPI && !KILN_C_T && KILN_OUT != 2 && BN % 64 == 0;
static_assert(!ROWS_V || 4 * 8 * 2 * BN <= 2 * Epi::CHUNK_BYTES, "a consumer's staging holds its warps' 8 rows");
constexpr u32 X_BYTES = KSPLIT ? 128 * (BN / 2) * 4 : 0, X_BARS = KSPLIT ? 2 : 0, C_BARS = C_LOAD ? 4 : 0;
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + C_BYTES + X_BYTES + (2 * STAGES + X_BARS + C_BARS) * 8,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");

extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_tma_ws(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b,
                      const __grid_constant__ TmaMap tma_c, const GemmArgs p, const Extras ex) {
  __shared__ u32 sk_range[2];  // stream-K: this CTA's K blocks [sk_range[0], sk_range[1])
  extern __shared__ unsigned char smem_raw[];
  if (TRACE && threadIdx.x == 0) trace_stamp(ex, T_ENTRY);
  // The 128B swizzle pattern follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = smem_align1024(smem_raw);
  const u32 cstage = base + STAGES * STAGE_BYTES;  // C staging buffers, 1024-aligned
  const u32 xbuf = cstage + C_BYTES;                // KSPLIT hand-off of consumer 1's partials
  const MbarRing<STAGES> ring{xbuf + X_BYTES};
  const u32 xfull = ring.bars + 16u * STAGES, xfree = xfull + 8u;  // KSPLIT hand-off
  const u32 cbars = ring.bars + 8u * (2 * STAGES + X_BARS);         // C_LOAD: staging buffer b's at 8b

  // Launched as the dependent of a copy kiln made of an operand or C (`transpose_rows`,
  // `pack_rows`), the CTAs get here while the copy runs and wait for it; else a no-op.
  grid_dependency_wait();
  const int wg = warpgroup_index();
  const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
  // Bytes a stage's loads deliver: a K-major A box may be shorter than the tile (a_box_rows).
  const u32 a_tx = KILN_A_ROW ? a_box_rows<BM>(p.m) * BK * 2 : A_BYTES, stage_tx = a_tx + B_BYTES;
  // The producer's loads of ring iteration `it`: K block kb of the block tile at (m0, n0).
  auto load_stage = [&](u32 it, int kb, int m0, int n0) {
    ws_fill(ring, it, stage_tx, [&](int s, u32 bar) {
      const u32 sa = base + s * STAGE_BYTES;
      ws_load_ab<BM, BN, CLUSTER>(sa, sa + A_BYTES, bar, &tma_a, &tma_b, m0, n0, kb * BK, rank);
    });
    if (TRACE && it == 0) trace_stamp(ex, T_FIRST_LOADS);
  };
  u32 early = 0;  // ring iterations thread 0 (the producer) loaded before the block's sync
  if (threadIdx.x == 0) {
    // The maps' descriptors are fetched while the barriers are set up.
    if (EARLY) {
      tma_prefetch(&tma_a);
      tma_prefetch(&tma_b);
    }
    ring.init((KSPLIT ? 4 : 8) * CLUSTER, CPA ? CpOperands(p).full_count() : 1);
    if (KSPLIT) {
      mbar_init(xfull, 128);  // consumer 1's threads, their partials written
      mbar_init(xfree, 128);  // consumer 0's threads, the partials read
    }
    if (C_LOAD)
      for (int b = 0; b < 4; ++b) mbar_init(cbars + 8u * b, 1);  // the loading leader's arrival
    mbar_fence_init();
    if (SK_OK && ex.sk_w != 0) {
      sk_range[0] = sk_start(blockIdx.x, ex.sk_w, gridDim.x);
      sk_range[1] = sk_start(blockIdx.x + 1, ex.sk_w, gridDim.x);
    }
    // EARLY: the first unit's first stage is loaded now, its latency running under the block's
    // sync and register reallocation. The barriers are this thread's own and initialised; nobody
    // reads the stage before the sync. (The first unit is worked out here on its own, as
    // GemmUnits does for single CTAs, so that the other configs' code stays as it was.)
    if (EARLY) {
      const int tn_count = (p.n + BN - 1) / BN, ctiles0 = ((p.m + BM - 1) / BM) * tn_count;
      const int splits0 = SK_OK && ex.sk_w != 0 ? 0 : SPLIT_CODE ? ex.splits : 1;
      const int from0 = splits0 != 1 ? min(ex.split_from, ctiles0) : ctiles0;
      if ((int)blockIdx.x < from0 + (ctiles0 - from0) * splits0) {
        int t, sp, ns, kb0, kb1, ctm, tn;
        unit_tile(blockIdx.x, from0, splits0, t, sp, ns);
        split_range(sp, ns, (p.k + BK - 1) / BK, kb0, kb1);
        tile_coords(t, (p.m + BM - 1) / BM, tn_count, ctm, tn);
        if (kb1 > kb0) load_stage(early++, kb0, ctm * BM, tn * BN);
      }
    }
  }
  if (CLUSTER > 1) cluster_sync();  // peers' barriers exist before any multicast or remote arrive
  else __syncthreads();
  if (TRACE && threadIdx.x == 0) trace_stamp(ex, T_SETUP);

  // The cluster walks cluster tiles of CLUSTER x 1 block tiles; its CTA `rank` takes row `rank`.
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER;
  const GemmUnits<CLUSTER, SK_OK, !KSPLIT && SPLIT_CODE> units(sk_range, ex, ctiles_m * tiles_n, (p.k + BK - 1) / BK);
  auto unit_of = [&](int tok, int& t, int& kb0, int& kb1, int& sp, int& ns) { units.unit_of(tok, t, kb0, kb1, sp, ns); };
  auto next_unit = [&](int& u, int& tok, int& nk) { return units.next(u, tok, nk); };

  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    // The producer: every unit's K blocks, in the order the consumers take them.
    if (CPA) {
      // (the whole warpgroup: cp.async copies of the operands TMA cannot address)
      const CpOperands cp(p);
      const int t = threadIdx.x;
      if (t == 0) {
        if (!cp.a()) tma_prefetch(&tma_a);
        if (!cp.b()) tma_prefetch(&tma_b);
      }
      const u32 tx = (cp.a() ? 0u : a_tx) + (cp.b() ? 0u : B_BYTES);
      u32 it = 0;
      int u = units.cid, tok, nk;
      while (next_unit(u, tok, nk)) {
        int tt, sp, ns, kb0, kb1, ctm, tn;
        unit_of(tok, tt, kb0, kb1, sp, ns);
        tile_coords(tt, ctiles_m, tiles_n, ctm, tn);
        const int m0 = ctm * BM, n0 = tn * BN;
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          const int s = ring.acquire(it);
          const u32 sa = base + s * STAGE_BYTES;
          ws_cp_load_ab<BM, BN>(sa, sa + A_BYTES, ring.full(s), &tma_a, &tma_b, p, cp, m0, n0, kb * BK, t, tx);
        }
      }
      cp_async_wait<0>();  // nothing in flight when the thread exits
    } else if (threadIdx.x == 0) {
      if (!EARLY) {
        tma_prefetch(&tma_a);
        tma_prefetch(&tma_b);
      }
      u32 it = 0;
      int u = units.cid, tok, nk;
      while (next_unit(u, tok, nk)) {
        int t, sp, ns, kb0, kb1, ctm, tn;
        unit_of(tok, t, kb0, kb1, sp, ns);
        tile_coords(t, ctiles_m, tiles_n, ctm, tn);
        const int m0 = (ctm * CLUSTER + rank) * BM, n0 = tn * BN;
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          if (it >= early) load_stage(it, kb, m0, n0);
        }
      }
      if (TRACE) trace_stamp(ex, T_LAST_LOADS);
    }
  } else {
    warpgroup_reg_inc<CONSUMER_REGS>();
    const int c = wg - 1;  // this consumer's rows: 64c .. 64c + 63 of the block tile
    const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    out_t* cout = static_cast<out_t*>(p.c);
    // Frees stage s: one arrival per warp, on every CTA that multicasts into it.
    auto release = [&](int s) { ring.template release<CLUSTER>(s, lane); };
    Epi epi(cstage, cbars, c, w, lane);
    // The chunks of the tile at column n0 that hold columns of C.
    auto tile_chunks = [&](int n0) { return min(C_NCH, (p.n - n0 + C_COLS - 1) / C_COLS); };
    const bool leader = (threadIdx.x % 128) == 0;
    // DEFER: the packed chunks DFIRST.. of the tile waiting to go out (pk[16 (ch - DFIRST) + i]),
    // its place, its chunk count (0 when nothing waits) and the next chunk to store.
    u32 pk[DEFER ? 16 * DCH : 1];
    int pend_m0 = 0, pend_n0 = 0, pend_chunks = 0, pend_next = 0;
    auto pending = [&]() { return pend_next < pend_chunks; };
    auto store_pending_chunk = [&]() {
      if constexpr (DEFER) {
#pragma unroll
        for (int ch = DFIRST; ch < C_NCH; ++ch)  // pk indexed statically
          if (ch == pend_next)
            epi.store_chunk(&tma_c, ch, pend_chunks, pend_m0, pend_n0, p.beta,
                            [&](int J, int x) { return pk[4 * (J - 4 * DFIRST) + x]; });
      }
      ++pend_next;
    };
    float accs[1][BN / 2];
    float(&acc)[BN / 2] = accs[0];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

    // KSPLIT: consumer 1 hands its partial sums to consumer 0 through two mbarriers (xfull, xfree),
    // not named barriers, so that compute-sanitizer's racecheck sees the order (ledger #41, #44).
    // Hand-off h (the consumers' h-th unit) completes phase h of xfull; the buffer is free for
    // hand-off h once phase h - 1 of xfree has completed (none for h = 0).
    u32 handoff = 0;
    // Stage 0's descriptors. Rows 64c.. of A: the K-major tile puts them 64 rows (8 KB) in; the
    // MN-major tile keeps them in box c, also 8 KB in. KSPLIT: both consumers read the tile's
    // only 64 rows. A stage and a k step only move the start address (wgmma_desc_add).
    const u32 sa0 = base + (KSPLIT ? 0 : c * BOX64_BYTES), sb0 = base + A_BYTES;
    const u64 da0 = TA ? wgmma_desc_sw128(sa0, BOX64_BYTES, 1024) : wgmma_desc_sw128(sa0, 16, 1024);
    const u64 db0 = TB ? wgmma_desc_sw128(sb0, BOX64_BYTES, 1024) : wgmma_desc_sw128(sb0, 16, 1024);
    u32 it = 0;
    int u = units.cid, tok, nk;  // nk: this unit's K blocks (the count; the producer picks which)
    while (next_unit(u, tok, nk)) {
      auto mma = [&](int s, int kb, bool acc_live, bool first) {
        // Copies by cp.async (and plain stores) are generic-proxy writes: made visible to wgmma's
        // async-proxy reads after the full barrier's wait.
        if (CPA) fence_proxy_async_shared();
        if (TRACE && c == 0 && (threadIdx.x % 128) == 0 && it == 0) trace_stamp(ex, T_C0_FIRST_FULL);
        ws_mma_stage<1, BN, STAGE_BYTES>(accs, da0, db0, s, acc_live);
        if (C_LOAD && leader && (!KSPLIT || c == 0) && first) {
          int t, kb0, kb1, sp, ns, ctm, tn;
          unit_of(tok, t, kb0, kb1, sp, ns);
          tile_coords(t, ctiles_m, tiles_n, ctm, tn);
          const int m0 = (ctm * CLUSTER + rank) * BM + 64 * c, n0 = tn * BN;
          if (ns == 1 && m0 < p.m) epi.load_first_chunks(&tma_c, tile_chunks(n0), m0, n0);
        }
        if (DEFER && pending()) store_pending_chunk();
      };
      const int prev = ws_kloop<KSPLIT ? 2 : 1>(ring, it, nk, c, mma, release);
      wgmma_wait<0>();
      if (TRACE && c == 0 && (threadIdx.x % 128) == 0) trace_stamp(ex, T_C0_MAIN_END);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
      if (!KSPLIT || prev >= 0) release(prev);
      if (DEFER) {  // pk is about to be reused: what a short unit left goes out now
        while (pending()) store_pending_chunk();
      }
      if (KSPLIT) {
        const int ct = threadIdx.x % 128;
        if (prev < 0) {  // a unit of one K block leaves consumer 1 none
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        }
        if (c == 1) {
          if (handoff > 0) mbar_wait(xfree, (handoff - 1) & 1);
#pragma unroll
          for (int i4 = 0; i4 < BN / 8; ++i4)
            st_shared_f4(xbuf + 16u * (128 * i4 + ct), acc[4 * i4], acc[4 * i4 + 1], acc[4 * i4 + 2], acc[4 * i4 + 3]);
          mbar_arrive(xfull);
          ++handoff;
          continue;
        }
        mbar_wait(xfull, handoff & 1);
#pragma unroll
        for (int i4 = 0; i4 < BN / 8; ++i4) {
          float v[4];
          ld_shared_f4(xbuf + 16u * (128 * i4 + ct), v[0], v[1], v[2], v[3]);
#pragma unroll
          for (int x = 0; x < 4; ++x) acc[4 * i4 + x] += v[x];
        }
        mbar_arrive(xfree);  // the buffer is free for consumer 1's next unit
        ++handoff;
      }

      int t, sp, ns, ctm, tn;
      {
        int kb0, kb1;
        unit_of(tok, t, kb0, kb1, sp, ns);
      }
      tile_coords(t, ctiles_m, tiles_n, ctm, tn);
      const int tm = ctm * CLUSTER + rank;
      if (ns > 1 && !units.template reduce<BM * BN>(ex, (t - units.split_from) * CLUSTER + rank, sp, ns, acc)) continue;

      // Epilogue: register i holds row 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1).
      if constexpr (TMA_EPI) {
        const int m0 = tm * BM + 64 * c, n0 = tn * BN;
        // Chunks before DFIRST go out now (all of them without DEFER), the rest wait in pk.
        if (m0 < p.m) {
          const int nch = tile_chunks(n0);
          if (ns > 1) epi.load_first_chunks(&tma_c, nch, m0, n0);  // a whole tile's: under its first K block
#pragma unroll
          for (int ch = 0; ch < DFIRST; ++ch)
            if (ch < nch)
              epi.store_acc_chunk(&tma_c, ch, nch, m0, n0, p.alpha, p.beta, acc);
          if constexpr (DEFER) pack2_scaled<out_t>(pk, acc, 32 * DFIRST, p.alpha);
          pend_m0 = m0;
          pend_n0 = n0;
          pend_chunks = DEFER ? nch : 0;
          pend_next = DFIRST;
        }
        // The last C_TAIL columns (8-column groups C_NCH * C_COLS / 8 ..), as the register
        // epilogue stores them.
        if constexpr (C_TAIL != 0)
          store_acc_groups<C_NCH * C_COLS / 8>(cout, p, m0 + 16 * w + lane / 4, n0, acc, lane % 4);
      } else {
        // Through this consumer's first staging buffer, by rows of C or (KILN_C_T) of C^T
        // (common/c_rows.cuh).
        const int m0 = tm * BM + 64 * c;
        const u32 buf = cstage + 2 * c * Epi::CHUNK_BYTES;
        if (m0 < p.m) {
          if constexpr (KILN_C_T) {
            store_cols_staged(cout, p, buf, m0, tn * BN, acc, w, lane);
          } else if constexpr (ROWS_V) {
            // (its 8 x 2BN bytes a warp fill both of the consumer's staging buffers at BN = 256)
            if (ex.rows_v != 0 && p.beta == 0.0f) store_rows_vec16(cout, p, buf, m0, tn * BN, acc, w, lane);
            else store_rows_staged(cout, p, buf, m0, tn * BN, acc, w, lane);
          } else {
            store_rows_staged(cout, p, buf, m0, tn * BN, acc, w, lane);
          }
        }
      }
    }
    if (DEFER) {  // the last tile's chunks
      while (pending()) store_pending_chunk();
    }
  }
  // Bulk stores still in flight must finish before the block's shared memory goes away.
  if (TMA_EPI && wg > 0 && (threadIdx.x % 128) == 0) tma_store_wait<0>();
  if (TRACE && wg > 0 && (threadIdx.x % 128) == 0) trace_stamp(ex, wg == 1 ? T_C0_END : T_C1_END);
  // No CTA may leave while a peer can still arrive on its barriers.
  if (CLUSTER > 1) {
    __syncwarp();
    cluster_sync();
  }
}
