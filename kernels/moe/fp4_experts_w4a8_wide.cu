// MoE expert GEMMs with MXFP4 weights and e4m3 activations on the FP8 tensor cores (W4A8) in tiles
// of 192 tokens (`KILN_W4A8_FORM=wide`, ledger F60): moe/fp4_experts_w4a8.cu's decoded weight
// tile (128 rows of 128 e4m3 a K block, decoded once per CTA into shared memory, wgmma's B) read by
// three consumer warpgroups of 64 tokens instead of two.
//
// Why: at E256 and 32,768 rows (65-194 rows an expert) the 128-token tiles cut 125 experts into a
// full tile and a short one of at most 64 rows (120 of the 381 m-tiles: ~24 % of the time for a
// sixth of the tensor work), and every tile decodes its weights again. The step of the two-consumer
// form is set by each consumer warp's serial chain (decode, fence, barrier, wgmmas, promotion; F8,
// F40), not by the tensor pipe (~40 % busy). Here an expert of up to 192 rows is one m-tile (256
// instead of 381 at that problem: a third fewer steps and decodes), and a step's decode and
// barrier feed up to 768 tensor cycles instead of 512.
//
// Registers: 512 threads, a pool of 128 a thread; a consumer thread holds fin and one accumulator
// (128) at 160 (the producer 32: 32 + 3 x 160 = 512), so each consumer keeps one batch in flight
// and promotes it before it issues the next into the same accumulator (DeepGEMM's order); the
// other two consumers' batches keep the tensor pipe busy meanwhile.
//
// A step j, consumer c: wait for stage j (and read its two token rows' X scales); consumers 0 and 1
// decode atom c of it into slot j % 3 and fence it (consumer 2 decodes nothing); all three meet at
// named barrier 1; wait for batch j - 1, free its stage, promote it; issue batch j. The decode runs
// while this consumer's batch j - 1 is on the tensor pipe. Slot j % 3 last held stage j - 3, whose
// batches every consumer waited for before it met at step j - 1, which the decode of step j follows.
//
// Shared memory: KILN_STAGES stages of 34 KB (192 X rows, the two atoms, 196 X scales: a box from
// the tile's first scale rounded down to 4, as fp4_produce_pairs loads it), three slots of 16 KB,
// the tables of at most KILN_MAX_EXPERTS experts (the host builds it for 256, so that five stages fit).
#include "common/bulk_copy.cuh"
#include "common/fp8.cuh"
#include "common/tma.cuh"
#include "common/wgmma_fp8.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/fp4_experts.cuh"
#include "moe/w4a8_args.cuh"
#include "moe/w4a8_lean.cuh"
#include "moe/w4a8_smem.cuh"

#if !defined(KILN_SWIGLU) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM)
#error "KILN_SWIGLU, KILN_STAGES, KILN_MAX_EXPERTS and KILN_SMEM must be defined by the host"
#endif

constexpr int CONSUMERS = 3, DECODERS = 2;  // consumers 0 and 1 decode atom c of each stage
constexpr int BM = 64 * CONSUMERS, BK = 128, STAGES = KILN_STAGES, SLOTS = 3;
constexpr int BN = KILN_SWIGLU ? 64 : 128;  // output columns of a tile (two 64-row atoms)
constexpr int THREADS = 128 * (1 + CONSUMERS), PRODUCER_REGS = 32, CONSUMER_REGS = 160;
static_assert(PRODUCER_REGS + CONSUMERS * CONSUMER_REGS <= (1 + CONSUMERS) * (65536 / THREADS),
              "the warpgroups' registers exceed the launch's pool");
constexpr u32 X_BYTES = BM * BK, W_BYTES = 2 * W4A8_ATOM_BYTES;
constexpr int SX_BOX = BM + 4;  // the host's box of X's scales
constexpr u32 SX_OFF = X_BYTES + W_BYTES, SX_BYTES = SX_BOX * 4;
constexpr u32 STAGE_BYTES = X_BYTES + (W_BYTES + SX_BYTES + 1023) / 1024 * 1024;  // the host's stage size
static_assert(SX_OFF % 128 == 0 && SX_OFF + SX_BYTES <= STAGE_BYTES, "the X scales fit the stage");
constexpr u32 SLOT_BYTES = 128 * BK;  // the decoded B tile: 128 rows of 128 e4m3
constexpr u32 LUT_BYTES = 128;  // 16 tables of 8 bytes
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 2) * 4;
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + SLOTS * SLOT_BYTES + LUT_BYTES + 2 * STAGES * 8 +
                               MOE_RING_BYTES + TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, slots, tables and ring need");

struct WideCtx {
  u32 base, slots, lut;
  MbarRing<STAGES> ring;
  int c, t, lane;
  u32 sx_off;  // this thread's first token's X scale in a stage, before the box's shift
};

// Step `it`'s stage (waited for), its slot and (LIVE: a consumer with tokens) the thread's two
// token rows' X scales, `shift` bytes into the stage's box.
template <bool LIVE>
__device__ __forceinline__ W4Stage wide_wait(const WideCtx& x, u32 it, u32 shift) {
  return w4a8_stage_wait<LIVE, SLOTS, STAGE_BYTES>(x, it, shift);
}

// Consumers 0 and 1 decode atom c of stage g into its slot and fence it for wgmma; all three meet.
__device__ __forceinline__ void wide_decode_meet(const WideCtx& x, const W4Stage& g) {
  if (x.c < DECODERS) {
    const u32 atom = x.base + g.s * STAGE_BYTES + X_BYTES + x.c * W4A8_ATOM_BYTES;
    w4a8_decode_unit_at(x.lut, w4a8_unit_at(atom, x.slots + g.slot * SLOT_BYTES, x.c, x.t), x.t);
    fence_proxy_async_shared();
  }
  named_barrier_sync(1, 128 * CONSUMERS);
}

// The four k32 wgmmas of stage g into the fresh accumulator `a` (X of this consumer's 64 tokens as
// A, the decoded slot as B), committed as one batch; the descriptors from the tiles' addresses in
// 16-byte units, one add a k32 step.
__device__ __forceinline__ void wide_issue(const WideCtx& x, const W4Stage& g, float (&a)[64]) {
  const u32 sa16 = (x.base >> 4) + g.s * (STAGE_BYTES / 16) + x.c * (64 * 128 / 16);
  const u32 sb16 = (x.slots >> 4) + g.slot * (SLOT_BYTES / 16);
  const u64 da = wgmma_desc_sw128_at(sa16, 16, 1024), db = wgmma_desc_sw128_at(sb16, 16, 1024);
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(a[i]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_m64k32_fp8<0, 0, 128>(a, da + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
  wgmma_commit();
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(a[i]);
}

// This consumer warp is done with step `it`'s stage (its wgmmas have read X): lane 0 frees it.
__device__ __forceinline__ void wide_done(const WideCtx& x, u32 it) {
  x.ring.release(MbarRing<STAGES>::slot(it), x.lane);
}

// A decoding thread's place (moe/w4a8_lean.cuh), from the thread index read opaquely once a tile so
// that the compiler does not hoist it out of the tile loop (kept across the epilogue, such values
// spilled its factors).
__device__ __forceinline__ W4Lane wide_lane(int c) {
  u32 tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return w4a8_lane(X_BYTES, c, tid % 128);
}

#if defined(KILN_W4A8_LEAN)
constexpr bool kLean = KILN_SWIGLU;  // the grouped GEMM runs `wide` (its lean decode spills)
#else
constexpr bool kLean = false;
#endif

// How a consumer with tokens gets each step's slot decoded: the two forms of the one K loop
// (wide_kloop; a third, `wide-turn`, lost two rounds and was deleted, F152, F170). ready: step
// it's slot decoded, for its wgmmas; done: step it's wgmmas waited for.
//
// `wide` (F60): consumers 0 and 1 decode atom c of each step's stage, its unit's addresses from the
// thread index each step, and all three meet at named barrier 1.
struct WideMeet {
  __device__ __forceinline__ void ready(const WideCtx& x, const W4Stage& g, u32) const { wide_decode_meet(x, g); }
  __device__ __forceinline__ void done(const WideCtx& x, u32 it) const { wide_done(x, it); }
};

// `wide-lean` (KILN_W4A8_LEAN, F122, auto's SwiGLU form from F150; moe/w4a8_lean.cuh): the same
// meet with a decoding thread's addresses taken from its place once a tile instead of from the
// thread index every step (an S2R and its dependents in the chain), its shared loads before its
// stores and seven operations a code word. A consumer without tokens runs `wide`'s decode (the
// same meets, issues and frees).
struct LeanMeet {
  W4Lane l;
  __device__ __forceinline__ void ready(const WideCtx& x, const W4Stage& g, u32) const {
    if (x.c < DECODERS) {
      const u32 stage = x.base + g.s * STAGE_BYTES;
      W4Codes a;
      const u32 offs = w4a8_lean_offs(stage, l);
      w4a8_lean_words(a, stage, l);
      w4a8_lean_tables(a, x.lut, offs);
      w4a8_lean_store(a, x.slots + g.slot * SLOT_BYTES, l);
      fence_proxy_async_shared();
    }
    named_barrier_sync(1, 128 * CONSUMERS);
  }
  __device__ __forceinline__ void done(const WideCtx& x, u32 it) const { wide_done(x, it); }
};

// The K loop of a consumer with tokens, one batch in flight: block j - 1's batch is waited for,
// freed and promoted once step j's slot is ready, then batch j goes into the same accumulator.
// sxsh(j): the byte shift of block j's X scales in its box.
template <class Meet, class Sh>
__device__ __forceinline__ void wide_kloop(const WideCtx& x, const Meet& m, u32& it, int nk, float (&fin)[64],
                                           float (&acc)[64], const Sh& sxsh) {
#pragma unroll
  for (int i = 0; i < 64; ++i) fin[i] = 0.0f;
  W4Stage g = wide_wait<true>(x, it, sxsh(0));
  m.ready(x, g, it);
  wide_issue(x, g, acc);
  float2 sc = g.sc;
  for (int j = 1; j < nk; ++j) {
    g = wide_wait<true>(x, it + j, sxsh(j));
    m.ready(x, g, it + j);
    wgmma_wait<0>();
    m.done(x, it + j - 1);
    w4a8_promote(fin, acc, sc.x, sc.y);
    wide_issue(x, g, acc);
    sc = g.sc;
  }
  wgmma_wait<0>();
  m.done(x, it + nk - 1);
  w4a8_promote(fin, acc, sc.x, sc.y);
  it += nk;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    moe_fp4_experts_w4a8_wide(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_sx,
                              const W4a8Args p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzles follow absolute address bits
  const u32 slots = base + STAGES * STAGE_BYTES, lut = slots + SLOTS * SLOT_BYTES;
  const int E = p.experts;
  const MoeRings<STAGES> rings(smem_raw, raw, lut + LUT_BYTES, p.sched, E, 4 * CONSUMERS, 4 * CONSUMERS,  // lane 0 of each consumer warp
                               [] {}, [&] { w4a8_write_tables(smem_raw, raw, lut); });

  ws_roles<PRODUCER_REGS, CONSUMER_REGS>(
      warpgroup_index(),
      [&] { w4a8_produce<STAGES, BM, BN, STAGE_BYTES, SX_BYTES>(p, &tma_x, &tma_sx, rings, base); },
      [&](int c) {
        WideCtx x;
        w4a8_consumer_ctx(x, base, slots, lut, rings.stages, c, SX_OFF);
        u32 it = 0;
        for (int j = 0;; ++j) {
          const int t = rings.ring.take(j, x.lane);
          // read from the tables each tile: kept in a register across the loop, the m-tile count
          // was the one value the consumers' 160 registers spilled
          const MoeTiles sp(rings.table, p.sched, E, p.tiles_n);
          if (t >= sp.tiles) break;
          const MoeTile tile = moe_tile(rings.table, E, t, sp.tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          if (tile.valid_rows <= 64 * c) {  // no tokens: decode (consumers 0, 1), meet, free
            for (int kb = 0; kb < p.katoms; ++kb, ++it) {
              wide_decode_meet(x, wide_wait<false>(x, it, 0));
              wide_done(x, it);
            }
            continue;
          }
          const auto sxsh = [&](int kb) { return w4a8_sx_shift(kb, p.x_rows, tile.row0); };
          float fin[64], acc[64];
          if constexpr (kLean) {
            wide_kloop(x, LeanMeet{wide_lane(c)}, it, p.katoms, fin, acc, sxsh);
          } else {
            wide_kloop(x, WideMeet{}, it, p.katoms, fin, acc, sxsh);
          }
          w4a8_store<BN>(c, x.t, x.lane, p, tile, sp.id(tile.expert), fin);
        }
      });
}
