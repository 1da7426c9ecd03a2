// NVFP4 codes and scales from the standard layout into the GEMV layout (the host's gemv_layout
// in src/ops/fp4/nvfp4_gemv_pack.rs, bit for bit): the bits inside each 32-bit word placed for
// the GEMV's decode (pack_gemv_word), and the words and scales tiled (below). Code j of a word (bits 4j .. 4j + 3: m, e0, e1, sign) is half j % 2 of the GEMV's
// pair j / 2, whose bf16 bits are m, e0, e1 at 6, 7, 8 and the sign at 15 (+16 for the high
// half); the layout stores pair 1 rotated right by 6, pair 2 by 12 and pair 3's m, e0 and sign
// by 2 and its e1 by 10, so that the GEMV brings each back with one shift or rotation.
// The pairs are adjacent from G30 on (G21; before, pair i was codes i and i + 4); the words tiled
// from G61 on (before, rows as they were, and the copy in place).
#include "common/types.cuh"

// Where bit b of code j goes (the host's GEMV_BIT[4j + b]).
__device__ __forceinline__ constexpr int gemv_bit(int j, int b) {
  const int half = j % 2, pair = j / 2;
  const int target = (b == 3 ? 15 : 6 + b) + 16 * half;
  const int rot = pair == 0 ? 0 : pair == 1 ? 6 : pair == 2 ? 12 : b == 2 ? 10 : 2;
  return (target + 32 - rot) % 32;
}

__device__ __forceinline__ u32 gemv_word(u32 w) {
  u32 out = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int b = 0; b < 4; ++b) out |= ((w >> (4 * j + b)) & 1u) << gemv_bit(j, b);
  return out;
}

// The GEMV layout (the host's gemv_layout: tile_gemv_layout of pack_gemv_codes): in each
// [n, K] block of a [rows, K] matrix, a full 16-row tile holds its codes step by step (step s of
// 128 K: the tile's 16 rows x 64 bytes at 1,024 s from its first byte) and its scales likewise
// (16 rows x 8 bytes at 128 s), each code word through gemv_word; a partial last tile keeps its
// rows as they are. Bytes move between rows, so `dst` is another buffer than `src`. One thread a
// 16-byte chunk of codes or an 8-byte step of a row's scales, grid-stride; once per weight.
extern "C" __global__ void __launch_bounds__(256)
    nvfp4_gemv_layout(const u32x4* codes, const uint2* scales, u32x4* dcodes, uint2* dscales, u64 rows, u64 n, u64 k) {
  const u64 row_chunks = k / 32, row_steps = k / 128;  // a row's 16-byte code chunks, 8-byte scale steps
  const u64 n16 = rows * row_chunks, total = n16 + rows * row_steps;
  for (u64 i = (u64)blockIdx.x * 256 + threadIdx.x; i < total; i += (u64)gridDim.x * 256) {
    const bool code = i < n16;
    const u64 j = code ? i : i - n16, per_row = code ? row_chunks : row_steps;
    const u64 row = j / per_row, c = j % per_row, rb = row % n, r = rb % 16;
    const bool full = rb - r + 16 <= n;  // the row's tile is whole inside its block
    const u64 tile = (row - r) * per_row;  // the tile's first unit
    if (code) {
      // chunk c of the row: step c / 4, its 16 bytes c % 4; a step's tile region is 64 chunks
      const u64 to = full ? tile + 64 * (c / 4) + 4 * r + c % 4 : j;
      const u32x4 v = codes[j];
      dcodes[to] = u32x4{gemv_word(v.x), gemv_word(v.y), gemv_word(v.z), gemv_word(v.w)};
    } else {
      // step c's 8 scale bytes of the row; a step's tile region is 16 of them
      dscales[full ? tile + 16 * c + r : j] = scales[j];
    }
  }
}
