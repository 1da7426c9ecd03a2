// 4-bit expert weights (NVFP4, MXFP4) in the prepacked layout of src/ops/moe/fp4/prepack.rs, and
// their dequantisation to bf16 or f16 wgmma A fragments in registers.
//
// An atom is 64 weight rows x 64 k: 2048 bytes of e2m1 codes, thread t of the consumer
// warpgroup's 16 at t*16 (its A fragments of the atom's four k16 steps, word j for step j), then
// the block scales (NVFP4: [warp][row 16][k16 4] bytes; MXFP4: [warp][row 16][k32 2]). A word
// holds the 8 codes of registers a0..a3 of one m64nNk16 A fragment (a0 row g, a1 row g+8, a2
// row g k+8, a3 row g+8 k+8; low half the even k). Its bits are placed so that rotating the word
// left by MAG[p] puts pair p's magnitudes (e1 e0 m) at bits 8:6 and 24:22 of a bf16 pair and
// rotating by SIGN[p] puts its signs at bits 15 and 31: the pair's bf16 bits are then
// value x 2^-126 exactly (e = 0 lands on bf16's subnormals, which is e2m1's 0.5 m). For f16 the
// magnitudes go 3 bits higher (value x 2^-14). Two to four integer operations per pair.
//
// The stored scale byte is a multiplier, not the format's code: NVFP4's e4m3 scale s is stored
// as the bf16 of s x 2^118 (exponent - 236 in bits 7:3, mantissa in 2:0); MXFP4's e8m0 as
// s_code + 126 - c (c per expert, so that no multiplier overflows). Times the decoded pair the
// product is value x scale x 2^-8 (NVFP4) or x 2^-c (MXFP4), exact in bf16 and f16; the epilogue
// multiplies the fp32 sum by the per-expert factor that undoes it (and the NVFP4 tensor scale).
#pragma once
#include "common/types.cuh"

#if !defined(KILN_FP4)
#error "KILN_FP4 (0 NVFP4, 1 MXFP4) must be defined by the host"
#endif

constexpr u32 FP4_CODE_BYTES = 2048;
constexpr u32 FP4_SCALE_BYTES = KILN_FP4 == 0 ? 256 : 128;
constexpr u32 FP4_ATOM_BYTES = FP4_CODE_BYTES + FP4_SCALE_BYTES;
constexpr u32 FP4_SCALES_PER_ROW = FP4_SCALE_BYTES / 64;  // per row of an atom: 4 or 2

#if !defined(KILN_FP4_ROT)
#define KILN_FP4_ROT 0
#endif
constexpr bool kFp4Shift = !KILN_FP4_ROT;

// x rotated left by R where only bits at or above LOW are kept: unless KILN_FP4_ROT
// (`KILN_FP4_DECODE=rot`, the decode before 2026-11-29) a rotation that brings none of them
// round from the top (R <= LOW) is a plain left shift, written as a multiply by 2^R so that ptxas issues it on the FMA pipe
// (IMAD.SHL) rather than as the ALU's funnel shift. The profile of the 512-row decode (H200,
// d4f7f42) had the ALU pipe throttling the consumers (17 % of stall samples) with 5 funnel
// shifts and 6 logic ops a code word on it; 4 of the 5 shifts wrap nothing.
template <int R, int LOW>
__device__ __forceinline__ u32 fp4_shift(u32 x) {
  if constexpr (R == 0) {
    return x;
  } else if constexpr (kFp4Shift && R <= LOW) {
    u32 d;
    asm("mul.lo.u32 %0, %1, %2;" : "=r"(d) : "r"(x), "n"(1u << R));
    return d;
  } else {
    return __funnelshift_l(x, x, R);
  }
}

// Pair p (0..3) of a code word as a 16-bit pair of In, times 2^-126 (bf16) or 2^-14 (f16).
template <bool kBf16, int P>
__device__ __forceinline__ u32 fp4_decode_pair(u32 w) {
  constexpr int MAG = (P == 0 ? 0 : P == 1 ? 3 : P == 2 ? 6 : 9) + (kBf16 ? 0 : 3);
  constexpr int SGN = P == 0 ? 4 : P == 1 ? 3 : P == 2 ? 6 : 5;
  constexpr u32 MAG_MASK = kBf16 ? 0x01C001C0u : 0x0E000E00u, SIGN_MASK = 0x80008000u;
  constexpr int MAG_LOW = kBf16 ? 6 : 9, SIGN_LOW = 15;  // the masks' lowest bits
  const u32 m = fp4_shift<MAG, MAG_LOW>(w);
  if constexpr (MAG == SGN) {
    return m & (MAG_MASK | SIGN_MASK);
  } else {
    return (m & MAG_MASK) | (fp4_shift<SGN, SIGN_LOW>(w) & SIGN_MASK);
  }
}

// Scale bytes I and I + 1 of `x` as the two 16-bit halves (of In) of one word: the multipliers
// above, two per integer operation (the product below picks its half).
template <bool kBf16, int I>
__device__ __forceinline__ u32 fp4_multipliers(u32 x) {
  const u32 b = __byte_perm(x, 0, I | (4 << 4) | ((I + 1) << 8) | (4 << 12));  // [byte I, 0, byte I+1, 0]
  if constexpr (KILN_FP4 == 0) {
    // NVFP4: bf16 bits = byte * 16 + (236 << 7); f16 bits = byte * 128 + (12 << 10)
    return kBf16 ? b * 16u + 0x76007600u : b * 128u + 0x30003000u;
  } else {
    // MXFP4: bf16 exponent = byte; f16 exponent = byte - 224 (the host checked 225..254), which
    // is its low 5 bits: a mask, not a subtraction, whose borrow would cross into the other half
    // (a zero block's byte 0 stays 0)
    return kBf16 ? b * 128u : (b & 0x001F001Fu) * 1024u;
  }
}

// The pair `a` times half H of `m` in both lanes. The broadcast is an operand selector of the
// tensor-free half multiply (HMUL2 ... R.H0_H0), not an instruction.
template <bool kBf16, int H>
__device__ __forceinline__ u32 fp4_mul2(u32 a, u32 m) {
  u32 d;
  if constexpr (kBf16) {
    if constexpr (H == 0) {
      asm("{.reg .b16 l, h; .reg .b32 b; mov.b32 {l, h}, %2; mov.b32 b, {l, l}; mul.rn.bf16x2 %0, %1, b;}"
          : "=r"(d) : "r"(a), "r"(m));
    } else {
      asm("{.reg .b16 l, h; .reg .b32 b; mov.b32 {l, h}, %2; mov.b32 b, {h, h}; mul.rn.bf16x2 %0, %1, b;}"
          : "=r"(d) : "r"(a), "r"(m));
    }
  } else {
    if constexpr (H == 0) {
      asm("{.reg .b16 l, h; .reg .b32 b; mov.b32 {l, h}, %2; mov.b32 b, {l, l}; mul.rn.f16x2 %0, %1, b;}"
          : "=r"(d) : "r"(a), "r"(m));
    } else {
      asm("{.reg .b16 l, h; .reg .b32 b; mov.b32 {l, h}, %2; mov.b32 b, {h, h}; mul.rn.f16x2 %0, %1, b;}"
          : "=r"(d) : "r"(a), "r"(m));
    }
  }
  return d;
}

// One k16 step's A fragment {a0, a1, a2, a3} from its code word: rows g (a0, a2) times half H
// of `m_lo`, rows g + 8 (a1, a3) times half H of `m_hi`.
template <bool kBf16, int H>
__device__ __forceinline__ void fp4_scale_step(u32 w, u32 m_lo, u32 m_hi, u32 (&a)[4]) {
  a[0] = fp4_mul2<kBf16, H>(fp4_decode_pair<kBf16, 0>(w), m_lo);
  a[1] = fp4_mul2<kBf16, H>(fp4_decode_pair<kBf16, 1>(w), m_hi);
  a[2] = fp4_mul2<kBf16, H>(fp4_decode_pair<kBf16, 2>(w), m_lo);
  a[3] = fp4_mul2<kBf16, H>(fp4_decode_pair<kBf16, 3>(w), m_hi);
}

// The A fragments of one atom's four k16 steps for this thread (t: 0..127 in its warpgroup):
// a[j] is step j's {a0, a1, a2, a3}.
template <bool kBf16>
__device__ __forceinline__ void fp4_load_fragments(u32 atom, int t, u32 (&a)[4][4]) {
  u32 w0, w1, w2, w3;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3) : "r"(atom + t * 16));
  const int row = (t / 32) * 16 + (t % 32) / 4;  // row g of the warp's 16; row g + 8 is 8 further
  u32 s_lo, s_hi;                                 // the scale bytes of rows g and g + 8
  if constexpr (FP4_SCALES_PER_ROW == 4) {
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(s_lo) : "r"(atom + FP4_CODE_BYTES + row * 4));
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(s_hi) : "r"(atom + FP4_CODE_BYTES + (row + 8) * 4));
  } else {
    u16 lo, hi;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(lo) : "r"(atom + FP4_CODE_BYTES + row * 2));
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(hi) : "r"(atom + FP4_CODE_BYTES + (row + 8) * 2));
    s_lo = lo;
    s_hi = hi;
  }
  if constexpr (FP4_SCALES_PER_ROW == 4) {  // NVFP4: step j's scale is byte j, half j % 2 of word j / 2
    const u32 lo01 = fp4_multipliers<kBf16, 0>(s_lo), lo23 = fp4_multipliers<kBf16, 2>(s_lo);
    const u32 hi01 = fp4_multipliers<kBf16, 0>(s_hi), hi23 = fp4_multipliers<kBf16, 2>(s_hi);
    fp4_scale_step<kBf16, 0>(w0, lo01, hi01, a[0]);
    fp4_scale_step<kBf16, 1>(w1, lo01, hi01, a[1]);
    fp4_scale_step<kBf16, 0>(w2, lo23, hi23, a[2]);
    fp4_scale_step<kBf16, 1>(w3, lo23, hi23, a[3]);
  } else {  // MXFP4: step j's scale is byte j / 2, half j / 2
    const u32 lo = fp4_multipliers<kBf16, 0>(s_lo), hi = fp4_multipliers<kBf16, 0>(s_hi);
    fp4_scale_step<kBf16, 0>(w0, lo, hi, a[0]);
    fp4_scale_step<kBf16, 0>(w1, lo, hi, a[1]);
    fp4_scale_step<kBf16, 1>(w2, lo, hi, a[2]);
    fp4_scale_step<kBf16, 1>(w3, lo, hi, a[3]);
  }
}
