// What the W4A8 experts' shared-memory forms share (moe/fp4_experts_w4a8.cu, two consumers of 64
// tokens a tile; moe/fp4_experts_w4a8_wide.cu, three): the decode of a stage's weight atom into
// the decoded tile (128 rows of 128 e4m3, 128B-swizzled as a TMA load would lay it out, wgmma's B
// operand), and a consumer's stores of its 64 tokens. Needs KILN_SWIGLU and out_t.
#pragma once
#include "common/fast_math.cuh"
#include "common/wgmma.cuh"
#include "moe/fp4_experts.cuh"
#include "moe/w4a8_args.cuh"

// A thread's unit of a stage's decode: row t / 2 of atom c, k 64 (t % 2) .. + 63 (two 32-blocks,
// one table each), stored as four 16-byte chunks where a 128B-swizzled TMA load of the e4m3 row
// would have put them (row 64c + t / 2 of the decoded tile).
struct W4Unit {
  u32 atom, dst;  // the atom in the stage; the row in the slot
  int row, hh;
  u16 offs;  // the two blocks' table offsets
};
// A 32-block of a unit: its four code words and its table.
struct W4Block {
  u32 w0, w1, w2, w3, t0, t1;
};

// Unit (c, t) of the atom at shared address `atom`, decoded into the tile at `slot`.
__device__ __forceinline__ W4Unit w4a8_unit_at(u32 atom, u32 slot, int c, int t) {
  W4Unit u;
  u.atom = atom;
  const int r = t / 2;
  u.hh = t % 2;
  u.row = 64 * c + r;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(u.offs) : "r"(u.atom + W4A8_ATOM_CODES + r * 4 + u.hh * 2));
  u.dst = slot + u.row * 128;
  return u;
}

// The shared loads of block b: its 32 codes (thread t's 16 bytes of the atom's b-th 2 KB) and its
// table (of the 16 at `lut`).
__device__ __forceinline__ W4Block w4a8_load_block(u32 lut, const W4Unit& u, int t, int b) {
  W4Block k;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(k.w0), "=r"(k.w1), "=r"(k.w2), "=r"(k.w3)
               : "r"(u.atom + 2048 * b + t * 16));
  // the table's byte offset masked to 8 (0..15): the 8-byte load stays aligned and inside the
  // 16 tables whatever the weight bytes hold (unmasked, a byte off the multiples of 8 faulted
  // with a misaligned address; the prepack writes only multiples of 8, which pass unchanged)
  const u32 toff = (b ? u.offs >> 8 : u.offs) & LUT_MASK;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(k.t0), "=r"(k.t1) : "r"(lut + toff));
  return k;
}

// Block b's e4m3 bytes into chunks 4hh + 2b and + 1 of the row.
__device__ __forceinline__ void w4a8_store_block(const W4Unit& u, int b, const W4Block& k) {
  const u32 c0 = (u32)(4 * u.hh + 2 * b) ^ (u32)(u.row & 7), c1 = c0 ^ 1u;
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(u.dst + c0 * 16), "r"(w4a8_bytes<0>(k.w0, k.t0, k.t1)),
               "r"(w4a8_bytes<1>(k.w0, k.t0, k.t1)), "r"(w4a8_bytes<0>(k.w1, k.t0, k.t1)),
               "r"(w4a8_bytes<1>(k.w1, k.t0, k.t1))
               : "memory");
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(u.dst + c1 * 16), "r"(w4a8_bytes<0>(k.w2, k.t0, k.t1)),
               "r"(w4a8_bytes<1>(k.w2, k.t0, k.t1)), "r"(w4a8_bytes<0>(k.w3, k.t0, k.t1)),
               "r"(w4a8_bytes<1>(k.w3, k.t0, k.t1))
               : "memory");
}

// Decodes unit u, one 32-block at a time (few registers; `wide-lean`'s decode, moe/w4a8_lean.cuh,
// issues both blocks' loads before its first store).
__device__ __forceinline__ void w4a8_decode_unit_at(u32 lut, const W4Unit& u, int t) {
#pragma unroll
  for (int b = 0; b < 2; ++b) w4a8_store_block(u, b, w4a8_load_block(lut, u, t, b));
}

// Sets what every shared-memory form's consumer context holds: the stages at `base`, the decoded
// slots, the tables, the stage ring, consumer c with this thread's t and lane, and sx_off, the
// thread's first token's X scale in a stage (the scales at `sx_first` of it; its second token's 32
// bytes on), before the box's shift (w4a8_sx_shift).
template <class Ctx, class Ring>
__device__ __forceinline__ void w4a8_consumer_ctx(Ctx& x, u32 base, u32 slots, u32 lut, const Ring& ring, int c,
                                                  u32 sx_first) {
  x.base = base;
  x.slots = slots;
  x.lut = lut;
  x.ring = ring;
  x.c = c;
  x.t = threadIdx.x % 128;
  x.lane = threadIdx.x % 32;
  x.sx_off = sx_first + 4u * (64 * c + 16 * (x.t / 32) + x.lane / 4);
}

// A K step's stage: its ring stage `s` (waited for), its decoded slot, and the thread's two token
// rows' X scales (staged with X; zero unless LIVE).
struct W4Stage {
  int s, slot;
  float2 sc;
};

// Waits for step `it`'s stage of the consumer context x's ring (stages STAGE_BYTES apart from
// x.base) and, LIVE, reads the thread's two X scales (x.sx_off, `shift` bytes into the box, and 32
// bytes on).
template <bool LIVE, int SLOTS, u32 STAGE_BYTES, class Ctx>
__device__ __forceinline__ W4Stage w4a8_stage_wait(const Ctx& x, u32 it, u32 shift) {
  W4Stage g;
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

// Where the tile's first X scale of K block kb sits in the stage's box, in bytes
// (the box starts at its index rounded down to 4: fp4_produce_pairs).
__device__ __forceinline__ u32 w4a8_sx_shift(int kb, int x_rows, int row0) {
  return 4u * ((u32)(kb * x_rows + row0) & 3u);
}

// fin += a * (X scale of the register's token row): rows 16w + g (sa) and + 8 (sb).
__device__ __forceinline__ void w4a8_promote(float (&fin)[64], float (&a)[64], float sa, float sb) {
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(a[i]);
#pragma unroll
  for (int i = 0; i < 64; ++i) fin[i] = fmaf(((i >> 1) & 1) ? sb : sa, a[i], fin[i]);
}

// The stores of consumer c's 64 tokens (tokens 64c .. 64c + 63 of the tile; thread t, lane lane):
// register i holds token 16w + g + 8((i>>1)&1) and B row 8(i>>2) + 2q + (i&1); the GEMM's B rows
// are its BN = 128 output columns, the SwiGLU's first 64 the gate and the next 64 the up rows of
// its BN = 64 columns (register i + 32).
template <int BN>
__device__ __forceinline__ void w4a8_store(int c, int t, int lane, const W4a8Args& p, const MoeTile& tile, int expert,
                                           const float (&fin)[64]) {
  out_t* y = static_cast<out_t*>(p.y);
  const int w = t / 32, g = lane / 4, q = lane % 4;
  const int halves = KILN_SWIGLU ? 2 : 1;
  const float* f0 = p.escale + (i64)expert * halves * p.n_pad + tile.n0;
  const float* f1 = f0 + p.n_pad;  // the SwiGLU's up rows
  // The factors and routing weights loaded before the stores that use them: the compiler cannot
  // move a load above a store it cannot prove apart, so loaded column by column they were BN / 8
  // round trips to L2 in a row, each tile (F12). In groups of G columns (the SwiGLU's 4: all 8
  // at once spilled), one round trip a group. Columns up to n0 + BN are inside n_pad (a multiple
  // of 128): the factors are read whole, padding included, and used below N only.
  constexpr int G = KILN_SWIGLU ? BN / 16 : BN / 8;
  float rt[2] = {1.0f, 1.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int tok = 64 * c + 16 * w + g + 8 * h;
    if (KILN_SWIGLU && p.route != nullptr && tok < tile.valid_rows) rt[h] = p.route[(i64)tile.row0 + tok];
  }
#pragma unroll
  for (int j0 = 0; j0 < BN / 8; j0 += G) {
    float2 fa[G], fu[G];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      fa[j] = *reinterpret_cast<const float2*>(f0 + 8 * (j0 + j) + 2 * q);
      if constexpr (KILN_SWIGLU) fu[j] = *reinterpret_cast<const float2*>(f1 + 8 * (j0 + j) + 2 * q);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int tok = 64 * c + 16 * w + g + 8 * h;
      if (tok >= tile.valid_rows) continue;
      const i64 row = (i64)tile.row0 + tok;
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const int col = 8 * (j0 + j) + 2 * q, i = 4 * (j0 + j) + 2 * h;
        if (tile.n0 + col >= p.n) continue;
        float v0 = fin[i] * fa[j].x, v1 = fin[i + 1] * fa[j].y;
        if constexpr (KILN_SWIGLU) {
          v0 = silu_tanh(v0) * fin[i + 32] * fu[j].x * rt[h];
          v1 = silu_tanh(v1) * fin[i + 33] * fu[j].y * rt[h];
        }
        fp4_store2(y, p.ldy, p.n, row, tile.n0 + col, v0, v1);
      }
    }
  }
}
