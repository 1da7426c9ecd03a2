// The decode of `KILN_W4A8_FORM=wide-ahead` (ledger F121): a decoding thread's unit of a stage (row
// t / 2 of atom c, k 64 (t % 2) .. + 63, two 32-blocks) as w4a8_smem.cuh decodes it, split so that
// its shared loads can be issued a step before its permutes and stores.
//
// Why: ncu of `wide-first` (F120's early call) put a decoding warp's step at ~1,400 cycles, ~half
// of it in the decode, where the two decoding warps of a scheduler wait together on three
// dependent latencies in a row: the thread index (S2R, re-read every step for the unit's
// addresses), the table offsets' LDS.U16, then the tables' LDS.64. Here the addresses are the
// thread's constants (W4Lane, once per launch), and the offsets, codes and tables of stage j + 1
// are loaded while the thread waits for its batch j - 1 and promotes it, so the decode of j + 1
// after the issue of j starts on registers.
//
// A word's eight codes take seven operations instead of eight: one mask of both halves' selector
// nibbles (prmt reads only its selector's low 16 bits, so the high half is a shift of the same
// mask).
#pragma once
#include "moe/w4a8_args.cuh"

// A decoding thread's place: consumer c, thread t (one register kept across the K loop; the
// offsets below are a few operations each, issued off the chain with the loads).
struct W4Lane {
  u32 ct;  // 128 c + t
  __device__ __forceinline__ u32 atom() const { return (ct / 128) * W4A8_ATOM_BYTES; }
  __device__ __forceinline__ u32 t() const { return ct % 128; }
  // its code words (block 0; block 1 2 KB on) and its row's two table offsets in the stage's atom,
  // after `x_bytes` of X
  __device__ __forceinline__ u32 codes(u32 x_bytes) const { return x_bytes + atom() + 16u * t(); }
  __device__ __forceinline__ u32 offs(u32 x_bytes) const { return x_bytes + atom() + W4A8_ATOM_CODES + 2u * t(); }
  // its row's first chunk in a decoded slot (128B-swizzled; the other three are XORs of it)
  __device__ __forceinline__ u32 dst() const {
    const u32 row = 64u * (ct / 128) + t() / 2;
    return row * 128 + 16u * ((4u * (t() % 2)) ^ (row & 7));
  }
};

__device__ __forceinline__ W4Lane w4a8_lane(int c, int t) { return {128u * c + t}; }

// A unit's loads: both blocks' code words and tables.
struct W4Ahead {
  u32 w[8], t[4];
};

// The table offsets of the unit in the stage at `stage`.
__device__ __forceinline__ u32 w4a8_ahead_offs(u32 stage, const W4Lane& l, u32 x_bytes) {
  u16 offs;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(offs) : "r"(stage + l.offs(x_bytes)));
  return offs;
}

// The codes' loads of the unit in the stage at `stage`.
__device__ __forceinline__ void w4a8_ahead_words(W4Ahead& a, u32 stage, const W4Lane& l, u32 x_bytes) {
#pragma unroll
  for (int b = 0; b < 2; ++b)
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.w[4 * b]), "=r"(a.w[4 * b + 1]), "=r"(a.w[4 * b + 2]), "=r"(a.w[4 * b + 3])
                 : "r"(stage + l.codes(x_bytes) + 2048u * b));
}

// The two tables the offsets name (masked as w4a8_load_block masks them: aligned and inside the
// 16 tables whatever the weight bytes hold).
__device__ __forceinline__ void w4a8_ahead_tables(W4Ahead& a, u32 lut, u32 offs) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const u32 toff = (b ? offs >> 8 : offs) & LUT_MASK;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(a.t[2 * b]), "=r"(a.t[2 * b + 1]) : "r"(lut + toff));
  }
}

__device__ __forceinline__ u32 w4a8_prmt(u32 t0, u32 t1, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(t0), "r"(t1), "r"(sel));
  return r;
}

// Word w's eight e4m3 bytes as two words (codes 0..3, 4..7), as w4a8_bytes<0> and <1> give them.
struct W4Bytes {
  u32 lo, hi;
};
__device__ __forceinline__ W4Bytes w4a8_word_lean(u32 w, u32 t0, u32 t1) {
  const u32 m = w & 0x77777777u;
  return {w4a8_prmt(t0, t1, m) | (w & 0x80808080u), w4a8_prmt(t0, t1, m >> 16) | ((w << 4) & 0x80808080u)};
}

// The unit's e4m3 bytes into the slot at `slot` (block b's words 0-1 in chunk 4hh + 2b of the row,
// swizzled; 2-3 in the next).
__device__ __forceinline__ void w4a8_ahead_store(const W4Ahead& a, u32 slot, const W4Lane& l) {
  const u32 dst = l.dst();
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const u32 t0 = a.t[2 * b], t1 = a.t[2 * b + 1];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const W4Bytes p = w4a8_word_lean(a.w[4 * b + 2 * h], t0, t1), q = w4a8_word_lean(a.w[4 * b + 2 * h + 1], t0, t1);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(slot + (dst ^ (32u * b + 16u * h))), "r"(p.lo),
                   "r"(p.hi), "r"(q.lo), "r"(q.hi)
                   : "memory");
    }
  }
}
