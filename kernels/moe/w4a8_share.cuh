// `KILN_W4A8_FORM=wide-share` (ledger F230): in a 192-token tile whose rows leave a consumer without
// tokens, that consumer decodes, and the decode's 512 32-blocks a stage are spread so that no warp
// both decodes a whole unit and promotes and issues a batch.
//
// Why: `wide-lean`'s step (~1,355 cycles against 768 of tensor work) is the decoding consumers' chain
// (decode ~600 cycles, meet, promote, issue; ncu, F190's section), and half of the 192-token tiles at
// E256 32,768 rows hold 65-128 rows: consumer 2 has no tokens there and only waits at each meet
// (12.5 % of the samples), while consumers 0 and 1 decode a unit each and then promote and issue.
// Here, by the tile's live consumers L (those with tokens):
//   L = 3: consumer c < 2 decodes atom c's unit (both blocks), as `wide-lean` does;
//   L = 2: consumer 2 decodes atom 1's unit; consumers 0 and 1 one 32-block each of atom 0's unit
//          (block c): each live chain is one block's decode, a promotion and an issue;
//   L = 1: consumers 1 and 2 decode atoms 0 and 1; consumer 0 only promotes and issues.
// The block split keeps whole 32-blocks (one code load, one table, two 16-byte stores), unlike
// F61's half-blocks, whose extra loads and addressing lost; the stores stay bank-conflict free
// (a block's two chunks of four consecutive rows are eight distinct swizzled chunks).
#pragma once
#include "moe/w4a8_lean.cuh"

// What a consumer decodes of each stage in a tile: atom `atom`'s unit for its thread, its blocks
// (bit b: block b; 0: nothing).
struct W4Share {
  int atom, blocks;
};

// The share of consumer c in a tile of `valid_rows` tokens (consumers of 64 tokens, three a tile).
__device__ __forceinline__ W4Share w4a8_share(int c, int valid_rows) {
  const int live = valid_rows > 128 ? 3 : valid_rows > 64 ? 2 : 1;
  if (live == 3) return {c, c < 2 ? 3 : 0};
  if (live == 2) return c < 2 ? W4Share{0, 1 << c} : W4Share{1, 3};
  return c == 0 ? W4Share{0, 0} : W4Share{c - 1, 3};
}

// One 32-block (B) of the thread's unit at `l` in the stage at `stage`, decoded into the slot at
// `slot`: its loads (the unit's table offsets, the block's code words), its table, then its two
// 16-byte stores, as w4a8_lean_store writes block B.
template <int B>
__device__ __forceinline__ void w4a8_lean_block(u32 stage, u32 lut, u32 slot, const W4Lane& l) {
  u32 w[4], t0, t1;
  const u32 offs = w4a8_lean_offs(stage, l);
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "r"(stage + l.codes + 2048u * B));
  const u32 toff = (B ? offs >> 8 : offs) & LUT_MASK;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(t0), "=r"(t1) : "r"(lut + toff));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const W4Bytes p = w4a8_word_lean(w[2 * h], t0, t1), q = w4a8_word_lean(w[2 * h + 1], t0, t1);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(slot + (l.dst ^ (32u * B + 16u * h))), "r"(p.lo),
                 "r"(p.hi), "r"(q.lo), "r"(q.hi)
                 : "memory");
  }
}

// The share's decode of the stage at `stage` into the slot at `slot` (nothing for blocks 0);
// returns whether this thread wrote the slot (then it fences before the meet).
__device__ __forceinline__ bool w4a8_share_decode(u32 stage, u32 lut, u32 slot, const W4Lane& l, int blocks) {
  if (blocks == 3) {
    W4Codes a;
    const u32 offs = w4a8_lean_offs(stage, l);
    w4a8_lean_words(a, stage, l);
    w4a8_lean_tables(a, lut, offs);
    w4a8_lean_store(a, slot, l);
  } else if (blocks == 1) {
    w4a8_lean_block<0>(stage, lut, slot, l);
  } else if (blocks == 2) {
    w4a8_lean_block<1>(stage, lut, slot, l);
  }
  return blocks != 0;
}
