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
#include "moe/w4a8_smem.cuh"

#if !defined(KILN_SWIGLU) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM)
#error "KILN_SWIGLU, KILN_STAGES, KILN_MAX_EXPERTS and KILN_SMEM must be defined by the host"
#endif

constexpr int CONSUMERS = 3, DECODERS = 2;  // consumers 0 and 1 decode atom c of each stage
constexpr int BM = 64 * CONSUMERS, BK = 128, STAGES = KILN_STAGES, SLOTS = 3, XBOX = 32;
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
constexpr u32 LUT_BYTES = 128;        // 16 tables of 8 bytes
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
struct WideStage {
  int s, slot;
  float2 sc;
};

template <bool LIVE>
__device__ __forceinline__ WideStage wide_wait(const WideCtx& x, u32 it, u32 shift) {
  WideStage g;
  g.s = x.ring.wait_full(it);
  g.slot = (int)(it % SLOTS);
  g.sc = make_float2(0.0f, 0.0f);
  if constexpr (LIVE) {
    const u32 at = x.base + g.s * STAGE_BYTES + x.sx_off + shift;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(g.sc.x) : "r"(at));
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(g.sc.y) : "r"(at + 32));
  }
  return g;
}

// KILN_W4A8_SPREAD (`KILN_W4A8_FORM=wide-spread`, F61): the decode spread over all three
// consumers in half-blocks (16 codes: two code words, one 16-byte store), a stage's 1,024 of them
// three a thread for consumers 0 and 1 and two for consumer 2 (instead of 64 codes for consumers 0
// and 1 and none for 2), every load of a thread's half-blocks issued before its first byte permute.
// Round 1's ncu of `wide` (F60): 29.5 % of the stall samples at the consumers' barrier (waiting for
// the decoders) and ~13 % on the decode's first use of its shared loads (short scoreboard): one
// unit's loads come in three dependent rounds (the table offsets, then block 0's codes and table,
// then, behind block 0's stores, block 1's).
#if defined(KILN_W4A8_SPREAD)
constexpr bool kSpread = true;
#else
constexpr bool kSpread = false;
#endif
constexpr int HALVES = 2 * 2 * 128 * 2;  // a stage's half-blocks: atoms x blocks x units x halves
constexpr int SPREAD = (HALVES + 128 * CONSUMERS - 1) / (128 * CONSUMERS);  // the most a thread takes

// Half-block h = ((2a + b) * 128 + u) * 2 + q of stage g: atom a, 32-block b, unit u (row u / 2,
// k half u % 2, as w4a8_unit_at's), code words 2q and 2q + 1 of the block, so that consecutive
// threads read consecutive 8 bytes. Thread i of the three consumers takes h = i + 384 k.
__device__ __forceinline__ void wide_decode_spread(const WideCtx& x, const WideStage& g) {
  const int i = 128 * x.c + x.t;
  const u32 atoms = x.base + g.s * STAGE_BYTES + X_BYTES, slot = x.slots + g.slot * SLOT_BYTES;
  u32 w0[SPREAD], w1[SPREAD];
  u16 off[SPREAD];
#pragma unroll
  for (int k = 0; k < SPREAD; ++k) {
    const int h = i + 128 * CONSUMERS * k;
    if (h >= HALVES) break;
    const int q = h & 1, u = (h >> 1) & 127, b = (h >> 8) & 1, a = h >> 9;
    const u32 atom = atoms + a * W4A8_ATOM_BYTES;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(w0[k]), "=r"(w1[k]) : "r"(atom + 2048 * b + 16 * u + 8 * q));
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(off[k]) : "r"(atom + W4A8_ATOM_CODES + 4 * (u / 2) + 2 * (u % 2)));
  }
  // the tables too before the first store (the SwiGLU); the grouped GEMM loads each beside its
  // store (all of them at once spilled 12 bytes of its consumers at 160 registers)
  constexpr bool TABLES_FIRST = KILN_SWIGLU;
  u32 t0[SPREAD], t1[SPREAD];
  const auto table = [&](int k, int h) {
    const u32 toff = (((h >> 8) & 1) ? (u32)off[k] >> 8 : (u32)off[k]) & LUT_MASK;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(t0[k]), "=r"(t1[k]) : "r"(x.lut + toff));
  };
#pragma unroll
  for (int k = 0; k < SPREAD; ++k) {
    const int h = i + 128 * CONSUMERS * k;
    if (h >= HALVES) break;
    if constexpr (TABLES_FIRST) table(k, h);
  }
#pragma unroll
  for (int k = 0; k < SPREAD; ++k) {
    const int h = i + 128 * CONSUMERS * k;
    if (h >= HALVES) break;
    if constexpr (!TABLES_FIRST) table(k, h);
    const int q = h & 1, u = (h >> 1) & 127, b = (h >> 8) & 1, a = h >> 9;
    const int row = 64 * a + u / 2;
    const u32 chunk = (u32)(4 * (u % 2) + 2 * b + q) ^ (u32)(row & 7);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(slot + row * 128 + chunk * 16),
                 "r"(w4a8_bytes<0>(w0[k], t0[k], t1[k])), "r"(w4a8_bytes<1>(w0[k], t0[k], t1[k])),
                 "r"(w4a8_bytes<0>(w1[k], t0[k], t1[k])), "r"(w4a8_bytes<1>(w1[k], t0[k], t1[k]))
                 : "memory");
  }
}

// Consumers 0 and 1 decode atom c of stage g into its slot (KILN_W4A8_SPREAD: all three their
// half-blocks of both atoms) and fence it for wgmma; all three meet.
__device__ __forceinline__ void wide_decode_meet(const WideCtx& x, const WideStage& g) {
  if constexpr (kSpread) {
    wide_decode_spread(x, g);
    fence_proxy_async_shared();
  } else if (x.c < DECODERS) {
    const u32 atom = x.base + g.s * STAGE_BYTES + X_BYTES + x.c * W4A8_ATOM_BYTES;
    w4a8_decode_unit_at(x.lut, w4a8_unit_at(atom, x.slots + g.slot * SLOT_BYTES, x.c, x.t), x.t);
    fence_proxy_async_shared();
  }
  named_barrier_sync(1, 128 * CONSUMERS);
}

// The four k32 wgmmas of stage g into the fresh accumulator `a` (X of this consumer's 64 tokens as
// A, the decoded slot as B), committed as one batch; the descriptors from the tiles' addresses in
// 16-byte units, one add a k32 step.
__device__ __forceinline__ void wide_issue(const WideCtx& x, const WideStage& g, float (&a)[64]) {
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

// The K loop of a consumer with tokens, one batch in flight: block j - 1's batch is waited for,
// freed and promoted after the meet of step j, then batch j goes into the same accumulator.
// sxsh(j): the byte shift of block j's X scales in its box.
template <class Sh>
__device__ __forceinline__ void wide_kloop(const WideCtx& x, u32& it, int nk, float (&fin)[64], float (&acc)[64],
                                           const Sh& sxsh) {
#pragma unroll
  for (int i = 0; i < 64; ++i) fin[i] = 0.0f;
  WideStage g = wide_wait<true>(x, it, sxsh(0));
  wide_decode_meet(x, g);
  wide_issue(x, g, acc);
  float2 sc = g.sc;
  for (int j = 1; j < nk; ++j) {
    g = wide_wait<true>(x, it + j, sxsh(j));
    wide_decode_meet(x, g);
    wgmma_wait<0>();
    wide_done(x, it + j - 1);
    w4a8_promote(fin, acc, sc.x, sc.y);
    wide_issue(x, g, acc);
    sc = g.sc;
  }
  wgmma_wait<0>();
  wide_done(x, it + nk - 1);
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
      [&] {
        fp4_produce_pairs<STAGES, BM, BN, BK, XBOX, X_BYTES, W4A8_ATOM_BYTES, STAGE_BYTES, SX_BYTES>(
            p, &tma_x, rings.stages, rings.ring, rings.table, base, &tma_sx);
      },
      [&](int c) {
        WideCtx x;
        x.base = base;
        x.slots = slots;
        x.lut = lut;
        x.ring = rings.stages;
        x.c = c;
        x.t = threadIdx.x % 128;
        x.lane = threadIdx.x % 32;
        x.sx_off = SX_OFF + 4u * (64 * c + 16 * (x.t / 32) + x.lane / 4);
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
          wide_kloop(x, it, p.katoms, fin, acc, sxsh);
          w4a8_store<BN>(c, x.t, x.lane, p, tile, sp.id(tile.expert), fin);
        }
      });
}
