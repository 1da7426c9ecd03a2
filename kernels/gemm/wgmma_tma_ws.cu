// GEMM, warp-specialised persistent WGMMA + TMA (sm_90a). 384 threads: warpgroup 0 is the
// producer (40 registers, 56 with clusters; one thread issues TMA loads of A and B tiles into a
// ring of KILN_STAGES shared buffers guarded by full/empty mbarriers); warpgroups 1 and 2 are
// consumers (232 registers, 224 with clusters) that together compute a 128 x KILN_BN block tile
// (BN = 64, 128, 168, 192, 224, 256 or 320; 192 or 256 in clusters), each 64 rows with wgmma.m64nBNk16 from
// 128B-swizzled shared tiles, fp32 accumulators; or (KILN_BM = 64, small problems) one 64-row
// tile, each consumer every other K block, consumer 0 adding consumer 1's partial sums before
// the epilogue. The grid is persistent: cluster b (one CTA, or KILN_CLUSTER = 2 CTAs along M
// that share the B tile through TMA multicast) takes work units b, b + clusters, ... in a
// grouped order (KILN_GROUP_M tile-rows at a time, for L2 reuse). A unit is a cluster tile. In
// the variants with KILN_SPLITK = 1 it may instead be, with split-K (Extras.splits > 1), one K
// slice of a tile, reduced through an fp32 workspace by the slice that finishes last
// (Extras.split_from > 0 splits only the tiles from there on: the last, partial wave, whose idle
// SMs take the other slices); or, with stream-K (Extras.sk_w, opt-in), a piece of one
// contiguous range of K blocks per CTA over the last waves' tiles.
// Epilogue (KILN_EPI = 1, beta 0 or 1): 16-bit C through stmatrix, f32 C through st.shared.v2,
// into 128B-swizzled staging chunks of 64 rows x 128 bytes stored by TMA, or added to C by TMA's
// reduce-add where beta == 1 (bulk groups drain while the next chunk / tile runs); KILN_EPI = 0:
// from registers (shuffle transpose, 16-byte stores, C read when beta != 0).
// Edges: the tensor maps carry the true M/N/K, so TMA zero-fills what lies outside and drops
// stores outside C; the register epilogue stores only in-range elements.
//
// Shared tiles (each 1024-byte aligned, rows of 128 bytes = 64 elements, 128B swizzle):
//   K-major operand (A row-major, B column-major): one box {64 k, rows}, row r = M/N index
//     (B: one box per CTA of the cluster, each BN / KILN_CLUSTER rows).
//   MN-major operand: boxes {64 m|n, 64 k} of 8 KB, one per 64 elements of M/N, row r = k (a B
//     tile 168 or 224 wide loads whole boxes: 192 or 256 columns, the last ones unused).
#include "common/c_staging.cuh"
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"
#include "common/gemm_ws.cuh"
#include "common/grid_dep.cuh"
#include "common/mbarrier.cuh"
#include "common/mem_ops.cuh"
#include "common/split_k.cuh"
#include "common/quad_transpose.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"
#include "common/wgmma_ss.cuh"

#ifndef KILN_BN
#define KILN_BN 256
#endif
#ifndef KILN_STAGES
#define KILN_STAGES 4
#endif
#ifndef KILN_CLUSTER
#define KILN_CLUSTER 1
#endif
#ifndef KILN_BM
#define KILN_BM 128
#endif
#ifndef KILN_EPI_DEFER
#define KILN_EPI_DEFER 0
#endif
// KILN_SPLITK = 0: the variant for launches that split nothing (Extras.splits 1, sk_w 0), which
// most are: without the split-K and stream-K code (work-unit decoding, the partials' stores,
// arrival and adds) it compiles in 25-37 % less time (ledger #91). Such a variant ignores
// splits and sk_w, and runs every tile whole.
#ifndef KILN_SPLITK
#define KILN_SPLITK 1
#endif

constexpr int BM = KILN_BM, BN = KILN_BN, BK = 64, STAGES = KILN_STAGES;
// 64-row tiles (small problems: twice the tiles of 128-row ones) keep both consumers on one
// 64 x BN tile by splitting its K blocks: consumer c takes the stages of ring iterations with
// parity c, consumer 1 hands its partial sums to consumer 0 through shared memory (X_BYTES) and
// goes on to its next K blocks while consumer 0 adds them and runs the epilogue of the whole tile.
constexpr bool KSPLIT = BM == 64;
// KSPLIT needs an even ring of at least 4: then stage s always serves the consumer of parity
// s % 2, which waits on it only after consuming its own previous fill (2 stages: it would hold
// that one while waiting for its refill, a deadlock). With an odd ring a stage alternates
// consumers, and one that runs a lap ahead of the other's still-landing fill (TMA completes out
// of order) waits on the parity of the phase before: mbarrier try_wait passes at once, and the
// consumer reads a half-written stage (KILN_STAGES=3: wrong results, then launch failures).
static_assert(!KSPLIT || (STAGES % 2 == 0 && STAGES >= 4), "64-row tiles need an even KILN_STAGES >= 4");
constexpr u32 BOX64_BYTES = 64 * BK * 2;  // one 64 x 64 box: 64 rows of 128 bytes
constexpr int B_BOXES_MN = (BN + 63) / 64;  // MN-major B boxes of a tile (whole ones)
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = KILN_B_ROW ? B_BOXES_MN * BOX64_BYTES : BN * BK * 2;
constexpr u32 STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int TA = KILN_A_ROW ? 0 : 1;    // wgmma transpose flags: 1 = MN-major
constexpr int TB = KILN_B_ROW ? 1 : 0;
// Cluster of CLUSTER CTAs along M sharing one B tile: each loads BN / CLUSTER of its rows (N)
// and multicasts them to all; each loads its own A tile.
constexpr int CLUSTER = KILN_CLUSTER, B_PART = BN / CLUSTER;
// A K-major B share is one box of B_PART rows, placed B_PART rows (128 bytes each) into the
// tile: whole 8-row swizzle atoms keep it on the 1024-byte pattern.
static_assert(B_PART % 8 == 0, "each CTA's share of the B tile must be whole 8-row swizzle atoms");
static_assert(BM == 128 || (BM == 64 && BN <= 128 && CLUSTER == 1), "KILN_BM is 128, or 64 with KILN_BN <= 128 in single CTAs");
static_assert(CLUSTER == 1 || CLUSTER == 2, "KILN_CLUSTER is 1 or 2");
// Register split (setmaxnreg; 128 x producer + 256 x consumer <= 168 x 384): the multicast producer
// needs a few more registers than 40.
constexpr int PRODUCER_REGS = CLUSTER > 1 ? 56 : 40, CONSUMER_REGS = CLUSTER > 1 ? 224 : 232;
// The pool is what the launch allocates, 168 registers (__launch_bounds__(384, 1)) x 384 threads,
// not the 64 K register file: a split over it makes setmaxnreg.inc wait forever.
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 168 * 384, "register pool overcommitted");
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256 ||
                  ((BN == 168 || BN == 224 || BN == 320) && CLUSTER == 1 && BM == 128),
              "KILN_BN is 64, 128, 192 or 256, or 168, 224 or 320 in single 128-row CTAs");
// BN = 320 (one exact wave of 128 x 320 tiles at 1024 x 5120): wider than one wgmma (n <= 256)
// and than one TMA box (<= 256 rows), so each k step is an n192 and an n128 wgmma, the second's
// accumulators from register 96 on (column 192 in the m64n320 fragment layout), and a K-major B
// is two boxes of 160 rows.
constexpr bool WIDE = BN > 256;
constexpr int B_BOXES_K = WIDE ? 2 : 1;  // K-major B boxes per CTA, B_PART / B_BOXES_K rows each
// The second wgmma's width. The discarded branch of an `if constexpr` outside a template is
// still checked, so narrower tiles give it a valid dummy width.
constexpr int N_HI = WIDE ? BN - 192 : 16;
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
// Stream-K (Extras.sk_w) only in single 128-row CTAs: a pair's CTAs would each need the other's
// range, and 64-row tiles already split K between their consumers.
constexpr bool SK_OK = CLUSTER == 1 && !KSPLIT && KILN_SPLITK;
// Single CTAs with 128 x 128 or 128 x 256 tiles load their first stage before the block's sync
// (H100, session 11: 2048^3 -2.7 %, 512x4096x4096 -1.7 %, 4096^3 -0.8 %). Not pairs, whose
// multicast writes into the peer before its barriers exist, nor the 64-wide tiles, which ran
// 1-6 % slower with it (512^3, 1024^3, 128x4096x4096; not understood).
constexpr bool EARLY = CLUSTER == 1 && !KSPLIT && BN >= 128;
// TMA-store epilogue: each consumer writes its 64 x BN accumulator C_COLS columns at a time
// (one 128-byte row each: 64 16-bit or 32 f32 elements) into one of two 8 KB staging buffers
// (stmatrix, or st.shared.v2 for f32; 128B-swizzled rows), from which one thread stores it with
// TMA while the next chunk (or the next tile's mainloop) goes on (beta == 1: added to C by TMA's
// reduce-add). KILN_EPI = 2 (beta other than 0 and 1): the same, but each chunk's old C is first
// loaded by TMA into its staging buffer (two chunks ahead), and the staging blends
// alpha * acc + beta * C. C that TMA cannot address uses the register epilogue, a variant of its
// own (KILN_EPI = 0): compiled side by side, the two epilogues more than doubled the code and
// spilled the 256-wide tile's consumers.
#ifndef KILN_EPI
#define KILN_EPI 1
#endif
constexpr bool TMA_EPI = KILN_EPI != 0, C_LOAD = KILN_EPI == 2;
constexpr int C_COLS = KILN_OUT == 2 ? 32 : 64, C_NCH = BN / C_COLS;
constexpr u32 C_CHUNK_BYTES = 64 * 128;
// BN = 168 or 224: widths that make whole waves where multiples of 64 do not (1024 x 11008:
// 528 tiles of 128 x 168, four waves on 132 SMs; 1024 x 3584: 128 tiles of 128 x 224). TMA stores
// whole chunks, so the last C_TAIL columns (16-bit: 40 or 32; f32: 8 of 168) go out from
// registers; these widths are compiled with the TMA-store epilogue only (the host runs another
// width otherwise).
constexpr int C_TAIL = BN % C_COLS;
static_assert(C_TAIL == 0 || TMA_EPI, "128 x 168 and 128 x 224 tiles have the TMA-store epilogue only");
// KILN_EPI_DEFER: the TMA-store epilogue packs the tile to 16-bit pairs in registers and stages /
// stores one 64-column chunk per K block of the next unit, after that K block's wgmmas are issued,
// so the tensor cores work while the chunks go out (the chunks left over when a unit is too short
// go out after its mainloop, and after the last unit). Not f32 C: a deferred f32 chunk would
// keep its values unpacked, twice the registers of a 16-bit one.
constexpr bool DEFER = TMA_EPI && KILN_EPI_DEFER && !KSPLIT && KILN_OUT != 2 && !C_LOAD;
// Chunks deferred: all of them in single CTAs up to 256 wide, two of the 320-wide tile's five
// (160 accumulators + 32 packed registers); only the last in pairs, whose 224 consumer
// registers spill with two or more packed chunks beside the accumulators (their multicast
// producer needs more than 40 registers, so 232 is not on offer): the first chunks go out at
// once, as without DEFER.
constexpr int DCH = !DEFER ? 0 : CLUSTER > 1 ? 1 : WIDE ? 2 : BN / 64, DFIRST = C_NCH - DCH;
// Two staging chunks per consumer that runs an epilogue (KSPLIT: consumer 0 only).
constexpr u32 C_BYTES = TMA_EPI ? (KSPLIT ? 1 : 2) * 2 * C_CHUNK_BYTES : 0;
// KSPLIT: consumer 1's 64 x BN fp32 partial tile, each thread's BN / 2 values as float4s
// (float4 i of thread t at 16 (128 i + t): conflict-free).
constexpr u32 X_BYTES = KSPLIT ? 128 * (BN / 2) * 4 : 0;
// KSPLIT: two more mbarriers after the ring's, the hand-off buffer's full and free.
constexpr u32 X_BARS = KSPLIT ? 2 : 0;
// C_LOAD: one mbarrier per staging buffer (two per consumer), after those.
constexpr u32 C_BARS = C_LOAD ? 4 : 0;
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + C_BYTES + X_BYTES + (2 * STAGES + X_BARS + C_BARS) * 8,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");

// KILN_TRACE = 1: an instrumented variant for `kiln profile --timeline` (never dispatched). The
// launch is unsplit and ws points at TRACE_EVENTS (globaltimer ns, SM clock) pairs per CTA,
// u64[grid][2][TRACE_EVENTS], each event stamped by the one thread that sees it (the host lists
// them: `TRACE_EVENTS` in src/ops/gemm/wgmma_tma_ws.rs). A CTA of several units keeps the
// last unit's mainloop end.
#ifndef KILN_TRACE
#define KILN_TRACE 0
#endif
enum TraceEvent { T_ENTRY, T_SETUP, T_FIRST_LOADS, T_LAST_LOADS, T_C0_FIRST_FULL, T_C0_MAIN_END, T_C0_END, T_C1_END, TRACE_EVENTS };
__device__ __forceinline__ void trace_stamp(const Extras& ex, int e) {
  if (KILN_TRACE) {
    u64 g, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    u64* t = reinterpret_cast<u64*>(ex.ws) + (size_t)blockIdx.x * 2 * TRACE_EVENTS;
    t[e] = g;
    t[TRACE_EVENTS + e] = c;
  }
}

// Stream-K: the first of w K blocks that CTA g of G takes (32-bit: the host keeps w * G under
// 2^31).
__device__ __forceinline__ u32 sk_start(u32 g, u32 w, u32 G) { return g * w / G; }

// Stream-K piece at position pos of a range ending at end: tile t, K blocks [kb0, kb1). Every
// range is at least a tile long (the host gives stream-K at least one tile per CTA), so a tile
// has at most two contributors: a piece that is not the whole tile is its head (slice 0, the
// range ends in it) or its tail (slice 1, the next range starts in it).
__device__ __forceinline__ void sk_piece(u32 pos, u32 end, int split_from, int kblocks, int& t, int& kb0, int& kb1,
                                         int& sp, int& ns) {
  const u32 tr = pos / (u32)kblocks, tile0 = tr * (u32)kblocks;
  t = split_from + (int)tr;
  kb0 = (int)(pos - tile0);
  kb1 = (int)min((u32)kblocks, pos - tile0 + (end - pos));
  ns = kb1 - kb0 < kblocks ? 2 : 1;
  sp = kb0 == 0 ? 0 : 1;
}

extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_tma_ws(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b,
                      const __grid_constant__ TmaMap tma_c, const GemmArgs p, const Extras ex) {
  __shared__ u32 sk_range[2];  // stream-K: this CTA's K blocks [sk_range[0], sk_range[1])
  extern __shared__ unsigned char smem_raw[];
  if (KILN_TRACE && threadIdx.x == 0) trace_stamp(ex, T_ENTRY);
  // The 128B swizzle pattern follows absolute address bits: tiles must start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 cstage = base + STAGES * STAGE_BYTES;  // C staging buffers (TMA_EPI), 1024-aligned
  const u32 xbuf = cstage + C_BYTES;                // KSPLIT hand-off of consumer 1's partials
  const u32 bars = xbuf + X_BYTES;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
  const u32 xfull = bars + 16u * STAGES, xfree = xfull + 8u;  // KSPLIT hand-off
  const u32 cbars = bars + 8u * (2 * STAGES + X_BARS);         // C_LOAD: staging buffer b's at 8b

  // Launched as the dependent of a copy kiln made of an operand or C (`transpose_rows`,
  // `pack_rows`), the CTAs get here while the copy runs and wait for it; else a no-op.
  grid_dependency_wait();
  const int wg = warpgroup_index();
  const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
  // Bytes a stage's loads deliver: a K-major A box may be shorter than the tile (a_box_rows).
  const u32 stage_tx = (KILN_A_ROW ? a_box_rows<BM>(p.m) * BK * 2 : A_BYTES) + B_BYTES;
  // The producer's loads of ring iteration `it`: K block kb of the block tile at (m0, n0).
  auto load_stage = [&](u32 it, int kb, int m0, int n0) {
    const int s = it % STAGES;
    // Fresh barriers: parity 1 passes. With a cluster, this also waits for the peers'
    // consumers, whose stage s this CTA's multicast overwrites.
    mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);
    // Full boxes count even where zero-filled; with a cluster, the peers' parts of B
    // complete bytes here too.
    mbar_arrive_expect_tx(full(s), stage_tx);
    const u32 sa = base + s * STAGE_BYTES, sb = sa + A_BYTES;
    const int k0 = kb * BK;
#if KILN_A_ROW
    tma_load_2d(sa, &tma_a, full(s), k0, m0);
#else
#pragma unroll
    for (int j = 0; j < BM / 64; ++j) tma_load_2d(sa + j * BOX64_BYTES, &tma_a, full(s), m0 + 64 * j, k0);
#endif
#if KILN_B_ROW
    if constexpr (CLUSTER == 1 || B_PART % 64 == 0) {
#pragma unroll
      for (int jj = 0; jj < (CLUSTER == 1 ? B_BOXES_MN : B_PART / 64); ++jj) {
        const int j = rank * (B_PART / 64) + jj;  // this CTA's boxes of the B tile
        if (CLUSTER > 1) tma_load_2d_multicast(sb + j * BOX64_BYTES, &tma_b, full(s), n0 + 64 * j, k0, (1 << CLUSTER) - 1);
        else tma_load_2d(sb + j * BOX64_BYTES, &tma_b, full(s), n0 + 64 * j, k0);
      }
    } else {
      // A share that is not whole boxes (128 x 192 in pairs: three boxes): the CTAs take
      // alternate boxes.
#pragma unroll
      for (int j = 0; j < BN / 64; ++j)
        if (j % CLUSTER == rank) tma_load_2d_multicast(sb + j * BOX64_BYTES, &tma_b, full(s), n0 + 64 * j, k0, (1 << CLUSTER) - 1);
    }
#else
    const u32 dst = sb + rank * B_PART * 128;  // rows of 128 bytes
    if (CLUSTER > 1) tma_load_2d_multicast(dst, &tma_b, full(s), k0, n0 + rank * B_PART, (1 << CLUSTER) - 1);
    else if (WIDE) {
#pragma unroll
      for (int j = 0; j < B_BOXES_K; ++j)
        tma_load_2d(dst + j * (BN / B_BOXES_K) * 128, &tma_b, full(s), k0, n0 + j * (BN / B_BOXES_K));
    } else tma_load_2d(dst, &tma_b, full(s), k0, n0);
#endif
    if (KILN_TRACE && it == 0) trace_stamp(ex, T_FIRST_LOADS);
  };
  u32 early = 0;  // ring iterations thread 0 (the producer) loaded before the block's sync
  if (threadIdx.x == 0) {
    // The maps' descriptors are fetched while the barriers are set up.
    if (EARLY) {
      tma_prefetch(&tma_a);
      tma_prefetch(&tma_b);
    }
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);             // the producer's arrive.expect_tx
      // lane 0 of each consumer warp (KSPLIT: of the consumer owning the stage) of every CTA
      // sharing B
      mbar_init(empty(s), (KSPLIT ? 4 : 8) * CLUSTER);
    }
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
    // EARLY: the first unit's first stage is loaded now, its latency (a DRAM round trip after
    // the L2 has moved on) running under the block's sync and register reallocation instead of
    // after them. The barriers are this thread's own and initialised; nobody reads the stage
    // before the sync.
    // (The first unit is worked out here on its own, as the work-unit code below does for
    // single CTAs, so that the other configs' code stays as it was.)
    if (EARLY) {
      const int tn_count = (p.n + BN - 1) / BN, ctiles0 = ((p.m + BM - 1) / BM) * tn_count;
      const int splits0 = SK_OK && ex.sk_w != 0 ? 0 : KILN_SPLITK ? ex.splits : 1;
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
  if (KILN_TRACE && threadIdx.x == 0) trace_stamp(ex, T_SETUP);

  // The cluster walks cluster tiles of CLUSTER x 1 block tiles; its CTA `rank` takes row `rank`.
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER;
  const int ctiles = ctiles_m * tiles_n, kblocks = (p.k + BK - 1) / BK;
  // Stream-K counts as 0 slices per tile from split_from on (the ranges take those tiles), so
  // that `units` stays one expression of uniform values: choosing between two expressions moved
  // it out of the uniform registers and spilled the 256-wide tile's consumers.
  const bool sk = SK_OK && ex.sk_w != 0;
  const int splits = sk ? 0 : !KSPLIT && KILN_SPLITK ? ex.splits : 1;
  const int split_from = splits != 1 ? min(ex.split_from, ctiles) : ctiles;
  const int units = split_from + (ctiles - split_from) * splits;
  const int cid = blockIdx.x / CLUSTER, nclusters = gridDim.x / CLUSTER;
  // Work units by token: u < units is whole or split-K unit u (this CTA takes cid, cid +
  // nclusters, ..); with stream-K, token units + nclusters + i is the piece of this CTA's range
  // that starts i K blocks in. The range's ends come from shared memory (kept in registers, they
  // spilled the 256-wide tile's consumers).
  auto unit_of = [&](int tok, int& t, int& kb0, int& kb1, int& sp, int& ns) {
    if (!(SK_OK && sk) || tok < units) {
      unit_tile(tok, split_from, splits, t, sp, ns);
      split_range(sp, ns, kblocks, kb0, kb1);
    } else {
      // The range's head (the first h K blocks of the tile it ends in) goes first, then the rest
      // in order: every CTA starts the stream-K phase at k = 0, and after its head each is at
      // the same k (mod the tile's K) as every other, so the CTAs stay in step along K and
      // share A and B slabs in L2 as whole tiles do. In plain range order each CTA started at
      // its own k, and problems whose A and B outgrow L2 ran at half speed (H100, session 8).
      const u32 s0 = sk_range[0], e = sk_range[1], h = e % (u32)kblocks, i = (u32)(tok - units - nclusters);
      sk_piece(i < h ? e - h + i : s0 + i - h, i < h ? e : e - h, split_from, kblocks, t, kb0, kb1, sp, ns);
    }
  };
  // Advances u to this CTA's next unit: its token and K block count; false when none is left.
  // The consumers keep only the token through the K loop and decode the rest after it.
  auto next_unit = [&](int& u, int& tok, int& nk) {
    if (u < units) {
      tok = u;
      u += nclusters;
    } else if (SK_OK && sk) {
      if (u < units + nclusters) u = units + nclusters;
      if (sk_range[0] + (u32)(u - units - nclusters) >= sk_range[1]) return false;
      tok = u;
    } else {
      return false;
    }
    int t, kb0, kb1, sp, ns;
    unit_of(tok, t, kb0, kb1, sp, ns);
    nk = kb1 - kb0;
    if (tok >= units) u += nk;
    return true;
  };

  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      if (!EARLY) {
        tma_prefetch(&tma_a);
        tma_prefetch(&tma_b);
      }
      u32 it = 0;
      int u = cid, tok, nk;
      while (next_unit(u, tok, nk)) {
        int t, sp, ns, kb0, kb1, ctm, tn;
        unit_of(tok, t, kb0, kb1, sp, ns);
        tile_coords(t, ctiles_m, tiles_n, ctm, tn);
        const int m0 = (ctm * CLUSTER + rank) * BM, n0 = tn * BN;
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          if (it >= early) load_stage(it, kb, m0, n0);
        }
      }
      if (KILN_TRACE) trace_stamp(ex, T_LAST_LOADS);
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
    u32 epi_chunks = 0;  // chunks staged so far: picks the staging buffer
    const bool leader = (threadIdx.x % 128) == 0;
#if KILN_OUT != 2
    const int srow = 16 * w + (lane & 15);  // the 16-bit staging row this lane addresses
#endif
    // Chunk ch (C_COLS columns) of the consumer's 64 x BN tile to C at (m0, n0 + C_COLS ch)
    // through the staging buffers. 16-bit C: get(J, x) is the x-th 16-bit pair of 16-column block
    // J (accumulators 8J + 2x, 8J + 2x + 1). f32 C: get(i) is accumulator i, scaled. The staging
    // layouts: common/c_staging.cuh.
    // KILN_EPI = 1 sees beta 0 or 1 (the host's choice): with beta == 1 chunks are added to C.
    // KILN_EPI = 2: get(i) is accumulator i, scaled, for every C; chunk ch's old C was loaded
    // into the buffer (load_first_chunks, or two chunks back), and chunk ch + 2 (of nch) is
    // loaded into it once its store has read it. Buffer b's k-th load completes phase k of its
    // barrier, and every chunk staged had one load: chunk count e waits on parity (e >> 1) & 1.
    auto store_chunk = [&](int ch, int nch, int m0, int n0, auto get) {
      const u32 buf = cstage + (2 * c + (epi_chunks & 1)) * C_CHUNK_BYTES;
      const u32 cbar = cbars + 8u * (2 * c + (epi_chunks & 1));
      if (C_LOAD) mbar_wait(cbar, (epi_chunks >> 1) & 1);
      store_staged_chunk(&tma_c, buf, 1 + c, leader, n0 + C_COLS * ch, m0, !C_LOAD && p.beta != 0.0f, [&] {
#if KILN_EPI == 2 && KILN_OUT == 2
        stage_chunk_f32_blend(buf, ch, w, lane, p.beta, get);
#elif KILN_EPI == 2
        stage_chunk_16_blend<out_t>(buf, ch, srow, w, lane, p.beta, get);
#elif KILN_OUT == 2
        stage_chunk_f32(buf, ch, w, lane, get);
#else
        stage_chunk_16(buf, ch, srow, lane, get);
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
    // The chunks of the tile at column n0 that hold columns of C.
    auto tile_chunks = [&](int n0) { return min(C_NCH, (p.n - n0 + C_COLS - 1) / C_COLS); };
    // C_LOAD: the old C of a tile's first two chunks, into the two buffers: a whole tile's under
    // its first K block's wgmmas, so the loads' latency hides behind the mainloop (ledger #86); a
    // split tile's at its epilogue, which only the CTA that adds the slices reaches. The last
    // tile's stores have read the buffers: its last store_chunk waits for that. (That wait after
    // the mainloop, at the epilogue's start, never returned on an H100: ledger #82.)
    auto load_first_chunks = [&](int nch, int m0, int n0) {
      if (C_LOAD && leader)
        load_first_c_chunks(&tma_c, cstage, cbars, c, epi_chunks, nch, m0, n0, C_COLS);
    };
    // DEFER: the packed chunks DFIRST.. of the tile waiting to go out (pk[16 (ch - DFIRST) + i]),
    // its place, its chunk count (0 when nothing waits) and the next chunk to store.
    u32 pk[DEFER ? 16 * DCH : 1];
    int pend_m0 = 0, pend_n0 = 0, pend_chunks = 0, pend_next = 0;
    auto pending = [&]() { return pend_next < pend_chunks; };
    auto store_pending_chunk = [&]() {
#if KILN_OUT != 2 && KILN_EPI != 2  // DEFER: 16-bit C, not loaded
#pragma unroll
      for (int ch = DFIRST; ch < C_NCH; ++ch)  // pk indexed statically
        if (ch == pend_next)
          store_chunk(ch, pend_chunks, pend_m0, pend_n0, [&](int J, int x) { return pk[4 * (J - 4 * DFIRST) + x]; });
#endif
      ++pend_next;
    };
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

    // KSPLIT: the hand-off goes through two mbarriers (xfull, xfree), not named barriers, so
    // that compute-sanitizer's racecheck sees the order (it flagged the named-barrier hand-off,
    // session 12 #41). Hand-off h (the consumers' h-th unit) completes phase h of xfull; the
    // buffer is free for hand-off h once phase h - 1 of xfree has completed (none for h = 0).
    u32 handoff = 0;
    // Stage 0's descriptors. Rows 64c.. of A: the K-major tile puts them 64 rows (8 KB) in; the
    // MN-major tile keeps them in box c, also 8 KB in. KSPLIT: both consumers read the tile's
    // only 64 rows. A stage and a k step only move the start address (wgmma_desc_add).
    const u32 sa0 = base + (KSPLIT ? 0 : c * BOX64_BYTES), sb0 = base + A_BYTES;
    const u64 da0 = TA ? wgmma_desc_sw128(sa0, BOX64_BYTES, 1024) : wgmma_desc_sw128(sa0, 16, 1024);
    const u64 db0 = TB ? wgmma_desc_sw128(sb0, BOX64_BYTES, 1024) : wgmma_desc_sw128(sb0, 16, 1024);
    u32 it = 0;
    int u = cid, tok, nk;  // nk: this unit's K blocks (the count; the producer picks which)
    while (next_unit(u, tok, nk)) {
      int prev = KSPLIT ? -1 : 0;  // the stage of the batch in flight (KSPLIT: -1, none yet)
      for (int kb = 0; kb < nk; ++kb, ++it) {
        if (KSPLIT && (int)(it & 1) != c) continue;  // the other consumer's K block
        const int s = it % STAGES;
        mbar_wait(full(s), (it / STAGES) & 1);
        if (KILN_TRACE && c == 0 && (threadIdx.x % 128) == 0 && it == 0) trace_stamp(ex, T_C0_FIRST_FULL);
        const bool acc_live = KSPLIT ? prev >= 0 : kb > 0;  // accumulate onto earlier K blocks
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          // K-major: step 16 elements (32 B) along the 128-byte row. MN-major: step 16 rows of K.
          const u64 da = wgmma_desc_add(da0, s * STAGE_BYTES + kk * (TA ? 2048 : 32));
          const u64 db = wgmma_desc_add(db0, s * STAGE_BYTES + kk * (TB ? 2048 : 32));
          if constexpr (WIDE) {
            // Columns 192.. of B start 192 rows (K-major) or three 64-column boxes (MN-major)
            // into the stage: 24 KB either way.
            wgmma_m64k16<in_t, 192, TA, TB>(acc, da, db, (acc_live || kk > 0) ? 1 : 0);
            wgmma_m64k16<in_t, N_HI, TA, TB>(*reinterpret_cast<float(*)[N_HI / 2]>(&acc[WIDE ? 96 : 0]), da,
                                             wgmma_desc_add(db, 192 * 128), (acc_live || kk > 0) ? 1 : 0);
          } else {
            wgmma_m64k16<in_t, BN, TA, TB>(acc, da, db, (acc_live || kk > 0) ? 1 : 0);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(acc[i]);
        // C_LOAD: the first K block's wgmmas run while the leader works out the tile and loads
        // its first two chunks of old C (whole tiles only).
        if (C_LOAD && leader && (!KSPLIT || c == 0) && (KSPLIT ? prev < 0 : kb == 0)) {
          int t, kb0, kb1, sp, ns, ctm, tn;
          unit_of(tok, t, kb0, kb1, sp, ns);
          tile_coords(t, ctiles_m, tiles_n, ctm, tn);
          const int m0 = (ctm * CLUSTER + rank) * BM + 64 * c, n0 = tn * BN;
          if (ns == 1 && m0 < p.m) load_first_chunks(tile_chunks(n0), m0, n0);
        }
        // One chunk of the previous tile goes out while this K block's wgmmas run.
        if (DEFER && pending()) store_pending_chunk();
        // Keep one batch in flight: once the previous one is done, its stage can be refilled.
        wgmma_wait<1>();
        if (acc_live) release(prev);
        prev = s;
      }
      wgmma_wait<0>();
      if (KILN_TRACE && c == 0 && (threadIdx.x % 128) == 0) trace_stamp(ex, T_C0_MAIN_END);
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
      if (ns > 1) {
        // Partials (common/split_k.cuh): slice s2's partial is in slot base + s2: split-K, base =
        // bt * ns; stream-K (two slices), CTA g's partial in slot 2g if its range starts in the
        // tile (slice 1), else 2g + 1.
        const int ct = threadIdx.x - 128, bt = (t - split_from) * CLUSTER + rank;
        const int base = sk ? 2 * cid + 1 - 2 * sp : bt * ns;
        float* tile_ws = ex.ws + (i64)base * (BM * BN);
        split_store_partial(tile_ws + (i64)sp * (BM * BN), ct, acc);
        if (!split_arrive(ex.counters + bt, ns, ct, 3)) continue;
        split_add_others(tile_ws, ns, sp, ct, acc);
      }

      // Epilogue: register i holds row 16w + lane/4 + 8((i>>1)&1), column 8(i>>2) + 2(lane%4) + (i&1).
#if KILN_EPI  // TMA_EPI
      {
        // Chunks of C_COLS columns (64 16-bit, 32 f32), staged as common/c_staging.cuh lays them.
        const int m0 = tm * BM + 64 * c, n0 = tn * BN;
        // Chunks before DFIRST go out now (all of them without DEFER), the rest wait in pk.
        if (m0 < p.m) {
          const int nch = tile_chunks(n0);
          if (ns > 1) load_first_chunks(nch, m0, n0);  // a whole tile's: under its first K block
#pragma unroll
          for (int ch = 0; ch < DFIRST; ++ch)
            if (ch < nch)
#if KILN_OUT == 2 || KILN_EPI == 2
              store_chunk(ch, nch, m0, n0, [&](int i) { return p.alpha * acc[i]; });
#else
              store_chunk(ch, nch, m0, n0, [&](int J, int x) {
                return pack2<out_t>(p.alpha * acc[8 * J + 2 * x], p.alpha * acc[8 * J + 2 * x + 1]);
              });
#pragma unroll
          for (int i = 0; i < 16 * DCH; ++i)
            pk[DEFER ? i : 0] = pack2<out_t>(p.alpha * acc[32 * DFIRST + 2 * i], p.alpha * acc[32 * DFIRST + 2 * i + 1]);
#endif
          pend_m0 = m0;
          pend_n0 = n0;
          pend_chunks = DEFER ? nch : 0;
          pend_next = DFIRST;
        }
        // The last C_TAIL columns (8-column groups C_NCH * C_COLS / 8 ..), as the register
        // epilogue stores them.
        if constexpr (C_TAIL != 0)
          store_acc_groups<C_NCH * C_COLS / 8>(cout, p, m0 + 16 * w + lane / 4, n0, acc, lane % 4);
      }
#else
      store_acc_groups<0>(cout, p, tm * BM + 64 * c + 16 * w + lane / 4, tn * BN, acc, lane % 4);
#endif
    }
    if (DEFER) {  // the last tile's chunks
      while (pending()) store_pending_chunk();
    }
  }
  // Bulk stores still in flight must finish before the block's shared memory goes away.
  if (TMA_EPI && wg > 0 && (threadIdx.x % 128) == 0) tma_store_wait<0>();
  if (KILN_TRACE && wg > 0 && (threadIdx.x % 128) == 0) trace_stamp(ex, wg == 1 ? T_C0_END : T_C1_END);
  // No CTA may leave while a peer can still arrive on its barriers.
  if (CLUSTER > 1) {
    __syncwarp();
    cluster_sync();
  }
}
