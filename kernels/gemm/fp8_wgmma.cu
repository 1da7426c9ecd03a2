// FP8 GEMM, warp-specialised persistent WGMMA + TMA (sm_90a): C[M, N] = alpha * (A · Bᵀ) with
// A [M, K] and B [N, K] both K-major FP8 (the NT layout: the only one FP8 wgmma reads from shared
// memory), each dequantised by its scales, fp32 accumulation, C row-major bf16 / f16 / f32.
// 384 threads: warpgroup 0 is the producer (40 registers; one thread issues the TMA loads of an
// A box of KILN_BM rows and a B box of KILN_BN rows, 128 bytes of K each, per stage into a ring
// of KILN_STAGES buffers guarded by full/empty mbarriers); warpgroups 1 and 2 are consumers (232
// registers) computing the KILN_BM x KILN_BN block tile with wgmma.m64nWNk32 from 128B-swizzled
// tiles (a 128-byte row is 128 elements: one K block of 128 is one stage, four k32 steps).
// KILN_BM = 128: each consumer takes 64 rows of the tile, all its columns (WN = BN). KILN_BM = 64
// (the small-M tile): each consumer takes all 64 rows and half the columns (WN = BN / 2), so a
// problem of 64 rows keeps both consumers at work and a wide tile (up to 256) keeps the
// pipelined promotion's three arrays within the registers. The grid is persistent: CTA b takes
// work units b, b + grid, .. (tiles in the grouped order of common/gemm_ws.cuh, or split-K slices
// of them). Clusters (128-row tiles) of KILN_CLUSTER CTAs along M by KILN_CLUSTER_N along N (1 or
// 2 each) take neighbouring block tiles: the CTAs of a cluster with the same columns (along M)
// share their B tile, each loading a part of it and multicasting it to all of them, and those
// with the same rows (along N) share A the same way, so a pair reads 3/4 of its bytes from the
// L2 and a 2 x 2 cluster half. A stage is free once the consumers of every CTA that writes into
// it (itself and the peers sharing A or B with it) have read it; a cluster's tiles past M or N
// only feed their parts of the shared tiles.
//
// Scales (KILN_SCALE), fp32, read from device memory (Fp8Args):
//   0 per tensor: sa[0], sb[0], applied with alpha in the epilogue.
//   1 per row / column: sa[m] (M), sb[n] (N), in the epilogue.
//   2 block: A 1x128, sa[kb * M + m] (M-major); B 128x128, sb[(n / 128) * ceil(K / 128) + kb];
//     applied per K block to that block's partial sums (needs KILN_PROMOTE = 1). A consumer whose
//     columns straddle two 128-wide B blocks (widths that do not divide 128) takes each column
//     group's own; a tile spans at most two B blocks, three for the 176-wide tile.
//     KILN_SSCALE = 0: each consumer loads its block's scales from global memory, two K blocks
//     ahead of their use. KILN_SSCALE = 1: they travel with the stage: warp 1 of the producer
//     warpgroup copies each stage's KILN_BM A scales and the tile's two B scales into a slot
//     beside the ring with cp.async, whose completion arrives on the stage's full barrier, and
//     the consumers read them from shared memory once the stage has landed (loaded by the
//     consumers, their latency under the ring's traffic stalled them: 30 % of the stall samples
//     at 4096x7168x16384, ncu, 2026-11-28; at small M they come from DRAM after the flush).
//     KILN_SSCALE = 2: the A scales ride the ring by TMA instead (DeepGEMM's way): the producer
//     thread loads the stage's box {BM, 1} of a map over [K/128, M] (tma_sa, which needs M a
//     multiple of 4: rows 16-byte aligned) into the slot with A and B on the stage's full
//     barrier, and the copier warp copies only the B scales; without the map (Fp8Args.tma_sa =
//     0), as KILN_SSCALE = 1.
//     Fp8Args.tma_sa = 2 (run time, either slot kernel in single CTAs; the `b` of a config): the producer
//     thread copies the stage's A scales with one 1D bulk copy (cp.async.bulk, no tensor map:
//     a tile's scales of one K block are contiguous in [K/128, M], M a multiple of 4) on the
//     stage's full barrier, counting only the rows within M (the slot's rows past M keep stale
//     values, whose products lie in rows never stored). The A-scale map's first use cost a
//     128-row launch 1.5-3 us whenever another kernel ran last on the SM (ledger row 53).
//     Fp8Args.tma_sa = 3 (the `q` of a config; KILN_SSCALE = 2 kernels in single CTAs, ceil(K /
//     128) a multiple of 4): the B scales come the same way, each B block's 16-byte run of four
//     K blocks' scales (sb[nb * kblocks + (kb & ~3)] ..) after the A scales at 16-byte steps, the
//     block's own at (kb & 3); the copier warp does nothing and the full barrier counts only the
//     producer's arrival.
// Promotion (KILN_PROMOTE = 1): each 128-deep K block is accumulated by its four wgmmas into
// fresh registers (the first with scale-d off), then added (block scales: multiplied by its
// scales and added) into a separate fp32 accumulator on the CUDA cores: the tensor cores' FP8
// accumulation keeps about 14 significant bits, and over long K its error outgrows bf16's.
// KILN_PROMOTE = 0 accumulates the whole K in the wgmma accumulator ("fast accumulation").
// Parts (128-row tiles, promoted, consumers wider than 128): a consumer's 64 x WN runs each K
// block as PARTS batches of m64n(WN / PARTS)k32 wgmmas, one per part of the columns, each into
// an accumulator of WN / PARTS / 2 registers promoted into its part of fin (the parts' fragments
// side by side are the m64nWN one, so the epilogue is the WN-wide one); the stage is freed
// after the last part. Drained (KILN_BN = 256: two parts of 128): a 64 x 256 fresh accumulator
// beside fin would need 128 + 128 registers; one part's 64 fit. The tile moves 48 KB a stage
// for twice a 128 x 128 tile's work (72 KB of shared-memory traffic per 128 x 128 x 128, TMA's
// writes and the wgmmas' reads, against 80) and, in pairs along M, reads 16 KB per
// 128 x 128 x 128 from the L2 (128ptme: 24). Pipelined (KILN_PIPE, ledger row 18): two part
// accumulators in turn, part f + 1's batch (the next K block's first part after the last)
// issued before part f is promoted, so a consumer keeps a batch of its own on the tensor cores
// while it promotes instead of counting on the other consumer's (the drained 256-wide tile's
// consumers waited on their own wgmmas, WARPGROUP.DEPBAR, in 33 % of the stall samples; ncu,
// H200, 2026-11-29): fin WN / 2 + two arrays of WN / PARTS / 2, so 256 runs in four parts of 64
// (128 + 64 registers) and 144 to 192 in two (176: 88 + 88). No split-K (Fp8Args.splits = 1).
// KILN_PIPE = 1 (promoted only) alternates two K-block accumulators: block kb + 1's wgmmas are
// issued before block kb is promoted (wgmma.wait_group 1), so the FFMAs of the promotion overlap
// the tensor cores' work instead of following a drained pipeline; it costs a third accumulator
// array, so it is compiled for consumers 128 wide or less. Without it (drained), one consumer's
// promotion overlaps the other's wgmmas, if they are out of phase: left to themselves both issue
// a K block's wgmmas together, the tensor cores interleave them, both batches end together and
// both consumers promote while the tensor cores idle (ncu, H200, 69f1c67, 128te at
// 4096x7168x16384: 32 % of the stall samples on the drain, 0.53 eligible warps a scheduler).
// Fp8Args.order = 1 (run time, drained promoted kernels; ignored by the others) keeps them out
// of phase, as FA3 does with its softmax: the consumers take turns issuing K blocks (two named barriers, TURN + c: consumer c waits for its
// turn, issues its four wgmmas, passes the turn), so consumer 0's batch of block j runs alone
// and ends first; it promotes under consumer 1's batch of block j and issues block j + 1 behind
// it, and so on: the tensor cores hold one batch while the other consumer promotes.
// K: any multiple of 16 (TMA's 16-byte row stride); a last partial K block is zero-filled by TMA,
// as are rows and columns past M and N, and the epilogue stores only in-range elements. The A
// box may hold fewer rows than the tile (Fp8Args.a_rows, when M is smaller): the tile's rows
// past it keep stale shared memory, whose products lie in rows past M and are never stored.
// Small M: a promoted consumer whose rows (or columns) all lie past M (N) skips its wgmmas, and
// with few tiles the host splits K (Fp8Args.splits: work units are tile slices), reduced either
// through one fp32 slot per slice (reduce 0), by atomic adds into one fp32 tile (reduce 1), or
// in the shared memory of a cluster that holds the tile's slices (reduce 2).
// Stream-K (Fp8Args.sk_w, the atomic sum): where the tiles do not fill whole waves of the SMs,
// the tiles past the last whole wave (every tile where there are fewer than the clusters) are
// shared out by K block, each cluster taking one contiguous run of the same length, so the
// busiest SM computes the average share instead of a whole extra tile (128x7168x16384: 56
// tiles of 128 K blocks, 54-55 blocks on each of 132 SMs against 64 on 112 in two slices).
// Epilogue: from registers (quad transpose, 16-byte stores), or with KILN_TMAE = 1 and a C that
// TMA can address (Fp8Args.tma_c; the host's map, else registers) through shared memory: each
// consumer stages its 64 x WN tile in chunks of 64 rows x 128 bytes (128B swizzle, two 8 KB
// buffers of its own, alternately, or with KILN_TMAE = 2 one, each chunk after the previous
// one's store has read it; common/c_staging.cuh) that one thread sends to C by
// cp.async.bulk.tensor, and goes on to the next unit's K blocks without waiting for the stores
// (the grid is persistent: they drain under its wgmmas; a buffer is rewritten only once its store
// has read it). TMA drops what lies past M and N. A width that is not whole chunks (112, 144,
// 176 for 16-bit C) stores its last columns from registers. KILN_TMAE = 3 (the 128 x 256
// tile, 16-bit C) defers part of it under the next tile's wgmmas (below).
// Fp8Args.ring_epi (run time, the
// `l` of a config; unsplit launches): a CTA's last unit stages its whole tile at once in the
// ring, which nothing loads into any more, instead of chunk by chunk through the staging
// buffers (one consumer chunk after another's store has read its buffer): both consumers past
// their last wgmmas (named barrier RING_BAR), every chunk written, one fence and barrier, and
// the leader sends them all; the tail of a CTA whose one tile is all its work (M <= 128).
// KILN_ARES = 1 (the `z` of a config; 2026-12-01, ledger row 171): the lean short-K form for
// M <= BM and K of 4 blocks (K 385..512): every tile of a CTA has the same rows, so A's 4 K
// blocks (64 KB at BM = 128) are loaded once into shared memory beside the ring, with their
// scales (one bulk copy a block, on that block's own barrier), and the ring carries B alone
// (16 KB a stage: 7 stages at 128 x 128, a CTA's two tiles' 8 blocks nearly all in flight from
// the start) with each B block's 16-byte run of its 4 K blocks' scales. What this form never
// takes is compiled out: split-K and stream-K units, the turns, the ring epilogue, the copier
// warp, PDL's early weights, and (with KILN_TMAE) the register epilogue: the host runs the
// config without `z` where one of them would be needed (M > BM, another K, scales or C that
// bulk copies or TMA cannot address).
// KILN_WHOLE = 1 (the `u` of a config; 2026-12-01, ledger row 202): whole tiles only, the code
// cut of KILN_ARES without A resident, for the small-M tiles a launch runs unsplit (one tile a
// CTA: `64x128psu/1`, `64x192psu/1`, `256tquhl/1`): split-K and stream-K units and their sums,
// and PDL's early weights, compiled out (the launch waits for the grid before as without them).
// The 64-row tile's kernel drops from 3,544 SASS instructions to 2,120, the 64 x 192 one from
// 4,312 to 2,768 (NVRTC 13.0): what a launch of a dozen microseconds fetches once.
#include "common/bulk_copy.cuh"
#include "common/c_staging.cuh"
#include "common/cp_async.cuh"
#include "common/gemm_args.cuh"
#include "common/gemm_ws.cuh"
#include "common/grid_dep.cuh"
#include "common/mbarrier.cuh"
#include "common/mma_sync.cuh"
#include "common/split_k.cuh"
#include "common/split_k_cluster.cuh"
#include "common/tma.cuh"
#include "common/wgmma_fp8.cuh"
#include "common/wgmma_fp8_rs.cuh"

#if !defined(KILN_BN) || !defined(KILN_STAGES) || !defined(KILN_SCALE) || !defined(KILN_PROMOTE) || \
    !defined(KILN_FP8_A) || !defined(KILN_FP8_B) || !defined(KILN_OUT) || !defined(KILN_SMEM) ||   \
    !defined(KILN_GROUP_M) || !defined(KILN_PIPE) || !defined(KILN_BM) || !defined(KILN_SSCALE) ||  \
    !defined(KILN_CLUSTER) || !defined(KILN_CLUSTER_N) || !defined(KILN_TMAE) || !defined(KILN_ARS) || \
    !defined(KILN_ARES)
#error "fp8_wgmma.cu needs every define src/ops/fp8/gemm.rs gives it"
#endif
// KILN_PINGPONG = 1 (`g` of a config, 2026-12-01; unpromoted tensor scales, 128-row tiles, one
// staging buffer a consumer): the consumers take whole tiles in turn, as the bf16 ping-pong kernel
// (gemm/wgmma_tma_ws_pingpong.cu) and cuBLASLt's fastest kernel at 6144^3 do: consumer 0 the
// CTA's 1st, 3rd, .. unit, consumer 1 its 2nd, 4th, .., each tile's 128 rows as two m64 wgmmas
// a k32 step into two accumulators (2 x WN / 2 registers). A consumer starts its K loop once the
// other has issued its last K block (named barrier TURN + c: the ring's fills of the other's
// tile have all been waited for, so no full barrier's parity can alias), and stores its tile
// under the other's K loop: the tensor cores never wait for an epilogue, where the cooperative
// kernels (both consumers on one tile) drain at every tile's end. A stage is read by one
// consumer a CTA (the empty barrier counts its four warps, and the peer's along M).
#ifndef KILN_PINGPONG
#define KILN_PINGPONG 0
#endif
#ifndef KILN_WHOLE
#define KILN_WHOLE 0
#endif

constexpr int BM = KILN_BM, BN = KILN_BN, BK = 128, STAGES = KILN_STAGES;
constexpr int SCALE = KILN_SCALE, FA = KILN_FP8_A, FB = KILN_FP8_B;
constexpr bool PROMOTE = KILN_PROMOTE != 0, PIPE = KILN_PIPE != 0, SSCALE = KILN_SSCALE != 0;
constexpr bool A_SCALE_TMA = KILN_SSCALE == 2;  // the slot's A scales by TMA (Fp8Args.tma_sa)
constexpr int CM = KILN_CLUSTER;            // CTAs along M sharing each B tile by TMA multicast
constexpr int CN = KILN_CLUSTER_N;          // CTAs along N sharing each A tile likewise
constexpr int CLUSTER = CM * CN;
// KILN_PAIR_SUM: pairs along N alone (`128ptne`) also sum split-K slices in a cluster
// (Fp8Args.reduce 2, `128ptne/2c`, 2026-12-02). The launch's cluster is then the pair times the
// slices, rank CLUSTER * slice + rn: a CTA's rank in its pair is the cluster rank's low bit, its
// multicast peers sit from its slice's first rank on, and slice 0 of the same rn (rank rn) adds
// the sum. In every other kernel the cluster is the pair (or the slices, single CTAs) and the
// rank as read. Selected by #if, not if constexpr: a constant at file scope is a global in every
// cubin, and even a local one, folded away, renumbered the PTX of other kernels and moved their
// register allocation (`192mgh`); this way every other variant compiles byte for byte as before.
#define KILN_PAIR_SUM (KILN_CLUSTER == 1 && KILN_CLUSTER_N == 2)
// Fp8Args.tma_sa = 2 (the A scales by one bulk copy) is compiled into the single-CTA slot kernels
// (the small-M tiles it is for: the pairs' producer spilled at 40 registers with it)
constexpr bool SA_BULK = SSCALE && CLUSTER == 1;
// Fp8Args.tma_sa = 3 (the A scales and the B scales by bulk copies, no copier warp) likewise, in
// the kernels whose slot has room past the A scales for a 16-byte run per B block (KILN_SSCALE = 2)
// but the 192-wide tile (`192th`, by name only: it spilled 28 bytes with it)
constexpr bool SB_BULK = A_SCALE_TMA && CLUSTER == 1 && BN != 192;
constexpr bool SPLIT_N = BM == 64;          // the consumers split the tile's columns, not its rows
constexpr bool ARES = KILN_ARES != 0;       // A resident, a ring of B alone (above)
constexpr int KA = ARES ? 4 : 0;            // its K blocks (K <= 512)
constexpr bool WHOLE = ARES || KILN_WHOLE != 0;  // whole tiles only, no slices or stream-K (above)
constexpr bool PINGPONG = KILN_PINGPONG != 0;  // the consumers take whole tiles in turn (above)
static_assert(!(ARES && PINGPONG), "the lean short-K form (KILN_ARES) and the ping-pong consumers (KILN_PINGPONG) are separate configs");
// KILN_BM = 192 (`192x192md`, 2026-11-30): three consumer warpgroups of 64 rows each (cuBLASLt's
// 192 x 192 tile at 6144^3 has the same rows), 512 threads; tensor scales unpromoted only, in
// pairs along M (no split-K, turns or ring epilogue: their named barriers count two consumers).
constexpr int NCONS = BM == 192 ? 3 : 2;    // consumer warpgroups
constexpr int THREADS = 128 * (NCONS + 1);
constexpr int WN = SPLIT_N ? BN / 2 : BN;   // one consumer's wgmma width
constexpr int NR = WN / 2;                  // its accumulator registers
// Parts (above): drained, 256 in two of 128; pipelined, 256 in four of 64 and the widths over
// 128 in two (three arrays of WN / 2 registers, the whole-width pipeline, fit up to 128).
constexpr int PARTS = !PROMOTE || SPLIT_N ? 1 : PIPE ? (WN <= 128 ? 1 : WN == 256 ? 4 : 2) : (WN == 256 ? 2 : 1);
constexpr int HN = WN / PARTS, HR = HN / 2;  // one part's wgmma width and registers
static_assert(BM == 64 || BM == 128 || BM == 192,
              "KILN_BM is 64 (consumers split N), 128 or 192 (two or three consumers split M)");
static_assert(NCONS == 2 || (SCALE == 0 && !PROMOTE && KILN_CLUSTER_N == 1),
              "the 192-row tile (three consumers) is compiled for unpromoted tensor scales, no pairs along N");
static_assert(!PIPE || PROMOTE, "KILN_PIPE pipelines the promotion: it needs KILN_PROMOTE = 1");
static_assert(WN % (8 * PARTS) == 0 && PARTS % 2 == (PARTS > 1 ? 0 : 1),
              "a consumer's parts are whole 8-column groups, two or four of them");
static_assert(!(PIPE && PARTS > 1) || SSCALE || SCALE != 2,
              "the promotion pipelined over parts reads block scales from the stage: KILN_SSCALE");
// KILN_ARS = 1 (the promotion pipelined over parts only): A's fragments from registers, loaded by
// ldmatrix once a K block and read by every part's wgmmas (RS), where each part's SS wgmmas read
// A from shared memory again: the 256-wide tile in four parts moves 32 KB of A per consumer and
// K block through the shared memory's port instead of 8. The fragments of a block stay until its
// last part is waited for, so the next block's first part is issued after that (not under it).
constexpr bool ARS = KILN_ARS != 0;
static_assert(!ARS || (PIPE && PARTS > 1 && (HN == 64 || HN == 128)),
              "KILN_ARS reads A from registers in the promotion pipelined over parts of 64 or 128");
static_assert(!SSCALE || SCALE == 2, "KILN_SSCALE carries block scales: it needs KILN_SCALE = 2");
static_assert((CM == 1 || CM == 2) && (CN == 1 || CN == 2) && (CLUSTER == 1 || BM == 128 || (BM == 192 && CN == 1)) &&
                  (BN / CM) % 8 == 0,
              "KILN_CLUSTER and KILN_CLUSTER_N are 1 or 2, pairs with 128-row tiles (192-row: along M) whose B "
              "halves are whole 8-row swizzle atoms");
constexpr int B_PART = BN / CM;  // B rows each CTA of a cluster loads (and multicasts along M)
constexpr int A_PART = BM / CN;  // A rows likewise (along N)
// A tile's columns n0 = tn * BN .. + BN - 1 span B_SPAN B scale blocks at most: BN plus the
// largest n0 % 128 (128 - gcd(BN, 128)) over 128, rounded up. Two for most widths; three for 176
// (n0 % 128 up to 112: 112 + 176 = 288 columns from a block's start), in 128-row tiles with the
// scales in shared memory only.
constexpr int GCD_BN_128 = (BN & -BN) < 128 ? (BN & -BN) : 128;
constexpr int B_SPAN = (BN - GCD_BN_128 + 127) / 128 + 1;
// KILN_ARES: a stage is B alone, A's KA blocks resident before the ring (ARES_BYTES) and their
// scales (SA_RES_BYTES, [kb][BM]) after the staging
constexpr u32 A_BYTES = BM * BK, B_BYTES = BN * BK, STAGE_BYTES = ARES ? B_BYTES : A_BYTES + B_BYTES;
constexpr u32 B_OFF = ARES ? 0 : A_BYTES;  // B's place in a stage
constexpr u32 ARES_BYTES = KA * A_BYTES, SA_RES_BYTES = KA * BM * 4;
// A stage's scale slot (KILN_SSCALE): the BM A scales, then the tile's B scales (up to three),
// padded to 16; to 128 with KILN_SSCALE = 2, whose TMA writes the A scales at the slot's start;
// KILN_ARES: the B blocks' 16-byte runs alone (SB_OFF: where they start).
constexpr u32 SLOT_BYTES = ARES ? 16 * B_SPAN : !SSCALE ? 0 : A_SCALE_TMA ? (BM * 4 + 16 + 127) / 128 * 128 : BM * 4 + 16;
constexpr u32 SB_OFF = ARES ? 0 : BM * 4;
static_assert(KILN_SSCALE >= 0 && KILN_SSCALE <= 2, "KILN_SSCALE is 0, 1 or 2");
// KILN_TMAE: the TMA-store epilogue's staging after the ring, two 8 KB chunks per consumer (1),
// or one (2: each chunk waits for the previous one's store to read it; the 16 KB saved buy the
// ring a stage), or deferred (3, `d`, the 128 x 256 tile with 16-bit C; two buffers a consumer,
// one beside block scales' slots): the tensor cores waited between tiles for the whole
// epilogue, so part of it goes under the next tile's wgmmas, its chunks held in registers as
// 16-bit pairs meanwhile (half of their fp32 registers). On an H200 (ledger row 26) it saved
// ~0.5 us a tile with fast accumulation (+1 % at 6144^3 and 8192^3) and ~2 us a block-scaled
// tile (+2.1 % at 4096x7168x16384). Unpromoted: chunks 0 and 1 staged at once, 2 and 3
// (32 pair registers beside the next tile's 128-register accumulator; all four spilled) staged
// and stored one a K block under the next tile's batches. Promoted (the drained halves: `256md`
// with tensor scales, `256tmd` with block scales): fin (128) and a half's accumulator (64) leave
// no room for pairs across a tile, so all four go under the next tile's first K block, two under
// each half's batch, and that block's promotion writes fin fresh (fin is dead until then). With
// f32 C, as 2 (or 1).
constexpr bool TMA_EPI = KILN_TMAE != 0;
// (three consumers, deferred: one buffer each, so that the 48 KB ring keeps four stages)
constexpr int EPI_BUFS = KILN_TMAE == 2 || (KILN_TMAE == 3 && (SSCALE || NCONS == 3)) ? 1 : 2;
static_assert(KILN_TMAE >= 0 && KILN_TMAE <= 3,
              "KILN_TMAE is 0, 1 (two staging buffers a consumer), 2 (one) or 3 (deferred)");
constexpr bool DEFER = KILN_TMAE == 3 && sizeof(out_t) == 2;
static_assert(!PINGPONG || (BM == 128 && !PROMOTE && SCALE == 0 && CN == 1 && KILN_TMAE == 2 && BN <= 192),
              "KILN_PINGPONG is compiled for unpromoted tensor scales in 128-row tiles at most 192 wide "
              "(two accumulators of BN / 2), no pairs along N, one staging buffer a consumer");
using Epi = TmaStoreEpilogue<1, out_t, EPI_BUFS>;
constexpr int C_COLS = Epi::C_COLS, C_NCH = WN / C_COLS, C_TAIL = WN % C_COLS;
static_assert(!DEFER || C_TAIL == 0, "the deferred epilogue stores whole chunks: a width of whole 64 columns");
// Chunks deferred: promoted all (under the next tile's first K block, fin half dead there);
// unpromoted the last half, the first staged at once (two buffers, no wait between them): the
// pairs of all four beside the next tile's 128-register accumulator spilled (ptxas: 136-160
// bytes), of two they fit.
// With one staging buffer (three consumers) all but the first are deferred, one a K block, so
// that no chunk waits on the one before it (the 192-wide consumer's two: 32 pair registers
// beside its 96-register accumulator).
constexpr int DCH = PROMOTE ? C_NCH : EPI_BUFS == 1 ? C_NCH - 1 : C_NCH / 2;
// The promoted 128 x 192 tile of tensor scales (`192md`, ledger row 120) defers the same way in
// one part: each consumer's 64 x 192 is one drained m64n192 batch a K block (fin 96 and a
// 96-register accumulator, no half re-reading A), its three chunks' 48 pair registers sent under
// the next tile's first batch while fin is dead.
static_assert(KILN_TMAE != 3 || (!PROMOTE && SCALE == 0) || (PROMOTE && !PIPE && PARTS == 2) ||
                  (PROMOTE && !PIPE && SCALE == 0 && PARTS == 1 && WN == 192 && NCONS == 2),
              "KILN_TMAE = 3 defers the epilogue of the unpromoted tensor-scale kernel, of the drained "
              "halves of the 128 x 256 tile or of the promoted tensor-scale 128 x 192 tile");
constexpr u32 C_BYTES = TMA_EPI ? NCONS * EPI_BUFS * Epi::CHUNK_BYTES : 0;
// Named barriers: 1 to NCONS are the consumers' staging (TmaStoreEpilogue: 1 + consumer), 7 the
// split-K hand-off of both, TURN + c consumer c's turn to issue a K block (Fp8Args.order: its
// 128 threads sync, the other consumer's 128 arrive).
constexpr u32 SPLIT_BAR = 7, TURN = 4, RING_BAR = 6;
// Fp8Args.ring_epi is compiled into the block-scaled TMA-store kernels without pairs along M
// (the small-M tiles it is for; the paired large-M kernels keep their code as it was: the
// unpromoted 256-wide one spilled with it).
constexpr bool RING_EPI = TMA_EPI && SCALE == 2 && CM == 1 && !ARES;
static_assert(!RING_EPI || 2 * C_NCH * Epi::CHUNK_BYTES <= STAGES * STAGE_BYTES,
              "Fp8Args.ring_epi stages both consumers' whole tiles in the ring: it must hold them");

// One chunk of a consumer's 64 x WN result (registers res, already scaled) into 8 KB at buf,
// laid out as the staging buffers are (Fp8Args.ring_epi).
template <class OutT, int N>
__device__ __forceinline__ void stage_result_chunk(u32 buf, int ch, int w, int lane, const float (&res)[N]) {
  if constexpr (sizeof(OutT) == 4)
    stage_chunk_f32(buf, ch, w, lane, [&](int i) { return res[i]; });
  else
    stage_chunk_16(buf, ch, 16 * w + (lane & 15), lane,
                   [&](int J, int x) { return pack2<OutT>(res[8 * J + 2 * x], res[8 * J + 2 * x + 1]); });
}
static_assert(SCALE >= 0 && SCALE <= 2, "KILN_SCALE is 0 (tensor), 1 (row) or 2 (block)");
static_assert(SCALE != 2 || PROMOTE, "block scales apply per K block: they need KILN_PROMOTE = 1");
static_assert(WN % 8 == 0 && WN >= 8 && WN <= 256, "a consumer's width is a multiple of 8 in 8..256");
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
static_assert(KILN_SMEM >= 1024 + ARES_BYTES + STAGES * (STAGE_BYTES + 16 + SLOT_BYTES) + C_BYTES + SA_RES_BYTES + 8 * KA,
              "KILN_SMEM (declared by the host) is smaller than the ring of stages needs");
static_assert(!ARES || (SCALE == 2 && SSCALE && PROMOTE && CLUSTER == 1 && PARTS == 1 && !ARS && !DEFER && NCONS == 2),
              "KILN_ARES is the block-scaled, promoted single-CTA tile in one part with the scales in shared memory");
static_assert(!SB_BULK || SB_OFF + 16 * B_SPAN <= SLOT_BYTES, "Fp8Args.tma_sa = 3: a 16-byte run per B block past the A scales");
static_assert(SCALE != 2 || B_SPAN <= 2 || (B_SPAN == 3 && SSCALE && !SPLIT_N),
              "a block-scaled tile spans at most two B scale blocks, or three in 128-row tiles with KILN_SSCALE");
// Whether a consumer's columns can straddle two B blocks (else every column group takes b0), or
// three (B_TRIPLE: groups from jb + 16 on take b2).
constexpr bool B_STRADDLE = SCALE == 2 && (128 % BN) != 0 && !(BN % 128 == 0 && 128 % WN == 0);
constexpr bool B_TRIPLE = SCALE == 2 && B_SPAN == 3;
static_assert(!B_STRADDLE || WN % 8 == 0, "column groups of 8 must not straddle a B scale block");
// A 2 x 2 cluster's producer holds more (its peers, both parts' coordinates): at 40 ptxas
// spilled the unit counter; its consumers need no more than 208 (the pipelined 128-wide tile).
// The 256-wide tile's producer spilled at 40 as well (its scale copier's loop); its consumers
// use 204 (fin 128, one half's 64, addressing), with split-K left out (the last slice's sum
// took them past 232); every tile run in parts likewise.
// Three consumers (512 threads, 128 registers each at entry): 32 for the producer, 160 each (at
// 40 / 152 ptxas spilled 52 bytes in the 192 x 192 tile; n256's 128 accumulators do not fit).
constexpr int PRODUCER_REGS = NCONS == 3 ? 32 : CLUSTER > 2 || PARTS > 1 ? 56 : 40;
constexpr int CONSUMER_REGS = NCONS == 3 ? 160 : CLUSTER > 2 || PARTS > 1 ? 224 : 232;
static_assert(128 * PRODUCER_REGS + 128 * NCONS * CONSUMER_REGS <= 65536, "register pool overcommitted");

// Two values as one 32-bit pair of 16-bit C (the deferred epilogue's; 0 for f32 C, which does not
// defer: a template, so that pack2<float> is never instantiated).
template <class T> __device__ __forceinline__ u32 pack_pair(float a, float b) {
  if constexpr (sizeof(T) == 2) return pack2<T>(a, b);
  else return 0u;
}

// A compile-time flag for a generic lambda's argument (the deferred epilogue's first K block).
template <bool B> struct Flag {
  static constexpr bool value = B;
};

// One K block's block scales: A's for this thread's two rows, B's for the consumer's one, two or
// three 128-column blocks.
struct BlockScales {
  float a0, a1, b0, b1, b2;
};

// Mirrors `Fp8Args` in src/ops/fp8/gemm.rs.
struct Fp8Args {
  void* c;
  const float* sa;
  const float* sb;
  int m, n, k;
  i64 ldc;
  float alpha;
  // Split-K (splits > 1): each tile's K blocks in `splits` slices, one work unit each.
  //   reduce 0: a slice's fp32 partial tile goes to ws slot (t * splits + sp), and the slice
  //     that counts last on counters[t] adds the others and runs the epilogue.
  //   reduce 1: every slice adds its partial into ws tile t (zero between launches) with
  //     red.add; the last reads the sum, sets the tile back to zero and runs the epilogue.
  //   reduce 2: a tile's slices are one cluster of `splits` CTAs, each one unit (the grid is the
  //     units, not persistent); the peers' partials go into rank 0's ring, which adds them
  //     (common/split_k_cluster.cuh). Pairs along N alone (KILN_PAIR_SUM): a cluster of 2 x `splits`
  //     CTAs, each pair's slice 1 adding into slice 0's ring; not with pairs along M.
  // (common/split_k.cuh)
  int splits;
  float* ws;
  u32* counters;
  int reduce;
  int a_rows;  // rows of the A box (the tensor map's): BM, or fewer when M is smaller
  int tma_c;   // KILN_TMAE: 1 when tma_c maps C (the TMA-store epilogue), 0 for registers
  int tma_sa;  // KILN_SSCALE = 2: 1 when tma_sa maps the A scales ([K/128, M], M % 4 == 0);
               // any KILN_SSCALE: 2 when the producer bulk-copies them (no map; M % 4 == 0)
  int order;   // 1: the consumers take turns issuing K blocks (drained promoted kernels only)
  // Stream-K (sk_w > 0; splits = 1, reduce 1): cluster tiles below sk_from run whole, cluster g
  // taking g, g + clusters, ..; then the sk_w K blocks of the tiles from sk_from on, laid end to
  // end, are cut into one contiguous range per cluster (sk_start: g * sk_w / clusters on), so
  // every cluster computes the same number of K blocks (+-1). A range may lie inside one tile
  // (fewer tiles than clusters: M <= 128) or run across several; a tile is summed atomically
  // from every range it lies in (sk_ranges). The host keeps sk_w >= clusters (no empty range)
  // and sk_w * clusters < 2^31 (32-bit arithmetic, as split_range's).
  int sk_from;
  u32 sk_w;
  int ring_epi;  // 1: the last unit's tile staged in the ring, all at once (the host: splits 1)
  // Programmatic dependent launch (KILN_FP8_PDL, common/grid_dep.cuh; 0 when launched plainly):
  // bit 0, launched as the programmatic dependent of the kernel before it: every thread that
  // reads global memory waits for that grid first (griddepcontrol.wait), and each CTA lets the
  // next kernel launch as soon as it starts (its CTAs take the SMs as this grid's leave). Bit 1
  // (single CTAs: not in clusters that multicast): the B tiles of the first unit's first STAGES K blocks are loaded
  // before the wait, so the weights stream while the kernel before still runs; the caller
  // promises that no earlier work on the stream writes B.
  int pdl;
};

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    gemm_fp8_wgmma(const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b,
                   const __grid_constant__ TmaMap tma_c, const __grid_constant__ TmaMap tma_sa,
                   const Fp8Args p) {
  extern __shared__ unsigned char smem_raw[];
  // The 128B swizzle pattern follows absolute address bits: tiles start on 1024 bytes.
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 stages0 = base + ARES_BYTES;              // the ring (KILN_ARES: A's blocks before it)
  const u32 cstage = stages0 + STAGES * STAGE_BYTES;  // KILN_TMAE's staging chunks, 1024-aligned
  const u32 sares = cstage + C_BYTES;                 // KILN_ARES: A's resident scales
  const u32 slots = sares + SA_RES_BYTES;             // KILN_SSCALE's scale slots, 1024-aligned
  const u32 bars = slots + SLOT_BYTES * STAGES;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
  auto a_full = [&](int kb) { return bars + 8u * (2 * STAGES + kb); };  // KILN_ARES: A block kb landed
  auto slot = [&](int s) { return slots + SLOT_BYTES * s; };
  const int wg = warpgroup_index();
  if (threadIdx.x == 0) {
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    if (TMA_EPI && p.tma_c) tma_prefetch(&tma_c);
    if (A_SCALE_TMA && p.tma_sa == 1) tma_prefetch(&tma_sa);
    for (int s = 0; s < STAGES; ++s) {
      // the producer's arrive.expect_tx, and with KILN_SSCALE each lane of the scale copier
      // (Fp8Args.tma_sa = 3: the producer's alone, the copier idle)
      mbar_init(full(s), SSCALE && !ARES && !(SB_BULK && p.tma_sa == 3) ? 1 + 32 : 1);
      // lane 0 of each consumer warp of this CTA and of each peer this CTA writes into
      // (ping-pong: only the consumer whose tile the stage holds)
      mbar_init(empty(s), 4 * (PINGPONG ? 1 : NCONS) * (CM + CN - 1));
    }
    for (int kb = 0; kb < KA; ++kb) mbar_init(a_full(kb), 1);
    mbar_fence_init();
    if (p.pdl & 1) launch_dependents();
  }
  // peers' barriers exist before any multicast or remote arrive
  if constexpr (CLUSTER > 1) cluster_sync();
  else __syncthreads();
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int ctiles_m = (tiles_m + CM - 1) / CM, ctiles_n = (tiles_n + CN - 1) / CN;
  const int kblocks = (p.k + BK - 1) / BK;
  const int splits = p.splits, ctiles = ctiles_m * ctiles_n;
  // Work units by token. u < units: slice u % splits of cluster tile u / splits (CM x CN block
  // tiles, in the grouped order over cluster tiles), cluster b taking b, b + clusters, ..; with
  // stream-K (Fp8Args.sk_w) the tiles below sk_from only, whole, and then token units + x is the
  // piece of this cluster's range [sk_lo, sk_hi) that starts x K blocks into the stream-K tiles
  // (to the end of its tile or of the range). The block tile (tm, tn) this CTA computes is rank
  // rm + CM * rn of the cluster (rm along M, rn along N); t numbers it for the split-K workspace
  // and counters; ns is how many units sum into it (1: none).
  const int first = blockIdx.x / CLUSTER, stride = gridDim.x / CLUSTER;
  const int units = WHOLE ? ctiles : (p.sk_w ? min(p.sk_from, ctiles) : ctiles) * splits;
  const u32 sk_lo = sk_start((u32)first, p.sk_w, (u32)stride), sk_hi = sk_start((u32)first + 1, p.sk_w, (u32)stride);
  const int u_first = first < units ? first : units + (int)sk_lo, u_end = units + (int)sk_hi;
  auto u_next = [&](int u) {
    if constexpr (WHOLE) return u + stride;  // (whole tiles: no slices, no stream-K)
    if (u < units) return u + stride < units ? u + stride : units + (int)sk_lo;
    const u32 x = (u32)(u - units), kb = (u32)kblocks;
    return units + (int)min((x / kb + 1) * kb, sk_hi);
  };
  auto unit = [&](int u, int& t, int& tm, int& tn, int& kb0, int& kb1, int& sp, int& ns) {
    int ct;
    if (WHOLE) {
      ct = u;
      sp = 0;
      ns = 1;
      kb0 = 0;
      kb1 = kblocks;
    } else if (u < units) {
      ct = u / splits;
      sp = u % splits;
      ns = splits;
      split_range(sp, splits, kblocks, kb0, kb1);
    } else {
      const u32 x = (u32)(u - units), kb = (u32)kblocks, tr = x / kb;
      ct = p.sk_from + (int)tr;
      kb0 = (int)(x - tr * kb);
      kb1 = (int)min(kb, (u32)kb0 + (sk_hi - x));
      sp = 0;
      ns = sk_ranges(tr * kb, kb, p.sk_w, (u32)stride);
    }
    int ctm, ctn;
    tile_coords(ct, ctiles_m, ctiles_n, ctm, ctn);
    // the rank read where it is needed (a special register): none held across the consumers'
    // K loop, which a 2 x 2 cluster's need
#if KILN_PAIR_SUM
    const int r = (int)(cluster_ctarank() % CLUSTER);
#else
    const int r = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
#endif
    tm = ctm * CM + r % CM;
    tn = ctn * CN + r / CM;
    t = ct * CLUSTER + r;
  };

  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      // whole boxes, zero fill included; KILN_SSCALE = 2: BM A scales; a bulk copy: the
      // tile's rows within M
      // (KILN_ARES: A and its scales once, on a_full; the B runs by bulk copies)
      const bool sa_by_tma = !ARES && A_SCALE_TMA && p.tma_sa == 1, sa_by_bulk = !ARES && SA_BULK && p.tma_sa >= 2;
      const bool sb_by_bulk = ARES || (SB_BULK && p.tma_sa == 3);
      const int nblocks_b = (p.n + 127) / 128;
      const u32 box_tx = (ARES ? 0u : (u32)p.a_rows * BK) + B_BYTES + (sa_by_tma ? BM * 4 : 0);
      // the bulk copies' bytes of a unit: the tile's rows within M, its B blocks within N
      auto scale_bytes = [&](int tm, int tn) {
        return (sa_by_bulk ? 4u * (u32)min(BM, p.m - tm * BM) : 0u) +
               (sb_by_bulk ? 16u * (u32)min(B_SPAN, nblocks_b - tn * BN / 128) : 0u);
      };
      // the K block's A scales of the tile's rows: box {BM, 1} of the map over [K/128, M], or
      // the same run of scales by one bulk copy; with tma_sa = 3 each B block's run of four
      auto load_slot = [&](int s, int kb, int tm, int tn) {
        if (sa_by_tma) tma_load_2d(slot(s), &tma_sa, full(s), tm * BM, kb);
        else if (sa_by_bulk) bulk_copy_g2s(slot(s), p.sa + (i64)kb * p.m + tm * BM, 4u * (u32)min(BM, p.m - tm * BM), full(s));
        if (sb_by_bulk) {
#pragma unroll
          for (int i = 0; i < B_SPAN; ++i) {
            const int nb = tn * BN / 128 + i;
            if (nb < nblocks_b) bulk_copy_g2s(slot(s) + SB_OFF + 16 * i, p.sb + (i64)nb * kblocks + (kb & ~3), 16, full(s));
          }
        }
      };
      // the CTAs sharing this CTA's B tile (same rn: ranks CM * rn ..) and its A tile (same rm)
#if KILN_PAIR_SUM
      // (the pair's ranks from its slice's first, hw - rank)
      const int hw = (int)cluster_ctarank(), rank = hw % CLUSTER, rm = rank % CM, rn = rank / CM;
      const u16 b_peers = (u16)(((1 << CM) - 1) << (CM * rn));
      const u16 a_peers = (u16)(((1 << rm) | (CN > 1 ? 1 << (rm + CM) : 0)) << (hw - rank));
#else
      const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0, rm = rank % CM, rn = rank / CM;
      const u16 b_peers = (u16)(((1 << CM) - 1) << (CM * rn));
      const u16 a_peers = (u16)((1 << rm) | (CN > 1 ? 1 << (rm + CM) : 0));
#endif
      u32 it = 0;
      // Fp8Args.pdl bit 1: the first unit's first `early` stages (fresh: no empty wait) take
      // their B tiles before the wait for the grid before, their A (and scales) after it.
      u32 early = 0;
      if (!WHOLE && CLUSTER == 1 && (p.pdl & 2) && u_first < u_end) {
        int t, tm, tn, kb0, kb1, sp, ns;
        unit(u_first, t, tm, tn, kb0, kb1, sp, ns);
        early = (u32)min(kb1 - kb0, STAGES);
        for (u32 j = 0; j < early; ++j) {
          mbar_arrive_expect_tx(full((int)j), box_tx + scale_bytes(tm, tn));
          tma_load_2d(stages0 + j * STAGE_BYTES + B_OFF, &tma_b, full((int)j), (kb0 + (int)j) * BK, tn * BN);
        }
      }
      if (p.pdl & 1) grid_dependency_wait();
      for (int u = u_first; u < u_end; u = u_next(u)) {
        int t, tm, tn, kb0, kb1, sp, ns;
        unit(u, t, tm, tn, kb0, kb1, sp, ns);
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          const int s = it % STAGES;
          const u32 sa = stages0 + s * STAGE_BYTES;
          if (ARES && it < (u32)kblocks) {
            // the first unit's K block kb: A's block (the tile's rows, every unit's: M <= BM) and
            // its scales, resident from now on, ahead of the block's B
            const u32 ra = (u32)min(BM, p.m);
            mbar_arrive_expect_tx(a_full(kb), (u32)p.a_rows * BK + 4u * ra);
            tma_load_2d(base + kb * A_BYTES, &tma_a, a_full(kb), kb * BK, 0);
            bulk_copy_g2s(sares + kb * BM * 4, p.sa + (i64)kb * p.m, 4u * ra, a_full(kb));
          }
          if (it < early) {  // B on its way already
            tma_load_2d(sa, &tma_a, full(s), kb * BK, tm * BM);
            load_slot(s, kb, tm, tn);
            continue;
          }
          // fresh barriers: parity 1 passes; in a cluster, free once the consumers of every CTA
          // this one multicasts into (its peers along M and N) have read the stage
          mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);
          mbar_arrive_expect_tx(full(s), box_tx + scale_bytes(tm, tn));  // whole A and B tiles land, every part
          if constexpr (CN > 1)
            tma_load_2d_multicast(sa + rn * A_PART * 128, &tma_a, full(s), kb * BK, tm * BM + rn * A_PART,
                                  a_peers);
          else if constexpr (!ARES)
            tma_load_2d(sa, &tma_a, full(s), kb * BK, tm * BM);
          if constexpr (CM > 1)
            tma_load_2d_multicast(sa + A_BYTES + rm * B_PART * 128, &tma_b, full(s), kb * BK,
                                  tn * BN + rm * B_PART, b_peers);
          else
            tma_load_2d(sa + B_OFF, &tma_b, full(s), kb * BK, tn * BN);
          load_slot(s, kb, tm, tn);
        }
      }
    } else if (SSCALE && !ARES && threadIdx.x / 32 == 1 && !(SB_BULK && p.tma_sa == 3)) {
      // The scale copier: the same (unit, K block) sequence as the TMA thread; rows past M and a
      // B block past N are zero-filled (their products are never stored).
      const int lane = threadIdx.x % 32, nblocks_b = (p.n + 127) / 128;
      if (p.pdl & 1) grid_dependency_wait();  // the scales may be the grid before's output
      u32 it = 0;
      for (int u = u_first; u < u_end; u = u_next(u)) {
        int t, tm, tn, kb0, kb1, sp, ns;
        unit(u, t, tm, tn, kb0, kb1, sp, ns);
        // Lanes 0 .. B_SPAN - 1: the tile's B blocks. 40 registers: keep it lean.
        const int nb = tn * BN / 128 + lane;
        const bool b_in = lane < B_SPAN && nb < nblocks_b;
        const float* sb_k = p.sb + (b_in ? (i64)nb * kblocks : 0);
        const float* sa_k = p.sa + (i64)kb0 * p.m;
        // the A scales by TMA (a map, or one bulk copy): this warp copies B's only
        const int a_rows = p.tma_sa ? 0 : BM;
        for (int kb = kb0; kb < kb1; ++kb, ++it, sa_k += p.m) {
          const int s = it % STAGES;
          mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);
          const u32 sl = slot(s);
#pragma unroll 1
          for (int r = lane; r < a_rows; r += 32) {
            const int m = tm * BM + r;
            cp_async4_zfill(sl + 4 * r, sa_k + (m < p.m ? m : 0), m < p.m ? 4 : 0);
          }
          if (lane < B_SPAN) cp_async4_zfill(sl + 4 * (BM + lane), sb_k + (b_in ? kb : 0), b_in ? 4 : 0);
          cp_async_mbar_arrive_noinc(full(s));
        }
      }
    }
    return;
  }

  warpgroup_reg_inc<CONSUMER_REGS>();
  // (the consumers read scales, the split-K sums and counters, and write C: all after the grid
  // before has finished)
  if (p.pdl & 1) grid_dependency_wait();
  const int c = wg - 1;
  const int arow = SPLIT_N || PINGPONG ? 0 : 64 * c;  // this consumer's first row and column in the tile
  const int bcol = SPLIT_N ? WN * c : 0;
  const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
  // A consumer warp frees stage s in this CTA and in each peer that multicasts into it: the one
  // sharing its B tile (along M: rank ^ 1) and the one sharing its A tile (along N: rank ^ CM).
  auto release = [&](int s) {
    if (lane != 0) return;
    mbar_arrive(empty(s));
    if constexpr (CLUSTER > 1) {
      const u32 r = cluster_ctarank();  // read here: no register held across the K loop
      if constexpr (CM > 1) mbar_arrive_cluster(mbar_peer(empty(s), r ^ 1));
      if constexpr (CN > 1) mbar_arrive_cluster(mbar_peer(empty(s), r ^ CM));
    }
  };
  // Fp8Args.order: a consumer waits for its turn before it issues (or skips) a K block and passes
  // the turn after. Consumer 1 hands consumer 0 the first; both walk the same units and K blocks,
  // so the turns alternate block by block through every unit, and consumer 0 takes the last
  // hand-off after its loop (no arrival is left on a barrier at exit). The same value for every
  // thread: both consumers take turns or neither.
  const bool order = PROMOTE && !PIPE && NCONS == 2 && p.order != 0;
  auto turn_wait = [&]() {
    if (order) named_barrier_sync(TURN + c, 256);
  };
  auto turn_pass = [&]() {
    if (order) named_barrier_arrive(TURN + (1 - c), 256);
  };
  if (order && c == 1) named_barrier_arrive(TURN, 256);
  // KILN_PINGPONG: consumer 0 has the first turn (TURN + c: consumer c may start its K loop)
  if (PINGPONG && c == 1 && u_first < u_end) named_barrier_arrive(TURN, 256);
  // Stage 0's descriptors (K-major, 128B swizzle): this consumer's 64 rows of A and WN rows of B.
  // A stage and a k32 step (32 bytes along the row) only move the start address.
  // (KILN_ARES: A's resident block 0, the others A_BYTES apart)
  const u64 da0 = wgmma_desc_sw128(base + arow * 128, 16, 1024);
  const u64 db0 = wgmma_desc_sw128(stages0 + B_OFF + bcol * 128, 16, 1024);
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
  Epi epi(cstage, 0, c, w, lane);  // (its barriers are the C-load epilogue's: none here)
  // (KILN_ARES: the host runs it only with a map of C)
  const bool tma_out = TMA_EPI && (ARES || p.tma_c != 0);
  // KILN_TMAE = 3: the last tile's deferred chunks (C_NCH - DCH ..) of scaled C as 16-bit pairs
  // (pair 4J + x of 16-column block J, what stage_chunk_16 reads, less the chunks sent at once)
  // and what is left of them to store: chunks dnch - dleft .. dnch - 1 (of its dnch within N) at
  // the consumer's rows dm0 .., columns dn0 ... defer_step stages and sends the next one (the
  // chunk index unrolled: the pairs stay in registers).
  u32 packed[DEFER ? DCH * 16 : 1];
  int dleft = 0, dnch = 0, dm0 = 0, dn0 = 0;
  auto defer_step = [&]() {
    if constexpr (DEFER) {
      if (dleft == 0) return;
      const int next = dnch - dleft;
#pragma unroll
      for (int ch = 0; ch < C_NCH; ++ch)
        if (ch == next)
          if (ch >= C_NCH - DCH) epi.store_chunk(&tma_c, ch, dnch, dm0, dn0, 0.0f, [&](int J, int x) { return packed[4 * J + x - 16 * (C_NCH - DCH)]; });
      --dleft;
    }
  };

  float acc[HR];    // a K block's (or half's) sums; without promotion, the whole K's
  float fin[NR];    // the promoted sums (unused, and so not allocated, without promotion)
  float acc2[HR];   // KILN_PIPE's second accumulator (likewise)
  float acc_hi[HR];  // KILN_PINGPONG: the tile's rows 64..127, acc its rows 0..63 (else unused)
  u32 afr[BK / 32][4];  // KILN_ARS: A's fragments of the K block's four k32 steps (else unused)
  // KILN_ARS: this consumer's fragments of stage s, an ldmatrix.x4 a k32 step: lanes 8j..8j+7
  // address matrix j's rows (the warp's rows + 8 (j & 1), bytes 16 (j >> 1) of the step's 32),
  // each row's 16-byte chunk c at c ^ (row % 8) (the 128B swizzle; rows 8-aligned here).
  auto load_a = [&](int s) {
    const int j = lane / 8, r = lane % 8;
    const u32 rowb = base + s * STAGE_BYTES + (arow + 16 * w + r + 8 * (j & 1)) * 128;
#pragma unroll
    for (int kk = 0; kk < BK / 32; ++kk) ldmatrix_x4(afr[kk], rowb + (((2 * kk + (j >> 1)) ^ r) << 4));
  };
  // Keeps the compiler from reusing the fragments' registers while a batch may still read them.
  auto fence_a = [&]() {
    if constexpr (ARS) {
#pragma unroll
      for (int kk = 0; kk < BK / 32; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(afr[kk][r])::"memory");
    }
  };
#pragma unroll
  for (int i = 0; i < HR; ++i) acc[i] = 0.0f;
  if constexpr (PIPE) {
#pragma unroll
    for (int i = 0; i < HR; ++i) acc2[i] = 0.0f;
  }
  u32 it = 0;
  int ui = 0;  // KILN_PINGPONG: the unit's place in this CTA's sequence (consumer ui % 2 takes it)
  for (int u = u_first; u < u_end; u = u_next(u)) {
    int t, tm, tn, kb0, kb1, sp, ns;
    unit(u, t, tm, tn, kb0, kb1, sp, ns);
    const int nk = kb1 - kb0;  // this unit's K blocks kb0 .. kb1 - 1 (at least one)
    if constexpr (PINGPONG) {
      if ((ui++ & 1) != c) {  // the other consumer's tile: its K blocks pass by in the ring
        it += (u32)nk;
        continue;
      }
      named_barrier_sync(TURN + c, 256);
    }
    const u32 it_unit = it;    // the ring iteration of its first (Fp8Args.tma_sa = 3: kb % 4)
    // Fp8Args.ring_epi: this CTA's last unit, after which the ring takes no more loads
    const bool ring = RING_EPI && tma_out && p.ring_epi != 0 && u_next(u) >= u_end;
    const int m0 = tm * BM, n0 = tn * BN + bcol;  // the consumer's first row of C is m0 + arow
    const int row = m0 + arow + 16 * w + lane / 4;  // this thread's rows: row, row + 8
    // Block scales: the consumer's column groups J < jb lie in B block nb0, the rest
    // (B_STRADDLE) in nb0 + 1, or (B_TRIPLE) from jb + 16 on in nb0 + 2; nb0 is the tile's first
    // or second B block (ib).
    const int nb0 = n0 / 128, jb = (128 - n0 % 128) / 8, ib = nb0 - tn * BN / 128;
    if constexpr (PROMOTE && !DEFER) {  // (deferred: the first K block writes fin fresh)
#pragma unroll
      for (int i = 0; i < NR; ++i) fin[i] = 0.0f;
    }
    // This K block's scales (block mode, KILN_SSCALE = 0), loaded ahead of their use so that
    // they arrive under the wgmmas.
    auto load_scales = [&](int j) {
      BlockScales sc{0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      const int kb = kb0 + j;
      if (SCALE == 2 && !SSCALE && j < nk) {
        if (row < p.m) sc.a0 = p.sa[(i64)kb * p.m + row];
        if (row + 8 < p.m) sc.a1 = p.sa[(i64)kb * p.m + row + 8];
        sc.b0 = p.sb[(i64)nb0 * kblocks + kb];
        if (B_STRADDLE && nb0 + 1 < nblocks_b) sc.b1 = p.sb[(i64)(nb0 + 1) * kblocks + kb];
      }
      return sc;
    };
    // Waits for ring iteration i's stage and issues its four wgmmas into `a` as one batch
    // (`fresh`: the first ignores a's old value); of part h's columns where the consumer's
    // width runs in PARTS (the stage waited for, and its scales read, with part 0). With
    // KILN_SSCALE, returns the stage's block scales, read before the stage is released.
    auto issue = [&](u32 i, float(&a)[HR], bool fresh, int h = 0) {
      const int s = i % STAGES;
      const int kb = kb0 + (int)(i - it_unit);
      if (h == 0) mbar_wait(full(s), (i / STAGES) & 1);
      // KILN_ARES: A's block kb resident (landed once: parity 0 passes from then on)
      if (ARES && h == 0) mbar_wait(a_full(kb), 0);
      BlockScales sc{0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      if (SSCALE && h == 0) {
        const u32 sl = slot(s);
        const int r = arow + 16 * w + lane / 4;
        const u32 sas = ARES ? sares + 4 * BM * kb : sl;
        sc.a0 = ld_shared_f32(sas + 4 * r);
        sc.a1 = ld_shared_f32(sas + 4 * (r + 8));
        // B block i's scale at 4 i past the A scales, or (tma_sa = 3, KILN_ARES) in its 16-byte
        // run of four K blocks, at 16 i + 4 (kb % 4)
        const bool runs = ARES || (SB_BULK && p.tma_sa == 3);
        const u32 bstep = runs ? 16u : 4u;
        const u32 bsl = sl + SB_OFF + (runs ? 4u * (u32)(kb & 3) : 0u);
        sc.b0 = ld_shared_f32(bsl + bstep * ib);
        // (a consumer that starts in the tile's second block ends there: its b1 goes unused)
        if constexpr (B_STRADDLE) sc.b1 = ld_shared_f32(bsl + bstep);
        if constexpr (B_TRIPLE) sc.b2 = ld_shared_f32(bsl + 2 * bstep);
      }
      if (ARS && h == 0) load_a(s);
#pragma unroll
      for (int j = 0; j < HR; ++j) wgmma_fence_operand(a[j]);
      if constexpr (PINGPONG) {
#pragma unroll
        for (int j = 0; j < HR; ++j) wgmma_fence_operand(acc_hi[j]);
      }
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 32; ++kk) {
        const u64 db = wgmma_desc_add(db0, s * STAGE_BYTES + h * HN * 128 + kk * 32);
        if constexpr (ARS)
          wgmma_m64k32_fp8_rs<FA, FB, HN>(a, afr[kk], db, (kk > 0 || !fresh) ? 1 : 0);
        else
          wgmma_m64k32_fp8<FA, FB, HN>(a, wgmma_desc_add(da0, (ARES ? kb * A_BYTES : s * STAGE_BYTES) + kk * 32), db,
                                       (kk > 0 || !fresh) ? 1 : 0);
        // (ping-pong: the tile's second 64 rows, 8 KB further in the stage's A)
        if constexpr (PINGPONG)
          wgmma_m64k32_fp8<FA, FB, HN>(acc_hi, wgmma_desc_add(da0, s * STAGE_BYTES + 64 * 128 + kk * 32), db,
                                       (kk > 0 || !fresh) ? 1 : 0);
      }
      wgmma_commit();
#pragma unroll
      for (int j = 0; j < HR; ++j) wgmma_fence_operand(a[j]);
      if constexpr (PINGPONG) {
#pragma unroll
        for (int j = 0; j < HR; ++j) wgmma_fence_operand(acc_hi[j]);
      }
      return sc;
    };
    // A finished batch's sums `a` (half h's) into fin: multiplied by their block's scales, or as
    // they are; `fresh` (a constant: the deferred epilogue's first K block) in place of fin's
    // old value (the same bits as adding to zero but for a zero's sign; tensor scales add to
    // zero: a plain copy let ptxas wait on the batch early, C7517).
    auto promote = [&](float(&a)[HR], const BlockScales& sc, int h = 0, bool fresh = false) {
#pragma unroll
      for (int j = 0; j < HR; ++j) wgmma_fence_operand(a[j]);
      if constexpr (SCALE == 2) {
        // fin register i: row + 8 ((i >> 1) & 1), column group i >> 2
        const float s00 = sc.a0 * sc.b0, s10 = sc.a1 * sc.b0, s01 = sc.a0 * sc.b1, s11 = sc.a1 * sc.b1;
        const float s02 = B_TRIPLE ? sc.a0 * sc.b2 : 0.0f, s12 = B_TRIPLE ? sc.a1 * sc.b2 : 0.0f;
#pragma unroll
        for (int j = 0; j < HR; ++j) {
          const int i = h * HR + j;
          const bool r8 = (i >> 1) & 1;
          const int J = i >> 2;
          // (the 256-wide tile starts on a B block: its column groups J < 16 lie in the first)
          const float f = BN == 256 && PARTS > 1         ? (J < 16 ? (r8 ? s10 : s00) : (r8 ? s11 : s01))
                          : (!B_STRADDLE || J < jb)      ? (r8 ? s10 : s00)
                          : (!B_TRIPLE || J < jb + 16) ? (r8 ? s11 : s01)
                                                       : (r8 ? s12 : s02);
          fin[i] = fresh ? f * a[j] : fmaf(f, a[j], fin[i]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < HR; ++j) fin[h * HR + j] = (fresh ? 0.0f : fin[h * HR + j]) + a[j];
      }
    };
    // Deferred and promoted: the last tile's chunks of part h's columns (indices unrolled: each
    // pair dead once sent); after the last part none is left.
    auto send_part = [&](int h) {
      if constexpr (DEFER && PROMOTE) {
#pragma unroll
        for (int ch = h * C_NCH / PARTS; ch < (h + 1) * C_NCH / PARTS; ++ch)
          if (ch < dnch)
            epi.store_chunk(&tma_c, ch, dnch, dm0, dn0, 0.0f, [&](int J, int x) { return packed[4 * J + x]; });
        if (h == PARTS - 1) dleft = 0;
      }
    };
    if (PROMOTE && (m0 + arow >= p.m || n0 >= p.n)) {
      // All of this consumer's rows lie past M (M <= 64 in a 128-row tile), or all its columns
      // past N: it only frees the stages, leaving the tensor cores to the other consumer.
      // (Promoted kernels only: in the unpromoted ones ptxas then serialised the wgmmas, C7515.)
      // Its sums (zero) still go through split-K, where every consumer thread counts.
#pragma unroll
      for (int h = 0; h < PARTS; ++h) send_part(h);
      if constexpr (DEFER) {  // (no K block writes fin here: zero, not the last tile's)
#pragma unroll
        for (int i = 0; i < NR; ++i) fin[i] = 0.0f;
      }
      for (int j = 0; j < nk; ++j, ++it) {
#pragma unroll
        for (int h = 0; h < PARTS; ++h) {
          turn_wait();
          if (h == 0) mbar_wait(full(it % STAGES), (it / STAGES) & 1);
          if (h == PARTS - 1) release(it % STAGES);
          turn_pass();
        }
      }
    } else if constexpr (!PROMOTE) {
      // One accumulator over the whole K; one batch kept in flight: once the previous one is
      // done, its stage can be refilled.
      // KILN_TMAE = 3: the last tile's C goes out a chunk a K block, under this tile's batches.
      int prev = 0;
      for (int j = 0; j < nk; ++j, ++it) {
        issue(it, acc, j == 0);
        wgmma_wait<1>();
        if (j > 0) release(prev);
        prev = it % STAGES;
        defer_step();
      }
      // KILN_PINGPONG: the other consumer's turn (if this CTA has a next unit): its first
      // wgmmas queue behind this tile's last, while this consumer drains and stores
      if (PINGPONG && u_next(u) < u_end) named_barrier_arrive(TURN + (1 - c), 256);
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < HR; ++i) wgmma_fence_operand(acc[i]);
      if constexpr (PINGPONG) {
#pragma unroll
        for (int i = 0; i < HR; ++i) wgmma_fence_operand(acc_hi[i]);
      }
      release(prev);
    } else if constexpr (!PIPE) {
      // Each K block's batch drains before its promotion (the other consumer's wgmmas run
      // meanwhile; taking turns, always).
      // The 256-wide tile: its two halves in turn, the stage freed after the second.
      // Deferred (KILN_TMAE = 3): the first K block peeled, the last tile's chunks of half h's
      // columns staged under half h's batch (chunk indices unrolled: each pair dead once sent),
      // its promotion fresh.
      auto kblock = [&](int j, auto first_t) {
        constexpr bool FIRST = decltype(first_t)::value;
        BlockScales sc = load_scales(j);
#pragma unroll
        for (int h = 0; h < PARTS; ++h) {
          turn_wait();
          const BlockScales ss = issue(it, acc, true, h);
          turn_pass();
          if (SSCALE && h == 0) sc = ss;
          if constexpr (FIRST) send_part(h);
          wgmma_wait<0>();
          if (h == PARTS - 1) release(it % STAGES);
          promote(acc, sc, h, FIRST);
        }
      };
      int j = 0;
      if constexpr (DEFER) {
        kblock(j++, Flag<true>{});
        ++it;
      }
      for (; j < nk; ++j, ++it) kblock(j, Flag<false>{});
    } else if constexpr (PARTS > 1) {
      // Pipelined over parts: even parts in acc, odd in acc2; at the top of each pair exactly
      // part h's batch is in flight (in acc), and the part after it is issued before part h is
      // promoted (after a K block's last part, the next block's first: its stage waited for and
      // its scales read then, so `sc` holds the block being promoted and `next` the one issued).
      // Every branch below is on the unrolled h, none at run time in the loop (C7514).
      BlockScales sc = issue(it, acc, true, 0);
      for (int j = 0; j + 1 < nk; ++j, ++it) {
#pragma unroll
        for (int h = 0; h < PARTS; h += 2) {
          issue(it, acc2, true, h + 1);
          wgmma_wait<1>();
          promote(acc, sc, h);
          BlockScales next = sc;
          if (h + 2 < PARTS) {
            issue(it, acc, true, h + 2);
            wgmma_wait<1>();
          } else if constexpr (ARS) {
            // the block's fragments are free once its last part has landed
            wgmma_wait<0>();
            fence_a();
            release(it % STAGES);
            next = issue(it + 1, acc, true, 0);
          } else {
            next = issue(it + 1, acc, true, 0);
            wgmma_wait<1>();
          }
          if (h + 2 == PARTS && !ARS) release(it % STAGES);
          promote(acc2, sc, h + 1);
          sc = next;
        }
      }
      // the last K block: nothing after its last part. (nk >= 1 always; written as a branch, as
      // the blocks-pipelined loop's tail is, ptxas sees the promotions read finished batches:
      // straight-line, it serialised every wgmma, C7514.)
      if (nk > 0) {
#pragma unroll
        for (int h = 0; h < PARTS; h += 2) {
          issue(it, acc2, true, h + 1);
          wgmma_wait<1>();
          promote(acc, sc, h);
          if (h + 2 < PARTS) {
            issue(it, acc, true, h + 2);
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
            fence_a();
            release(it % STAGES);
          }
          promote(acc2, sc, h + 1);
        }
      } else {
        wgmma_wait<0>();
      }
      ++it;
    } else {
      // Two accumulators in turn: K block j + 1's batch is issued before block j's is
      // promoted, so the tensor cores work while the CUDA cores promote. The loop body has no
      // branch, and at its top exactly block j's batch (in acc) is in flight, on entry and on
      // every lap: ptxas can then see that each promotion reads a finished batch (written with
      // a conditional issue inside the loop, it serialised every wgmma: C7514). Block scales
      // from global memory are loaded two blocks ahead of their promotion (one ahead left their
      // latency exposed); from shared memory, with their stage.
      BlockScales s0 = load_scales(0), s1 = load_scales(1);
      auto take = [&](BlockScales& dst, const BlockScales& from_stage) {
        if constexpr (SSCALE) dst = from_stage;
      };
      take(s0, issue(it, acc, true));
      int j = 0;
      for (; j + 2 < nk; j += 2, it += 2) {
        take(s1, issue(it + 1, acc2, true));
        wgmma_wait<1>();
        release(it % STAGES);
        promote(acc, s0);
        if constexpr (!SSCALE) s0 = load_scales(j + 2);
        take(s0, issue(it + 2, acc, true));
        wgmma_wait<1>();
        release((it + 1) % STAGES);
        promote(acc2, s1);
        if constexpr (!SSCALE) s1 = load_scales(j + 3);
      }
      if (j + 1 < nk) {  // two blocks left: j (in flight in acc) and j + 1
        take(s1, issue(it + 1, acc2, true));
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
    // (without promotion acc holds the whole K, HR = NR)
    float(&sums)[NR] = *[&]() {
      if constexpr (PROMOTE) return &fin;
      else return &acc;
    }();
    // (a tile run in parts, by three consumers or promoted with its epilogue deferred is never split)
    if (!WHOLE && PARTS == 1 && NCONS == 2 && !PINGPONG && !(KILN_TMAE == 3 && PROMOTE) && ns > 1) {
      const int ct = threadIdx.x - 128;
      if (p.reduce == 2) {
        // The tile's slices are this cluster's CTAs (rank sp), one unit each
        // (common/split_k_cluster.cuh): once every consumer is past its K blocks, rank 0's ring
        // takes the peers' partials, and rank 0 goes on with their sum. (KILN_PAIR_SUM: each pair's
        // CTA rn of slice sp is rank CLUSTER * sp + rn, and rank rn, its slice 0, sums; every
        // multicast into that ring has landed once its own consumers are past their K blocks.)
        cluster_sync();
#if KILN_PAIR_SUM
        if (sp != 0) split_cluster_put_to(base + (u32)(sp - 1) * (256u * NR * 4u), cluster_ctarank() % CLUSTER, ct, sums);
#else
        if (sp != 0) split_cluster_put(base + (u32)(sp - 1) * (256u * NR * 4u), ct, sums);
#endif
        cluster_sync();
        if (sp != 0) continue;
        split_cluster_sum(base, ns, ct, sums);
      } else if (p.reduce) {
        // Atomic adds into the tile's one fp32 sum; only the slice that counts last goes on.
        // Rows past M (and a consumer wholly past N) add nothing: the sum there stays zero.
        float* tile_ws = p.ws + (i64)t * (BM * BN);
        const bool live = row < p.m && n0 < p.n;
        split_red_partial(tile_ws, ct, sums, live);
        if (!split_arrive(p.counters + t, ns, ct, SPLIT_BAR)) continue;
        split_take_sum(tile_ws, ct, sums, live);
      } else {
        // Partials through the workspace; only the slice that counts last goes on.
        float* tile_ws = p.ws + (i64)t * ns * (BM * BN);
        split_store_partial(tile_ws + (i64)sp * (BM * BN), ct, sums);
        if (!split_arrive(p.counters + t, ns, ct, SPLIT_BAR)) continue;
        split_add_others(tile_ws, ns, sp, ct, sums);
      }
    }
    // Epilogue: scale, convert, store (register i holds row + 8 ((i >> 1) & 1), column
    // n0 + 8 (i >> 2) + 2q + (i & 1)).
    auto epilogue = [&](float(&res)[NR]) {
      if constexpr (SCALE == 1) {
        const float ra0 = row < p.m ? p.alpha * p.sa[row] : 0.0f;
        const float ra1 = row + 8 < p.m ? p.alpha * p.sa[row + 8] : 0.0f;
#pragma unroll
        for (int j = 0; j < WN / 8; ++j) {
          const int n = n0 + 8 * j + 2 * q;
          const float b0 = n < p.n ? p.sb[n] : 0.0f, b1 = n + 1 < p.n ? p.sb[n + 1] : 0.0f;
          res[4 * j] *= ra0 * b0;
          res[4 * j + 1] *= ra0 * b1;
          res[4 * j + 2] *= ra1 * b0;
          res[4 * j + 3] *= ra1 * b1;
        }
      } else {
#pragma unroll
        for (int i = 0; i < NR; ++i) res[i] *= tensor_scale;
      }
      if constexpr (DEFER) {
        // Deferred: what is left of the last tile first (a tile of fewer K blocks than chunks),
        // then this one's pairs, stored under the next tile's K blocks (or after the last).
        // (promoted: none left, the first K block or the skip sent them all; the loop is not
        // written there, or the pairs would stay live through the K blocks.) The pairs are
        // written whatever the path, none to store without the map: else the last tile's would
        // stay live through the K blocks.
        if constexpr (!PROMOTE) while (dleft > 0) defer_step();
        dm0 = m0 + arow;
        dn0 = n0;
        dnch = !tma_out || dm0 >= p.m || n0 >= p.n ? 0 : min(C_NCH, (p.n - n0 + C_COLS - 1) / C_COLS);
#pragma unroll
        for (int ch = 0; ch < C_NCH - DCH; ++ch)
          if (ch < dnch) epi.store_acc_chunk(&tma_c, ch, dnch, dm0, n0, 1.0f, 0.0f, res);
        dleft = dnch > C_NCH - DCH ? dnch - (C_NCH - DCH) : 0;
#pragma unroll
        for (int J = 4 * (C_NCH - DCH); J < WN / 16; ++J)
#pragma unroll
          for (int x = 0; x < 4; ++x) packed[4 * J + x - 16 * (C_NCH - DCH)] = pack_pair<out_t>(res[8 * J + 2 * x], res[8 * J + 2 * x + 1]);
        if (tma_out) return;
      }
      if (TMA_EPI && tma_out) {
        // The ring's stages are free once both consumers are past their last wgmmas (the loads
        // they read have all landed; nothing else loads into it): both reach this barrier.
        if (ring) named_barrier_sync(RING_BAR, 256);
        // A consumer wholly past M or N stores nothing (TMA would drop it all).
        const int cm0 = m0 + arow;
        if (cm0 >= p.m || n0 >= p.n) return;
        const int nch = min(C_NCH, (p.n - n0 + C_COLS - 1) / C_COLS);
        if (ring) {
          // every chunk of this consumer's tile in its own 8 KB of the ring (consumer c's from
          // chunk c * C_NCH on), then one fence, one barrier and the leader's bulk stores
          auto buf = [&](int ch) { return base + (u32)(c * C_NCH + ch) * Epi::CHUNK_BYTES; };
#pragma unroll
          for (int ch = 0; ch < C_NCH; ++ch)
            if (ch < nch) stage_result_chunk<out_t>(buf(ch), ch, w, lane, res);
          fence_proxy_async_shared();
          named_barrier_sync(1 + c, 128);
          if ((threadIdx.x % 128) == 0) {
            for (int ch = 0; ch < nch; ++ch) tma_store_2d(&tma_c, buf(ch), n0 + C_COLS * ch, cm0);
            tma_store_commit();
          }
        } else {
#pragma unroll
          for (int ch = 0; ch < C_NCH; ++ch)
            if (ch < nch) epi.store_acc_chunk(&tma_c, ch, nch, cm0, n0, 1.0f, 0.0f, res);
        }
        // the last C_TAIL columns (8-column groups C_NCH * C_COLS / 8 ..) from registers
        if constexpr (C_TAIL != 0) store_acc_groups<C_NCH * C_COLS / 8>(cout, gp, row, n0, res, q);
      } else {
        store_acc_groups<0>(cout, gp, row, n0, res, q);
      }
    };
    if constexpr (PINGPONG) {
      // both 64-row halves of the tile, each as a cooperative consumer's tile (no deferral: the
      // other consumer's K loop runs meanwhile)
      auto store_rows = [&](float(&res)[HR], int h) {
#pragma unroll
        for (int i = 0; i < HR; ++i) res[i] *= tensor_scale;
        const int cm0 = m0 + 64 * h;
        if (tma_out) {
          if (cm0 >= p.m || n0 >= p.n) return;
          const int nch = min(C_NCH, (p.n - n0 + C_COLS - 1) / C_COLS);
#pragma unroll
          for (int ch = 0; ch < C_NCH; ++ch)
            if (ch < nch) epi.store_acc_chunk(&tma_c, ch, nch, cm0, n0, 1.0f, 0.0f, res);
          if constexpr (C_TAIL != 0) store_acc_groups<C_NCH * C_COLS / 8>(cout, gp, row + 64 * h, n0, res, q);
        } else {
          store_acc_groups<0>(cout, gp, row + 64 * h, n0, res, q);
        }
      };
      store_rows(acc, 0);
      store_rows(acc_hi, 1);
    } else {
      epilogue(sums);
    }
  }
  if (order && c == 0) named_barrier_sync(TURN, 256);  // consumer 1's last hand-off
  while (dleft > 0) defer_step();  // the last tile's deferred chunks
  // Bulk stores still reading the staging chunks finish before the shared memory goes away.
  if (TMA_EPI && tma_out && (threadIdx.x % 128) == 0) tma_store_wait<0>();
  // No CTA may leave while a peer's consumers can still arrive on its barriers.
  if constexpr (CLUSTER > 1) {
    __syncwarp();
    cluster_sync();
  }
}
