// MoE expert GEMMs with MXFP4 weights and e4m3 activations on the FP8 tensor cores (W4A8,
// sm_90a): the grouped GEMM Y = X·W[e]ᵀ and, with KILN_SWIGLU, the fused
// H = silu(X·W1[e]ᵀ) ⊙ (X·W3[e]ᵀ) (times the routing weight), X in e4m3 with kiln's 1x128
// scales (M-major over X's rows: sx[kb * x_rows + row]), Y bf16 (KILN_OUT).
//
// Every e2m1 value times 2^u is exact in e4m3 for u in -8..6, so the prepack
// (src/ops/moe/fp4/w4a8.rs) gives each weight row a reference exponent and each 32-block its
// offset u; a block's codes become e4m3 bytes through a table of the eight magnitudes times 2^u,
// one byte permute per four codes, exactly. Each stage's weight tile (128 rows x 128 k: the
// GEMM's 128 output columns, or the SwiGLU's gate and up rows of 64) is decoded once per CTA
// into shared memory, where both consumers read it as wgmma's B operand; consumer c takes
// tokens 64c .. 64c + 63 of the tile's 128 as A (X by TMA, 128B-swizzled). Each 128-deep K block
// goes into a fresh accumulator and is promoted into fp32 with its tokens' X scales while the
// next block's wgmmas run (the tensor cores' FP8 sums keep about 14 bits), as
// common/fp8_promote.cuh does; the epilogue multiplies each output column by its row's
// 2^(c_ref - 127). The decode and barrier protocol is moe/fp4_experts_dq.cu's: per K step a
// consumer decodes its atom into slot it % 3, fences, meets the other at named barrier 1, issues;
// before each barrier it has waited for its batch two steps back.
//
// KILN_W4A8_SX = 1 (`KILN_W4A8_SX=tma`, the host's default from 2026-11-29; 0 is `ldg`): the K
// block's X scales of the tile's 128 rows ride in the stage (a TMA box over the scales seen as
// one row) and a consumer reads its two from there after the stage's wait. With 0 each
// consumer loads them from global memory one K block ahead, and the fence before the named
// barrier (MEMBAR) waits for those loads: ncu (H200, 32,768 rows) put 4-5 % of the stall samples
// on that fence and barrier, waiting on the loads' scoreboard.
// A TMA box must start on 16 bytes of global memory: one that started on the tile's first scale
// (kb * x_rows + row0, any multiple of 4 bytes) stopped the kernel with an illegal instruction
// (F11). The box starts at that index rounded down to 4 and holds 132 scales; a consumer reads
// from (index & 3) on.
//
// KILN_W4A8_DEC = 1 (`KILN_W4A8_DECODE=producer`): warps 1-3 of the producer warpgroup, idle
// otherwise, decode both atoms of each stage into its slot, and the consumers only wait for the
// slot (an mbarrier each slot: `ready`, the 96 decoding threads; `free`, the 8 consumer warps
// once their wgmmas have read it), issue and promote. ncu at 32,768 rows (F8): the consumers
// issue 37.6 % of the time at 2.25 warps a scheduler, each step a chain of decode, fence, named
// barrier and wgmma; with the decode on other warps a consumer's step is the wait, four wgmmas
// and the promotion of the block before, and the decoders run a stage ahead.
//
// KILN_W4A8_IDLE (`KILN_W4A8_IDLE=decode`): in a tile of at most 64 tokens (an expert's last
// m-tile: at 32,768 rows on 256 experts, 65-194 rows each, 120 of the 381 m-tiles, ~33 rows on
// average) consumer 1 has no tokens; it decodes both atoms of every stage, and consumer 0 only
// waits, promotes and issues. Before, each decoded its own atom and consumer 1 then waited at
// the barrier while consumer 0 promoted: the decode and the promotion one after the other.
//
// KILN_W4A8_BESIDE (`KILN_W4A8_PROMOTE=beside`): the same batches, slots and barriers, but a
// consumer waits for stage j + 2 before the wgmma wait for block j, then promotes block j and
// decodes stage j + 2 in one block of code (w4a8_promote_decode). The per-line profile at
// 32,768 rows (H200, ldg): a K block's 64 promotion FFMAs held 22 % of the stall samples (12 %
// dispatch) and the decode after them, behind the stage's wait in the next basic block, ~19 %
// (waits on its shared loads and ALU chains); the two consumers meet at every step, so both
// warps of a scheduler run the same phase and neither hides the other's stalls.
#include "common/bulk_copy.cuh"
#include "common/fp8.cuh"
#include "common/tma.cuh"
#include "common/wgmma_fp8.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/fp4_experts.cuh"
#include "moe/w4a8_args.cuh"
#include "moe/w4a8_smem.cuh"

#if !defined(KILN_SWIGLU) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM)
#error "KILN_SWIGLU, KILN_STAGES, KILN_MAX_EXPERTS and KILN_SMEM must be defined by the host"
#endif
#ifndef KILN_W4A8_SX
#define KILN_W4A8_SX 0
#endif
constexpr bool kSxStaged = KILN_W4A8_SX == 1;
#ifndef KILN_W4A8_DEC
#define KILN_W4A8_DEC 0
#endif
constexpr bool kDecProd = KILN_W4A8_DEC >= 1;  // the decode off the consumers (1 or 2)
constexpr bool kDecWg = KILN_W4A8_DEC >= 2;    // a warpgroup of its own (KILN_W4A8_DECODE=warpgroup)
// KILN_W4A8_DEC=3 (KILN_W4A8_DECODE=warpgroup-ring): the weight atoms in a ring of their own
// (KILN_W4A8_ASTAGES stages, freed by the decoding warps once decoded), X and its scales in the
// other (KILN_STAGES, freed by the consumers). With one ring for both a stage is held from its
// landing through the decode a stage ahead to the consumers' wgmmas: round 1a's ncu (F40) had
// the decoders waiting for landed stages (5.9 % of the samples) and for free slots (2.5 %), the
// consumers for decoded slots (17 %).
constexpr bool kSplit = KILN_W4A8_DEC == 3;
#ifndef KILN_W4A8_ASTAGES
#define KILN_W4A8_ASTAGES 2
#endif
constexpr int ASTAGES = KILN_W4A8_ASTAGES;
// KILN_W4A8_DEC 1: warps 1-3 of the producer warpgroup; 2 and 3: warpgroup 1, all four warps
constexpr int DEC_THREADS = kDecWg ? 128 : 96;
constexpr int THREADS = kDecWg ? 512 : 384;
// KILN_W4A8_DEC=2: the register split of the four warpgroups over the launch's pool of 128 a
// thread (40 + 56 + 2 x 208 = 512): the consumers keep both accumulators and fin (192) and their
// addressing; a decoding thread holds its two units' four 32-blocks (24) at once.
constexpr int WG_PRODUCER_REGS = 40, WG_DECODER_REGS = 56, WG_CONSUMER_REGS = 208;
static_assert(!kDecWg || WG_PRODUCER_REGS + WG_DECODER_REGS + 2 * WG_CONSUMER_REGS <= 4 * (65536 / 512),
              "the warpgroups' registers exceed the launch's pool");
#if defined(KILN_W4A8_BESIDE)
constexpr bool kBeside = true;
#else
constexpr bool kBeside = false;
#endif
static_assert(!(kBeside && kDecProd), "KILN_W4A8_BESIDE orders the consumers' own decode: not with KILN_W4A8_DEC");
#if defined(KILN_W4A8_IDLE)
constexpr bool kIdleDec = true;
#else
constexpr bool kIdleDec = false;
#endif
static_assert(!kIdleDec || (kBeside && kSxStaged && !kDecProd),
              "KILN_W4A8_IDLE runs with KILN_W4A8_BESIDE and KILN_W4A8_SX=1 only (the host's rule)");

constexpr int BM = 128, BK = 128, STAGES = KILN_STAGES, SLOTS = 3, XBOX = 32;
constexpr int BN = KILN_SWIGLU ? 64 : 128;  // output columns of a tile (two 64-row atoms)
constexpr u32 ATOM_CODES = W4A8_ATOM_CODES, ATOM_BYTES = W4A8_ATOM_BYTES;
constexpr u32 X_BYTES = BM * BK, W_BYTES = 2 * ATOM_BYTES;
constexpr int SX_BOX = BM + 4;  // the staged X scales: a box from a multiple of 4 (the host's SX_BOX)
// KILN_W4A8_DEC=3: a stage is X and its scales, the atoms in their own ring of ASTAGE_BYTES
constexpr u32 SX_OFF = X_BYTES + (kSplit ? 0 : W_BYTES), SX_BYTES = kSxStaged ? SX_BOX * 4 : 0;
constexpr u32 STAGE_BYTES = X_BYTES + ((kSplit ? 0 : W_BYTES) + SX_BYTES + 1023) / 1024 * 1024;  // the host's stage_bytes
constexpr u32 ASTAGE_BYTES = kSplit ? W_BYTES : 0;
static_assert(!kSplit || (kSxStaged && ASTAGES % 2 == 0), "KILN_W4A8_DEC=3: staged scales, an even atom ring (1 KB)");
static_assert(SX_OFF % 128 == 0 && SX_OFF + SX_BYTES <= STAGE_BYTES, "the X scales fit the stage");
constexpr u32 SLOT_BYTES = 128 * BK;  // the decoded B tile: 128 rows of 128 e4m3
constexpr u32 LUT_BYTES = kDecProd ? 128 + 64 : 128;  // 16 tables of 8 bytes (then the slots' ready, free barriers)
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 2) * 4;
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + SLOTS * SLOT_BYTES + LUT_BYTES + 2 * STAGES * 8 +
                               (kSplit ? ASTAGES * (ASTAGE_BYTES + 16) : 0) +
                               MOE_RING_BYTES + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, slots, tables and ring need");

struct W4Ctx {
  u32 base, slots, lut;  // KILN_W4A8_DEC: slot i's ready barrier at lut + 128 + 8i, its free one 24 on
  MbarRing<STAGES> ring;
  u32 abase;               // KILN_W4A8_DEC=3: the atom ring's first stage
  MbarRing<ASTAGES> aring;  // and its barriers
  int c, t, lane;
  u32 sx_off;  // KILN_W4A8_SX: this thread's first token's scale in a stage (the second 32 B on),
               // before the box's shift (w4a8_sx_shift)
};

// Unit (c, t) of stage s (w4a8_unit_at), decoded into slot `slot`.
__device__ __forceinline__ W4Unit w4a8_unit(const W4Ctx& x, int s, int slot, int c, int t) {
  const u32 atom = (kSplit ? x.abase + s * ASTAGE_BYTES : x.base + s * STAGE_BYTES + X_BYTES) + c * ATOM_BYTES;
  return w4a8_unit_at(atom, x.slots + slot * SLOT_BYTES, c, t);
}

// Decodes unit (c, t) of stage s into slot `slot`, one 32-block at a time (few registers).
__device__ __forceinline__ void w4a8_decode_unit(const W4Ctx& x, int s, int slot, int c, int t) {
  w4a8_decode_unit_at(x.lut, w4a8_unit(x, s, slot, c, t), t);
}

// KILN_W4A8_DEC=2: decoding thread d's two units of stage s (row d / 2 of both atoms, half
// d % 2), the four 32-blocks' shared loads issued before any byte permute or store: four
// independent chains a thread. F14's decoders (three warps of the producer warpgroup at 40
// registers) ran ~2.7 units a thread one block after another, each block's loads behind the
// previous block's stores (volatile asm keeps their order), and fell a stage behind.
__device__ __forceinline__ void w4a8_decode_pair(const W4Ctx& x, int s, int slot, int d) {
  const W4Unit u0 = w4a8_unit(x, s, slot, 0, d), u1 = w4a8_unit(x, s, slot, 1, d);
  const W4Block a0 = w4a8_load_block(x.lut, u0, d, 0), a1 = w4a8_load_block(x.lut, u0, d, 1);
  const W4Block b0 = w4a8_load_block(x.lut, u1, d, 0), b1 = w4a8_load_block(x.lut, u1, d, 1);
  w4a8_store_block(u0, 0, a0);
  w4a8_store_block(u1, 0, b0);
  w4a8_store_block(u0, 1, a1);
  w4a8_store_block(u1, 1, b1);
}

// UNITS 1: this consumer's atom of stage s (thread t of consumer c: row t / 2, half t % 2); 2:
// both atoms (KILN_W4A8_IDLE, the consumer without tokens of a tile of at most 64); 0: none.
template <int UNITS = 1>
__device__ __forceinline__ void w4a8_decode(const W4Ctx& x, int s, int slot) {
  if constexpr (UNITS == 2) {
    w4a8_decode_unit(x, s, slot, 0, x.t);
    w4a8_decode_unit(x, s, slot, 1, x.t);
  } else if constexpr (UNITS == 1) {
    w4a8_decode_unit(x, s, slot, x.c, x.t);
  }
}

// KILN_W4A8_DEC: slot i's barriers. `ready` completes a phase when the 96 decoding threads have
// written (and fenced) the slot's tile; `free` when the 8 consumer warps' wgmmas have read it.
__device__ __forceinline__ u32 w4a8_ready(const W4Ctx& x, int slot) { return x.lut + 128 + 8u * slot; }
__device__ __forceinline__ u32 w4a8_free(const W4Ctx& x, int slot) { return x.lut + 128 + 8u * (SLOTS + slot); }

// A consumer warp is done with iteration `it`: its wgmmas have read the stage's X (and, with
// KILN_W4A8_DEC, the slot's tile): lane 0 frees both.
__device__ __forceinline__ void w4a8_done(const W4Ctx& x, u32 it) {
  x.ring.release(MbarRing<STAGES>::slot(it), x.lane);
  if (kDecProd && x.lane == 0) mbar_arrive(w4a8_free(x, (int)(it % SLOTS)));
}

// KILN_W4A8_DEC: the decoding warps (threads 32..127 of the producer warpgroup). They take the
// same tiles as the consumers, and for each K block wait for the stage and for its slot to be
// free, decode both atoms (256 units of a row half, ~2.7 a thread), fence them for wgmma, arrive
// on the slot's `ready` barrier and free the stage (its atoms read).
__device__ __forceinline__ void w4a8_decoders(const W4Ctx& x, const MoeIndexRing& ring, int tiles, int katoms, int d) {
  u32 it = 0;
  for (int j = 0;; ++j) {
    const int t = ring.take(j, x.lane);
    if (t >= tiles) break;
    for (int kb = 0; kb < katoms; ++kb, ++it) {
      const int s = kSplit ? x.aring.wait_full(it) : x.ring.wait_full(it), slot = (int)(it % SLOTS);
      mbar_wait(w4a8_free(x, slot), ((it / SLOTS) & 1) ^ 1);  // a fresh barrier passes at once
      if constexpr (kDecWg) {
        w4a8_decode_pair(x, s, slot, d);
      } else {
#pragma unroll 1
        for (int u = d; u < 256; u += DEC_THREADS) w4a8_decode_unit(x, s, slot, u / 128, u % 128);
      }
      fence_proxy_async_shared();
      mbar_arrive(w4a8_ready(x, slot));
      __syncwarp();  // every lane has read the stage's atoms before lane 0 frees it
      if constexpr (kSplit) {
        x.aring.release(s, x.lane);
      } else {
        x.ring.release(s, x.lane);
      }
    }
  }
}

// KILN_W4A8_DEC=3: the producer thread (fp4_produce_pairs with the atoms in their own ring):
// per K block the two atoms into the atom ring, then X's rows and scales into the X ring.
__device__ __forceinline__ void w4a8_produce_split(const W4a8Args& p, const TmaMap* tma_x, const TmaMap* tma_sx,
                                                   const MbarRing<STAGES>& xring, const MbarRing<ASTAGES>& aring,
                                                   const MoeIndexRing& ring, const int* table, u32 base, u32 abase) {
  tma_prefetch(tma_x);
  tma_prefetch(tma_sx);
  fp4_walk_pairs<BM, BN, XBOX, ATOM_BYTES>(p, ring, table, [&](u32 it, int kb, const MoeTile& tile, int boxes,
                                                                const unsigned char* src, u64 block_bytes) {
    ws_fill(aring, it, W_BYTES, [&](int s, u32 bar) {
#pragma unroll
      for (int a = 0; a < 2; ++a)
        bulk_copy_g2s(abase + s * ASTAGE_BYTES + a * ATOM_BYTES, src + a * block_bytes, ATOM_BYTES, bar);
    });
    const u32 bytes = boxes * XBOX * 128u + SX_BYTES;  // X rows of 128 bytes, the scales' box
    ws_fill(xring, it, bytes, [&](int s, u32 bar) {
      const u32 sx = base + s * STAGE_BYTES;
      for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, tma_x, bar, kb * BK, tile.row0 + b * XBOX);
      tma_load_2d(sx + X_BYTES, tma_sx, bar, (kb * p.x_rows + tile.row0) & ~3, 0);
    });
  });
}

// A K step's stage (w4a8_stage_wait): with KILN_W4A8_SX, a consumer with tokens reads its two
// token rows' X scales, `shift` bytes into the stage's box.
template <bool LIVE>
__device__ __forceinline__ W4Stage w4a8_wait(const W4Ctx& x, u32 it, u32 shift) {
  return w4a8_stage_wait<kSxStaged && LIVE, SLOTS, STAGE_BYTES>(x, it, shift);
}

// The four k32 wgmmas of stage g into the fresh accumulator `a` (X of this consumer's 64 tokens
// as A, the decoded slot as B), committed as one batch.
__device__ __forceinline__ void w4a8_issue(const W4Ctx& x, const W4Stage& g, float (&a)[64]) {
  const int s = g.s, slot = g.slot;
  const u32 sa = x.base + s * STAGE_BYTES + x.c * 64 * 128, sb = x.slots + slot * SLOT_BYTES;
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(a[i]);
  wgmma_fence();
  if constexpr (kSxStaged) {
    // the descriptors from the tiles' start addresses in 16-byte units, one add a k32 step
    // (wgmma_desc_sw128 on each address rebuilt both, ~10 uniform instructions a wgmma: 23 %
    // of the loop's instructions in the profile at 32,768 rows; F15). Not with KILN_W4A8_SX
    // = 0: its grouped GEMM, at its 232 registers, spills 16 bytes with them.
    const u32 sa16 = (x.base >> 4) + s * (STAGE_BYTES / 16) + x.c * (64 * 128 / 16);
    const u32 sb16 = (x.slots >> 4) + slot * (SLOT_BYTES / 16);
    const u64 da = wgmma_desc_sw128_at(sa16, 16, 1024), db = wgmma_desc_sw128_at(sb16, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64k32_fp8<0, 0, 128>(a, da + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
  } else {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64k32_fp8<0, 0, 128>(a, wgmma_desc_sw128(sa + kk * 32, 16, 1024), wgmma_desc_sw128(sb + kk * 32, 16, 1024),
                                  kk > 0 ? 1 : 0);
  }
  wgmma_commit();
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(a[i]);
}

// The slot of stage g written (this consumer's atom), fenced for wgmma, and both consumers met.
__device__ __forceinline__ void w4a8_meet() {
  fence_proxy_async_shared();
  named_barrier_sync(1, 256);
}

// One K step: wait for stage `it`, decode this consumer's atom, meet the other consumer (with
// KILN_W4A8_DEC: wait for the decoding warps' slot instead), then (when the consumer has tokens)
// issue the four k32 wgmmas into the fresh accumulator `a`.
// KILN_W4A8_SX: returns the thread's two token rows' X scales of the step's K block, `shift`
// bytes into the stage's box.
// UNITS: the atoms this consumer decodes (w4a8_decode).
template <bool LIVE, int UNITS = 1>
__device__ __forceinline__ float2 w4a8_step(const W4Ctx& x, u32 it, float (&a)[64], u32 shift = 0) {
  const W4Stage g = w4a8_wait<LIVE>(x, it, shift);
  if constexpr (kDecProd) {
    mbar_wait(w4a8_ready(x, g.slot), (it / SLOTS) & 1);  // the decoding warps have filled the slot
  } else {
    w4a8_decode<UNITS>(x, g.s, g.slot);
    w4a8_meet();
  }
  if constexpr (LIVE) w4a8_issue(x, g, a);
  return g.sc;
}

// The promoted K loop of a consumer with tokens (the structure of common/fp8_promote.cuh: at the
// top of the loop exactly block j's batch is in flight, so each promotion reads a finished one).
// sxs(j) gives K block j's two X scales (0 past the end); with KILN_W4A8_SX the steps read them
// from their stages instead, sxsh(j) bytes into block j's box.
template <int UNITS, class Sx, class Sh>
__device__ __forceinline__ void w4a8_kloop(const W4Ctx& x, u32& it, int nk, float (&fin)[64], float (&acc)[64],
                                           float (&acc2)[64], const Sx& sxs, const Sh& sxsh) {
#pragma unroll
  for (int i = 0; i < 64; ++i) fin[i] = 0.0f;
  float2 s0, s1;
  if constexpr (!kSxStaged) s0 = sxs(0), s1 = sxs(1);
  const float2 f0 = w4a8_step<true, UNITS>(x, it, acc, sxsh(0));
  if constexpr (kSxStaged) s0 = f0;
  int j = 0;
  for (; j + 2 < nk; j += 2, it += 2) {
    const float2 f1 = w4a8_step<true, UNITS>(x, it + 1, acc2, sxsh(j + 1));
    if constexpr (kSxStaged) s1 = f1;
    wgmma_wait<1>();
    w4a8_done(x, it);
    w4a8_promote(fin, acc, s0.x, s0.y);
    if constexpr (!kSxStaged) s0 = sxs(j + 2);
    const float2 f2 = w4a8_step<true, UNITS>(x, it + 2, acc, sxsh(j + 2));
    if constexpr (kSxStaged) s0 = f2;
    wgmma_wait<1>();
    w4a8_done(x, it + 1);
    w4a8_promote(fin, acc2, s1.x, s1.y);
    if constexpr (!kSxStaged) s1 = sxs(j + 3);
  }
  if (j + 1 < nk) {
    const float2 f1 = w4a8_step<true, UNITS>(x, it + 1, acc2, sxsh(j + 1));
    if constexpr (kSxStaged) s1 = f1;
    wgmma_wait<1>();
    w4a8_done(x, it);
    w4a8_promote(fin, acc, s0.x, s0.y);
    wgmma_wait<0>();
    w4a8_done(x, it + 1);
    w4a8_promote(fin, acc2, s1.x, s1.y);
    it += 2;
  } else {
    wgmma_wait<0>();
    w4a8_done(x, it);
    w4a8_promote(fin, acc, s0.x, s0.y);
    it += 1;
  }
}

// KILN_W4A8_BESIDE: promotes block j into fin while decoding this consumer's atom of stage g
// into its slot, in one block of code: the decode's shared loads first, then the FFMAs with the
// byte permutes and stores among them (the FMA pipe and the ALU side by side; in the order of
// w4a8_kloop the promotion ends one basic block and the decode, behind the stage's wait, starts
// the next, so a warp ran 64 FFMAs, then ~75 ALU instructions, each phase stalled on its own).
__device__ __forceinline__ void w4a8_promote_decode(const W4Ctx& x, const W4Stage& g, float (&fin)[64],
                                                    float (&a)[64], float sa, float sb) {
  const W4Unit u = w4a8_unit(x, g.s, g.slot, x.c, x.t);
  const W4Block k0 = w4a8_load_block(x.lut, u, x.t, 0), k1 = w4a8_load_block(x.lut, u, x.t, 1);
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(a[i]);
#pragma unroll
  for (int i = 0; i < 32; ++i) fin[i] = fmaf(((i >> 1) & 1) ? sb : sa, a[i], fin[i]);
  w4a8_store_block(u, 0, k0);
#pragma unroll
  for (int i = 32; i < 64; ++i) fin[i] = fmaf(((i >> 1) & 1) ? sb : sa, a[i], fin[i]);
  w4a8_store_block(u, 1, k1);
}

// KILN_W4A8_BESIDE (`KILN_W4A8_PROMOTE=beside`): w4a8_kloop's batches and barriers in the same
// order, but the wait for stage j + 2 comes before the wgmma wait for block j, so that block j's
// promotion and stage j + 2's decode share one block of code (w4a8_promote_decode). At the top
// of each half-turn blocks j (in `pa`) and j + 1 are in flight; the decode of j + 2 writes slot
// (j + 2) % 3, last read by the wgmmas of block j - 1, which this consumer waited for before
// and the other consumer before the barrier of step j + 1 (as in w4a8_kloop).
template <int UNITS, class Sx, class Sh>
struct W4Beside {
  const W4Ctx& x;
  const Sx& sxs;
  const Sh& sxsh;

  // Block j's stage (ring iteration `at`) decoded, met and issued into `a`, with nothing to
  // promote before it; returns block j's X scales.
  __device__ __forceinline__ float2 first(u32 at, int j, float (&a)[64]) const {
    const W4Stage g = w4a8_wait<true>(x, at, sxsh(j));
    w4a8_decode<UNITS>(x, g.s, g.slot);
    w4a8_meet();
    w4a8_issue(x, g, a);
    return kSxStaged ? g.sc : sxs(j);
  }

  // Block j (iteration `at`): its stage waited for, then block j - 2's batch (in `a`, scales
  // `sa`) waited for, freed and promoted beside block j's decode; met, and block j issued into
  // `a`. Returns block j's X scales.
  __device__ __forceinline__ float2 next(u32 at, int j, float (&fin)[64], float (&a)[64], float2 sa) const {
    const W4Stage g = w4a8_wait<true>(x, at, sxsh(j));
    wgmma_wait<1>();
    w4a8_done(x, at - 2);
    if constexpr (UNITS == 1) {
      w4a8_promote_decode(x, g, fin, a, sa.x, sa.y);
    } else {
      w4a8_promote(fin, a, sa.x, sa.y);
    }
    w4a8_meet();
    w4a8_issue(x, g, a);
    return kSxStaged ? g.sc : sxs(j);
  }

  // The last two batches: iteration `at` in `a` (scales sa), then at + 1 in `b` (sb).
  __device__ __forceinline__ void last(u32 at, float (&fin)[64], float (&a)[64], float2 sa, float (&b)[64],
                                       float2 sb) const {
    wgmma_wait<1>();
    w4a8_done(x, at);
    w4a8_promote(fin, a, sa.x, sa.y);
    wgmma_wait<0>();
    w4a8_done(x, at + 1);
    w4a8_promote(fin, b, sb.x, sb.y);
  }
};

template <int UNITS, class Sx, class Sh>
__device__ __forceinline__ void w4a8_kloop_beside(const W4Ctx& x, u32& it, int nk, float (&fin)[64], float (&acc)[64],
                                                  float (&acc2)[64], const Sx& sxs, const Sh& sxsh) {
#pragma unroll
  for (int i = 0; i < 64; ++i) fin[i] = 0.0f;
  const W4Beside<UNITS, Sx, Sh> k{x, sxs, sxsh};
  float2 s0 = k.first(it, 0, acc);
  if (nk == 1) {
    wgmma_wait<0>();
    w4a8_done(x, it);
    w4a8_promote(fin, acc, s0.x, s0.y);
    it += 1;
    return;
  }
  float2 s1 = k.first(it + 1, 1, acc2);
  // blocks j (acc) and j + 1 (acc2) in flight, j + 1 < nk
  int j = 0;
  for (; j + 2 < nk; j += 2, it += 2) {
    s0 = k.next(it + 2, j + 2, fin, acc, s0);
    if (j + 3 == nk) {  // blocks j + 1 (acc2) and j + 2 (acc) left
      k.last(it + 1, fin, acc2, s1, acc, s0);
      it += 3;
      return;
    }
    s1 = k.next(it + 3, j + 3, fin, acc2, s1);
  }
  k.last(it, fin, acc, s0, acc2, s1);  // blocks j (acc) and j + 1 = nk - 1 (acc2) left
  it += 2;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    moe_fp4_experts_w4a8(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_sx, const W4a8Args p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzles follow absolute address bits
  // KILN_W4A8_DEC=3: the atom ring between the X stages and the slots, its barriers after the tables
  const u32 abase = base + STAGES * STAGE_BYTES;
  const u32 slots = abase + ASTAGES * ASTAGE_BYTES, lut = slots + SLOTS * SLOT_BYTES;
  const MbarRing<ASTAGES> aring{lut + LUT_BYTES};
  const u32 abars = kSplit ? 16u * ASTAGES : 0u;
  const int E = p.experts;
  // lane 0 of each consumer warp (and of each decoding warp: they read the atoms and the tiles;
  // with KILN_W4A8_DEC=3 they free the atom ring's stages, not X's)
  const MoeRings<STAGES> rings(
      smem_raw, raw, lut + LUT_BYTES + abars, p.sched, E, kDecProd && !kSplit ? 8 + DEC_THREADS / 32 : 8,
      kDecProd ? 8 + DEC_THREADS / 32 : 8,
      [&] {
        if constexpr (kSplit) aring.init(DEC_THREADS / 32);  // lane 0 of each decoding warp
        if constexpr (kDecProd) {
          for (int i = 0; i < SLOTS; ++i) {
            mbar_init(lut + 128 + 8u * i, DEC_THREADS);  // ready: every decoding thread
            mbar_init(lut + 128 + 8u * (SLOTS + i), 8);  // free: lane 0 of each consumer warp
          }
        }
      },
      [&] { w4a8_write_tables(smem_raw, raw, lut); });
  const MoeTiles sp(rings.table, p.sched, E, p.tiles_n);
  const int wg = warpgroup_index();

  // the producer: thread 0 of warpgroup 0
  const auto produce = [&] {
    if constexpr (kSplit) {
      w4a8_produce_split(p, &tma_x, &tma_sx, rings.stages, aring, rings.ring, rings.table, base, abase);
      return;
    }
    w4a8_produce<STAGES, BM, BN, STAGE_BYTES, SX_BYTES>(p, &tma_x, &tma_sx, rings, base);
  };
  // KILN_W4A8_DEC: decoding thread d (0 .. DEC_THREADS - 1)
  const auto decode = [&](int d) {
    W4Ctx x;
    x.base = base;
    x.slots = slots;
    x.lut = lut;
    x.ring = rings.stages;
    x.abase = abase;
    x.aring = aring;
    x.c = x.t = 0;
    x.lane = threadIdx.x % 32;
    x.sx_off = 0;
    w4a8_decoders(x, rings.ring, sp.tiles, p.katoms, d);
  };
  const auto consume =
      [&](int c) {
        W4Ctx x;
        w4a8_consumer_ctx(x, base, slots, lut, rings.stages, c, SX_OFF);
        const int tok_a = 64 * c + 16 * (x.t / 32) + x.lane / 4;  // its first token (sx_off's)
        u32 it = 0;
        for (int j = 0;; ++j) {
          const int t = rings.ring.take(j, x.lane);
          if (t >= sp.tiles) break;
          const MoeTile tile = moe_tile(rings.table, E, t, sp.tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          if (tile.valid_rows <= 64 * c) {  // no tokens: decode for the other consumer (or just wait)
            for (int kb = 0; kb < p.katoms; ++kb, ++it) {
              float none[64];
              w4a8_step<false, kIdleDec ? 2 : 1>(x, it, none);
              w4a8_done(x, it);
            }
            continue;
          }
          // this thread's two token rows' X scales of K block kb (0 past the tile's rows or K)
          const auto sxs = [&](int kb) {
            const bool ka = kb < p.katoms;
            const i64 at = (i64)kb * p.x_rows + tile.row0;
            return make_float2(ka && tok_a < tile.valid_rows ? p.sx[at + tok_a] : 0.0f,
                               ka && tok_a + 8 < tile.valid_rows ? p.sx[at + tok_a + 8] : 0.0f);
          };
          const auto sxsh = [&](int kb) { return kSxStaged ? w4a8_sx_shift(kb, p.x_rows, tile.row0) : 0u; };
          float fin[64], acc[64], acc2[64];
          // KILN_W4A8_IDLE: in a tile of at most 64 tokens consumer 1 decodes both atoms
          if (kIdleDec && tile.valid_rows <= 64) {
            if constexpr (kBeside) {
              w4a8_kloop_beside<0>(x, it, p.katoms, fin, acc, acc2, sxs, sxsh);
            } else {
              w4a8_kloop<0>(x, it, p.katoms, fin, acc, acc2, sxs, sxsh);
            }
          } else if constexpr (kBeside) {
            w4a8_kloop_beside<1>(x, it, p.katoms, fin, acc, acc2, sxs, sxsh);
          } else {
            w4a8_kloop<1>(x, it, p.katoms, fin, acc, acc2, sxs, sxsh);
          }
          w4a8_store<BN>(x.c, x.t, x.lane, p, tile, sp.id(tile.expert), fin);
        }
      };
  if constexpr (kDecWg) {
    // KILN_W4A8_DEC=2: warpgroup 0 produces (thread 0), warpgroup 1 decodes, 2 and 3 consume
    if (wg == 0) {
      warpgroup_reg_dec<WG_PRODUCER_REGS>();
      if (threadIdx.x == 0) produce();
    } else if (wg == 1) {
      warpgroup_reg_dec<WG_DECODER_REGS>();
      decode((int)threadIdx.x - 128);
    } else {
      warpgroup_reg_inc<WG_CONSUMER_REGS>();
      consume(wg - 2);
    }
  } else {
    // thread 0 loads; with KILN_W4A8_DEC=1 warps 1-3 of the producer warpgroup decode
    ws_roles<40, 232, kDecProd ? 128 : 1>(
        wg,
        [&] {
          if (threadIdx.x == 0) {
            produce();
          } else if (kDecProd && threadIdx.x >= 32) {
            decode((int)threadIdx.x - 32);
          }
        },
        consume);
  }
}
