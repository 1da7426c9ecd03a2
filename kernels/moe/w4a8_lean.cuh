// The decode of `KILN_W4A8_FORM=wide-lean` (ledger F122; `auto`'s SwiGLU form from F150): a
// decoding thread's unit of a stage (row t / 2 of atom c, k 64 (t % 2) .. + 63, two 32-blocks) as
// w4a8_smem.cuh decodes it, all its shared loads before its first store (F91's `wide-first`,
// deleted), with fewer instructions in its chain:
//
// - its addresses from its place (W4Lane, once a tile), not from the thread
//   index re-read every step (ncu of `wide-first`, F120's early call: an S2R and its dependents,
//   ~60 cycles of a decoding warp's ~1,400-cycle step);
// - seven operations a word of eight codes instead of eight: one mask of both halves' selector
//   nibbles (prmt reads only its selector's low 16 bits, so the high half is a shift of the same
//   mask).
//
// F121 (`wide-ahead`) issued these loads a step earlier, before the promotion: 12 % more
// instructions and an earlier wait for the stage, +4 % (deleted).
#pragma once
#include "moe/w4a8_args.cuh"

// A decoding thread's constant offsets, once a tile: its code words (block 0; block 1 2 KB on) and
// its row's two table offsets in a stage's atom c (from the stage's start, after `x_bytes` of X),
// and its row's first chunk in a decoded slot (128B-swizzled; the other three are XORs of it).
struct W4Lane {
  u32 codes, offs, dst;
};

__device__ __forceinline__ W4Lane w4a8_lane(u32 x_bytes, int c, int t) {
  W4Lane l;
  const u32 atom = x_bytes + (u32)c * W4A8_ATOM_BYTES;
  const int row = 64 * c + t / 2, hh = t % 2;
  l.codes = atom + 16u * t;
  l.offs = atom + W4A8_ATOM_CODES + 2u * t;  // row t / 2's four offsets, half t % 2
  l.dst = (u32)row * 128 + 16u * ((u32)(4 * hh) ^ (u32)(row & 7));
  return l;
}

// A unit's loads: both blocks' code words and tables.
struct W4Codes {
  u32 w[8], t[4];
};

// The table offsets of the unit in the stage at `stage`.
__device__ __forceinline__ u32 w4a8_lean_offs(u32 stage, const W4Lane& l) {
  u16 offs;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(offs) : "r"(stage + l.offs));
  return offs;
}

// The codes' loads of the unit in the stage at `stage`.
__device__ __forceinline__ void w4a8_lean_words(W4Codes& a, u32 stage, const W4Lane& l) {
#pragma unroll
  for (int b = 0; b < 2; ++b)
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.w[4 * b]), "=r"(a.w[4 * b + 1]), "=r"(a.w[4 * b + 2]), "=r"(a.w[4 * b + 3])
                 : "r"(stage + l.codes + 2048u * b));
}

// The two tables the offsets name (masked as w4a8_load_block masks them: aligned and inside the
// 16 tables whatever the weight bytes hold).
__device__ __forceinline__ void w4a8_lean_tables(W4Codes& a, u32 lut, u32 offs) {
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
__device__ __forceinline__ void w4a8_lean_store(const W4Codes& a, u32 slot, const W4Lane& l) {
  const u32 dst = l.dst;
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
