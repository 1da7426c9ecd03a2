// MoE expert GEMMs with 4-bit weights (sm_90a): the grouped GEMM Y = X·W[e]ᵀ and, with
// KILN_SWIGLU, the fused gate/up pair H = silu(X·W1[e]ᵀ) ⊙ (X·W3[e]ᵀ) (times the routing weight),
// W in NVFP4 or MXFP4 (KILN_FP4), X and Y bf16 or f16. Hopper has no 4-bit tensor cores: the
// weights are dequantised in registers, exactly (moe/fp4_weights.cuh), straight into wgmma's A
// operand (the register form), so the operands are swapped: Yᵀ = W·Xᵀ, weight rows fill M = 64
// and an expert's tokens are N (8, 16, 32.. up to TT, chosen per tile at run time; the X tile in
// shared memory is the B operand). The weights stream from HBM at 4.5 bits a weight, which is
// the point: at decode the kernel is bound by reading them. The narrow decode tiles (TT 8, 16)
// have small X stages, which leaves room for more stages of weights in flight.
//
// 384 threads: warpgroup 0 produces (its thread 0: per stage the X boxes of the tile's tokens by
// TMA, and each consumer's prepacked weight atoms, one contiguous bulk copy each); warpgroups 1
// and 2 consume, each 64 output columns (one weight atom per stage; SwiGLU: the W1 atom and the
// W3 atom of the same columns). A tile is one expert's up-to-TT tokens by 128 output columns;
// tiles come from a global counter after the first (moe_tile_prefix zeroes it), experts
// heaviest first where the prefix kernel sorts them, and an expert with no rows has no tiles, so
// its weights are never read. The epilogue multiplies by the per-expert factor (tensor scale,
// and the power of two the dequantisation left out), applies silu and the routing weight, and
// stores bf16/f16 pairs of adjacent columns.
//
// Last-wave split (the decode tiles, TT <= 16; Fp4Split.max_splits > 1, KILN_FP4_TAIL): every
// tile streams the same K, so a last wave of a few tiles keeps the GPU for a whole tile's time
// with most CTAs idle (E256 decode: 3,184 tiles on 264 CTAs leave 16 in a 13th wave; 896 leave
// 104 in a 4th). Only here is the tile count known, so the kernel checks whether the last wave
// is at most half full and if so cuts each of its tiles into min(CTAs / tail, max_splits,
// katoms / 4) K slices (with Fp4Split.balance, the default: any last wave, into the slice count
// that ends it first, fp4_balanced_splits): units are the whole tiles, then the slices. A slice stores its fp32
// accumulators (both consumers', fragment order) to ws, counts itself on the tile's counter, and
// the slice that counts last adds the others and runs the epilogue (common/split_k.cuh).
//
// KILN_FP4_MMA (the 8-token tile, `KILN_FP4_MMA=sync`): each consumer warp runs its 16 weight rows
// as warp-level mma.sync m16n8k16 instead of the warpgroup's wgmma (its A fragment layout is
// wgmma's per warp, its C layout wgmma's m64n8 accumulators per warp), X's fragments by ldmatrix
// from the same swizzled stage. A wgmma waits for the warpgroup's four warps, on four schedulers,
// at every batch, so the slowest warp's decode sets the pace of all four; the ncu profile of the
// 512-row decode (d4f7f42) had ~22 % of the stall samples at the two batches' first HGMMA. Warps
// that wait for nobody but their stage, one A set each (mma.sync reads its registers at issue),
// and a stage freed as soon as the warp has read it.
#include "common/bulk_copy.cuh"
#include "common/grid_dep.cuh"
#include "common/mma_sync.cuh"
#include "common/split_k.cuh"
#include "common/tma.cuh"
#include "common/wgmma_rs.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/fp4_experts.cuh"
#include "moe/fp4_epilogue.cuh"
#include "moe/fp4_order.cuh"
#include "moe/fp4_weights.cuh"
#include "moe/trace.cuh"

#if !defined(KILN_SWIGLU) || !defined(KILN_TT) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || \
    !defined(KILN_SMEM) || !defined(KILN_CTAS)
#error "KILN_SWIGLU, KILN_TT, KILN_STAGES, KILN_MAX_EXPERTS, KILN_SMEM and KILN_CTAS must be defined by the host"
#endif

// CTAs per SM: 2 halves each CTA's stages and registers but doubles the consumer warps that
// decode weights on an SM (the decode tiles, whose consumers are bound by each stage's decode
// latency, not by the bytes in flight). The register pool of a CTA is 65536 / (384 CTAS) per
// thread rounded down to 8 (80 for two): 32 + 2 x 104 = 240 of it.
#if !defined(KILN_FP4_MMA)
#define KILN_FP4_MMA 0
#endif
// KILN_FP4_PDL (`KILN_FP4_PDL=wide`, the default from 2026-12-01 on the tiles of 64-256 tokens;
// `=1` on the decode tiles): launched as moe_tile_prefix's programmatic dependent, the CTAs are
// placed and set up their barriers while it runs, then wait for its tables. The grouped GEMM at
// one expert of 200 rows (H200) ran 4-6 % faster so (docs/moe.md, ledger F210).
#if !defined(KILN_FP4_PDL)
#define KILN_FP4_PDL 0
#endif
// KILN_FP4_OWN (`KILN_FP4_PDL=own`, the wide tiles' dependent launch over at most MOE_SORT_MAX
// experts, its tables built just before): warp 0 of each CTA builds the tables itself, into shared
// memory, from the rows the prefix kernel reads (a last parameter, Fp4Rows), instead of waiting for
// the prefix kernel's and loading them; only the producer waits for it, before it takes a tile from
// the counter the prefix kernel zeroes. The expert ids then come from shared memory too (the
// producer's first copy waited for one from L2). Why: the first tile's loads wait neither for the
// prefix kernel's end (its rows' DRAM latency, its stores, the grid's completion) nor for two L2
// round trips after it (docs/moe.md, ledger F223).
#if !defined(KILN_FP4_OWN)
#define KILN_FP4_OWN 0
#endif
static_assert(!KILN_FP4_OWN || KILN_FP4_PDL, "KILN_FP4_OWN is the dependent launch's");
// KILN_FP4_PREFETCH=D (the decode tiles, `KILN_FP4_PREFETCH=D`): the producer asks L2 for each
// weight atom D stages before its stage is filled (a tile's first D at its start, one copy a
// block). The ncu profile of the 512-row decode (53c7c5d) had the consumers waiting for full
// stages in 25 % of the stall samples with DRAM at 73 % of peak (kiln's bf16 kernel reads at
// ~92 %): the ring's bytes in flight do not cover the latency under load, and an L2 prefetch
// adds bytes in flight that hold no shared memory.
#if !defined(KILN_FP4_PREFETCH)
#define KILN_FP4_PREFETCH 0
#endif
constexpr int PREFETCH = KILN_FP4_PREFETCH;
// KILN_FP4_WTMA (`KILN_FP4_LOAD=tma`): the producer loads each weight atom as a TMA box of the
// weights seen as rows of W_ROW bytes (the host's map: no swizzle, 256-byte L2 promotion as
// kiln's bf16 kernels' weight maps) instead of one bulk copy. Both move the same contiguous
// bytes; what differs is how the copy engine asks L2 and DRAM for them. kiln's bf16 SwiGLU reads
// its weights by TMA boxes at ~106 % of the copy rate on the decode counts where these bulk
// copies reach ~80 % (docs/moe.md, ledger F34). The map is a fourth kernel parameter.
#if !defined(KILN_FP4_WTMA)
#define KILN_FP4_WTMA 0
#endif
constexpr u32 W_ROW = 128;  // bytes a row of the weights' map (fp4::kernel::W_MAP_ROW)
static_assert(FP4_ATOM_BYTES % W_ROW == 0, "an atom is whole rows of the weights' map");
// KILN_FP4_STAGGER (`KILN_FP4_STAGGER=1`, the decode tiles): each unit (tile or slice) walks its
// K atoms from a point of its own, a hash of the unit, wrapping; the consumers take the stages in
// the order they come (a sum in another order). Tiles handed out together (an expert's n-tiles,
// the first wave) otherwise stream their blocks in lockstep, every one at the same offset of
// blocks 252 KB apart: if that lands the concurrent requests unevenly on the memory partitions
// and the two L2 halves' fabric (the early profile: the fabric 86 % busy at 73 % DRAM), spreading
// the offsets evens them out (docs/moe.md, ledger F35).
#if !defined(KILN_FP4_STAGGER)
#define KILN_FP4_STAGGER 0
#endif
constexpr bool STAGGER = KILN_FP4_STAGGER;
static_assert(!(STAGGER && PREFETCH > 0), "KILN_FP4_STAGGER walks K out of order; the prefetch assumes in order");
#if KILN_FP4_WTMA
#define FP4_WMAP_PARAM , const __grid_constant__ TmaMap tma_w
#else
#define FP4_WMAP_PARAM
#endif
// KILN_MOE_TRACE (`kiln moe bench --weights F --timeline`, never dispatched): the CTAs stamp their
// phases into a last parameter (moe/trace.cuh), beside the prefix kernel's.
#if KILN_MOE_TRACE
#define FP4_TRACE_PARAM , u64* moe_trace
#else
#define FP4_TRACE_PARAM
#endif
// What KILN_FP4_OWN's CTAs build their tables from (moe_tile_prefix's arguments), laid out as
// `Fp4Rows` in src/ops/moe/fp4/kernel.rs.
struct Fp4Rows {
  const int* rows_in;  // offsets [E + 1] (masked 0) or counts [E] (masked 1)
  int x_rows, max_rows, masked, bm;
};
#if KILN_FP4_OWN
#define FP4_OWN_PARAM , const Fp4Rows own
#else
#define FP4_OWN_PARAM
#endif
constexpr bool kMmaSync = KILN_FP4_MMA;
// KILN_FP4_EPI (`KILN_FP4_EPI=ahead|defer`, the tiles of 64-256 tokens): 1 loads all of a tile's
// routing weights a consumer thread needs at once, then stores; 2 also defers the stores of half
// its results until the next unit's first wgmma batch is issued (moe/fp4_epilogue.cuh says why).
#if !defined(KILN_FP4_EPI)
#define KILN_FP4_EPI 0
#endif
constexpr int EPI = KILN_FP4_EPI;
static_assert(EPI == 0 || KILN_TT >= 64, "KILN_FP4_EPI is the wide tiles' epilogue");

constexpr int CTAS = KILN_CTAS;
static_assert(CTAS == 1 || CTAS == 2, "KILN_CTAS is 1 or 2");
constexpr int PRODUCER_REGS = CTAS == 1 ? 40 : 32, CONSUMER_REGS = CTAS == 1 ? 232 : 104;

// KILN_FP4_GCOLS = 256 (`KILN_FP4_GCOLS=256`, the grouped GEMM's 128-token tile): a tile of
// 256 output columns, each consumer two 64-row weight blocks a stage (MB 2, as the SwiGLU's gate
// and up blocks), so one stage's X serves twice the weight rows. The 256-token GEMM tile of 128
// columns brings 32 KB of X and 4.5 KB of weights a stage into a ring of 5 stages for 1,024 tensor
// cycles; this one 16 KB and 9 KB into 8 stages for the same tensor work. The early profile of
// the 256-token tile at one expert of 300 rows (H200, 5e674b5, docs/moe.md ledger F110) had the
// consumers waiting for landed stages at ~1,800 cycles a stage: its rate is its bytes in flight
// over their latency, and two stages of its five are held by the consumers.
#if !defined(KILN_FP4_GCOLS)
#define KILN_FP4_GCOLS 128
#endif
static_assert(KILN_FP4_GCOLS == 128 || (KILN_FP4_GCOLS == 256 && !KILN_SWIGLU && KILN_TT >= 64),
              "KILN_FP4_GCOLS is 128, or 256 on the grouped GEMM's wide tiles");
static_assert(EPI < 2 || KILN_SWIGLU || KILN_FP4_GCOLS == 128, "KILN_FP4_EPI 2 holds one block's results");
constexpr bool kBf16 = KILN_IN == 0;
constexpr int MB = KILN_SWIGLU ? 2 : KILN_FP4_GCOLS / 128;  // weight atoms per consumer per stage
constexpr int HALVES = KILN_SWIGLU ? 2 : 1;                 // epilogue factors an expert (gate, up)
constexpr int TT = KILN_TT, STAGES = KILN_STAGES, BK = 64, BN = KILN_SWIGLU ? 128 : KILN_FP4_GCOLS;
// X rows per TMA box: a tile of a few tokens loads 8-16 rows. KILN_FP4_XBOX = TT (`KILN_FP4_XTILE`,
// the tiles of 64-256 tokens): the whole tile in one box, so a stage is 1 + 2 MB requests instead
// of TT / 16 + 2 MB, and the weights may come in runs (KILN_FP4_RUN). The early profile of the
// 128-token SwiGLU tile (H200, 33dca92, 7,516 rows) had its consumers waiting for landed stages
// in 35 % of the samples at L2 29 % and DRAM 10 % busy, where kiln's bf16 SwiGLU moves twice the
// bytes a stage in 3 requests with its tensor pipe 89 % busy (docs/moe.md, ledger F81). Rows past
// the tile's are loaded too (the next expert's, or zeros past X): columns never stored.
#if defined(KILN_FP4_XBOX)
constexpr int XBOX = KILN_FP4_XBOX;
static_assert(XBOX == TT && TT >= 64, "KILN_FP4_XBOX is the wide tiles' whole tile");
#else
constexpr int XBOX = TT < 16 ? TT : 16;
#endif
constexpr u32 X_BYTES = TT * BK * 2;
constexpr u32 W_BYTES = 2 * MB * FP4_ATOM_BYTES;
constexpr u32 STAGE_BYTES = X_BYTES + (W_BYTES + 1023) / 1024 * 1024;  // X first, 1024-aligned for the swizzle
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 2) * 4;
static_assert((TT == 8 || TT == 16 || TT % 32 == 0) && TT <= 256, "KILN_TT is 8, 16 or a multiple of 32 up to 256");
static_assert(MB * TT / 2 <= 128, "accumulators above 128 registers per thread do not fit");
static_assert(!kMmaSync || TT == 8, "KILN_FP4_MMA is the 8-token tile's");
// KILN_FP4_RUN = R > 1 (`KILN_FP4_RUN=R`, the decode tiles): one bulk copy brings a weight block's
// atoms of R consecutive stages (R x 2,304 contiguous bytes of global memory, as the prepack
// keeps a block's atoms along K) where the ring slot and the unit allow, instead of R copies of
// one. Shared memory is then laid out by block: all stages' X tiles first, then each block's
// atoms of stages 0..STAGES-1 side by side (fp4_x_at, fp4_w_at). The run's first stage's full
// barrier counts the run's weights, the others only their X: a consumer reaches a later stage of
// the run only after it has waited for the first. Why: the brief's (2), longer contiguous runs per
// request for the DRAM, without a new prepack (docs/moe.md, ledger F37).
#if !defined(KILN_FP4_RUN)
#define KILN_FP4_RUN 1
#endif
constexpr int RUN = KILN_FP4_RUN;
static_assert(RUN == 1 || RUN == 2 || RUN == 4, "KILN_FP4_RUN is 1, 2 or 4");
static_assert(RUN == 1 || (PREFETCH == 0 && !STAGGER && !KILN_FP4_WTMA),
              "KILN_FP4_RUN walks K in order with bulk copies: not with the prefetch, the stagger or the map load");
static_assert(STAGES * (X_BYTES + W_BYTES) <= STAGES * STAGE_BYTES, "the run layout fits the stages' bytes");
static_assert(RUN == 1 || XBOX == TT, "a run's X tiles are one box each (the decode tiles)");

// Stage s's X tile (1024-aligned for the 128B swizzle) and its weight atom a (of 2 MB).
__device__ __forceinline__ u32 fp4_x_at(u32 base, int s) {
  return RUN == 1 ? base + s * STAGE_BYTES : base + s * X_BYTES;
}
__device__ __forceinline__ u32 fp4_w_at(u32 base, int s, int a) {
  return RUN == 1 ? base + s * STAGE_BYTES + X_BYTES + a * FP4_ATOM_BYTES
                  : base + STAGES * X_BYTES + (a * STAGES + s) * FP4_ATOM_BYTES;
}

static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + MOE_RING_BYTES + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, ring and tables need");
static_assert(!KILN_FP4_OWN || 4 * MOE_SORT_MAX + 2 <= TABLE_BYTES / 4,
              "KILN_FP4_OWN's tables (4E + 2 ints, ids included) fit the table's shared memory");

// The last-wave split's workspace, laid out as `Fp4Split` in src/ops/moe/fp4/kernel.rs: ws holds
// up to gridDim.x partial tiles of 256 x NA floats, counters gridDim.x / 2 zeros (with balance,
// max_splits x gridDim.x partials and gridDim.x counters).
struct Fp4Split {
  float* ws;
  u32* counters;
  int max_splits;  // 1: no split
  int balance;     // KILN_FP4_BALANCE: the slice count by fp4_balanced_splits, any last wave
};
// KILN_FP4_WSPLIT (`KILN_FP4_FILL=1`, the tiles of 64-256 tokens): they split too. The host
// then launches every CTA the SMs hold, so a launch of fewer tiles than CTAs (one expert of 300
// rows at N 2048: 48 prefill tiles on 132 SMs, each streaming the whole K) or a last wave of a
// few runs on every SM; a partial is 256 x NA floats (128 KB for the 128-token SwiGLU tile).
#if !defined(KILN_FP4_WSPLIT)
#define KILN_FP4_WSPLIT 0
#endif
constexpr bool kSplit = TT <= 16 || KILN_FP4_WSPLIT;  // the decode tiles; the wider ones when asked
static_assert(!KILN_FP4_WSPLIT || KILN_FP4_GCOLS == 128, "the split's partials are of 128-column tiles");
constexpr int WIDE_SPLITS = 4;  // the most slices of a wide tile (its partials' traffic, below)
constexpr int NA = MB * TT / 2;    // a consumer thread's accumulators
constexpr u32 SPLIT_BAR = 1;       // the named barrier of the two consumers' 256 threads

// KILN_FP4_BALANCE: the slices s (1..most) of each of a last wave's `tail` tiles that end it
// first on `slots` CTAs: ceil(tail s / slots) rounds of 1/s of a tile; the fewest slices of the
// shortest. The default rule (a wave at most half full, slots / tail slices) gives the 64-row
// decode's 104 tail tiles on 264 CTAs 2 slices, one round of half a tile; 5 take two rounds of a
// fifth (the ideal, 104 / 264 = 0.39 of a tile).
__device__ __forceinline__ int fp4_balanced_splits(int tail, int slots, int most) {
  int best = 1, rounds = 1;  // whole tiles: one round (tail < slots)
  for (int s = 2; s <= most; ++s) {
    const int r = (tail * s + slots - 1) / slots;
    if (r * best < rounds * s) best = s, rounds = r;
  }
  return best;
}

// Unit u as (tile t, K atoms [kb0, kb1), slice sp of ns).
__device__ __forceinline__ void fp4_unit(int u, int split_from, int splits, int katoms, int& t, int& sp, int& ns,
                                         int& kb0, int& kb1) {
  if constexpr (kSplit) {
    unit_tile(u, split_from, splits, t, sp, ns);
    split_range(sp, ns, katoms, kb0, kb1);
  } else {
    t = u, sp = 0, ns = 1, kb0 = 0, kb1 = katoms;
  }
}

struct Fp4Ctx {
  u32 base;
  MbarRing<STAGES> ring;
  int katoms, c, t, lane;
#if KILN_MOE_TRACE
  u64* trace;
  mutable u32 stamp_next;  // the ring iteration this thread stamps next (moe/trace.cuh)
#endif
};

// Keeps the compiler from reusing a batch's A registers before the batch has been waited for.
__device__ __forceinline__ void fp4_fence_fragments(u32 (&a)[MB][4][4]) {
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[m][j][r])::"memory");
}

// Two wgmma batches in flight where the accumulators leave the registers for it: from 64
// accumulators a thread on (SwiGLU at 64 tokens, the prefill tiles) ptxas serialises the wgmmas
// in this loop's default form, so those tiles wait for each batch before issuing the next (a
// 128-token GEMM tile kept two in flight at 64, `KILN_FP4_GTILE=128`, and was no faster than the
// 256-token tile: docs/moe.md, ledger F130, eliminated).
constexpr bool kTwoInFlight = MB * TT / 2 <= 32;

// Waits for ring iteration `it` and returns its stage, which every lane computes alike; with
// two batches in flight the shuffle tells ptxas so. Without it, that loop keeps the stage in
// vector registers and builds each wgmma descriptor there (16 R2UR and their arithmetic per
// stage) instead of in the uniform datapath.
__device__ __forceinline__ int fp4_wait_stage(const Fp4Ctx& x, u32 it) {
  const int s = x.ring.wait_full(it);
#if KILN_MOE_TRACE
  if (it == x.stamp_next) x.stamp_next = moe_stamp_full(x.trace, it, x.katoms - 1);
#endif
  return kTwoInFlight ? __shfl_sync(0xffffffffu, s, 0) : s;
}

// This thread's A fragments of its atoms in stage s.
__device__ __forceinline__ void fp4_dequant(const Fp4Ctx& x, int s, u32 (&a)[MB][4][4]) {
#pragma unroll
  for (int m = 0; m < MB; ++m) fp4_load_fragments<kBf16>(fp4_w_at(x.base, s, x.c * MB + m), x.t, a[m]);
}

// One stage's batch: 4 k16 steps x MB atoms against the X tile of stage s.
template <int N>
__device__ __forceinline__ void fp4_issue(const Fp4Ctx& x, float (&acc)[MB][TT / 2], const u32 (&a)[MB][4][4], int s,
                                          bool first) {
  const u32 sx = fp4_x_at(x.base, s);
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
  wgmma_fence();
  // Unless KILN_FP4_ROT: the k16 steps' descriptors by one add each from the stage's first (the
  // uniform datapath built each from the address, mask, shift and or: ~50 uniform instructions
  // a stage with the ring's index arithmetic, a quarter of a consumer warp's issue)
  const u64 d0 = wgmma_desc_sw128(sx, 16, 1024);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u64 db = kFp4Shift ? wgmma_desc_add(d0, j * 32) : wgmma_desc_sw128(sx + j * 32, 16, 1024);
#pragma unroll
    for (int m = 0; m < MB; ++m) wgmma_m64k16_rs<in_t, N, 0>(acc[m], a[m][j], db, (first && j == 0) ? 0 : 1);
  }
  wgmma_commit();
}

// Waits until at most PENDING batches are in flight (the newest), then frees the stage of the
// batch before them, whose A fragments `a` may then be overwritten.
template <int N, int PENDING>
__device__ __forceinline__ void fp4_retire(const Fp4Ctx& x, float (&acc)[MB][TT / 2], u32 (&a)[MB][4][4], int s) {
  wgmma_wait<PENDING>();
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
  fp4_fence_fragments(a);
  x.ring.release(s, x.lane);
}

// The K loop of one tile at wgmma width N (>= its tokens) into acc[m][0 .. N/2). Two register
// sets of A fragments take turns. With kTwoInFlight the thread issues stage k's batch, then
// waits for stage k - 1's (the other set) and dequantises stage k + 1 into that set, so the
// tensor cores have a batch queued while the thread dequantises; else it waits for stage k's
// batch before it issues stage k + 1's. A stage is freed, and its set rewritten, once its batch
// has completed. Two copies of the dequantise-and-issue step, as few as the two sets allow.
// issued() runs before the loop, or with PEEL (KILN_FP4_EPI 2: the previous unit's deferred
// stores, under the tensor work) once the first batch is issued: the first batch then stands
// outside the loop and the loop ends on stage k + 2's issue, so that what issued() reads is dead
// inside it (in the loop, under `kb == 0`, ptxas kept the packed results live through every
// stage and spilled them). Without PEEL the loop is the form ptxas pipelines without
// serialising, as it was: the peel's lines are `if constexpr` and compile to nothing.
template <int N, bool PEEL, class Issued>
__device__ __forceinline__ void fp4_mainloop(const Fp4Ctx& x, float (&acc)[MB][TT / 2], u32& it,
                                             const Issued& issued) {
  constexpr int PENDING = kTwoInFlight ? 1 : 0;
  if constexpr (!PEEL) issued();
  u32 a0[MB][4][4], a1[MB][4][4];
  int s0 = fp4_wait_stage(x, it), s1 = 0;
  fp4_dequant(x, s0, a0);
  if constexpr (PEEL) {
    fp4_issue<N>(x, acc, a0, s0, true);
    issued();
  }
  for (int kb = 0; PEEL || kb < x.katoms; kb += 2) {
    if constexpr (!PEEL) fp4_issue<N>(x, acc, a0, s0, kb == 0);
    if (kTwoInFlight && kb > 0) {
      fp4_retire<N, PENDING>(x, acc, a1, s1);
      ++it;
    }
    if (kb + 1 < x.katoms) {
      s1 = fp4_wait_stage(x, it + 1);
      fp4_dequant(x, s1, a1);
    }
    if (!kTwoInFlight || kb + 1 >= x.katoms) {
      fp4_retire<N, 0>(x, acc, a0, s0);
      ++it;
    }
    if (kb + 1 >= x.katoms) break;
    fp4_issue<N>(x, acc, a1, s1, false);
    if (kTwoInFlight) {
      fp4_retire<N, PENDING>(x, acc, a0, s0);
      ++it;
    }
    if (kb + 2 < x.katoms) {
      s0 = fp4_wait_stage(x, it + 1);
      fp4_dequant(x, s0, a0);
    }
    if (!kTwoInFlight || kb + 2 >= x.katoms) {
      fp4_retire<N, 0>(x, acc, a1, s1);
      ++it;
    }
    if constexpr (PEEL) {
      if (kb + 2 >= x.katoms) break;
      fp4_issue<N>(x, acc, a0, s0, false);
    }
  }
  // Every path above has waited for the last batch, but ptxas cannot tell on the loop's own
  // exit and would inject a wait before the epilogue reads acc (C7517): say it here, for free.
  if constexpr (kTwoInFlight) wgmma_wait<0>();
}

// This warp's B fragments of stage s's X tile (8 tokens of 64 k, one 128-byte row a token in
// the 128B swizzle: 16-byte chunk j of row r at chunk j ^ r): b[j] for k16 step j. Matrix m of
// an ldmatrix is k chunk m (then m + 4) of the 8 tokens, so lane l (token l / 4) receives the k
// pair 2(l % 4) of each chunk: b0 of step j is chunk 2j, b1 chunk 2j + 1.
__device__ __forceinline__ void fp4_load_x(const Fp4Ctx& x, int s, u32 (&b)[4][2]) {
  const u32 sx = fp4_x_at(x.base, s);
  const int r = x.lane % 8, m = x.lane / 8;
  u32 lo[4], hi[4];
  ldmatrix_x4(lo, sx + r * 128 + ((m ^ r) << 4));
  ldmatrix_x4(hi, sx + r * 128 + (((m + 4) ^ r) << 4));
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    b[j][0] = lo[2 * j];
    b[j][1] = lo[2 * j + 1];
    b[j + 2][0] = hi[2 * j];
    b[j + 2][1] = hi[2 * j + 1];
  }
}

// The K loop of one 8-token tile with mma.sync (KILN_FP4_MMA): per stage the warp waits for it,
// reads X's fragments and its atoms' codes and scales, frees it (the reads are ordered before
// the release's arrive), dequantises and issues 4 k16 steps x MB atoms. Two accumulators an atom
// (even and odd k16 steps) halve the chain of dependent mmas; added at the end into acc, which
// holds wgmma's m64n8 fragment for this warp's rows.
__device__ __forceinline__ void fp4_mainloop_sync(const Fp4Ctx& x, float (&acc)[MB][TT / 2], u32& it) {
  float d[MB][2][4];
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[m][h][i] = 0.0f;
  for (int kb = 0; kb < x.katoms; ++kb, ++it) {
    const int s = x.ring.wait_full(it);
    u32 b[4][2], a[MB][4][4];
    fp4_load_x(x, s, b);
    fp4_dequant(x, s, a);
    x.ring.release(s, x.lane);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int m = 0; m < MB; ++m) mma_16816<in_t>(d[m][j & 1], a[m][j], b[j]);
  }
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[m][i] = d[m][0][i] + d[m][1][i];
}

template <int W, class Issued>
__device__ __forceinline__ void fp4_dispatch(int width, const Fp4Ctx& x, float (&acc)[MB][TT / 2], u32& it,
                                             const Issued& issued) {
  if constexpr (kMmaSync) {
    issued();
    fp4_mainloop_sync(x, acc, it);
  } else if (width >= W || W == 8) {
    fp4_mainloop<W, EPI == 2>(x, acc, it, issued);
  } else if constexpr (W > 8) {
    fp4_dispatch<(W > 32 ? W - 32 : W / 2)>(width, x, acc, it, issued);
  }
}

// The stores of a tile computed at width `width`: this consumer's 64 output columns (the GEMM
// under KILN_FP4_GCOLS 256: its 128, block m's from column 64 m). The SwiGLU's two atoms are one
// block's gate and up.
__device__ __forceinline__ void fp4_store(const Fp4Ctx& x, const MoeTile& tile, int expert, const Fp4Args& p,
                                          const float (&acc)[MB][TT / 2], int width) {
  const float sg = p.escale[expert * HALVES], su = p.escale[expert * HALVES + HALVES - 1];
  if constexpr (KILN_SWIGLU) {
    fp4_store_block(p, tile, x.t, acc[0], acc[1], sg, su, width, tile.n0 + x.c * 64, 0);
  } else {
#pragma unroll
    for (int m = 0; m < MB; ++m)
      fp4_store_block(p, tile, x.t, acc[m], acc[m], sg, sg, width, tile.n0 + (x.c * MB + m) * 64, 0);
  }
}

// A slice of a split tile (ns > 1): stores this consumer thread's partial, counts the slice, and
// in the slice that counts last adds the others' into acc; false in the others (no epilogue).
__device__ __forceinline__ bool fp4_split_sum(const Fp4Split& sx, int st, int sp, int ns, float (&acc)[MB][TT / 2]) {
  const int ct = threadIdx.x - 128;
  float* tile_ws = sx.ws + (i64)st * ns * (256 * NA);
  float f[NA];
#pragma unroll
  for (int e = 0; e < NA; ++e) f[e] = acc[e / (TT / 2)][e % (TT / 2)];
  split_store_partial(tile_ws + (i64)sp * (256 * NA), ct, f);
  if (!split_arrive(sx.counters + st, ns, ct, SPLIT_BAR)) return false;
  split_add_others(tile_ws, ns, sp, ct, f);
#pragma unroll
  for (int e = 0; e < NA; ++e) acc[e / (TT / 2)][e % (TT / 2)] = f[e];
  return true;
}

extern "C" __global__ void __launch_bounds__(384, KILN_CTAS)
    moe_fp4_experts(const __grid_constant__ TmaMap tma_x, const Fp4Args p, const Fp4Split sx FP4_WMAP_PARAM
                        FP4_OWN_PARAM FP4_TRACE_PARAM) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzle of X follows absolute address bits
  const MbarRing<STAGES> stages{base + STAGES * STAGE_BYTES};
  const MoeIndexRing ring(smem_raw, raw, stages.bars + 16u * STAGES);
  int* table = ring.slot + 2;

  const int E = p.experts;
#if KILN_MOE_TRACE
  if (threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_ENTRY);
#endif
  if (threadIdx.x == 0) {
    stages.init(8);  // lane 0 of each consumer warp
    ring.init(8);
    mbar_fence_init();
  }
#if KILN_MOE_TRACE
  if (threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_SETUP);
#endif
#if KILN_FP4_OWN
  // the tables, ids included (4E + 2 ints: the host keeps E <= MOE_SORT_MAX), as the prefix
  // kernel builds them, sorted; X's map asked for meanwhile (the producer's first copy needs it)
  if (threadIdx.x == 0) tma_prefetch(&tma_x);
  if (threadIdx.x < 32)
    moe_build_tables(own.rows_in, table, E, own.x_rows, own.max_rows, own.masked, own.bm, 1, 0, threadIdx.x);
#else
  // KILN_FP4_PDL: launched as moe_tile_prefix's programmatic dependent, the CTAs have set up
  // their barriers while it ran; its tables are read from here on.
  if constexpr (KILN_FP4_PDL) grid_dependency_wait();
#if KILN_MOE_TRACE
  if (KILN_FP4_PDL && threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_DEP_WAIT);
#endif
  moe_load_tables(table, p.sched, E);
#endif
  __syncthreads();
#if KILN_MOE_TRACE
  if (threadIdx.x == 0) moe_stamp(moe_trace, blockIdx.x, MT_TABLES);
#endif

  const int tiles_m = table[E], tiles = tiles_m * p.tiles_n;
  // The last wave's split (see the top): a last wave over half full stays whole.
  int split_from = tiles, splits = 1;
  if constexpr (kSplit) {
    const int slots = gridDim.x, tail = tiles % slots;
    // The wide tiles (KILN_FP4_WSPLIT) only in one round, a wave at most half full, at most
    // WIDE_SPLITS ways: a slice's partial is 64-128 KB, written and read back through L2 and
    // DRAM, so eight slices of each of E64's 99 tail tiles (the balanced rule's four) cost more
    // than the quarter tile they save (H200, 2026-11-30, ledger F51: 264 -> 301 us).
    const bool wide = TT > 16, sparse = 2 * tail <= slots;
    if (sx.max_splits > 1 && tail > 0 && (wide ? sparse : sx.balance || sparse)) {
      const int most = min(wide ? min(sx.max_splits, WIDE_SPLITS) : sx.max_splits, p.katoms / 4);
      const int s = sx.balance && !wide ? fp4_balanced_splits(tail, slots, most) : min(slots / tail, most);
      if (s > 1) {
        splits = s;
        split_from = tiles - tail;
      }
    }
  }
  const int units = split_from + (tiles - split_from) * splits;
  int* counter = const_cast<int*>(p.sched) + moe_table_ints(E);
  const int* ids = (KILN_FP4_OWN ? table : p.sched) + moe_table_ints(E) + 1;
  const int wg = warpgroup_index();

  ws_roles<PRODUCER_REGS, CONSUMER_REGS>(
      wg,
      [&] {
        tma_prefetch(&tma_x);
#if KILN_FP4_WTMA
        tma_prefetch(&tma_w);
#endif
        u32 it = 0;
        int u = blockIdx.x;
        for (int j = 0;; ++j) {
          ring.publish(j, u);
#if KILN_MOE_TRACE
          if (u >= units) moe_stamp(moe_trace, blockIdx.x, MT_LAST_LOADS);
#endif
          if (u >= units) break;
          int t, sp, ns, kb0, kb1;
          fp4_unit(u, split_from, splits, p.katoms, t, sp, ns, kb0, kb1);
          const MoeTile tile = fp4_tile_at(table, E, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, TT, BN);
          const int expert = ids[tile.expert];
          const int boxes = (tile.valid_rows + XBOX - 1) / XBOX;
          const u32 bytes = boxes * XBOX * BK * 2 + W_BYTES;
          // Consumer a / MB's atom a % MB of a stage is weight block 2 MB tn + a: the GEMM's
          // 64-row block 2 tn + a, or of output block 2 tn + a / 2 the gate (a even) or up atom
          // (the prepack alternates W1 and W3 blocks). A block's atoms follow each other along K.
          const u64 block_bytes = (u64)p.katoms * FP4_ATOM_BYTES;
          const unsigned char* src0 = p.w + (i64)expert * p.expert_bytes + (u64)(2 * MB * (tile.n0 / BN)) * block_bytes +
                                      (u64)kb0 * FP4_ATOM_BYTES;
          if constexpr (PREFETCH > 0) {
#pragma unroll
            for (int a = 0; a < 2 * MB; ++a)
              bulk_prefetch_l2(src0 + a * block_bytes, min(PREFETCH, kb1 - kb0) * FP4_ATOM_BYTES);
          }
          // KILN_FP4_STAGGER: the unit's atoms from a point of its own (a hash of the unit), wrapping
          const int nk = kb1 - kb0;
          const int rot = STAGGER ? (int)((u32)u * 2654435761u % (u32)nk) : 0;
          for (int i = 0; i < nk; ++i, ++it) {
            const int kb = kb0 + (i + rot < nk ? i + rot : i + rot - nk);
            const unsigned char* src = src0 + (u64)(kb - kb0) * FP4_ATOM_BYTES;
            if constexpr (PREFETCH > 0) {
              if (kb + PREFETCH < kb1) {
#pragma unroll
                for (int a = 0; a < 2 * MB; ++a)
                  bulk_prefetch_l2(src + a * block_bytes + PREFETCH * FP4_ATOM_BYTES, FP4_ATOM_BYTES);
              }
            }
            if constexpr (RUN > 1) {
              // a run of RUN stages where it starts on a multiple of RUN, fits the ring and the unit;
              // a decode tile's X is one box of X_BYTES (XBOX == TT)
              const int s0 = MbarRing<STAGES>::slot(it);
              if (s0 % RUN == 0 && s0 + RUN <= STAGES && i + RUN <= nk) {
#pragma unroll 1
                for (int r = 0; r < RUN; ++r) {
                  stages.acquire(it + r);
                  mbar_arrive_expect_tx(stages.full(s0 + r), r == 0 ? X_BYTES + RUN * W_BYTES : X_BYTES);
                  tma_load_2d(fp4_x_at(base, s0 + r), &tma_x, stages.full(s0 + r), (kb + r) * BK, tile.row0);
                }
#pragma unroll
                for (int a = 0; a < 2 * MB; ++a)
                  bulk_copy_g2s(fp4_w_at(base, s0, a), src + a * block_bytes, RUN * FP4_ATOM_BYTES, stages.full(s0));
#if KILN_MOE_TRACE
                if (it == 0) moe_stamp(moe_trace, blockIdx.x, MT_FIRST_LOADS);
#endif
                i += RUN - 1;
                it += RUN - 1;
                continue;
              }
            }
            ws_fill(stages, it, bytes, [&](int s, u32 bar) {
              const u32 sx = fp4_x_at(base, s);
              for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, kb * BK, tile.row0 + b * XBOX);
#pragma unroll
              for (int a = 0; a < 2 * MB; ++a) {
                const u32 sw = fp4_w_at(base, s, a);
#if KILN_FP4_WTMA
                // the atom's first row of the map: its byte offset / W_ROW (under 2^31 rows)
                const int row = (int)((u64)(src + a * block_bytes - p.w) / W_ROW);
                tma_load_2d(sw, &tma_w, bar, 0, row);
#else
                bulk_copy_g2s(sw, src + a * block_bytes, FP4_ATOM_BYTES, bar);
#endif
              }
            });
#if KILN_MOE_TRACE
            if (it == 0) moe_stamp(moe_trace, blockIdx.x, MT_FIRST_LOADS);
#endif
          }
#if KILN_FP4_OWN
          if (j == 0) {
            grid_dependency_wait();  // the prefix kernel has zeroed the counter
#if KILN_MOE_TRACE
            moe_stamp(moe_trace, blockIdx.x, MT_DEP_WAIT);
#endif
          }
#endif
          u = (int)gridDim.x + atomicAdd(counter, 1);
        }
      },
      [&](int c) {
        Fp4Ctx x;
        x.base = base;
        x.ring = stages;
        x.katoms = p.katoms;
        x.c = c;
        x.t = threadIdx.x % 128;
        x.lane = threadIdx.x % 32;
#if KILN_MOE_TRACE
        x.trace = moe_trace;
        x.stamp_next = c == 0 && x.t == 0 ? 0u : MOE_STAMP_NEVER;
#endif
        u32 it = 0;
        // KILN_FP4_EPI: this consumer's packed results of its last tile (2: not yet stored)
        Fp4Packed<TT / 8> done;
        done.pending = false;
        for (int j = 0;; ++j) {
          const int u = ring.take(j, x.lane);
          if (u >= units) break;
          int t, sp, ns, kb0, kb1;
          fp4_unit(u, split_from, splits, p.katoms, t, sp, ns, kb0, kb1);
          const MoeTile tile = fp4_tile_at(table, E, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, TT, BN);
          const int width = fp4_width(tile.valid_rows);
          float acc[MB][TT / 2];
          if constexpr (kSplit && TT > 8) {  // a slice's partial is whole: no unwritten registers
#pragma unroll
            for (int e = 0; e < NA; ++e) acc[e / (TT / 2)][e % (TT / 2)] = 0.0f;
          }
          x.katoms = kb1 - kb0;
          fp4_dispatch<TT>(width, x, acc, it, [&] {
            if constexpr (EPI == 2) fp4_flush(p, x.t, done);
          });
#if KILN_MOE_TRACE
          if (c == 0 && x.t == 0) moe_stamp(moe_trace, blockIdx.x, MT_MAIN_END);
#endif
          if (kSplit && ns > 1 && !fp4_split_sum(sx, t - split_from, sp, ns, acc)) continue;
          if constexpr (EPI > 0) {
            const int expert = ids[tile.expert];
            const float sg = p.escale[expert * HALVES], su = p.escale[expert * HALVES + HALVES - 1];
            if constexpr (EPI == 1 && !KILN_SWIGLU && MB > 1) {
#pragma unroll
              for (int m = 0; m < MB; ++m)
                fp4_store_block_ahead(p, tile, x.t, acc[m], acc[m], sg, sg, width, tile.n0 + (x.c * MB + m) * 64);
            } else {
              const int col0 = tile.n0 + x.c * 64;
              if constexpr (EPI == 1) fp4_store_block_ahead(p, tile, x.t, acc[0], acc[MB - 1], sg, su, width, col0);
              else fp4_pack_block(p, tile, x.t, acc[0], acc[MB - 1], sg, su, width, col0, done);
            }
          } else {
            fp4_store(x, tile, ids[tile.expert], p, acc, width);
          }
        }
        if constexpr (EPI == 2) fp4_flush(p, x.t, done);  // the last tile's
#if KILN_MOE_TRACE
        if (x.t == 0) moe_stamp(moe_trace, blockIdx.x, c == 0 ? MT_C0_END : MT_C1_END);
#endif
      });
}
