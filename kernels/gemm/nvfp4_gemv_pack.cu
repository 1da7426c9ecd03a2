// NVFP4 codes from the standard layout into the GEMV layout (`KILN_FP4_GEMV=pack`'s codes; the
// host's pack_gemv_word in src/ops/fp4/nvfp4_gemv_pack.rs, bit for bit): only bits inside each
// 32-bit word move, so a row, its bytes and its scales stay where they were, and the copy may be
// in place. Code j of a word (bits 4j .. 4j + 3: m, e0, e1, sign) is half j % 2 of the GEMV's
// pair j / 2, whose bf16 bits are m, e0, e1 at 6, 7, 8 and the sign at 15 (+16 for the high
// half); the layout stores pair 1 rotated right by 6, pair 2 by 12 and pair 3's m, e0 and sign
// by 2 and its e1 by 10, so that the GEMV brings each back with one shift or rotation.
// A streaming kernel over 16-byte chunks, grid-stride; it runs once per weight, at load time.
// The pairs are adjacent from G30 on (G21; before, pair i was codes i and i + 4).
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

extern "C" __global__ void __launch_bounds__(256) nvfp4_gemv_pack(const u32x4* src, u32x4* dst, u64 n16) {
  for (u64 i = (u64)blockIdx.x * 256 + threadIdx.x; i < n16; i += (u64)gridDim.x * 256) {
    const u32x4 v = src[i];
    dst[i] = u32x4{gemv_word(v.x), gemv_word(v.y), gemv_word(v.z), gemv_word(v.w)};
  }
}
