// The decode of `KILN_W4A8_FORM=wide-calc` (ledger F191; off by default): `wide-lean`'s decode
// (moe/w4a8_lean.cuh) with each 32-block's e4m3 table computed from its offset byte in registers
// instead of loaded from the 16 tables in shared memory.
//
// Why: a decoding thread's chain a step is two dependent rounds of shared loads (its offsets and
// codes, then the two tables the offsets name) before its permutes; ncu of `wide-lean` (F150,
// 2026-11-30 evening) put ~6 % of all samples on the first permute waiting for the tables, about
// a ninth of a decoding warp's ~1,355-cycle step. Computed, the tables cost two IMADs a block and
// the loads are one round.
//
// The arithmetic: table i (offset byte 8i, u = i - 8) holds e4m3 of the e2m1 magnitudes 0, 0.5,
// 1, 1.5 (word 0) and 2, 3, 4, 6 (word 1) times 2^u. Where all of them are normal in e4m3
// (u >= -5) and below 448 (u <= 6), i.e. tables 3..14, byte m is 0 for m = 0 and otherwise the
// u = 0 table's byte plus 8u (the exponent field): word 0 = 8i x 0x01010100 - 0x04081000, word 1
// = 8i x 0x01010101 + 0x0C080400 (no byte borrows or carries for 8i in 24..112; checked against
// w4a8.rs's table on the CPU: `the_computed_tables_are_the_kernels`). Tables 0..2 hold subnormals
// and table 15 is the NaN poison: a warp with any block naming one of those loads its tables as
// `wide-lean` does (the prepack names tables 0..2 only for blocks 2^11 below their row's largest).
#pragma once
#include "moe/w4a8_lean.cuh"

// Whether any lane of the (whole) warp passes p.
__device__ __forceinline__ bool w4a8_warp_any(bool p) {
  u32 r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n vote.sync.any.pred q, p, 0xffffffff;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"((u32)p));
  return r != 0;
}

// The unit's two tables from its offsets (`offs`, both blocks' bytes); true where a block names a
// table the arithmetic does not give (0..2 or 15), whose words are then not the table's.
__device__ __forceinline__ bool w4a8_calc_tables(W4Codes& a, u32 offs) {
  bool other = false;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const u32 toff = (b ? offs >> 8 : offs) & LUT_MASK;
    a.t[2 * b] = toff * 0x01010100u - 0x04081000u;
    a.t[2 * b + 1] = toff * 0x01010101u + 0x0C080400u;
    other |= toff - 24u > 88u;
  }
  return other;
}

// A decoding thread's unit of the stage at `stage` into the slot at `slot`: wide-lean's loads,
// permutes and stores with the tables computed (loaded by the whole warp where any lane's block
// names a table the arithmetic does not give).
//
// The three loads are volatile and the codes' come first: ptxas keeps volatile loads in program
// order, so the codes' loads are issued before the offsets' arithmetic waits (as plain loads, at
// the consumers' 160 registers it issued the codes' loads after the offsets had landed and the
// tables were computed, a second round of shared loads again).
__device__ __forceinline__ void w4a8_calc_decode(u32 stage, u32 lut, u32 slot, const W4Lane& l) {
  W4Codes a;
#pragma unroll
  for (int b = 0; b < 2; ++b)
    asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.w[4 * b]), "=r"(a.w[4 * b + 1]), "=r"(a.w[4 * b + 2]), "=r"(a.w[4 * b + 3])
                 : "r"(stage + l.codes + 2048u * b));
  u16 offs16;
  asm volatile("ld.volatile.shared.u16 %0, [%1];" : "=h"(offs16) : "r"(stage + l.offs));
  const u32 offs = offs16;
  if (w4a8_warp_any(w4a8_calc_tables(a, offs))) w4a8_lean_tables(a, lut, offs);
  w4a8_lean_store(a, slot, l);
}
