// NVFP4 GEMV and small-M GEMM: Y [M, N] = g * X [M, K] . W^T, X bf16, W NVFP4 in the standard
// layout (codes [N, K/2], element 2i in the low nibble of byte i; e4m3 scales [N, K/16]; the f32
// tensor scale g), fp32 accumulation on mma.sync m16n8k16, bf16 or f16 out; batched over
// blockIdx.z with per-batch strides. Bandwidth is everything: each lane streams 16-byte loads of
// two weight rows (L1 bypassed), decodes them in registers, and the tensor cores do the sums.
//
// A CTA owns 16 rows of W; its warps (4 to 16: blockDim.x / 32, about 16 an SM in all) split K
// (step s of 128 elements goes to warp s % warps) and add their partial sums in shared memory at
// the end, so a small N still fills the GPU. Bytes in flight: a warp takes UNROLL steps an
// iteration and loads the next iteration's weights before decoding the current one, so each
// lane always has UNROLL x 2 x 16 bytes of weights outstanding: 4 KB a warp (M <= 8), 64 KB an
// SM at 16 warps (before: 2 steps loaded, then decoded, 2 KB a warp only while it waited). In a step, lane (g = lane / 4, q = lane % 4) holds 32 elements (16 bytes, two scale blocks) of rows
// g and g + 8 at k = 128 s + 32 q. The order of k inside an mma is free as long as X follows it:
// the A register pair i of a 32-bit word (elements e .. e + 7) holds elements e + i and e + i + 4
// (nibbles i and i + 4, 16 bits apart, so one shift places both), and X's pairs are permuted to
// match. A nibble becomes bf16 by moving its magnitude bits into the exponent and mantissa (the
// value times 2^-126, 0.5 a bf16 subnormal) and its sign bit to bit 15; then bf16x2 products by
// 2^126 and by the block scale, both exact (e2m1 x e4m3 fits bf16), give the operand.
// KILN_GEMV_NF: 8-column mma tiles of M (1: M <= 8, 2: M <= 16). The output dtype and the warps
// per CTA are arguments: they change one store and a loop stride, not the loop body.
//
// KILN_GEMV_ASYNC = 1 (`KILN_FP4_GEMV=async`, K a multiple of 128): each warp streams its steps'
// weights and scales by cp.async into a ring of RING steps in shared memory (1,152 bytes each)
// instead of registers, so 7 steps (8 KB) a warp are in flight however few registers it has,
// 112 KB an SM at 16 warps against 64 KB; a step is read back with two 16-byte and two 2-byte
// shared loads. Its block scales are multiplied by 2^118 once (exact in bf16: e4m3 times 2^118
// stays within bf16's normal range), which folds the 2^126 product of every pair into the scale
// product (value x 2^-126 x s x 2^118 = value x s x 2^-8, at least 2^-18: exact), and the
// epilogue multiplies by g x 2^8: one bf16x2 multiply a pair instead of two, the same sums.
//
// KILN_GEMV_ASYNC = 2 (`KILN_FP4_GEMV=wide`, K a multiple of 128): the ring holds stages of 4
// steps (16 rows x 256 code bytes, 16 x 32 scale bytes), and a warp copies a stage with each
// cp.async instruction covering two rows' 256 contiguous bytes (the register path's and the async
// ring's loads cover 64 bytes of each of 8 rows: DRAM and L2 see 64-byte pieces of 8,192 rows at
// once); odd rows' 16-byte chunks are stored with bit 2 of their index flipped so that the
// fragment reads (rows g and g + 1 in one 8-lane phase) are free of bank conflicts. Three stages
// a warp (2 in flight while one is decoded, 9 KB), no weights in registers, X loaded one step
// ahead. A pair is decoded with two logic ops and one integer multiply: the nibbles are masked in
// place and one multiply by 2^a + 2^b puts the magnitude bits at 6..8 and the sign at 15 (the two
// shifted copies do not overlap, so no carry), against a logic op more and one or two shifts.
// The scales are folded as in the async ring.
//
// KILN_GEMV_ASYNC = 3 (`KILN_FP4_GEMV=lean`, M <= 4, K a multiple of 128): the wide ring's
// 256-byte runs traded for X in the ring. The profile of the wide ring (H200, 1x8192x8192, 21 us
// in ncu) had the SMs issuing 54 % of the time, a quarter of the warps' stalls waiting on X's
// global loads (each stage's first step waits at the loop's warp barrier for X loaded just
// before it) and 284 instructions a step of which ~90 were addressing: the copies' per-chunk
// bounds and 64-bit sums, X's predicates and reloaded pointers. Here a stage is 2 steps (16 rows
// x 128 code bytes, 16 x 16 scale bytes, by cp.async), four a warp, three in flight; each lane's
// copy addresses are computed once and step by a constant. A stage's X (M rows x 256 elements)
// is loaded by the lanes two iterations ahead and stored one iteration ahead into one of two X
// slots, with each 8 elements' pairs already in the mma's B order (no byte permutes in the step);
// it is read back by the lanes whose column is a row of X (the others keep zeros).
//
// KILN_GEMV_ASYNC = 4 (`KILN_FP4_GEMV=xring`, K a multiple of 128): X rides in the ring beside
// its step's weights, copied by cp.async as they are. The profile of the lean ring (H200) showed
// its terms: 3.6 warps a scheduler (21 % occupancy: 92-109 registers and the grid's ~16 warps an
// SM), and at M 4 X's global loads into registers, zeroed then loaded one iteration before their
// store (CS2R and PRMT on the load's scoreboard: 45 % of the stall samples). Here a slot is one
// step (16 rows x 64 code bytes, 16 x 8 scale bytes, then M x 128 bf16 of X), four slots a warp,
// three steps in flight; X is never in registers before its step, so nothing waits on it but the
// ring's own wait, and its copies go through L1 (the other CTAs on the SM copy the same X at
// about the same time: their warp w walks the same steps). A lane reads X's rows
// min(g + 8 f, M - 1) (lanes past M compute columns that are never written: no zeroing, no
// predicate) and permutes its pairs as the register path does (16 PRMT a step, against 16
// registers of staging). At most 80 registers (384-thread CTAs, two an SM) and 5.5-21 KB a warp
// (M 1-16), so the host can put ~24 warps on an SM at M 1 (GemvProblem::xring_warps): 6 a
// scheduler against lean's 3.6.
//
// KILN_GEMV_XSWZ = 1 with 4 (`KILN_FP4_GEMV=xswz`): the X ring with X's chunks placed for
// conflict-free reads. A lane reads chunks 4q .. 4q + 3 (64 bytes) of its X row, and an 8-lane
// phase of a 16-byte load holds q = 0..3 of two rows: at a 256-byte row pitch chunks 4q + v of
// q and q + 2 share banks (128 bytes apart) and so do the two rows (ncu, H200, M 1: 51 % of the
// shared wavefronts excess). Here a row's chunk c sits at c ^ ((c >> 2) & 2) (q 2 and 3 swap
// their halves) and rows are 272 bytes apart (the next row one chunk on), so the eight chunks of
// a phase fill the 32 banks once; a lane's four reads are two pairs at two bases.
//
// KILN_GEMV_ASYNC = 5 (`KILN_FP4_GEMV=xstage`, M <= 8, K a multiple of 128): the lean ring's
// 2-step stages carrying X by cp.async as the X ring does, three slots a warp (two stages in
// flight), at most 80 registers. The X ring spent ~50 instructions a step on its one-step
// slots' copies and 16 PRMT a step building X's pairs, each lane permuting the X it reads;
// here a stage's copies are a lane's four 16-byte code chunks (one sector of each row an
// instruction, from one source pointer with immediate offsets), its 8 scale bytes and one X
// chunk a row of X, and each lane permutes its own chunk of each X row once, in place, into the
// mma's pair order (lean's store_lean_x): ~6 instructions a row of X a stage instead of 16 PRMT
// a step. X's chunks sit at xswz's swizzle (c ^ ((c >> 2) & 2)) with rows 528 bytes apart, so
// the reads of an 8-lane phase, the copies and the permutes hit the 32 banks once.
//
// KILN_GEMV_PACKED = 1 with 3, or with 4 and KILN_GEMV_XSWZ (`KILN_FP4_GEMV=pack`: auto's
// lean at M 1 and xswz above, each reading codes in the GEMV layout (`gemv_layout` on the host, `to_gemv_layout` on
// the device: the same 8 codes a 32-bit word, their 32 bits placed so that each pair decodes
// with fewer instructions, and the words tiled, below). The standard word decodes a pair with a
// mask, a multiply and a mask (plus a shift shared by two pairs): 13 instructions a word. In
// the GEMV layout pair 0 is already at its bf16 bits (one mask), pairs 1 and 2 one rotation
// away (rotation, mask), and pair 3 is split over two rotations (two rotations, a mask, a
// select): 9 a word, 32 fewer a step. The pairs, their bf16 bits and everything after are
// the ring's own.
//
// `packsync` (the first stages asked for in order across the CTA, G11) and `pack1` (lean1's
// stage on the GEMV layout, G12), neither faster, went with the row-by-row GEMV layout
// (2026-12-01, G61).
//
// KILN_GEMV_PDL = 1 (`KILN_FP4_GEMV_PDL=1`): the kernel is launched as a programmatic dependent
// of the one before it and releases its own dependents as it starts, so that back-to-back
// launches (a decode step's layers) overlap one's start with the other's end. Everything that
// may depend on earlier work (X; Y's stores) waits in griddepcontrol.wait; the lean ring asks for
// its first weight stages before it (weights are a layer's constants, not what the kernel before
// it writes), the X ring (xring, xswz) its first slots' weight copies, their X after it; the
// other paths wait first.
//
// KILN_GEMV_ACC = 2 or 4 (`KILN_FP4_GEMV_ACC`, any path): the step's mmas spread over 2 or 4
// accumulators instead of one, added together once before the CTA's reduction. With one, every
// mma of a warp waits for the one before it (8 a step at M 1-8: ~8 x 33 cycles of fixed latency
// a step, each warp's longest chain), and at ~4 warps a scheduler the loop stalls on fixed
// latencies (`wait`, 22 % of the samples of lean at M 1, G12); two chains halve that path for
// 4 (NF 1) or 8 registers more. Sums in another order: the same bound (fp32, K terms).
//
// KILN_GEMV_TILES = 2 with KILN_GEMV_XSWZ (`KILN_FP4_GEMV=xswz2`, and `pack2` on the GEMV
// layout; M up to 8): the swizzled X ring with 32 rows of W a CTA, two 16-row tiles a warp step
// sharing the step's X. At M 4 the X ring copies as many bytes of X a step (M x 256) as of
// weights (1,152) and spends ~40 of its ~225 instructions a step on X (its copies, 4 shared
// loads, 16 PRMT); here each step of X serves 2,304 weight bytes: X's copies, shared traffic and
// reads a weight byte halve (~17 % fewer instructions a weight at M 4). The ring holds 3 slots
// (two in flight: 4.6 KB of weights a warp, more than the one-tile ring's 3.5 KB), so that ~20
// warps an SM fit at M 4. Sums as the X ring's, per tile.
//
// The GEMV layout's pairs are adjacent (G21, the layout from G30 on): pair i of a word is codes
// 2i and 2i + 1 (`pack_gemv_codes` on the host, the layout kernel), each placed at the bits
// `packed_pairs` takes them from, so the decode is 9 instructions a word. The mma's k order
// follows: its B pair (k 2q, 2q + 1) is X's elements 2i, 2i + 1, a 32-bit word of X as it lies
// in memory, so the X ring reads B without byte permutes (16 PRMT a step fewer, on the path
// from X's shared load to the mma) and the lean ring stores X as it loads it. At M 4 the X
// ring's step is ~209 instructions (SASS, NVRTC 13.0), the two-tile ring's ~177 a tile-step.
//
// The GEMV layout is tiled (G52 as `packt`, the one layout from 2026-12-01, G61: every
// KILN_GEMV_PACKED ring reads it), so that a step's copies read whole 128-byte lines. ncu's source counters of the X ring at 4x8192x8192 (G50): its shared loads
// are conflict-free, and every excess wavefront is a copy's write, one wavefront a source line:
// the codes' copy (8 rows x 64 bytes) 8 for 512 bytes, the scales' (16 rows x 8 bytes) 16 for
// 128, 23 of a warp step's 66. In the tiled layout the full 16-row tiles of each [N, K] block
// keep a step's codes as 16 rows x 64 bytes (1 KB) and its scales as 16 x 8 (128 bytes)
// contiguous, step after step (`tile_gemv_layout` on the host); a partial last tile stays as
// it was (the bounded copies read it). A lane copies 16 bytes at 16 L and 512 + 16 L of the
// step's codes, from one source with an immediate offset, and lanes 0-7 16 bytes of its scales:
// 9 wavefronts a step's weights where 32 were. A two-tile CTA whose second tile is partial
// copies its first tiled, its second bounded, row by row. The lean ring (M 1) copies a whole
// tile's 2-step stage, 2 KB of codes and 256 bytes of scales, each contiguous, into two
// async-ring steps (copy_lean_tiled; G60).
//
// KILN_GEMV_XFIRST = 1 with 3 (`KILN_FP4_GEMV=leanx`): the lean ring with each warp's first X
// load issued before its ring's first weight copies. ncu (H200, M 1): 21.7 % of the lean ring's
// stall samples sat on one instruction, the permute that stores the first stage's X, once a
// warp: that load left after three stages of weight copies from every warp on the GPU and
// waited behind them.
#include "common/cp_async.cuh"
#include "common/grid_dep.cuh"
#include "common/mma_sync.cuh"
#include "common/fp8.cuh"

#if !defined(KILN_GEMV_NF)
#error "nvfp4_gemv.cu needs KILN_GEMV_NF (src/ops/fp4/nvfp4_gemv.rs)"
#endif
#if !defined(KILN_GEMV_ASYNC)
#define KILN_GEMV_ASYNC 0
#endif
#if !defined(KILN_GEMV_XSWZ)
#define KILN_GEMV_XSWZ 0
#endif
#if !defined(KILN_GEMV_XFIRST)
#define KILN_GEMV_XFIRST 0
#endif
#if !defined(KILN_GEMV_LEAN1)
#define KILN_GEMV_LEAN1 0
#endif
#if !defined(KILN_GEMV_PACKED)
#define KILN_GEMV_PACKED 0
#endif
#if !defined(KILN_GEMV_PDL)
#define KILN_GEMV_PDL 0
#endif
#if !defined(KILN_GEMV_ACC)
#define KILN_GEMV_ACC 1
#endif
#if !defined(KILN_GEMV_TILES)
#define KILN_GEMV_TILES 1
#endif
constexpr int MAX_WARPS = 16, NF = KILN_GEMV_NF;
// accumulator chains a warp (KILN_GEMV_ACC): a step's mma i goes into chain i % NACC
constexpr int NACC = KILN_GEMV_ACC;
static_assert(NACC == 1 || NACC == 2 || NACC == 4, "1, 2 or 4 accumulator chains");
typedef float Acc[NACC][NF][4];
constexpr bool kAsync = KILN_GEMV_ASYNC == 1, kWide = KILN_GEMV_ASYNC == 2, kLean = KILN_GEMV_ASYNC == 3;
constexpr bool kXring = KILN_GEMV_ASYNC == 4, kXswz = KILN_GEMV_XSWZ == 1, kXstage = KILN_GEMV_ASYNC == 5;

static_assert(!kXstage || NF == 1, "the X stages hold X of at most 8 rows: one mma column tile");
// the paths whose sums carry the folded 2^-8 and whose partial sums reuse the ring's memory
constexpr bool kRing = kWide || kLean || kXring || kXstage;
static_assert(!kXswz || kXring, "the X swizzle is the X ring's");
constexpr bool kXfirst = KILN_GEMV_XFIRST == 1;
static_assert(!kXfirst || kLean, "X first is the lean ring's");
constexpr bool kLean1 = KILN_GEMV_LEAN1 == 1;
static_assert(!kLean1 || (kLean && !kXfirst), "lean1 is the lean ring's, compiled for M 1");
constexpr bool kPacked = KILN_GEMV_PACKED == 1;
static_assert(!kPacked || (kLean && !kXfirst && !kLean1) || kXswz, "the GEMV layout is read by lean and xswz");
// the GEMV layout's adjacent pairs: X's words are the mma's B pairs as they are in memory
constexpr bool kPairs = kPacked;
// the paths whose ring holds X's pairs already in the mma's order (no byte permutes in a step)
constexpr bool kXsorted = kLean || kXstage || kPairs;
// lean1's lazy start (its first stage alone)
constexpr bool kLazy = kLean1;
constexpr bool kPdl = KILN_GEMV_PDL == 1;
// 16-row tiles of W a CTA (KILN_GEMV_TILES): 2 only on the swizzled X ring at M up to 8
constexpr int TILES = KILN_GEMV_TILES;
static_assert(TILES == 1 || (TILES == 2 && kXswz && NF == 1), "two row tiles are the swizzled X ring's, M up to 8");
// the GEMV layout is tiled (G61): a whole 16-row tile's step of codes and scales contiguous
constexpr bool kTiled = kPacked;

static_assert(!kLean || NF == 1, "the lean ring holds X of at most 4 rows: one mma column tile");
constexpr int RING = 8;                          // async: steps a warp's ring holds
constexpr u32 RING_CODES = 16 * 64;              // a step's codes: 16 rows x 64 bytes
constexpr u32 RING_STEP = RING_CODES + 16 * 8;   // then its scales: 16 rows x 8 bytes
constexpr int STEP = 128;            // K elements per warp step
constexpr int WIDE_RING = 3;                    // wide: stages a warp's ring holds
constexpr int WIDE_STEPS = 4;                   // wide: steps a stage
constexpr u32 WIDE_CODES = 16 * WIDE_STEPS * 64;  // a stage's codes: 16 rows x 256 bytes
constexpr u32 WIDE_STAGE = WIDE_CODES + 16 * WIDE_STEPS * 8;  // then its scales: 16 rows x 32 bytes
constexpr int LEAN_RING = 4;                     // lean: weight stages a warp's ring holds
constexpr int LEAN_STEPS = 2;                    // lean: steps a stage
constexpr u32 LEAN_CODES = 16 * LEAN_STEPS * 64; // a stage's codes: 16 rows x 128 bytes
constexpr u32 LEAN_SLOT = LEAN_CODES + 16 * LEAN_STEPS * 8;  // then its scales (16 x 16)
constexpr int LEAN_MAX_M = 4;                    // X rows the ring holds (the host's LEAN_MAX_M)
// xring: one-step slots a warp's ring holds (3 on the two-tile ring, 4 otherwise)
constexpr int XR_RING = TILES == 2 ? 3 : 4;
// a 3-slot ring steps its slots around (no modulo by 3)
constexpr bool kXrStepped = XR_RING == 3;
constexpr int XR_MAX_WARPS = 12;                 // xring: the most warps a CTA (the host's XR_MAX_WARPS)
constexpr u32 XR_PITCH = kXswz ? 272 : 256;      // xring: bytes between X's rows in a slot
constexpr u32 XR_X = TILES * RING_STEP;          // xring: where X starts in a slot (after each tile's step)
constexpr int XS_RING = 3;                       // xstage: 2-step slots a warp's ring holds
constexpr u32 XS_PITCH = 528;                    // xstage: bytes between X's rows (256 bf16, 16 more)
constexpr int UNROLL = NF == 1 ? 4 : 2;  // steps per iteration; the next iteration's are in flight meanwhile

// Laid out as GemvArgs in src/ops/fp4/nvfp4_gemv.rs.
struct GemvArgs {
  u64 x, w, s, y;
  i64 ldx, ldy;                              // elements
  i64 x_batch, w_batch, s_batch, y_batch;    // elements (x, y) and bytes (w, s) between batches
  float g;
  int m, n, k;
  int out_f16;  // 0: bf16 out, 1: f16
};

__device__ __forceinline__ u32x4 ld_stream(const void* p) {
  u32x4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ u32x4 ld_cached(const void* p) {
  u32x4 r;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

// Copies 16 bytes, all in range, through L1 (cached there): the X ring's X, which the other
// CTAs on the SM copy at about the same time (their warp w walks the same steps).
__device__ __forceinline__ void cp_async16_ca(u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

__device__ __forceinline__ u32 mul_bf16x2(u32 a, u32 b) {
  u32 r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Nibbles I and I + 4 of w as a bf16 pair, each the e2m1 value times 2^-126.
template <int I> __device__ __forceinline__ u32 nibble_pair(u32 w) {
  constexpr int MAG = 6 - 4 * I, SIGN = 12 - 4 * I;
  const u32 mag = MAG >= 0 ? w << MAG : w >> -MAG;
  return (mag & 0x01C001C0u) | ((w << SIGN) & 0x80008000u);
}

// Nibbles I and I + 4 of w as nibble_pair<I>, by one multiply: `w8` is w >> 8 (shared by I = 2, 3).
// The masked nibble at bits 4J..4J+3 of each half, times 2^(6-4J) + 2^(12-4J), has its magnitude
// at 6..8 and its sign at 15 from two copies 6 bits apart, which a 4-bit field cannot make overlap.
template <int I> __device__ __forceinline__ u32 nibble_pair_mul(u32 w, u32 w8) {
  constexpr int J = I & 1;
  constexpr u32 MUL = (1u << (6 - 4 * J)) | (1u << (12 - 4 * J));
  const u32 m = (I < 2 ? w : w8) & (0x000F000Fu << (4 * J));
  u32 t;
  asm("mul.lo.u32 %0, %1, %2;" : "=r"(t) : "r"(m), "n"(MUL));
  return t & 0x81C081C0u;
}

template <int N> __device__ __forceinline__ u32 rotl(u32 w) {
  u32 r;
  asm("shf.l.wrap.b32 %0, %1, %1, %2;" : "=r"(r) : "r"(w), "n"(N));
  return r;
}

// The four pairs of a word in the GEMV layout, each two codes as nibble_pair_mul's halves: pair i
// (elements 2i and 2i + 1) with the magnitudes at bits 6..8
// and 22..24, the signs at 15 and 31. Where the layout keeps pair i's bits (`pack_gemv_word` on the host): pair 0 at
// those bits, pair 1 six bits lower and pair 2 twelve lower (mod 32), pair 3's magnitude low
// bits and signs two lower and its top magnitude bits ten lower.
__device__ __forceinline__ void packed_pairs(u32 w, u32 (&p)[4]) {
  constexpr u32 PAIR = 0x81C081C0u, TOP = 0x01000100u;
  // pairs 1 and 3's low bits do not wrap: plain shifts, which ptxas may put on the FMA pipe
  // (IMAD.SHL) beside the logic ops
  p[0] = w & PAIR;
  p[1] = (w << 6) & PAIR;
  p[2] = rotl<12>(w) & PAIR;
  p[3] = ((w << 2) & (PAIR & ~TOP)) | (rotl<10>(w) & TOP);
}

// The two e4m3 scale codes in `codes` (low byte first) as bf16 pairs (s, s), times `f` (1, or
// 2^118 where the 2^126 of the decoded pairs is folded in; exact either way).
__device__ __forceinline__ void scale_pairs(u32 codes, u32& s0, u32& s1, float f = 1.0f) {
  const u32 h = fp8x2_to_f16x2<FP8_E4M3>((u16)codes);
  const float a = half_to_float<f16>(h, 0) * f, b = half_to_float<f16>(h, 1) * f;
  s0 = pack2<bf16>(a, a);
  s1 = pack2<bf16>(b, b);
}

// One step's weight loads for one lane: rows g and g + 8, 32 elements each, and their two scale
// codes each (low byte: the first block).
struct WStep {
  u32x4 w[2];
  u32 sc[2];
};

// One step's X for one lane: row g + 8 f, the same 32 elements.
struct XStep {
  u32x4 x[NF][4];
};

__device__ __forceinline__ void load_w(WStep& st, const GemvArgs& a, const u8* w, const u8* s, int row0, int g, int q,
                                       int step) {
  const int k0 = step * STEP + 32 * q;
  const bool kin = k0 < a.k;  // K is a multiple of 32: a lane's 32 elements are all in or all out
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + g + 8 * h;
    if (kin && r < a.n) {
      st.w[h] = ld_stream(w + (i64)r * (a.k / 2) + k0 / 2);
      st.sc[h] = *reinterpret_cast<const u16*>(s + (i64)r * (a.k / 16) + k0 / 16);
    } else {
      st.w[h] = u32x4{0, 0, 0, 0};
      st.sc[h] = 0;
    }
  }
}

__device__ __forceinline__ void load_x(XStep& st, const GemvArgs& a, const bf16* x, int g, int q, int step) {
  const int k0 = step * STEP + 32 * q;
  const bool kin = k0 < a.k;
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    const int m = g + 8 * f;
#pragma unroll
    for (int v = 0; v < 4; ++v)
      st.x[f][v] = kin && m < a.m ? ld_cached(x + (i64)m * a.ldx + k0 + 8 * v) : u32x4{0, 0, 0, 0};
  }
}

__device__ __forceinline__ u32 word(const u32x4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// FOLD: the scales carry 2^118 and the pairs are not multiplied by 2^126 (kAsync's path).
template <bool FOLD = false>
__device__ __forceinline__ void compute_step(Acc& acc, const WStep& st, const XStep& xs) {
  constexpr u32 TWO_126 = 0x7E807E80u;  // bf16 2^126, twice
  constexpr float F = FOLD ? 0x1p118f : 1.0f;
  u32 s[2][2];                           // [row half][block]
  scale_pairs(st.sc[0], s[0][0], s[0][1], F);
  scale_pairs(st.sc[1], s[1][0], s[1][1], F);
#pragma unroll
  for (int v = 0; v < 4; ++v) {  // 32-bit word v: elements 8v .. 8v + 7 of the lane's 32
    const u32 w0 = word(st.w[0], v), w1 = word(st.w[1], v);
    const int blk = v / 2;
    u32 a0[4], a1[4];  // pairs i = 0..3 of rows g and g + 8
    if constexpr (kPacked) {
      packed_pairs(w0, a0);
      packed_pairs(w1, a1);
    } else if constexpr (kRing) {
      const u32 h0 = w0 >> 8, h1 = w1 >> 8;
      a0[0] = nibble_pair_mul<0>(w0, h0), a0[1] = nibble_pair_mul<1>(w0, h0);
      a0[2] = nibble_pair_mul<2>(w0, h0), a0[3] = nibble_pair_mul<3>(w0, h0);
      a1[0] = nibble_pair_mul<0>(w1, h1), a1[1] = nibble_pair_mul<1>(w1, h1);
      a1[2] = nibble_pair_mul<2>(w1, h1), a1[3] = nibble_pair_mul<3>(w1, h1);
    } else {
      a0[0] = nibble_pair<0>(w0), a0[1] = nibble_pair<1>(w0), a0[2] = nibble_pair<2>(w0), a0[3] = nibble_pair<3>(w0);
      a1[0] = nibble_pair<0>(w1), a1[1] = nibble_pair<1>(w1), a1[2] = nibble_pair<2>(w1), a1[3] = nibble_pair<3>(w1);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (FOLD) {
        a0[i] = mul_bf16x2(a0[i], s[0][blk]);
        a1[i] = mul_bf16x2(a1[i], s[1][blk]);
      } else {
        a0[i] = mul_bf16x2(mul_bf16x2(a0[i], TWO_126), s[0][blk]);
        a1[i] = mul_bf16x2(mul_bf16x2(a1[i], TWO_126), s[1][blk]);
      }
    }
    // Two mmas per word: pairs (0, 1), then (2, 3).
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const u32 a[4] = {a0[2 * j], a1[2 * j], a0[2 * j + 1], a1[2 * j + 1]};
#pragma unroll
      for (int f = 0; f < NF; ++f) {
        // X elements 8v + i and 8v + i + 4 as one pair: register 2 j (+ 2) of the word's four.
        // (the lean and xstage rings hold X's pairs already in this order: words 2 j, 2 j + 1;
        // with adjacent pairs, kPairs, pair i is elements 8v + 2i, 8v + 2i + 1: word i as it is)
        const u32 lo = word(xs.x[f][v], j), hi = word(xs.x[f][v], j + 2);
        const u32 b[2] = {kXsorted ? word(xs.x[f][v], 2 * j) : prmt(lo, hi, 0x5410),
                          kXsorted ? word(xs.x[f][v], 2 * j + 1) : prmt(lo, hi, 0x7632)};
        mma_16816<bf16>(acc[(2 * v + j) % NACC][f], a, b);
      }
    }
  }
}

// The async path's copies of one step into its ring slot `dst`: lane (g, q) the 16 code bytes of
// rows g and g + 8 at k = 128 step + 32 q (rows g + 8h at dst + 64 (g + 8h) + 16 q), lanes 0..15
// the 8 scale bytes of row `lane` (at dst + RING_CODES + 8 lane); rows past N zero-filled. One
// commit group per call, empty past the warp's last step, so that the groups count steps.
__device__ __forceinline__ void copy_step(u32 dst, const GemvArgs& a, const u8* w, const u8* s, int row0, int lane,
                                          int step) {
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + g + 8 * h;
    const u8* src = r < a.n ? w + (i64)r * (a.k / 2) + step * (STEP / 2) + 16 * q : w;
    cp_async16_zfill(dst + (g + 8 * h) * 64 + 16 * q, src, r < a.n ? 16 : 0);
  }
  if (lane < 16) {
    const int r = row0 + lane;
    const u8* src = r < a.n ? s + (i64)r * (a.k / 16) + step * (STEP / 16) : s;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst + RING_CODES + 8 * lane), "l"(src),
                 "r"(r < a.n ? 8 : 0));
  }
}

__device__ __forceinline__ void issue_step(u32 dst, const GemvArgs& a, const u8* w, const u8* s, int row0, int lane,
                                           int step, int steps) {
  if (step < steps) copy_step(dst, a, w, s, row0, lane, step);  // warp-uniform
  cp_async_commit();
}

// A landed step as the register path's WStep: lane (g, q)'s codes of rows g, g + 8 and their
// two scale codes each.
__device__ __forceinline__ void read_step(WStep& st, u32 src, int g, int q) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    u32x4& v = st.w[h];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(src + (g + 8 * h) * 64 + 16 * q));
    u16 c;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(c) : "r"(src + RING_CODES + (g + 8 * h) * 8 + 2 * q));
    st.sc[h] = c;
  }
}

// The async path's K loop of one warp: steps warp, warp + warps, ... through its ring, RING - 1
// of them in flight while one is decoded.
__device__ __forceinline__ void async_kloop(Acc& acc, const GemvArgs& a, const u8* w, const u8* s,
                                            const bf16* x, u32 ring, int row0, int warp, int warps, int lane) {
  const int g = lane / 4, q = lane % 4, steps = (a.k + STEP - 1) / STEP;
  const int mine = steps > warp ? (steps - warp + warps - 1) / warps : 0;
#pragma unroll
  for (int j = 0; j < RING - 1; ++j) issue_step(ring + j * RING_STEP, a, w, s, row0, lane, warp + j * warps, steps);
  for (int j = 0; j < mine; ++j) {
    __syncwarp();  // every lane has read the slot that step j + RING - 1 overwrites (step j - 1's)
    issue_step(ring + ((j + RING - 1) % RING) * RING_STEP, a, w, s, row0, lane, warp + (j + RING - 1) * warps, steps);
    XStep xs;
    load_x(xs, a, x, g, q, warp + j * warps);
    cp_async_wait<RING - 1>();  // this lane's copies of step j have landed
    __syncwarp();               // and every lane's
    WStep st;
    read_step(st, ring + (j % RING) * RING_STEP, g, q);
    compute_step<true>(acc, st, xs);
  }
  cp_async_wait<0>();
}

// The wide ring's copies of stage `stage` (steps 4 stage .. 4 stage + 3) into slot `dst`: codes
// of row r at dst + 256 r, its 16-byte chunk c at 16 (c ^ 4 (r & 1)); scales of row r, step u at
// dst + WIDE_CODES + 32 r + 8 u. Instruction i of the codes covers rows 2i and 2i + 1, 256 bytes
// each; steps past K and rows past N are zero-filled. One commit group per call.
__device__ __forceinline__ void issue_stage(u32 dst, const GemvArgs& a, const u8* w, const u8* s, int row0, int lane,
                                            int stage, int steps) {
  if (stage * WIDE_STEPS < steps) {  // warp-uniform
    const int c = lane % 16, step_c = stage * WIDE_STEPS + c / 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = 2 * i + lane / 16, row = row0 + r;
      const bool in = row < a.n && step_c < steps;
      const u8* src = in ? w + (i64)row * (a.k / 2) + (i64)step_c * (STEP / 2) + 16 * (c % 4) : w;
      cp_async16_zfill(dst + r * (WIDE_STEPS * 64) + 16 * (c ^ ((r & 1) << 2)), src, in ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int id = 32 * i + lane, r = id / 4, u = id % 4, row = row0 + r, step = stage * WIDE_STEPS + u;
      const bool in = row < a.n && step < steps;
      const u8* src = in ? s + (i64)row * (a.k / 16) + (i64)step * (STEP / 16) : s;
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst + WIDE_CODES + 32 * r + 8 * u), "l"(src),
                   "r"(in ? 8 : 0));
    }
  }
  cp_async_commit();
}

// Step u of a landed ring stage of STEPS steps (the wide ring's 4, the lean ring's 2) as the
// register path's WStep: codes of row r at 64 STEPS r, chunk c at 16 (c ^ 4 (r & 1)); then the
// scales, 8 STEPS bytes a row.
template <int STEPS>
__device__ __forceinline__ void read_ring(WStep& st, u32 src, int g, int q, int u) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h, c = (4 * u + q) ^ ((r & 1) << 2);
    u32x4& v = st.w[h];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(src + r * (STEPS * 64) + 16 * c));
    u16 sc;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(sc) : "r"(src + 16 * STEPS * 64 + 8 * STEPS * r + 8 * u + 2 * q));
    st.sc[h] = sc;
  }
}

// read_ring<2>(st, slot, g, q, u) from a lane's kept offsets (lean1, xstage): row g's codes of
// step u at rd0 (u 0) or rd1 (u 1), row g + 8's 1024 on; the scales at sd + 128 h + 8 u.
__device__ __forceinline__ void read_kept(WStep& st, u32 slot, u32 rd0, u32 rd1, u32 sd, int u) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    u32x4& d = st.w[h];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w)
                 : "r"(slot + (u == 0 ? rd0 : rd1) + 1024 * h));
    u16 sc;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(sc) : "r"(slot + sd + 128 * h + 8 * u));
    st.sc[h] = sc;
  }
}

// The wide path's K loop of one warp: stages warp, warp + warps, ... through its ring of
// WIDE_RING, WIDE_RING - 1 in flight while one is decoded; X one step ahead of the decode.
__device__ __forceinline__ void wide_kloop(Acc& acc, const GemvArgs& a, const u8* w, const u8* s,
                                           const bf16* x, u32 ring, int row0, int warp, int warps, int lane) {
  const int g = lane / 4, q = lane % 4, steps = (a.k + STEP - 1) / STEP;
  const int stages = (steps + WIDE_STEPS - 1) / WIDE_STEPS;
  const int mine = stages > warp ? (stages - warp + warps - 1) / warps : 0;
#pragma unroll
  for (int j = 0; j < WIDE_RING - 1; ++j)
    issue_stage(ring + j * WIDE_STAGE, a, w, s, row0, lane, warp + j * warps, steps);
  XStep xs[2];
  if (mine > 0) load_x(xs[0], a, x, g, q, warp * WIDE_STEPS);
  for (int j = 0; j < mine; ++j) {
    __syncwarp();  // every lane has read the slot that stage j + WIDE_RING - 1 overwrites
    issue_stage(ring + ((j + WIDE_RING - 1) % WIDE_RING) * WIDE_STAGE, a, w, s, row0, lane,
                warp + (j + WIDE_RING - 1) * warps, steps);
    cp_async_wait<WIDE_RING - 1>();  // this lane's copies of stage j have landed
    __syncwarp();                    // and every lane's
    const int stage = warp + j * warps, last = min(WIDE_STEPS, steps - stage * WIDE_STEPS);
    const u32 slot = ring + (j % WIDE_RING) * WIDE_STAGE;
#pragma unroll
    for (int u = 0; u < WIDE_STEPS; ++u) {
      if (u >= last) break;  // warp-uniform: a last, partial stage
      // the next step's X: this stage's next, else the next stage's first
      const int next = u + 1 < last ? stage * WIDE_STEPS + u + 1 : (stage + warps) * WIDE_STEPS;
      if (u + 1 < last || j + 1 < mine) load_x(xs[(u + 1) & 1], a, x, g, q, next);
      WStep st;
      read_ring<WIDE_STEPS>(st, slot, g, q, u);
      compute_step<true>(acc, st, xs[u & 1]);
    }
    // a partial stage is the warp's last; a whole one ends on u = 3, so the next starts on xs[0]
  }
  cp_async_wait<0>();
}

// A warp's lean buffers for M rows of X: LEAN_RING weight slots, then two X slots of M x 256 bf16.
__device__ __forceinline__ u32 lean_warp_bytes(int m) { return LEAN_RING * LEAN_SLOT + 2u * m * (LEAN_STEPS * STEP * 2); }

// A lean stage's weights copied chunk by chunk into slot `dst` (issue_lean's layout), each copy
// bounded: rows past N and steps past K are zero-filled. Lane L copies chunk L % 8 of rows
// L / 8 + 4i and the 8 scale bytes of row L / 2, step L % 2. No commit.
__device__ __forceinline__ void copy_lean_bounded(u32 dst, const GemvArgs& a, const u8* w, const u8* s, int row0,
                                                  int lane, int stage, int steps) {
  const int c = lane % 8, hi = (lane / 8) & 1;
  const u32 wdst = dst + (lane / 8) * 128 + 16 * (c ^ (hi << 2));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = lane / 8 + 4 * i, row = row0 + r, step = stage * LEAN_STEPS + c / 4;
    const bool in = row < a.n && step < steps;
    const u8* src = in ? w + (i64)row * (a.k / 2) + (i64)step * (STEP / 2) + 16 * (c % 4) : w;
    cp_async16_zfill(wdst + 512 * i, src, in ? 16 : 0);
  }
  const int r = lane / 2, row = row0 + r, step = stage * LEAN_STEPS + lane % 2;
  const bool in = row < a.n && step < steps;
  const u8* src = in ? s + (i64)row * (a.k / 16) + (i64)step * (STEP / 16) : s;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst + LEAN_CODES + 8 * lane), "l"(src),
               "r"(in ? 8 : 0));
}

// The lean ring's copies of stage `stage` on the tiled GEMV layout (kTiled): the slot holds the
// stage's two steps as the async ring's steps, step u at 1,152 u (row r's codes at 64 r, then
// 8 scale bytes a row at 1,024), the tile's bytes as they lie. A whole tile's stage is 2 KB of
// codes and 256 bytes of scales, each contiguous: lane L copies 16 bytes at 16 L and 512 + 16 L
// of each step's codes, lanes 0-15 16 bytes of the scales (4 + 1 copies a lane, the row layout's
// count, but 4 lines of 128 bytes an instruction and 2 for the scales where the rows gave 16
// pieces of 16 bytes); a one-step last stage copies its first step only. A partial tile (rows
// past N; row by row in memory) copies the same slot positions from its rows, bounded and
// zero-filled. No commit.
__device__ __forceinline__ void copy_lean_tiled(u32 dst, const GemvArgs& a, const u8* w, const u8* s, const u8* wl,
                                                const u8* sl, int row0, int lane, int stage, int steps, bool whole) {
  const bool two = (stage + 1) * LEAN_STEPS <= steps;  // warp-uniform
  if (whole) {
    const u8* src = wl + (i64)stage * (LEAN_STEPS * RING_CODES);
    cp_async16_full(dst + 16 * lane, src);
    cp_async16_full(dst + 512 + 16 * lane, src + 512);
    if (two) {
      cp_async16_full(dst + RING_STEP + 16 * lane, src + RING_CODES);
      cp_async16_full(dst + RING_STEP + 512 + 16 * lane, src + RING_CODES + 512);
    }
    // scales: lane L < 8 (16 with two steps) the 16 bytes at 16 L, step L / 8's rows 2 (L % 8)..
    if (lane < (two ? 16 : 8))
      cp_async16_full(dst + RING_STEP * (lane / 8) + RING_CODES + 16 * (lane % 8),
                      sl + (i64)stage * (LEAN_STEPS * (RING_STEP - RING_CODES)));
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // step i / 2, row lane / 4 + 8 (i % 2), chunk lane % 4
      const int r = lane / 4 + 8 * (i % 2), row = row0 + r, step = stage * LEAN_STEPS + i / 2;
      const bool in = row < a.n && step < steps;
      const u8* src = in ? w + (i64)row * (a.k / 2) + (i64)step * (STEP / 2) + 16 * (lane % 4) : w;
      cp_async16_zfill(dst + RING_STEP * (i / 2) + 512 * (i % 2) + 16 * lane, src, in ? 16 : 0);
    }
    const int r = lane % 16, row = row0 + r, step = stage * LEAN_STEPS + lane / 16;
    const bool in = row < a.n && step < steps;
    const u8* src = in ? s + (i64)row * (a.k / 16) + (i64)step * (STEP / 16) : s;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst + RING_STEP * (lane / 16) + RING_CODES + 8 * r),
                 "l"(src), "r"(in ? 8 : 0));
  }
}

// The lean ring's copies of stage `stage` (steps 2 stage, 2 stage + 1) into slot `dst`: codes of
// row r at dst + 128 r, its 16-byte chunk c at 16 (c ^ 4 (r & 1)) (the wide ring's conflict-free
// order); scales of row r, step u at dst + LEAN_CODES + 16 r + 8 u. Lane L copies chunk L % 8 of
// rows L / 8 + 4i and the 8 scale bytes of row L / 2, step L % 2. `fast` (warp-uniform): the CTA's 16 rows are
// inside N and the stage inside K, so every copy is whole and its address steps by a constant
// from the lane's first (`wl`, `sl`: the lane's sources at stage 0); else each copy is
// bounded and zero-filled. One commit group per call, empty past the warp's last stage.
__device__ __forceinline__ void issue_lean(u32 dst, const GemvArgs& a, const u8* w, const u8* s, const u8* wl,
                                           const u8* sl, int row0, int lane, int stage, int steps, bool fast) {
  if (kTiled && stage * LEAN_STEPS < steps) {  // warp-uniform; `fast`: the tile is whole
    copy_lean_tiled(dst, a, w, s, wl, sl, row0, lane, stage, steps, fast);
  } else if (stage * LEAN_STEPS < steps) {  // warp-uniform
    const int c = lane % 8, hi = (lane / 8) & 1;
    const u32 wdst = dst + (lane / 8) * 128 + 16 * (c ^ (hi << 2));
    const i64 row4 = (i64)4 * (a.k / 2);
    if (fast) {
      const u8* src = wl + (i64)stage * (LEAN_STEPS * STEP / 2);
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async16_full(wdst + 512 * i, src + i * row4);
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst + LEAN_CODES + 8 * lane),
                   "l"(sl + (i64)stage * (LEAN_STEPS * STEP / 16)));
    } else {
      copy_lean_bounded(dst, a, w, s, row0, lane, stage, steps);
    }
  }
  cp_async_commit();
}

// The lean ring's X of one stage, a lane's 16 bytes of each row (elements 8 lane .. 8 lane + 7
// of the stage's 256; zeros past K in a last stage of one step), loaded into registers one
// iteration before they are stored (xr: LEAN_MAX_M chunks, rows at or past M untouched).
// `m_rows`: a.m, or 1 where the kernel is compiled for M 1 (lean1: no loop, no branches).
__device__ __forceinline__ void load_lean_x(u32x4 (&xr)[LEAN_MAX_M], const GemvArgs& a, const bf16* xl, int lane,
                                            int stage, int steps, int m_rows) {
  if (stage * LEAN_STEPS >= steps) return;  // warp-uniform: past the warp's last stage
  const bool in = (stage + 1) * LEAN_STEPS <= steps || lane < 16;
  const bf16* xs = xl + (i64)stage * (LEAN_STEPS * STEP);
#pragma unroll
  for (int m = 0; m < LEAN_MAX_M; ++m)
    if (m < m_rows) xr[m] = in ? ld_cached(xs + (i64)m * a.ldx) : u32x4{0, 0, 0, 0};
}

// Stores a lane's X chunks (row m's 256 elements at dst + 512 m) with each 8-element group's pairs in the mma's B order:
// (x0, x4), (x1, x5), (x2, x6), (x3, x7), so that a step's B fragments are read as they are,
// without compute_step's two byte permutes an mma (16 a step); with adjacent pairs (kPairs) the
// B order is X's own, (x0, x1), (x2, x3), ...: stored as loaded.
__device__ __forceinline__ void store_lean_x(u32 dst, const u32x4 (&xr)[LEAN_MAX_M], int m_rows, int lane) {
#pragma unroll
  for (int m = 0; m < LEAN_MAX_M; ++m) {
    if (m >= m_rows) break;
    const u32x4 v = xr[m];
    if constexpr (kPairs) {
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + 512 * m + 16 * lane), "r"(v.x), "r"(v.y),
                   "r"(v.z), "r"(v.w)
                   : "memory");
    } else {
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + 512 * m + 16 * lane),
                   "r"(prmt(v.x, v.z, 0x5410)), "r"(prmt(v.x, v.z, 0x7632)), "r"(prmt(v.y, v.w, 0x5410)),
                   "r"(prmt(v.y, v.w, 0x7632))
                   : "memory");
    }
  }
}

// Step u of a landed lean stage (read_ring) and X's 32 elements of column g from the stage's X
// slot (rows of X below M only: `xin`).
__device__ __forceinline__ void read_lean(WStep& st, XStep& xs, u32 src, u32 xsrc, int g, int q, int u, bool xin) {
  if constexpr (kTiled) {
    read_step(st, src + RING_STEP * u, g, q);  // copy_lean_tiled's slot: two async-ring steps
  } else {
    read_ring<LEAN_STEPS>(st, src, g, q, u);
  }
  if (xin) {
    const u32 xa = xsrc + 512 * g + 256 * u + 64 * q;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      u32x4& d = xs.x[0][v];
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w) : "r"(xa + 16 * v));
    }
  }
}

// The lean path's K loop of one warp: stages warp, warp + warps, ... (2 steps each) through its
// ring of LEAN_RING weight slots, LEAN_RING - 1 in flight while one is decoded. X goes through
// two slots: the X of the warp's stage j + 2 is loaded in iteration j and stored in iteration
// j + 1, after the warp barrier that frees its slot (last read in iteration j - 1).
//
// KILN_GEMV_LEAN1 (`KILN_FP4_GEMV=lean1`, M 1 only): the same ring compiled for one row of X,
// with a lazy start and a lighter stage. SASS of lean at M 1 (NVRTC 13.0, 2026-11-29): a stage
// is ~460 instructions, 342 of them its two steps' decode, scales and mma, ~120 its copies, X's
// loads and stores (loops over M 1-4 with their branches and zeroing), the slot's modulo and
// the read offsets rebuilt. Here M is 1 at compile time, the slots are stepped around the ring
// and the read offsets kept. And the start: every warp of the one-wave grid asked for its first
// three stages at once (~14 MB at 1x8192x8192, ~3.4 us at the copy rate), so a warp whose first
// stage came last waited that long; here a warp asks for its first stage only, waits for it,
// then fills the ring (4.7 MB ahead of every warp's first step, ~1.1 us).
__device__ __forceinline__ void lean_kloop(Acc& acc, const GemvArgs& a, const u8* w, const u8* s,
                                           const bf16* x, u32 ring, int row0, int warp, int warps, int lane) {
  const int g = lane / 4, q = lane % 4, steps = a.k / STEP;
  const int stages = (steps + LEAN_STEPS - 1) / LEAN_STEPS;
  const int mine = stages > warp ? (stages - warp + warps - 1) / warps : 0;
  const int m_rows = kLean1 ? 1 : a.m;
  const u32 xbuf = ring + LEAN_RING * LEAN_SLOT, xslot = (u32)m_rows * (LEAN_STEPS * STEP * 2);
  const bool rows_in = row0 + 16 <= a.n;
  // the lane's copy sources at stage 0 (rows clamped: only the fast path, rows_in, reads them)
  const int wr = min(row0 + lane / 8, a.n - 1), sr = min(row0 + lane / 2, a.n - 1);
  const u8* wl = w + (i64)wr * (a.k / 2) + 16 * (lane % 8);
  const u8* sl = s + (i64)sr * (a.k / 16) + 8 * (lane % 2);
  if constexpr (kTiled) {
    // the tile's stages from its first byte (a whole tile only reads these; lanes 16-31 keep a
    // scale source inside the tile, never copied)
    wl = w + (i64)min(row0, a.n - 1) * (a.k / 2) + 16 * lane;
    sl = s + (i64)min(row0, a.n - 1) * (a.k / 16) + 16 * (lane % 16);
  }
  const bf16* xl = x + 8 * lane;
  const bool xin = g < m_rows;
  const auto stage_of = [&](int j) { return warp + j * warps; };
  // tiled: a whole tile's stages are copied from the lane's sources, a one-step last stage too
  const auto fast = [&](int stage) { return rows_in && (kTiled || (stage + 1) * LEAN_STEPS <= steps); };
  u32x4 xr[LEAN_MAX_M];
  if constexpr (kPdl && kXfirst) grid_dependency_wait();  // X first: nothing ahead of the wait
  if constexpr (kXfirst) load_lean_x(xr, a, xl, lane, stage_of(0), steps, m_rows);  // ahead of the weights
  if constexpr (kLazy) {
    // the lazy start: the first stage alone, then the ring's other two once it has landed
    issue_lean(ring, a, w, s, wl, sl, row0, lane, stage_of(0), steps, fast(stage_of(0)));
    if constexpr (kPdl) grid_dependency_wait();  // X may be the kernel before's output
    load_lean_x(xr, a, xl, lane, stage_of(0), steps, m_rows);
    cp_async_wait<0>();
#pragma unroll
    for (int j = 1; j < LEAN_RING - 1; ++j)
      issue_lean(ring + j * LEAN_SLOT, a, w, s, wl, sl, row0, lane, stage_of(j), steps, fast(stage_of(j)));
  } else {
#pragma unroll
    for (int j = 0; j < LEAN_RING - 1; ++j) {
      issue_lean(ring + j * LEAN_SLOT, a, w, s, wl, sl, row0, lane, stage_of(j), steps, fast(stage_of(j)));
    }
    if constexpr (kPdl && !kXfirst) grid_dependency_wait();  // the weights asked for; X may be the kernel before's output
    if constexpr (!kXfirst) load_lean_x(xr, a, xl, lane, stage_of(0), steps, m_rows);
  }
  if (mine > 0) store_lean_x(xbuf, xr, m_rows, lane);
  load_lean_x(xr, a, xl, lane, stage_of(1), steps, m_rows);
  XStep xs;  // columns at or past M stay zero
#pragma unroll
  for (int v = 0; v < 4; ++v) xs.x[0][v] = u32x4{0, 0, 0, 0};
  // lean1: the slots of stage j and of stage j + LEAN_RING - 1, stepped around the ring (no
  // modulo), and the lane's read offsets kept (read_ring<2>: row r's chunk (4u + q) ^ 4 (r & 1),
  // i.e. rd + 64 u for an even g, rd + 64 (1 - u) for an odd one; its scales at sd + 8 u; X's
  // row 0 at 256 u + 64 q)
  const u32 ring_end = ring + LEAN_RING * LEAN_SLOT;
  u32 slot = ring, fill = ring + (LEAN_RING - 1) * LEAN_SLOT;
  u32 rd0 = g * 128 + 16 * q + 64 * (g & 1), rd1 = g * 128 + 16 * q + 64 * (1 - (g & 1));
  u32 sd = LEAN_CODES + 16 * g + 2 * q, xd = 64 * q;
  if constexpr (kLean1) asm volatile("" : "+r"(rd0), "+r"(rd1), "+r"(sd), "+r"(xd));  // kept, not rebuilt
  for (int j = 0; j < mine; ++j) {
    __syncwarp();  // every lane is done with iteration j - 1's weight and X slots
    if (j + 1 < mine) store_lean_x(xbuf + ((j + 1) & 1) * xslot, xr, m_rows, lane);
    const int next = stage_of(j + LEAN_RING - 1);
    if constexpr (kLean1) {
      issue_lean(fill, a, w, s, wl, sl, row0, lane, next, steps, fast(next));
      fill = fill + LEAN_SLOT == ring_end ? ring : fill + LEAN_SLOT;
    } else {
      issue_lean(ring + ((j + LEAN_RING - 1) % LEAN_RING) * LEAN_SLOT, a, w, s, wl, sl, row0, lane, next, steps,
                 fast(next));
    }
    load_lean_x(xr, a, xl, lane, stage_of(j + 2), steps, m_rows);
    cp_async_wait<LEAN_RING - 1>();  // this lane's copies of stage j have landed
    __syncwarp();                    // and every lane's, and the X stored in iteration j - 1
    const int stage = stage_of(j), last = min(LEAN_STEPS, steps - stage * LEAN_STEPS);
    const u32 xsrc = xbuf + (j & 1) * xslot;
    if constexpr (!kLean1) slot = ring + (j % LEAN_RING) * LEAN_SLOT;
#pragma unroll
    for (int u = 0; u < LEAN_STEPS; ++u) {
      if (u >= last) break;  // warp-uniform: a last, partial stage
      WStep st;
      if constexpr (kLean1) {
        read_kept(st, slot, rd0, rd1, sd, u);
        if (xin) {
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            u32x4& d = xs.x[0][v];
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w)
                         : "r"(xsrc + xd + 256 * u + 16 * v));
          }
        }
      } else {
        read_lean(st, xs, slot, xsrc, g, q, u, xin);
      }
      compute_step<true>(acc, st, xs);
    }
    if constexpr (kLean1) slot = slot + LEAN_SLOT == ring_end ? ring : slot + LEAN_SLOT;
  }
  cp_async_wait<0>();
}

// A warp's X ring for M rows of X: XR_RING one-step slots, each the async ring's step (codes,
// then scales) and M x 128 bf16 of X (256 bytes a row).
__device__ __forceinline__ u32 xring_slot_bytes(int m) { return XR_X + XR_PITCH * m; }

// Where X's 16-byte chunk c (0..15) of a row sits in it: as it is, or (xswz) c ^ ((c >> 2) & 2).
__device__ __forceinline__ u32 xr_chunk(u32 c) { return kXswz ? c ^ ((c >> 2) & 2u) : c; }

// A lane's X ring copies, fixed for the whole loop: its sources at step 0 (codes of rows g and
// g + 8 at chunk q, the 8 scale bytes of row lane % 16, X's chunk lane % 16 of row lane / 16)
// and how many X chunks it copies a step (rows lane / 16 + 2 t below M).
struct XrLane {
  u64 w0, w1, s, x;
  u64 wtile, stile;  // bytes between the codes (scales) of two 16-row tiles (KILN_GEMV_TILES 2)
  u64 xrow2;  // bytes between rows of X two apart
  int nx;
  u32 xdst;  // xswz: where the lane's first X chunk lands in a slot
};

// The X ring's copies of step `step` into slot `dst`: when `fast` (the CTA's 16 rows inside N)
// the async ring's codes and scales from the lane's fixed sources, else bounded and zero-filled
// (copy_step); then X's chunks, M x 16 of 16 bytes (chunk i = lane + 32 t: row i / 16, elements
// 8 (i % 16) .. + 7 of the step's 128; K is a multiple of 128, so each is whole). One commit
// group per call, empty past the warp's last step (issue_xring; its halves issue_xring_w, the
// weights, and issue_xring_x, X, leave the commit to the caller).
__device__ __forceinline__ void issue_xring_w(u32 dst, const GemvArgs& a, const u8* w, const u8* s, const XrLane& l,
                                              int row0, int lane, int step, bool fast) {
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int t = 0; t < TILES; ++t) {  // tile t: rows row0 + 16 t .., at dst + t RING_STEP
    const u32 d = dst + t * RING_STEP;
    // tiled: a whole tile is tiled (the CTA's other may be partial, row by row, bounded)
    const bool whole = kTiled && (TILES == 1 ? fast : row0 + 16 * (t + 1) <= a.n);
    if (whole) {
      // the step's 1,152 bytes as they lie: codes at 16 L and 512 + 16 L, scales' 128 by lanes 0-7
      const u8* src = reinterpret_cast<const u8*>(l.w0 + t * l.wtile) + (u64)step * RING_CODES;
      cp_async16_full(d + 16 * lane, src);
      cp_async16_full(d + 512 + 16 * lane, src + 512);
      asm volatile("{ .reg .pred p; setp.lt.u32 p, %2, 8; @p cp.async.cg.shared.global [%0], [%1], 16; }\n" ::"r"(
                       d + RING_CODES + 16 * lane),
                   "l"(l.s + t * l.stile + (u64)step * (RING_STEP - RING_CODES)), "r"(lane));
    } else if (fast) {
      const u64 off = (u64)step * (STEP / 2) + t * l.wtile;
      cp_async16_full(d + g * 64 + 16 * q, reinterpret_cast<const void*>(l.w0 + off));
      cp_async16_full(d + (g + 8) * 64 + 16 * q, reinterpret_cast<const void*>(l.w1 + off));
      if (lane < 16)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d + RING_CODES + 8 * lane),
                     "l"(l.s + (u64)step * (STEP / 16) + t * l.stile));
    } else {
      copy_step(d, a, w, s, row0 + 16 * t, lane, step);
    }
  }
}

__device__ __forceinline__ void issue_xring_x(u32 dst, const XrLane& l, int lane, int step) {
  const u64 xs = l.x + (u64)step * (STEP * 2);
#pragma unroll
  for (int t = 0; t < 4 * NF; ++t) {  // 8 NF rows x 16 chunks at most: 4 NF a lane
    const u32 at = kXswz ? dst + l.xdst + 2 * XR_PITCH * t : dst + XR_X + 16 * lane + 512 * t;
    if (t < l.nx) cp_async16_ca(at, reinterpret_cast<const void*>(xs + t * l.xrow2));
  }
}

__device__ __forceinline__ void issue_xring(u32 dst, const GemvArgs& a, const u8* w, const u8* s, const XrLane& l,
                                            int row0, int lane, int step, int steps, bool fast) {
  if (step < steps) {  // warp-uniform
    issue_xring_w(dst, a, w, s, l, row0, lane, step, fast);
    issue_xring_x(dst, l, lane, step);
  }
  cp_async_commit();
}

// The X ring's K loop of one warp: steps warp, warp + warps, ... through its ring of XR_RING
// slots, XR_RING - 1 in flight while one is decoded; each slot carries its step's X (and, with
// TILES 2, the step's weights of the CTA's two row tiles, each decoded against the one X).
__device__ __forceinline__ void xring_kloop(Acc (&acc)[TILES], const GemvArgs& a, const u8* w, const u8* s,
                                            const bf16* x, u32 ring, int row0, int warp, int warps, int lane) {
  const int g = lane / 4, q = lane % 4, steps = a.k / STEP;
  const int mine = steps > warp ? (steps - warp + warps - 1) / warps : 0;
  const u32 slot_bytes = xring_slot_bytes(a.m);
  const bool fast = row0 + 16 * TILES <= a.n;
  XrLane l;  // rows clamped: only the fast path reads w0, w1 and s
  l.w0 = reinterpret_cast<u64>(w + (i64)min(row0 + g, a.n - 1) * (a.k / 2) + 16 * q);
  l.w1 = reinterpret_cast<u64>(w + (i64)min(row0 + g + 8, a.n - 1) * (a.k / 2) + 16 * q);
  l.s = reinterpret_cast<u64>(s + (i64)min(row0 + lane % 16, a.n - 1) * (a.k / 16));
  if constexpr (kTiled) {
    // the tile's steps from its first byte (whole tiles only read these; lanes 8-31 keep a scale
    // source inside the tile, never copied)
    l.w0 = reinterpret_cast<u64>(w + (i64)row0 * (a.k / 2) + 16 * lane);
    l.w1 = l.w0;
    l.s = reinterpret_cast<u64>(s + (i64)row0 * (a.k / 16) + 16 * (lane % 8));
  }
  l.x = reinterpret_cast<u64>(x + (i64)(lane / 16) * a.ldx + 8 * (lane % 16));
  l.xrow2 = (u64)(4 * a.ldx);
  l.nx = (a.m - lane / 16 + 1) / 2;
  l.xdst = XR_X + XR_PITCH * (lane / 16) + 16 * xr_chunk(lane % 16);
  l.wtile = (u64)16 * (a.k / 2);
  l.stile = (u64)16 * (a.k / 16);
  // opaque to the compiler, which otherwise recomputes the sources every step (64-bit products)
  asm volatile("" : "+l"(l.w0), "+l"(l.w1), "+l"(l.s), "+l"(l.x), "+l"(l.xrow2), "+r"(l.nx));
  if constexpr (TILES > 1) asm volatile("" : "+l"(l.wtile), "+l"(l.stile));
  // X's rows of this lane's mma columns, clamped: columns at or past M are computed, never stored
  // (xswz: chunks 4q, 4q + 1 at xoff, 4q + 2, 4q + 3 at xoff2; q of 2 and 3 have them swapped)
  u32 xoff[NF], xoff2[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    xoff[f] = XR_X + XR_PITCH * min(g + 8 * f, a.m - 1) + 16u * xr_chunk(4 * q);
    xoff2[f] = XR_X + XR_PITCH * min(g + 8 * f, a.m - 1) + 16u * xr_chunk(4 * q + 2);
  }
  if constexpr (kPdl) {
    // PDL: the first slots' weights asked for before the wait, their X (the kernel before's
    // output, maybe) after it; group 0 then holds every prologue weight copy and X of slot 0,
    // group j the X of slot j, so slot j is whole once groups 0..j are, as the loop waits
#pragma unroll
    for (int j = 0; j < XR_RING - 1; ++j)
      if (warp + j * warps < steps) issue_xring_w(ring + j * slot_bytes, a, w, s, l, row0, lane, warp + j * warps, fast);
    grid_dependency_wait();
#pragma unroll
    for (int j = 0; j < XR_RING - 1; ++j) {
      if (warp + j * warps < steps) issue_xring_x(ring + j * slot_bytes, l, lane, warp + j * warps);
      cp_async_commit();
    }
  } else {
#pragma unroll
    for (int j = 0; j < XR_RING - 1; ++j) {
      issue_xring(ring + j * slot_bytes, a, w, s, l, row0, lane, warp + j * warps, steps, fast);
    }
  }
  // 3 slots: the slots of step j and of step j + XR_RING - 1 stepped around the ring (3 slots:
  // no modulo by 3)
  const u32 ring_end = ring + XR_RING * slot_bytes;
  u32 slot2 = ring, fill2 = ring + (XR_RING - 1) * slot_bytes;
  for (int j = 0; j < mine; ++j) {
    __syncwarp();  // every lane has read the slot that step j + XR_RING - 1 overwrites (step j - 1's)
    const u32 fill = kXrStepped ? fill2 : ring + ((j + XR_RING - 1) % XR_RING) * slot_bytes;
    issue_xring(fill, a, w, s, l, row0, lane, warp + (j + XR_RING - 1) * warps, steps, fast);
    cp_async_wait<XR_RING - 1>();  // this lane's copies of step j have landed
    __syncwarp();                  // and every lane's
    const u32 slot = kXrStepped ? slot2 : ring + (j % XR_RING) * slot_bytes;
    if constexpr (kXrStepped) {
      fill2 = fill2 + slot_bytes == ring_end ? ring : fill2 + slot_bytes;
      slot2 = slot2 + slot_bytes == ring_end ? ring : slot2 + slot_bytes;
    }
    WStep st[TILES];
#pragma unroll
    for (int t = 0; t < TILES; ++t) read_step(st[t], slot + t * RING_STEP, g, q);
    XStep xs;
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        u32x4& d = xs.x[f][v];
        const u32 at = kXswz ? slot + (v < 2 ? xoff[f] : xoff2[f]) + 16 * (v % 2) : slot + xoff[f] + 16 * v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w)
                     : "r"(at));
      }
#pragma unroll
    for (int t = 0; t < TILES; ++t) compute_step<true>(acc[t], st[t], xs);  // X's permutes shared
  }
  cp_async_wait<0>();
}

// A warp's xstage ring for M rows of X: XS_RING slots, each a lean stage (codes, then scales)
// and M rows of the stage's 256 bf16 of X, XS_PITCH bytes apart.
__device__ __forceinline__ u32 xstage_slot_bytes(int m) { return LEAN_SLOT + XS_PITCH * m; }

// Where X's 16-byte chunk c (0..31 of a stage's row) sits in its row: xswz's swizzle.
__device__ __forceinline__ u32 xs_chunk(u32 c) { return c ^ ((c >> 2) & 2u); }

// A lane's xstage copies, fixed for the whole loop: its sources at stage 0 and its offsets in a
// slot. Codes: row lane / 2, chunks 2i + lane % 2 (instruction i covers each row's 32-byte
// sector i), stored at chunk (2i + lane % 2) ^ 4 (row & 1), read_ring's order: for i < 2 at
// wdst0 + 32 i, for i >= 2 at wdst1 + 32 i. Scales: row lane / 2, step lane % 2 (8 bytes). X:
// chunk `lane` of every row below M.
struct XsLane {
  u64 w, s, x;
  u64 ldx2;  // bytes between X's rows
  u32 wdst0, wdst1, xdst;
};

// The xstage ring's copies of stage `stage` into slot `dst`: when `fast` (the CTA's 16 rows
// inside N and both steps inside K) from the lane's fixed sources, else the lean ring's bounded
// copies; then X's chunk `lane` of each row below M (none past K: a last stage of one step
// copies its first 16 chunks). One commit group per call, empty past the warp's last stage.
__device__ __forceinline__ void issue_xstage_w(u32 dst, const GemvArgs& a, const u8* w, const u8* s, const XsLane& l,
                                               int row0, int lane, int stage, int steps, bool fast) {
  if (fast) {
    const u64 src = l.w + (u64)stage * (LEAN_STEPS * STEP / 2);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      cp_async16_full(dst + (i < 2 ? l.wdst0 : l.wdst1) + 32 * i, reinterpret_cast<const void*>(src + 32 * i));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst + LEAN_CODES + 8 * lane),
                 "l"(l.s + (u64)stage * (LEAN_STEPS * STEP / 16)));
  } else {
    copy_lean_bounded(dst, a, w, s, row0, lane, stage, steps);
  }
}

__device__ __forceinline__ void issue_xstage_x(u32 dst, const GemvArgs& a, const XsLane& l, int lane, int stage,
                                               int steps) {
  if ((stage + 1) * LEAN_STEPS <= steps || lane < 16) {
    u64 xs = l.x + (u64)stage * (LEAN_STEPS * STEP * 2);
    u32 xd = dst + l.xdst;
#pragma unroll 1  // M is small: a plain loop (unrolled, M 1 paid ~25 instructions of remainder logic)
    for (int m = 0; m < a.m; ++m, xs += l.ldx2, xd += XS_PITCH) cp_async16_ca(xd, reinterpret_cast<const void*>(xs));
  }
}

__device__ __forceinline__ void issue_xstage(u32 dst, const GemvArgs& a, const u8* w, const u8* s, const XsLane& l,
                                             int row0, int lane, int stage, int steps, bool fast) {
  if (stage * LEAN_STEPS < steps) {  // warp-uniform
    issue_xstage_w(dst, a, w, s, l, row0, lane, stage, steps, fast);
    issue_xstage_x(dst, a, l, lane, stage, steps);
  }
  cp_async_commit();
}

// The xstage path's K loop of one warp: stages warp, warp + warps, ... (2 steps each) through
// its ring of XS_RING slots, XS_RING - 1 in flight while one is decoded. Once a stage has
// landed each lane puts its own X chunks into the mma's pair order (store_lean_x's order) in
// place; after the warp barrier the steps read X's row min(g, M - 1) (columns at or past M are
// computed, never stored).
__device__ __forceinline__ void xstage_kloop(Acc& acc, const GemvArgs& a, const u8* w, const u8* s,
                                             const bf16* x, u32 ring, int row0, int warp, int warps, int lane) {
  const int g = lane / 4, q = lane % 4, steps = a.k / STEP;
  const int stages = (steps + LEAN_STEPS - 1) / LEAN_STEPS;
  const int mine = stages > warp ? (stages - warp + warps - 1) / warps : 0;
  const u32 slot_bytes = xstage_slot_bytes(a.m);
  const bool rows_in = row0 + 16 <= a.n;
  XsLane l;  // rows clamped: only the fast path reads w and s
  const int r = lane / 2, h = lane % 2, odd = r & 1;
  l.w = reinterpret_cast<u64>(w + (i64)min(row0 + r, a.n - 1) * (a.k / 2) + 16 * h);
  l.s = reinterpret_cast<u64>(s + (i64)min(row0 + r, a.n - 1) * (a.k / 16) + 8 * h);
  l.x = reinterpret_cast<u64>(x + 8 * lane);
  l.ldx2 = (u64)(2 * a.ldx);
  l.wdst0 = r * 128 + 16 * h + 64 * odd;
  l.wdst1 = r * 128 + 16 * h - 64 * odd;
  l.xdst = LEAN_SLOT + 16 * xs_chunk(lane);
  // opaque to the compiler, which otherwise recomputes the sources every stage (64-bit products)
  asm volatile("" : "+l"(l.w), "+l"(l.s), "+l"(l.x), "+l"(l.ldx2));
  // X's row of this lane's mma column, clamped; chunks 4q + v of a step at xs_chunk: v 0, 1 at
  // xa, v 2, 3 at xb (q 2 and 3 have the pairs swapped)
  const u32 xrow = LEAN_SLOT + XS_PITCH * min(g, a.m - 1) + 64 * q;
  u32 xa = xrow + 16 * (q & 2), xb = xrow + 16 * (2 - (q & 2));
  // read_ring<2>'s offsets of rows g (g + 8: 1024 on) at step u: chunk (4u + q) ^ 4 (g & 1),
  // i.e. rd + 64 u for an even g, rd + 64 (1 - u) for an odd one; the scales at sd + 8 u
  // (+ 128 for g + 8)
  u32 rd0 = g * 128 + 16 * q + 64 * (g & 1), rd1 = g * 128 + 16 * q + 64 * (1 - (g & 1));
  u32 sd = LEAN_CODES + 16 * g + 2 * q;
  asm volatile("" : "+r"(xa), "+r"(xb), "+r"(rd0), "+r"(rd1), "+r"(sd));  // kept, not rebuilt every stage
  const auto stage_of = [&](int j) { return warp + j * warps; };
  const auto fast = [&](int stage) { return rows_in && (stage + 1) * LEAN_STEPS <= steps; };
#pragma unroll
  for (int j = 0; j < XS_RING - 1; ++j)
    issue_xstage(ring + j * slot_bytes, a, w, s, l, row0, lane, stage_of(j), steps, fast(stage_of(j)));
  // the slots of stage j and of stage j + XS_RING - 1, stepped around the ring (no modulo)
  const u32 ring_end = ring + XS_RING * slot_bytes;
  u32 slot = ring, fill = ring + (XS_RING - 1) * slot_bytes;
  for (int j = 0; j < mine; ++j) {
    __syncwarp();  // every lane has read the slot that stage j + XS_RING - 1 overwrites (stage j - 1's)
    const int next = stage_of(j + XS_RING - 1);
    issue_xstage(fill, a, w, s, l, row0, lane, next, steps, fast(next));
    fill = fill + slot_bytes == ring_end ? ring : fill + slot_bytes;
    cp_async_wait<XS_RING - 1>();  // this lane's copies of stage j have landed
    u32 at = slot + l.xdst;
#pragma unroll 1
    for (int m = 0; m < a.m; ++m, at += XS_PITCH) {  // this lane's chunk of each X row, into the pair order
      u32x4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at));
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(prmt(v.x, v.z, 0x5410)),
                   "r"(prmt(v.x, v.z, 0x7632)), "r"(prmt(v.y, v.w, 0x5410)), "r"(prmt(v.y, v.w, 0x7632))
                   : "memory");
    }
    __syncwarp();  // every lane's copies and permutes
    const int stage = stage_of(j), last = min(LEAN_STEPS, steps - stage * LEAN_STEPS);
#pragma unroll
    for (int u = 0; u < LEAN_STEPS; ++u) {
      if (u >= last) break;  // warp-uniform: a last, partial stage
      WStep st;
      read_kept(st, slot, rd0, rd1, sd, u);
      XStep xs;
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        u32x4& d = xs.x[0][v];
        const u32 at = slot + (v < 2 ? xa : xb) + 256 * u + 16 * (v % 2);
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w)
                     : "r"(at));
      }
      compute_step<true>(acc, st, xs);
    }
    slot = slot + slot_bytes == ring_end ? ring : slot + slot_bytes;
  }
  cp_async_wait<0>();
}

// At most 128 registers a thread: four 128-thread CTAs, or one of 512, fill an SM's 64 K. The X
// ring (and xstage): at most 80 (two CTAs of 384 threads an SM), so that ~24 warps an SM fit.
#if KILN_GEMV_ASYNC == 4 || KILN_GEMV_ASYNC == 5
#define GEMV_BOUNDS __launch_bounds__(XR_MAX_WARPS * 32, 2)
#else
#define GEMV_BOUNDS __launch_bounds__(MAX_WARPS * 32, 1)
#endif
extern "C" __global__ void GEMV_BOUNDS nvfp4_gemv(const GemvArgs a) {
  constexpr int SUMS = TILES * NF * 4;  // a lane's partial sums: tile t, column tile f, register i at 4 (NF t + f) + i
  __shared__ float red_static[kRing ? 1 : MAX_WARPS][SUMS][32];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int row0 = blockIdx.x * (16 * TILES);
  const u8* w = reinterpret_cast<const u8*>(a.w) + (i64)blockIdx.z * a.w_batch;
  const u8* s = reinterpret_cast<const u8*>(a.s) + (i64)blockIdx.z * a.s_batch;
  const bf16* x = reinterpret_cast<const bf16*>(a.x) + (i64)blockIdx.z * a.x_batch;
  u16* y = reinterpret_cast<u16*>(a.y) + (i64)blockIdx.z * a.y_batch;  // bf16 or f16 bits
  Acc acc_t[TILES];  // a tile's sums (acc: the first tile's, the only one but on two-tile X rings)
  Acc& acc = acc_t[0];
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int c = 0; c < NACC; ++c)
#pragma unroll
      for (int f = 0; f < NF; ++f) acc_t[t][c][f][0] = acc_t[t][c][f][1] = acc_t[t][c][f][2] = acc_t[t][c][f][3] = 0.0f;
  extern __shared__ __align__(16) unsigned char ring_raw[];
  if constexpr (kPdl) {
    launch_dependents();                         // the next kernel's CTAs may be placed as ours leave
    // the lean and X rings wait after their first weight copies
    if constexpr (!kLean && !kXring) grid_dependency_wait();
  }
  if constexpr (kAsync) {
    async_kloop(acc, a, w, s, x, smem_u32(ring_raw) + warp * RING * RING_STEP, row0, warp, warps, lane);
  } else if constexpr (kWide) {
    wide_kloop(acc, a, w, s, x, smem_u32(ring_raw) + warp * WIDE_RING * WIDE_STAGE, row0, warp, warps, lane);
  } else if constexpr (kLean) {
    lean_kloop(acc, a, w, s, x, smem_u32(ring_raw) + warp * lean_warp_bytes(a.m), row0, warp, warps, lane);
  } else if constexpr (kXring) {
    xring_kloop(acc_t, a, w, s, x, smem_u32(ring_raw) + warp * XR_RING * xring_slot_bytes(a.m), row0, warp, warps,
                lane);
  } else if constexpr (kXstage) {
    xstage_kloop(acc, a, w, s, x, smem_u32(ring_raw) + warp * XS_RING * xstage_slot_bytes(a.m), row0, warp, warps,
                 lane);
  } else {
  // Software pipeline: the weights of iteration i + 1 (UNROLL steps, 2 x 16 bytes a lane each)
  // are loaded before iteration i is decoded, so a warp always has them in flight. X is small and
  // L2-resident: loaded step by step.
  const int steps = (a.k + STEP - 1) / STEP, stride = warps * UNROLL;
  WStep cur[UNROLL], nxt[UNROLL] = {};
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) load_w(cur[u], a, w, s, row0, g, q, warp + u * warps);
  for (int s0 = warp; s0 < steps; s0 += stride) {
    const bool more = s0 + stride < steps;  // warp-uniform
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (more) load_w(nxt[u], a, w, s, row0, g, q, s0 + stride + u * warps);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (s0 + u * warps >= steps) break;  // warp-uniform: this warp's last steps
      XStep xs;
      load_x(xs, a, x, g, q, s0 + u * warps);
      compute_step(acc, cur[u], xs);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) cur[u] = nxt[u];
  }
  }
  const float gy = kAsync || kRing ? a.g * 256.0f : a.g;  // the rings' sums are 2^-8 of the value
  // the wide path's partial sums go where its rings were, once every warp is done with its own
  float(*red)[SUMS][32] = red_static;
  if constexpr (kRing) {
    __syncthreads();
    red = reinterpret_cast<float(*)[SUMS][32]>(ring_raw);
  }
#pragma unroll
  for (int tt = 0; tt < TILES; ++tt)
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float t = acc_t[tt][0][f][i];
#pragma unroll
        for (int c = 1; c < NACC; ++c) t += acc_t[tt][c][f][i];  // the chains, once
        red[warp][4 * (NF * tt + f) + i][lane] = t;
      }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int tt = 0; tt < TILES; ++tt)
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float t = 0.0f;
        for (int v = 0; v < warps; ++v) t += red[v][4 * (NF * tt + f) + i][lane];
        // d0, d1: row g, columns 2q, 2q + 1; d2, d3: row g + 8 (of tile tt).
        const int r = row0 + 16 * tt + g + 8 * (i / 2), m = 8 * f + 2 * q + (i % 2);
        if (r < a.n && m < a.m)
          y[(i64)m * a.ldy + r] = a.out_f16 ? from_float<f16>(t * gy).bits : from_float<bf16>(t * gy).bits;
      }
}
