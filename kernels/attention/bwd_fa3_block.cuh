// What the FlashAttention-3-style attention backwards (bwd_fa3_wgmma.cu, bwd_fa3_bulk_dq.cu,
// bwd_fa3_tma_dq.cu, bwd_fa3_lookahead.cu; bwd_fa3_d256.cu takes the constants, the walk, the
// producer and Pᵀ) have in common, written once: the constants of their specialisation, where
// a block sits in the problem, the producer warp's loop, and a consumer warpgroup's walk over the
// query blocks up to each block's dQ partial in registers. The kernels differ in how that partial
// reaches the fp32 accumulator (a hook of bwd_consume) and in the shared memory it takes.
//   Block: BN = 128 keys of one (batch, key/value head); every BM = 64-row query block of every
//   query head of its group (GQA: dK and dV summed in registers), causal blocks from the first
//   query block that sees its keys (bottom-right).
//   Producer warp: K and V by TMA once; per query block Q and dO by TMA and LSE·log2e and
//   D = rowsum(dO ∘ O) by its 32 lanes into a STAGES-deep ring (full: 32 arrivals, the TMA
//   bytes counted on it; empty: the 8 consumer warps).
//   Consumer c (keys 64c .. 64c + 63, keys as the M of every product):
//     Sᵀ = K_c·Qᵀ, dPᵀ = V_c·dOᵀ (SS m64 n64), Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e) masked,
//     dV += Pᵀ·dO (RS), dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ·Q (RS), dSᵀ -> shared memory,
//     dQ = dS·K (SS, both operands MN-major).
//   KILN_DQ_SPLIT 0: the consumers meet once every dSᵀ row is stored and consumer c computes dQ's
//   columns D/2·c .. over all BN keys; 1: each computes all D columns over its own 64 keys; 2
//   (BM 128 only): they meet, and consumer c computes the step's query rows 64c .. 64c + 63, all D
//   columns over all BN keys (each dQ element added once a block, as by columns).
//   KILN_BWD_WINDOW 1: the sliding window (p.win_left, p.win_right, causal folded into win_right
//   by the host; window.cuh's rule, the forward's): a key block walks only the query blocks whose
//   rows see one of its keys, and the blocks that cut a window's edge are masked.
//   KILN_BWD_VARLEN 1: a packed batch (Q, O, dO [total_q, H, D], K, V [total_k, Hkv, D], the
//   offsets p.cu_q and p.cu_k; the maps [1, heads, total, dim], LSE, D and the accumulator
//   [1, H, total_q]): grid z is the sequence, a block's keys and query blocks are its sequence's
//   (rows read past the sequence's end are masked, and their dQ rows, all zero, are added into
//   the next sequence's); a block whose keys lie past its sequence's end returns at once.
//   KILN_BWD_VARLEN 2: the same with the sequences' key blocks back to back along grid x
//   (bwd_varlen_grid.cuh): no block past the longest sequence's keys for the shorter ones.
#pragma once
#include "attention/attn_bwd_args.cuh"
#include "attention/bwd_dq.cuh"
#include "attention/bwd_tail.cuh"
#include "attention/bwd_varlen_grid.cuh"
#include "attention/bwd_wgmma.cuh"
#include "attention/tma_4d.cuh"
#include "attention/window.cuh"
#include "common/ws_pipeline.cuh"
#include "common/fast_math.cuh"

#if !defined(KILN_D) || !defined(KILN_STAGES) || !defined(KILN_DQ_SPLIT) || !defined(KILN_SMEM) || !defined(KILN_IN)
#error "KILN_D, KILN_STAGES, KILN_DQ_SPLIT, KILN_SMEM and KILN_IN must be defined by the host"
#endif

// BM, query rows a step: 64, or 128 where the host defines KILN_BM (bwd_fa3_m128: d64 only, dK
// and dV in 64 registers beside Sᵀ and dPᵀ of 64 each). A step of 128 rows is two 64-row halves
// wherever a 64-row unit is needed: the TMA boxes of Q and dO, the dSᵀ boxes, dQ's m64 products
// and its staging tiles (MH of each).
#if defined(KILN_BM)
constexpr int BM = KILN_BM;
#else
constexpr int BM = 64;
#endif
constexpr int MH = BM / 64;
// BN, keys a block: 128 (two consumers of 64 keys each), or 64 where the host defines KILN_BN
// (bwd_fa3_d256.cu: both consumers on the same 64 keys, one holding dV and the other dK).
#if defined(KILN_BN)
constexpr int BN = KILN_BN;
#else
constexpr int BN = 128;
#endif
constexpr int D = KILN_D, STAGES = KILN_STAGES, DH = D / 64;
constexpr int THREADS = 384;
constexpr int SR = BM / 2, KR = D / 2;  // accumulator registers: Sᵀ / dPᵀ, dK / dV
constexpr int KP = BM / 16;             // k16 steps over the query block (register A chunks)
constexpr bool SPLIT_N = KILN_DQ_SPLIT == 0;
constexpr bool SPLIT_M = KILN_DQ_SPLIT == 2;
// The consumers meet once every dSᵀ row is stored (dQ over all BN keys); else (the key split)
// both add to every dQ element of the step.
constexpr bool MEET = SPLIT_N || SPLIT_M;
constexpr int QN = SPLIT_N ? D / 2 : D;  // dQ columns per consumer
constexpr int QKS = MEET ? BN / 16 : 64 / 16;  // dQ's k16 steps (keys)
constexpr int DQ_MH = SPLIT_M ? 1 : MH;  // dQ's 64-row halves per consumer
constexpr u32 HALF_Q = BM * 128, HALF_KV = BN * 128;  // one 64-dim box: rows of 128 bytes
constexpr u32 Q_BYTES = DH * HALF_Q, KV_BYTES = DH * HALF_KV, STAGE_BYTES = 2 * Q_BYTES;
constexpr u32 DS_BYTES = BN * BM * 2;  // dSᵀ: MH boxes [BN][64], 128-byte rows
static_assert(BM == 64 || (BM == 128 && D == 64), "64 query rows a step, or 128 at d64");
// dSᵀ = Pᵀ ∘ (dPᵀ − D) from Pᵀ as rounded for dV's product (at BM 128), not from its fp32 values:
// Sᵀ's 64 registers are free once Pᵀ is packed, so that Pᵀ (32 packed), dPᵀ (64), dK and dV (32
// each) are what is live while dV runs. dSᵀ gains one more rounding of the input type (2^-9 of
// each element in bf16), beside its own.
constexpr bool P_ROUNDED = BM == 128;
// KILN_BWD_EXP_POLY n (the host's bwd_fa3_m128_fma; 0 when undefined: every other variant's SASS
// is unchanged): n of every 8 of Pᵀ's exponentials by ex2_poly on the FMA pipe, the rest on MUFU.
// The H200 profile of bwd_fa3_m128_rows (d64 B4 H16 S4096, 2026-11-29) put 24 % of the stall
// samples in Pᵀ's loop, MUFU-bound (mio and the MUFU results' short_sb): 64 MUFU.EX2 a thread a
// step, 1,024 cycles of MUFU an SM sub-partition for its two consumer warps, of which the tensor
// pipe covers 512 with dPᵀ. Degree 3 in bf16 (relative error 7.6e-5 against a rounding of up to
// 3.9e-3), 4 in f16 (2.7e-6 against 4.9e-4).
#if defined(KILN_BWD_EXP_POLY)
constexpr int EXP_POLY = KILN_BWD_EXP_POLY;
#else
constexpr int EXP_POLY = 0;
#endif
static_assert(EXP_POLY >= 0 && EXP_POLY <= 8, "KILN_BWD_EXP_POLY: how many of every 8 exponentials on the FMA pipe");
constexpr int EXP_POLY_DEG = KILN_IN == 0 ? 3 : 4;
// Whether element i of a thread's Pᵀ takes ex2_poly: n of every 8, spread evenly.
__device__ __forceinline__ constexpr bool exp_on_fma(int i) { return (i * EXP_POLY) % 8 < EXP_POLY; }
// KILN_BWD_DS_PACKED 1 (the host's bwd_fa3_m128_fma, bf16 only; needs P_ROUNDED): dSᵀ = Pᵀ ∘
// (dPᵀ − D) in packed pairs, the rounded Pᵀ times (dPᵀ − D) rounded to bf16 by one mul.bf16x2,
// in place of unpacking Pᵀ, multiplying in fp32 and packing: 4 instructions a pair where there
// were 7 (the same profile: 11 % of the samples in this phase, issue-bound). One more rounding
// (dPᵀ − D to bf16, 2^-9 of the element) inside dSᵀ's own. Not in f16, whose range (65504) the
// factor dPᵀ − D may pass where dSᵀ does not.
#if defined(KILN_BWD_DS_PACKED)
constexpr bool DS_PACKED = KILN_BWD_DS_PACKED != 0;
#else
constexpr bool DS_PACKED = false;
#endif
static_assert(!DS_PACKED || (P_ROUNDED && KILN_IN == 0), "packed dSᵀ math from the rounded Pᵀ (128 rows a step), in bf16");
constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
static_assert(D == 64 || D == 128 || (D == 256 && BN == 64),
              "head dim 64 or 128 (dK and dV of 64 keys x D in registers), or 256 at 64 keys a block (bwd_fa3_d256.cu)");
// KILN_BWD_DET_WRITER 2 (the host's bwd_fa3_ordered_eager; bwd_fa3_lookahead.cu's walk only): in
// the deterministic mode each block's dQ tiles go to a writer warp (warp 1 of warpgroup 0), which
// adds them by TMA reduce in a fixed order of key blocks per query block (det_rank), the walks
// arranged so that a block's turn has mostly come by the time it gets there (bwd_walk), bumping
// each counter as soon as its add is complete and waiting for the next block's turn before that
// block's tiles arrive (bwd_dq_tile.cuh's dq_writer). The value 1 (the late bump of the removed
// bwd_fa3_ordered_dq, 2026-11-30) is refused.
#if defined(KILN_BWD_DET_WRITER)
constexpr bool DET_WRITER = KILN_BWD_DET_WRITER != 0;
static_assert(KILN_BWD_DET_WRITER == 0 || KILN_BWD_DET_WRITER == 2, "KILN_BWD_DET_WRITER: 0 or 2 (the eager writer)");
#else
constexpr bool DET_WRITER = false;
#endif
// KILN_D256_DET (bwd_fa3_d256.cu only: the host's bwd_fa3_d256_w2 and the versions on its
// kernel): the deterministic mode's dQ staged and added by TMA reduces in the dQ writer's fixed
// order (det_rank), on the writer's walks (det_walk: rotated non-causal, reversed causal), where
// the other d256 versions add by ordered atomics with every block walking the same query blocks.
#if defined(KILN_D256_DET)
constexpr bool D256_DET = KILN_D256_DET != 0;
#else
constexpr bool D256_DET = false;
#endif
// KILN_D256_DET 3 (the host's bwd_fa3_d256_w2): those adds by writer warps of warpgroup 0
// (bwd_fa3_d256.cu's d256_writer) instead of the consumers.
#if defined(KILN_D256_DET)
constexpr bool D256_WRITER = KILN_D256_DET >= 3;
#else
constexpr bool D256_WRITER = false;
#endif
// Warps 1 and 2 of warpgroup 0 run a writer (bwd_kernel's write()).
constexpr bool WRITER_WARPS = DET_WRITER || D256_WRITER;
// The walks and order of adds of the dQ writer (DET_WRITER) or of d256's ordered reduces.
constexpr bool DET_ORDERED = DET_WRITER || D256_DET;
// KILN_BWD_CLUSTER 2 (bwd_fa3_d256.cu only: the host's bwd_fa3_d256_pair): clusters of two
// adjacent key blocks that walk the same query blocks in step (causal: from the first block the
// cluster's first key block sees). Each CTA's producer loads half of a stage (the first CTA Q,
// the second dO) and multicasts it to both, so the L2 sends each stage once per pair; the empty
// barriers count both CTAs' releases (8 each), the CTAs start once both have initialised their
// barriers, and each producer waits for the last stages' releases before its CTA may leave.
#if defined(KILN_BWD_CLUSTER)
constexpr int BWD_CLUSTER = KILN_BWD_CLUSTER;
#else
constexpr int BWD_CLUSTER = 1;
#endif
static_assert(BWD_CLUSTER == 1 || (BWD_CLUSTER == 2 && D == 256 && BM == 64 && !DET_WRITER), "a pair of CTAs at d256 only");
static_assert(!D256_DET || (D == 256 && BWD_CLUSTER == 1),
              "KILN_D256_DET: bwd_fa3_d256.cu's ordered reduces, one CTA a cluster (the writers in pairs, bwd_fa3_d256_w2_pair, were deleted on 2026-12-01)");
static_assert(KILN_DQ_SPLIT == 0 || KILN_DQ_SPLIT == 1 || (KILN_DQ_SPLIT == 2 && BM == 128),
              "dQ split over columns (0), keys (1) or, at 128 rows a step, query rows (2)");
#if defined(KILN_BWD_WINDOW)
constexpr bool BWD_WINDOW = KILN_BWD_WINDOW != 0;
#else
constexpr bool BWD_WINDOW = false;
#endif
#if defined(KILN_BWD_VARLEN)
constexpr bool BWD_VARLEN = KILN_BWD_VARLEN != 0;
#else
constexpr bool BWD_VARLEN = false;
#endif
static_assert(!(BWD_WINDOW || BWD_VARLEN) || D != 256, "the window's and the packed walk: d64 or d128 (bwd_fa3_d256.cu masks by its own rule)");
static_assert(!(DET_WRITER && (BWD_WINDOW || BWD_VARLEN)),
              "the dQ writer's order (det_rank) knows no window or packed sequence: bwd_fa3_ordered_eager refuses them");
// KILN_BWD_DQ_FUSED 1 (the host's KILN_BWD_DQ_FUSED knob; the packed walk on d64's 128-row tile
// split by query rows or d128's 64-row tile split by columns): no postprocess. Each block's dQ
// tiles go to a writer warp (warp 1 of warpgroup 0), which adds them by TMA reduce, waits for the
// adds to complete and counts them on a per-(sequence, head, 64 query rows) counter; the adder
// that completes a counter queues the rows for warps 2 and 3, which read them from L2, scale,
// round and store dQ (bwd_dq_fused.cuh). KILN_BWD_DQ_FUSED 2: the same, the converters storing
// zeros over what they read, so that the accumulator is left zero for the next call.
// KILN_BWD_DQ_FUSED 3 (DQ_LAST): no writer warp; the consumers add dQ as without the define, and
// at the block's end one counter per (sequence, key/value head) counts the block; the last of the
// sequence's key blocks converts the whole unit and leaves the accumulator zero (bwd_dq_fused.cuh:
// fused_last_block).
#if defined(KILN_BWD_DQ_FUSED)
constexpr bool DQ_FUSED = KILN_BWD_DQ_FUSED == 1 || KILN_BWD_DQ_FUSED == 2;  // (the writer warp and its queue)
constexpr bool DQ_ZERO = KILN_BWD_DQ_FUSED == 2;
constexpr bool DQ_LAST = KILN_BWD_DQ_FUSED == 3;
static_assert(KILN_BWD_DQ_FUSED >= 0 && KILN_BWD_DQ_FUSED <= 3,
              "KILN_BWD_DQ_FUSED: 0, 1, 2 (the accumulator left zero) or 3 (the last key block converts)");
#else
constexpr bool DQ_FUSED = false;
constexpr bool DQ_ZERO = false;
constexpr bool DQ_LAST = false;
#endif
static_assert(!DQ_FUSED || (BWD_VARLEN && BWD_WINDOW && (SPLIT_M || SPLIT_N) && !DET_WRITER),
              "KILN_BWD_DQ_FUSED: the packed walk (its window's rule counts the adders) on the row split's or the column split's tile");
static_assert(!SPLIT_N || QN % 64 == 0, "a column split keeps whole 64-wide boxes of K");
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= THREADS * (65536 / THREADS / 8 * 8), "register split");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

// Where the block sits: keys n0 .. n0 + BN - 1 (key block nb) of key/value head hk, batch (or
// packed sequence) b; iteration it is query head hk·group + it / per_head, query block
// m_first + it % per_head. Rows and keys are the sequence's: rows_q(), rows_k() its lengths, q0(),
// k0() its first packed rows, bi() the batch index of the maps, LSE, D and the accumulator (dense:
// p.sq, p.skv, 0, 0, b, read straight from the arguments so that the dense variants compile as
// before; KILN_BWD_VARLEN: the sequence's, batch 0, read from shared memory at each use
// (bwd_seq) rather than held: held, the four took registers that d128's consumers do not have (4
// bytes spilled; reloaded from the offsets at each use, their addresses did: 28). DET_WRITER:
// the walk may start past the head's first block, then wraps at its last (walk_at).
#if defined(KILN_BWD_VARLEN) && KILN_BWD_VARLEN
// The block's sequence: its first query row, query rows, first key row and key rows (bwd_kernel);
// KILN_BWD_VARLEN 2, its key block within the sequence (bwd_seq(4)).
__shared__ int4 bwd_seq_rows;
#endif
#if defined(KILN_BWD_VARLEN) && KILN_BWD_VARLEN == 2
__shared__ int bwd_seq_block;
#endif
// Entry i of bwd_seq_rows (0 without KILN_BWD_VARLEN), by a load the compiler cannot hoist.
__device__ __forceinline__ int bwd_seq(int i) {
#if defined(KILN_BWD_VARLEN) && KILN_BWD_VARLEN
  int v;
#if KILN_BWD_VARLEN == 2
  const u32 at = i == 4 ? smem_u32(&bwd_seq_block) : smem_u32(&bwd_seq_rows) + 4 * i;
#else
  const u32 at = smem_u32(&bwd_seq_rows) + 4 * i;
#endif
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(at));
  return v;
#else
  return 0;
#endif
}
struct BwdWalk {
  int nb, hk, b, n0;
  int off;  // query i sees keys j <= i + off when causal
  int m_first, per_head, iters;
  // KILN_BWD_TAIL (bwd_tail.cuh): the block walks iterations it0 .. it0 + iters - 1 of its key
  // block's walk (0 ..: the whole walk; a part's slot and index are worked out again at the end,
  // tail_part, rather than held across the walk: held, d128's consumers spilled).
  int it0;
  __device__ __forceinline__ int rows_q(const AttnBwdArgs& p) const { return BWD_VARLEN ? bwd_seq(1) : p.sq; }
  __device__ __forceinline__ int rows_k(const AttnBwdArgs& p) const { return BWD_VARLEN ? bwd_seq(3) : p.skv; }
  __device__ __forceinline__ int q0(const AttnBwdArgs&) const { return BWD_VARLEN ? bwd_seq(0) : 0; }
  __device__ __forceinline__ int k0(const AttnBwdArgs&) const { return BWD_VARLEN ? bwd_seq(2) : 0; }
  __device__ __forceinline__ int bi() const { return BWD_VARLEN ? 0 : b; }
};

// KILN_BWD_VARLEN, by every thread before the block's start: whether the block has work. Sequence
// blockIdx.z's offsets are checked as the forward checks them (fa3_wgmma.cu's varlen_rows)
// against the packed rows (p.sq, p.skv) and the grid (at most p.m_blocks query blocks and
// gridDim.x key blocks a sequence): a bad sequence's blocks return at once (nothing of it is
// written) and p.errors records it; so does a block past its sequence's keys (nothing to store).
// Thread 0 of a block with work puts the sequence's rows in bwd_seq_rows (bwd_start's barrier
// publishes them).
// KILN_BWD_VARLEN 2: the sequence and key block from grid x (varlen_compact_block), the offsets
// first checked to rise from 0; a sequence's keys then fit its blocks by construction.
__device__ __forceinline__ bool bwd_varlen_start(const AttnBwdArgs& p) {
#if defined(KILN_BWD_VARLEN) && KILN_BWD_VARLEN
  int b = blockIdx.z, nb = blockIdx.x, seqs = gridDim.z;
  bool placed = true;
  if (VARLEN_COMPACT) {
    seqs = varlen_compact_seqs<BN>(p);
    placed = varlen_compact_block<BN>(p, b, nb);
    if (!placed) b = 0, nb = 0;
  }
  const int qs = __ldg(p.cu_q + b), qe = __ldg(p.cu_q + b + 1), ks = __ldg(p.cu_k + b), ke = __ldg(p.cu_k + b + 1);
  const bool ok = placed && 0 <= qs && qs <= qe && qe <= p.sq && qe - qs <= p.m_blocks * p.m_block && 0 <= ks && ks <= ke &&
                  ke <= p.skv && (VARLEN_COMPACT || ke - ks <= (int)gridDim.x * BN) && (b > 0 || (qs | ks) == 0) &&
                  (b + 1 < seqs || (qe == p.sq && ke == p.skv));
  if (!ok && p.errors != nullptr && threadIdx.x == 0) *reinterpret_cast<volatile u32*>(p.errors) = 1u;
  if (!ok || nb * BN >= ke - ks) return false;
  if (threadIdx.x == 0) {
    bwd_seq_rows = make_int4(qs, qe - qs, ks, ke - ks);
#if KILN_BWD_VARLEN == 2
    bwd_seq_block = nb;
#endif
  }
#endif
  return true;
}

// p.lpt_heads = g > 0 (the host's KILN_BWD_LPT: causal, not deterministic, dense, no window, one
// CTA a cluster): the block's key block, key/value head and batch in longest-walk-first order.
// A causal key block nb walks per_head = query blocks - nb·BN/BM steps, and the grid's order (key
// blocks fastest) launches each head's longest walk first but the last heads' long walks late: a
// schedule of the walks onto 132 SMs (one CTA each) ends 3-6 % past the mean at d128 B4 H32 S4096
// and B2 H16 S8192 and d64 B4 H16 S4096 (ncu, H200, 2026-11-30: the d128 one's SMs idle 3.9 % of
// its cycles). Here the linear block index L runs over chunks of g (head, batch) pairs, within a
// chunk key block slowest: a chunk's longest walks first, its shortest last, and only g heads'
// Q, dO and dQ in flight at once (the host's g: SMs / key blocks, the heads the grid's order has
// in flight), not every head's.
constexpr bool LPT_WALK = !BWD_WINDOW && !BWD_VARLEN && BWD_CLUSTER == 1;
// KILN_BWD_TAIL (bwd_tail.cuh): the dense walk only, no writer (the host sets p.tail_parts for
// non-causal, non-deterministic problems only).
constexpr bool TAIL_WALK = TAIL && LPT_WALK && !DET_WRITER;
static_assert(!TAIL || TAIL_WALK, "KILN_BWD_TAIL: the dense walk without a window, packed sequences, clusters or the dQ writer");
__device__ __forceinline__ void lpt_block(const AttnBwdArgs& p, int& nb, int& hk, int& b) {
  const int nx = gridDim.x, pairs = gridDim.y * gridDim.z, g = p.lpt_heads;
  const int l = blockIdx.x + nx * (blockIdx.y + gridDim.y * blockIdx.z);
  const int chunk = l / (g * nx), r = l - chunk * g * nx;
  const int gc = min(g, pairs - chunk * g);  // (the last chunk may hold fewer pairs)
  const int pair = chunk * g + r % gc;
  nb = r / gc, hk = pair % gridDim.y, b = pair / gridDim.y;
}

// (nb: the block's key block, blockIdx.x but under det_walk's reversal; -1: the grid's, or
// lpt_block's)
__device__ __forceinline__ BwdWalk bwd_walk(const AttnBwdArgs& p, int nb = -1) {
  BwdWalk k;
  k.nb = nb >= 0 ? nb : VARLEN_COMPACT ? bwd_seq(4) : (int)blockIdx.x, k.hk = blockIdx.y, k.b = blockIdx.z;
  k.it0 = 0;
  if (LPT_WALK && nb < 0 && p.lpt_heads > 0) lpt_block(p, k.nb, k.hk, k.b);
  int part = -1;
  if (TAIL_WALK && p.tail_parts > 0) tail_unit(p, (p.skv + BN - 1) / BN, p.heads_q / p.group, k.nb, k.hk, k.b, part);
  k.n0 = k.nb * BN;
  k.off = k.rows_k(p) - k.rows_q(p);
  if (BWD_WINDOW) {
    // the rows that see one of this block's keys (n0 < skv: a packed block past its sequence's
    // keys has returned)
    int lo, hi;
    window_rows(k.n0, min(k.n0 + BN, k.rows_k(p)) - 1, k.off, p.win_left, p.win_right, k.rows_q(p), lo, hi);
    k.m_first = lo / BM;
    k.per_head = hi < lo ? 0 : hi / BM - k.m_first + 1;
  } else {
    // (BWD_CLUSTER: from the cluster's first key block, so that both walk the same blocks)
    k.m_first = p.causal ? max(0, (BWD_CLUSTER == 1 ? k.n0 : k.n0 & ~(BWD_CLUSTER * BN - 1)) - k.off) / BM : 0;
    k.per_head = (k.rows_q(p) + BM - 1) / BM - k.m_first;
    if (BWD_VARLEN) k.per_head = max(0, k.per_head);  // keys past a shorter sequence's end
  }
  k.iters = p.group * k.per_head;
  if (TAIL_WALK && part >= 0) {
    int it0, n;
    tail_share(k.iters, p.tail_parts, part, it0, n);
    k.it0 = it0, k.iters = n;
  }
  return k;
}

// Iteration it's query head h and query block mb (DET_WRITER: the producer's, a rotated walk
// wrapping; the other roles read it from the walk table).
__device__ __forceinline__ void walk_at(const BwdWalk& k, const AttnBwdArgs& p, int it, int& h, int& mb) {
  if (TAIL_WALK) it += k.it0;
  h = k.hk * p.group + it / k.per_head;
  mb = k.m_first + it % k.per_head;
}

// DET_WRITER, det_order 1 (non-causal, deterministic): the key blocks of one (batch, key/value
// head) that start in the same wave of det_sms blocks (one a SM, launched in block order) form a
// group [g0, g0 + gn); block g0 + i starts its walk at query block i·gs, gs = per_head / gn, so
// that the group's blocks reach any query block one after another, gs steps apart.
struct DetGroup {
  int g0, gn, gs;
};

// (The d256 launch in chunks of heads, bwd_fa3_d256_w2_spread, lost two rounds and was deleted on
// 2026-11-30 night, ledger D60: the grid's order only.)
// TAIL_WALK (a 1D grid, bwd_tail.cuh): the key blocks and heads from the problem, so that a part
// of a split key block is in the group its key block would have been in whole.
__device__ __forceinline__ DetGroup det_group(const BwdWalk& k, const AttnBwdArgs& p) {
  const int n = TAIL_WALK ? (p.skv + BN - 1) / BN : (int)gridDim.x, heads = TAIL_WALK ? p.heads_q / p.group : (int)gridDim.y;
  const int base = n * (k.hk + heads * k.b);  // block nb launched at base + nb
  const int w0 = (base + k.nb) / p.det_sms * p.det_sms;
  DetGroup g;
  g.g0 = w0 > base ? w0 - base : 0;
  g.gn = min(n, w0 + p.det_sms - base) - g.g0;
  g.gs = (p.sq + BM - 1) / BM / g.gn;
  return g;
}

// DET_WRITER's walk: rotated under det_order 1 (a non-causal block's walk starts at 0); under
// det_order 2 (causal) the key blocks in reverse (block x takes key block gridDim.x - 1 - x: the
// shortest walks first), so that every block a block waits for (det_rank: the later key blocks)
// was launched before it, as FlashAttention-3 orders its deterministic causal blocks. Only the
// producer walks it; the consumers and the writer read its (head, query block) pairs from the
// walk table.
// KILN_BWD_DET_LPT (the host's p.lpt_heads > 0 under det_order 2, only where a head's key blocks
// fit on the SMs at once): the causal blocks longest walk first in chunks of heads (lpt_block),
// the order of adds unchanged. The reversed launch puts each head's longest walk last and the
// last heads' long walks at the very end: a list schedule of the walks onto 132 SMs ends 7.8 %
// past the mean at d64 B4 H16 S4096 (128-row steps) and d128 B2 H16 S8192, 7.4 % at d64 B1 H16
// S16384; the chunks end within 0.2-0.5 % (lpt.rs). A block then waits for later key blocks
// launched after it, but only of its own chunk (at most SMs blocks): every block of the chunk
// gets an SM once the earlier chunks, which wait on nothing later, have finished
// (det_schedule.rs checks it).
// D256_DET with no counters and det_order 1 (the host's bwd_fa3_d256_rotated, a diagnostic): the
// rotated walks without the order, the non-deterministic staged adds on them (what the rotated
// walk alone costs: its blocks sit on as many query tiles as are resident, where the
// non-deterministic walk keeps a head's blocks on one).
__device__ __forceinline__ BwdWalk det_walk(const AttnBwdArgs& p) {
  const bool det = DET_ORDERED && (p.dq_sem != nullptr || (D256_DET && p.det_order == 1));
  const bool reversed = det && p.det_order == 2 && p.lpt_heads == 0;
  // (-1: the grid's order, or lpt_block's where p.lpt_heads is set)
  BwdWalk w = bwd_walk(p, reversed ? (int)(gridDim.x - 1 - blockIdx.x) : det ? -1 : (int)blockIdx.x);
  if (det && p.det_order == 1) {
    const DetGroup g = det_group(w, p);
    w.m_first = (w.nb - g.g0) * g.gs;
  }
  return w;
}

// Iteration it's (head, query block) on det_walk's walk, as the producer takes it (a rotated walk
// wraps at the head's last block): for a writer that needs it before the walk table has it.
__device__ __forceinline__ void det_walk_at(const BwdWalk& k, const AttnBwdArgs& p, int it, int& h, int& mb) {
  walk_at(k, p, it, h, mb);
  if (!p.causal && mb >= k.per_head) mb -= k.per_head;
}

// DET_WRITER, deterministic mode: how many key blocks add their partials of query block mb (of
// any head) before this one, the order every run follows. det_order 2 (causal): every later key
// block that sees mb (each reaches it first: its walk starts later; launched first: det_walk); 1
// (non-causal): the groups of earlier waves first, then the group (g) from the block whose walk
// reached mb first: with i = nb - g0 and a = min(gn - 1, mb / gs) the last block to reach mb by
// step mb, the order is a, a - 1, .., 0, gn - 1, .., a + 1, so i's rank is (a - i) mod gn; a
// group longer than the walk (gs 0) and det_order 0 in block order.
__device__ __forceinline__ int det_rank(const BwdWalk& k, const AttnBwdArgs& p, const DetGroup& g, int mb) {
  if (p.det_order == 2) {
    const int x = (mb + 1) * BM + k.off;  // key block n sees mb iff n·BN < x (x > 0: this one does)
    return min((int)gridDim.x - 1, (x - 1) / BN) - k.nb;
  }
  if (p.det_order == 1 && g.gs > 0) return g.g0 + (min(g.gn - 1, mb / g.gs) - (k.nb - g.g0) + g.gn) % g.gn;
  return k.nb;
}

// The deterministic mode's rank of key block k.nb among those that add into query block m0 (rows
// m0 ..): the first such block is the first that holds a key some row of the block sees (0 but
// with a window's left edge).
__device__ __forceinline__ int bwd_dq_rank(const AttnBwdArgs& p, const BwdWalk& k, int m0) {
  return BWD_WINDOW ? k.nb - window_first_key(m0, k.off, p.win_left) / BN : k.nb;
}

// The shared memory every version has: K and V, the ring's stages (Q then dO), the dSᵀ buffers,
// the LSE·log2e and D vectors (per stage [BM] each), and the barriers (kv_full, then the ring's).
struct BwdSmem {
  u32 sk, sv, ring, sds;
  float* vec;
  u32 kv_full;
  MbarRing<STAGES> qring;
};

// DET_WRITER: the walk as the producer takes it, (head, query block) of iteration it at it %
// WALK_DEPTH, written before it arrives on the stage's full barrier; the consumers read it once the
// stage has landed, the writer once the consumers have handed it the block's tiles (by when the
// producer is at most STAGES + 1 iterations further). It follows the stages' vectors (OFF_WALK in
// bwd_dq_tile.cuh).
// The table sits just below the barriers (kv_full), so that its address costs no register.
constexpr int WALK_DEPTH = 8;
static_assert(STAGES + 2 <= WALK_DEPTH, "the walk table outlasts the ring and the writer's lag");
__device__ __forceinline__ void walk_put(const BwdSmem& sm, int it, int h, int mb) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(sm.kv_full - 8 * (WALK_DEPTH - it % WALK_DEPTH)), "r"(h), "r"(mb) : "memory");
}
__device__ __forceinline__ void walk_get(const BwdSmem& sm, int it, int& h, int& mb) {
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(h), "=r"(mb) : "r"(sm.kv_full - 8 * (WALK_DEPTH - it % WALK_DEPTH)) : "memory");
}

// A consumer thread's coordinates: consumer c, warp w of its warpgroup, lane, t = lane % 4, and
// its keys within the consumer's 64: krow and krow + 8.
struct BwdThread {
  int c, w, lane, t, krow;
};

// LSE·log2e and D of query rows m0 .. of head h into a stage's vectors (the sequence's rows with
// KILN_BWD_VARLEN).
__device__ __forceinline__ void stage_lse(float* sl, const AttnBwdArgs& p, const BwdWalk& k, int h, int m0, int lane) {
  if (BWD_WINDOW || BWD_VARLEN) {
    stage_lse_d_rows<BM>(sl, p, ((i64)k.bi() * p.heads_q + h) * p.sq + k.q0(p), m0, k.rows_q(p), lane);
  } else {
    stage_lse_d<BM>(sl, p, k.b, h, m0, lane);
  }
}

// The producer warp (its 32 lanes). TX_FIRST: a stage's TMA is armed (expect_tx, no arrival) and
// started before the lanes load LSE and D, then all 32 arrive; else the lanes' loads come first
// and lane 0 arrives with the bytes.
template <bool TX_FIRST>
__device__ __forceinline__ void bwd_produce(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm,
                                            const TmaMap* tq, const TmaMap* tk, const TmaMap* tv, const TmaMap* tdo) {
  const int lane = threadIdx.x;
  if (lane == 0) load_kv<DH, BN>(sm.sk, sm.sv, tk, tv, sm.kv_full, k.k0(p) + k.n0, k.hk, k.bi());
  for (int it = 0; it < k.iters; ++it) {
    int h, mb;
    walk_at(k, p, it, h, mb);
    if (DET_ORDERED && !p.causal && mb >= k.per_head) mb -= k.per_head;  // a rotated walk wraps (det_walk)
    const int m0 = mb * BM;
    const int s = sm.qring.acquire(it);
    if (!TX_FIRST) stage_lse(sm.vec + s * 2 * BM, p, k, h, m0, lane);
    if (lane == 0) {
      if (DET_WRITER) walk_put(sm, it, h, mb);
      if (TX_FIRST) {
        mbar_expect_tx(sm.qring.full(s), STAGE_BYTES);
      } else {
        mbar_arrive_expect_tx(sm.qring.full(s), STAGE_BYTES);
      }
      const u32 st = sm.ring + s * STAGE_BYTES;
      if (BWD_CLUSTER == 1) {
        // boxes of 64 rows (the maps'); MH of them stack into one [BM][64] swizzled box
#pragma unroll
        for (int d = 0; d < DH; ++d)
#pragma unroll
          for (int r = 0; r < MH; ++r) {
            tma_load_4d(st + d * HALF_Q + r * 64 * 128, tq, sm.qring.full(s), 64 * d, k.q0(p) + m0 + 64 * r, h, k.bi());
            tma_load_4d(st + Q_BYTES + d * HALF_Q + r * 64 * 128, tdo, sm.qring.full(s), 64 * d, k.q0(p) + m0 + 64 * r, h, k.bi());
          }
      } else {
        // the pair: rank 0 loads Q into both CTAs, rank 1 dO
        const bool second = cluster_ctarank() != 0;
        const TmaMap* map = second ? tdo : tq;
        const u32 dst = st + (second ? Q_BYTES : 0);
#pragma unroll
        for (int d = 0; d < DH; ++d) tma_load_4d_multicast(dst + d * HALF_Q, map, sm.qring.full(s), 64 * d, k.q0(p) + m0, h, k.bi(), 3);
      }
    }
    if (TX_FIRST) {
      stage_lse(sm.vec + s * 2 * BM, p, k, h, m0, lane);
      mbar_arrive(sm.qring.full(s));
    } else if (lane != 0) {
      mbar_arrive(sm.qring.full(s));
    }
  }
  // A pair: the CTA stays until the last STAGES stages are released by both CTAs' consumers, so
  // that no peer arrives on its barriers after it has gone (its own consumers wait for every
  // stage the peer multicasts into it). (A cluster barrier after the roles instead spilled.)
  if (BWD_CLUSTER > 1)
    for (int j = 0; j < STAGES; ++j) sm.qring.acquire(k.iters + j);
}

// Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e) in place: register i is key `row` + 8·((i >> 1) & 1) of
// the block, query 8·(i >> 2) + 2t + (i & 1) of the query block at m0. !AHEAD: LSE·log2e read
// here into l. MASK: keys past Skv, queries past Sq and (causal) keys after the query's last are 0
// (BWD_WINDOW: keys outside the query's window, window_sees).
template <bool AHEAD, bool MASK>
__device__ __forceinline__ void p_from_s(float (&st)[SR], float2 (&l)[BM / 8], const float* sl, const AttnBwdArgs& p, const BwdWalk& k,
                                         int row, int t, int m0) {
#pragma unroll
  for (int j = 0; j < BM / 8; ++j) {
    if (!AHEAD) l[j] = *reinterpret_cast<const float2*>(sl + 8 * j + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = fmaf(st[4 * j + e], p.scale_log2, -((e & 1) ? l[j].y : l[j].x));
      float pe = EXP_POLY > 0 && exp_on_fma(4 * j + e) ? ex2_poly<EXP_POLY_DEG>(x) : ex2_approx(x);
      if (MASK) {
        const int key = k.n0 + row + 8 * (e >> 1), q = m0 + 8 * j + 2 * t + (e & 1);
        const bool hidden = BWD_WINDOW ? q >= k.rows_q(p) || !window_sees(q, key, k.off, p.win_left, p.win_right, k.rows_k(p))
                                       : key >= k.rows_k(p) || q >= k.rows_q(p) || (p.causal && key > q + k.off);
        if (hidden) pe = 0.0f;
      }
      st[4 * j + e] = pe;
    }
  }
}

// The middle of a query block (iteration it, rows m0 ..) of consumer th.c, written once for
// bwd_block and bwd_fa3_lookahead.cu's walk: Sᵀ has completed into st and dPᵀ is the newest
// wgmma group in flight (dp). Pᵀ in place of Sᵀ (masked on edge blocks only), dV += Pᵀ·dO, dSᵀ
// in place of dPᵀ, dK += dSᵀ·Q issued (dV and dK left in flight), dSᵀ rounded into buffer
// it % DS_BUFS, and the consumers met (both, or this warpgroup's warps under the key split); the
// buffer's address is returned. l: the queries' LSE·log2e when AHEAD (else read here); sq_a,
// sdo_a: the stage's Q and dO as the products take them (AT: in 16-byte units); sl: its vectors.
// before_meet(): just before the barrier at which the dSᵀ rows are shared.
template <bool AHEAD, int DS_BUFS, bool AT, class BeforeMeet>
__device__ __forceinline__ u32 bwd_grads(float (&st)[SR], float (&dp)[SR], float2 (&l)[BM / 8], float (&dk)[KR], float (&dv)[KR],
                                         const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const BwdThread& th, int it, int m0,
                                         u32 sq_a, u32 sdo_a, const float* sl, const BeforeMeet& before_meet) {
  static_assert(DS_BUFS == 2 || (DS_BUFS == 1 && !MEET), "one dSᵀ buffer only when the warpgroups do not share rows");
  const int c = th.c, t = th.t, krow = th.krow;
  // Pᵀ, masked on edge blocks only: two copies of the loop, so that the inner blocks run without
  // a branch per element (one per element was 7 % of the stall samples, branch resolving).
  // (BWD_WINDOW: a block whose first row's right edge or last row's left edge cuts its keys)
  const bool edge = BWD_WINDOW ? k.n0 + BN > k.rows_k(p) || m0 + BM > k.rows_q(p) || k.n0 + BN - 1 > m0 + k.off + p.win_right ||
                                     k.n0 < m0 + BM - 1 + k.off - p.win_left
                               : k.n0 + BN > k.rows_k(p) || m0 + BM > k.rows_q(p) || (p.causal && k.n0 + BN - 1 > m0 + k.off);
  if (edge) {
    p_from_s<AHEAD, true>(st, l, sl, p, k, c * 64 + krow, t, m0);
  } else {
    p_from_s<AHEAD, false>(st, l, sl, p, k, c * 64 + krow, t, m0);
  }
  float2 dd[BM / 8];  // D of the same queries (AHEAD: read while dPᵀ and dV run)
  if (AHEAD) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) dd[j] = *reinterpret_cast<const float2*>(sl + BM + 8 * j + 2 * t);
  }
  u32 pa[KP][4];
  pack_a<KP>(pa, st);
  if (P_ROUNDED) fence_packed(pa);
  wgmma_fence();
  keys_by_dims<D, BM, AT>(dv, pa, sdo_a);
  wgmma_commit();
  wgmma_wait<1>();
  fence_all(dp);
  u32 dsa[KP][4];
  if constexpr (DS_PACKED) {
    // pair (4j + 2h, + 1) of queries: Pᵀ's packed pa[j / 2][2 (j % 2) + h], D's dd[j]
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      if (!AHEAD) dd[j] = *reinterpret_cast<const float2*>(sl + BM + 8 * j + 2 * t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * j + 2 * h;
        dsa[j / 2][2 * (j % 2) + h] = mul2<in_t>(pa[j / 2][2 * (j % 2) + h], pack2<in_t>(dp[i] - dd[j].x, dp[i + 1] - dd[j].y));
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      if (!AHEAD) dd[j] = *reinterpret_cast<const float2*>(sl + BM + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * j + e;
        const float pe = P_ROUNDED ? half_to_float<in_t>(pa[i / 8][(i % 8) / 2], i & 1) : st[i];
        dp[i] = pe * (dp[i] - ((e & 1) ? dd[j].y : dd[j].x));
      }
    }
    pack_a<KP>(dsa, dp);
  }
  if (P_ROUNDED) fence_packed(dsa);
  wgmma_fence();
  keys_by_dims<D, BM, AT>(dk, dsa, sq_a);
  wgmma_commit();
  // dSᵀ rows (keys 64c + krow, + 8) into buffer it % DS_BUFS; with one buffer, once every warp of
  // the warpgroup is past the previous block's dQ product (which read all its rows).
  const u32 ds = sm.sds + (DS_BUFS == 1 ? 0 : (it & 1)) * DS_BYTES;
  if (DS_BUFS == 1) named_barrier_sync(1 + c, 128);
  store_ds_t<BM, BN>(ds, dsa, c * 64 + krow, t);
  fence_proxy_async_shared();
  before_meet();
  // Column or row split: every consumer's rows are needed (both warpgroups meet); key split: only
  // this warpgroup's.
  if (MEET) {
    named_barrier_sync(1, 256);
  } else {
    named_barrier_sync(1 + c, 128);
  }
  return ds;
}

// One query block (iteration it, rows m0 .., BM = 64 only) of consumer th.c: its products, dK and dV
// accumulated, the stage released, and dq = this consumer's dQ partial (register i: query row
// krow + 8·((i >> 1) & 1), column col0 + 8·(i >> 2) + 2t + (i & 1), col0 = SPLIT_N ? c·QN : 0).
// AHEAD: the queries' LSE·log2e and D are read into registers before the wgmmas are waited for
// (else where they are used). DS_BUFS: dSᵀ buffers, two (a block's rows stored while the previous
// block's dQ product may still read the other; the barrier every block orders the reuse two
// blocks apart) or one (each warpgroup meets its own warps before it rewrites its rows; key split
// only). PP: the two warpgroups take turns to issue Sᵀ and dPᵀ (named barriers 6 and 7, a token
// passed after each issue; bwd_consume hands warpgroup 0 the first), so that one's exponentials
// run under the other's products. before_meet(): bwd_grads'.
template <bool AHEAD, int DS_BUFS, bool PP, class BeforeMeet>
__device__ __forceinline__ void bwd_block(float (&dq)[QN / 2], float (&dk)[KR], float (&dv)[KR], const AttnBwdArgs& p, const BwdWalk& k,
                                          const BwdSmem& sm, const BwdThread& th, int it, int m0,
                                          const BeforeMeet& before_meet) {
  const int c = th.c, lane = th.lane, t = th.t;
  const u32 skc = sm.sk + c * 64 * 128, svc = sm.sv + c * 64 * 128;
  const int s = sm.qring.wait_full(it);
  const u32 sq = sm.ring + s * STAGE_BYTES, sdo = sq + Q_BYTES;
  const float* sl = sm.vec + s * 2 * BM;
  // This thread's queries' LSE·log2e (AHEAD: read while the products run).
  float2 l[BM / 8];
  if (AHEAD) {
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) l[j] = *reinterpret_cast<const float2*>(sl + 8 * j + 2 * t);
  }
  float st[SR], dp[SR];
  if (PP) named_barrier_sync(6 + c, 256);  // this warpgroup's turn
  wgmma_fence();
  keys_by_queries<D, BM, BN>(st, skc, sq);
  wgmma_commit();
  keys_by_queries<D, BM, BN>(dp, svc, sdo);
  wgmma_commit();
  // The other's turn; after its last block warpgroup 1 keeps the token (warpgroup 0 waits no more).
  if (PP && !(c == 1 && it == k.iters - 1)) named_barrier_arrive(6 + (1 - c), 256);
  wgmma_wait<1>();
  fence_all(st);
  const u32 ds = bwd_grads<AHEAD, DS_BUFS, false>(st, dp, l, dk, dv, p, k, sm, th, it, m0, sq, sdo, sl, before_meet);
  // d128 split by keys: dQ's 64 accumulators only fit once dK is done with dSᵀ's registers (else
  // ptxas serialises the wgmmas, C7512).
  if (QN > 64) wgmma_wait<0>();
  wgmma_fence();
  dq_from_ds<QN, QKS, BM, BN>(dq, ds, sm.sk, SPLIT_N ? 0 : c * 64, SPLIT_N ? c * (QN / 64) : 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_all(dq);
  // Q and dO are read (Sᵀ, dPᵀ, dV, dK). The stage is recomputed from an opaque copy of it: kept
  // live across the block, it spilled at d128 split by keys.
  int it_late = it;
  asm volatile("" : "+r"(it_late));
  if (lane == 0) mbar_arrive(sm.qring.empty(sm.qring.slot(it_late)));
}

// The first row of dK or dV (`g`, K's layout) of the block's key/value head and sequence.
__device__ __forceinline__ in_t* bwd_kv_rows(void* g, const AttnBwdArgs& p, const BwdWalk& k) {
  return static_cast<in_t*>(g) + k.bi() * p.kv_sb + k.hk * p.kv_sh + (i64)k.k0(p) * p.kv_ss;
}

// A consumer warpgroup's whole walk (AHEAD, DS_BUFS, PP: bwd_block's): dK and dV zeroed, K and V waited for, then per query block
// bwd_block and add_dq(dq, th, h, m0, sem) (sem: the deterministic mode's counter of head h and
// this query block, else null), then before_exit() and dK (scaled) and dV stored in K's layout.
template <bool AHEAD, int DS_BUFS, bool PP, class BeforeMeet, class AddDq, class BeforeExit>
__device__ __forceinline__ void bwd_consume(int c, const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm,
                                            const BeforeMeet& before_meet, const AddDq& add_dq, const BeforeExit& before_exit) {
  BwdThread th;
  th.c = c, th.w = (threadIdx.x / 32) % 4, th.lane = threadIdx.x % 32, th.t = th.lane & 3;
  th.krow = 16 * th.w + (th.lane >> 2);
  float dk[KR], dv[KR];
#pragma unroll
  for (int i = 0; i < KR; ++i) dk[i] = dv[i] = 0.0f;
  mbar_wait(sm.kv_full, 0);
  if (PP && c == 1 && k.iters > 0) named_barrier_arrive(6, 256);  // warpgroup 0 issues first
  for (int it = 0; it < k.iters; ++it) {
    const int h = k.hk * p.group + it / k.per_head, mb = k.m_first + it % k.per_head, m0 = mb * BM;
    float dq[QN / 2];
    bwd_block<AHEAD, DS_BUFS, PP>(dq, dk, dv, p, k, sm, th, it, m0, before_meet);
    u32* sem = p.dq_sem == nullptr ? nullptr : p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb;
    add_dq(dq, th, h, m0, sem);
  }
  before_exit();
  fence_all(dk);  // the last dK and dV wgmmas completed (the loop's final wait) before these reads
  fence_all(dv);
  store_dk_dv<D>(bwd_kv_rows(p.dk, p, k), bwd_kv_rows(p.dv, p, k), dk, dv, p.scale, k.n0 + c * 64 + th.krow, k.rows_k(p), p.kv_ss, th.t);
}

// dQ added with per-thread red.global.add.v2.f32: in any order (sem null), or in key block order on
// the counter `sem` (the deterministic mode; bwd_fa2_mma_sync.cu), the key split's consumer 0
// before consumer 1, so every element's additions keep one order. dq[hh]: the m64 partial of
// query rows m0 + 64hh .. (H halves of a query block; the row split's consumer c: m0 + 64c ..).
template <int H>
__device__ __forceinline__ void add_dq_atomics(const float (&dq)[H][QN / 2], const AttnBwdArgs& p, const BwdWalk& k, const BwdThread& th,
                                               int h, int m0, u32* sem) {
  const int col0 = SPLIT_N ? th.c * QN : 0;
  const int rank = bwd_dq_rank(p, k, m0);  // (the query block's, before the row split's shift)
  m0 += SPLIT_M ? 64 * th.c : 0;           // (the consumer's rows)
  float* acc = p.dq_acc + (((i64)k.bi() * p.heads_q + h) * p.sq + k.q0(p) + m0 + th.krow) * D + col0 + 2 * th.t;
  auto add = [&] {
#pragma unroll
    for (int hh = 0; hh < H; ++hh)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        if (m0 + 64 * hh + th.krow + 8 * hf < k.rows_q(p))
#pragma unroll
          for (int j = 0; j < QN / 8; ++j)
            red_add2(acc + (64 * hh + 8 * hf) * D + 8 * j, dq[hh][4 * j + 2 * hf], dq[hh][4 * j + 2 * hf + 1]);
  };
  if (sem == nullptr) {
    add();
  } else {
    add_dq_in_order<D == 256>(sem, rank, !MEET, th.c, 3, add);  // (d256: each consumer its own instance)
  }
}

// The same for a 64-row query block's partial in one m64 accumulator.
__device__ __forceinline__ void add_dq_atomics(const float (&dq)[QN / 2], const AttnBwdArgs& p, const BwdWalk& k, const BwdThread& th, int h,
                                               int m0, u32* sem) {
  add_dq_atomics(reinterpret_cast<const float (&)[1][QN / 2]>(dq), p, k, th, h, m0, sem);
}

// The shared memory at the first 1024-byte boundary: K, V, the ring and the dSᵀ buffers first,
// then what the kernel places: the vectors at `off_vec` and the barriers at `off_bars`.
__device__ __forceinline__ BwdSmem bwd_smem(unsigned char* smem_raw, u32 off_vec, u32 off_bars) {
  const u32 base = smem_align1024(smem_raw);
  BwdSmem sm;
  sm.sk = base, sm.sv = base + KV_BYTES, sm.ring = base + 2 * KV_BYTES, sm.sds = sm.ring + STAGES * STAGE_BYTES;
  sm.vec = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + off_vec);
  sm.kv_full = base + off_bars;
  sm.qring = MbarRing<STAGES>{sm.kv_full + 8};
  return sm;
}

// The kernel's start, by every thread: the shared memory (bwd_smem), thread 0's setup (the
// barriers, the four maps prefetched, and `extra` if any), and a block barrier.
__device__ __forceinline__ BwdSmem bwd_start(unsigned char* smem_raw, u32 off_vec, u32 off_bars, const TmaMap* tq, const TmaMap* tk,
                                             const TmaMap* tv, const TmaMap* tdo, const TmaMap* extra = nullptr) {
  const BwdSmem sm = bwd_smem(smem_raw, off_vec, off_bars);
  if (threadIdx.x == 0) {
    bwd_setup(sm.kv_full, sm.qring, tq, tk, tv, tdo, BWD_CLUSTER);
    if (extra != nullptr) tma_prefetch(extra);
  }
  if (BWD_CLUSTER > 1) {
    cluster_sync();  // the peer's barriers exist before any multicast or remote arrival
  } else {
    __syncthreads();
  }
  return sm;
}

// A WGMMA backward's kernel body, by every thread (the preamble every version had): the start
// (bwd_start, `extra` prefetched), where the block sits, the register split with the producer
// warp (TX_FIRST: bwd_produce's) and consumer c's consume(c, walk, smem). The warpgroup index is
// broadcast (warpgroup_index), so that what the consumers derive from c is warp-uniform.
// DET_WRITER, D256_WRITER: warps 1 and 2 of warpgroup 0 run write(walk, smem, writer) with writer
// 0 and 1 (at the producer's registers; the second has work only with p.det_writers 2).
template <bool TX_FIRST, class Consume, class Write>
__device__ __forceinline__ void bwd_kernel(unsigned char* smem_raw, u32 off_vec, u32 off_bars, const TmaMap* tq, const TmaMap* tk,
                                           const TmaMap* tv, const TmaMap* tdo, const TmaMap* extra, const AttnBwdArgs& p,
                                           const Consume& consume, const Write& write) {
  // KILN_BWD_VARLEN: the grid covers the longest sequence's keys; a block past its own's, or of a
  // sequence with bad offsets, has nothing to do
  if (BWD_VARLEN && !bwd_varlen_start(p)) return;
  const BwdSmem sm = bwd_start(smem_raw, off_vec, off_bars, tq, tk, tv, tdo, extra);
  if constexpr (BWD_WINDOW || BWD_VARLEN) {
    // each role works out where the block sits after its register split: computed before it, the
    // window's walk left its iteration count in a vector register that ptxas spilled across it
    // (no writer: DET_WRITER is refused with a window or packed sequences above; DQ_FUSED: warp
    // 1 the dQ writer, warps 2 and 3 the conversion, write(walk, smem, warp - 1))
    ws_roles<PRODUCER_REGS, CONSUMER_REGS, DQ_FUSED ? 128 : 32>(
        warpgroup_index(),
        [&] {
          if constexpr (DQ_FUSED) {
            const int w = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 32), 0);
            if (w != 0) {
              write(bwd_walk(p), sm, w - 1);
              return;
            }
          }
          bwd_produce<TX_FIRST>(p, bwd_walk(p), sm, tq, tk, tv, tdo);
        },
        [&](int c) { consume(c, bwd_walk(p), sm); });
    return;
  }
  const BwdWalk k = DET_ORDERED ? det_walk(p) : bwd_walk(p);
  // (warps 1, 2 the writers)
  ws_roles<PRODUCER_REGS, CONSUMER_REGS, WRITER_WARPS ? 96 : 32>(
      warpgroup_index(),
      [&] {
        if (!WRITER_WARPS) {
          bwd_produce<TX_FIRST>(p, k, sm, tq, tk, tv, tdo);
          return;
        }
        const int w = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 32), 0);  // (warp-uniform: a plain test spilled)
        if (w == 0) {
          bwd_produce<TX_FIRST>(p, k, sm, tq, tk, tv, tdo);
        } else {
          write(k, sm, w - 1);  // (writer 1 returns at once unless p.det_writers is 2)
        }
      },
      [&](int c) { consume(c, k, sm); });
}

template <bool TX_FIRST, class Consume>
__device__ __forceinline__ void bwd_kernel(unsigned char* smem_raw, u32 off_vec, u32 off_bars, const TmaMap* tq, const TmaMap* tk,
                                           const TmaMap* tv, const TmaMap* tdo, const TmaMap* extra, const AttnBwdArgs& p,
                                           const Consume& consume) {
  bwd_kernel<TX_FIRST>(smem_raw, off_vec, off_bars, tq, tk, tv, tdo, extra, p, consume, [](const BwdWalk&, const BwdSmem&, int) {});
}
