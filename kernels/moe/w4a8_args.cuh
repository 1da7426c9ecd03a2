// What the forms of the W4A8 experts share (moe/fp4_experts_w4a8.cu and moe/fp4_experts_w4a8_wide.cu,
// the decoded weights in shared memory as wgmma's B): the argument block, the prepack's atom
// (src/ops/moe/fp4/w4a8.rs) and the e4m3 tables its block offsets name.
#pragma once
#include "common/fp8.cuh"
#include "common/types.cuh"
#include "moe/fp4_experts.cuh"

// The argument block, laid out as `W4a8Args` in src/ops/moe/fp4/kernel_w4a8.rs.
struct W4a8Args {
  const int* sched;
  void* y;
  const float* route;
  const float* escale;        // [E][halves][n_pad]: each weight row's 2^(c_ref - 127)
  const unsigned char* w;     // the W4A8 prepack
  const float* sx;            // X's 1x128 scales, M-major
  i64 ldy, expert_bytes;
  int experts, n, katoms, n_pad;
  int tiles_n, group_m, by_expert, x_rows;
};

// An atom: 64 weight rows x 128 k, 4096 bytes of codes, then each row's four block offsets.
constexpr u32 W4A8_ATOM_CODES = 4096, W4A8_ATOM_BYTES = W4A8_ATOM_CODES + 64 * 4;
constexpr int W4A8_U_MIN = -8, W4A8_LUTS = 15;
constexpr u32 LUT_MASK = 0x78u;  // a table's byte offset: 8 x (0..15); w4a8.rs's `table_offset`

// The e4m3 tables, written by threads 0..63 at shared address `lut` (`raw` is smem_raw's): byte m
// of table i < 15 is e2m1 magnitude m times 2^(i - 8), exact; table 15 is NaN, which no
// prepacked block names (the verify poisons unread experts with offset 120 so that a stray read
// turns into NaN).
__device__ __forceinline__ void w4a8_write_tables(unsigned char* smem_raw, u32 raw, u32 lut) {
  if (threadIdx.x < 16 * 4) {
    const int i = threadIdx.x / 4, m = 2 * (threadIdx.x % 4);
    // magnitudes m and m + 1 (m even): 0 and 0.5, 1 and 1.5, 2 and 3, 4 and 6
    const float lo = m == 0 ? 0.0f : (float)(1 << (m / 2 - 1)), hi = m == 0 ? 0.5f : 1.5f * lo;
    const float scale = __int_as_float((127 + i + W4A8_U_MIN) << 23);
    const u16 two = i == W4A8_LUTS ? 0x7F7F : fp8x2_encode<FP8_E4M3>(hi * scale, lo * scale);
    *reinterpret_cast<u16*>(smem_raw + (lut - raw) + 8 * i + m) = two;
  }
}

// The four e4m3 bytes of codes 0..3 (HI = 0) or 4..7 (HI = 1) of prepacked word w under the
// block's table (t0, t1): the magnitudes are nibbles 0..3 (HI: 4..7) with their top bits masked
// (a selector nibble's bit 3 is PRMT's sign-replicate mode), the signs at bits 8j + 7 (HI:
// 8j + 3, moved up by 4).
template <int HI>
__device__ __forceinline__ u32 w4a8_bytes(u32 w, u32 t0, u32 t1) {
  const u32 sel = (HI ? w >> 16 : w) & 0x7777u;
  const u32 sign = (HI ? w << 4 : w) & 0x80808080u;
  return __byte_perm(t0, t1, sel) | sign;
}

// The producer thread of every W4A8 form: fp4_produce_pairs with W4A8's K block (128 e4m3), X boxes
// of 32 rows and atoms. Per K block one stage of `rings`: the tile's BM X rows, the two weight atoms
// and (SX_BYTES > 0) the box of X's scales.
template <int STAGES, int BM, int BN, u32 STAGE_BYTES, u32 SX_BYTES>
__device__ __forceinline__ void w4a8_produce(const W4a8Args& p, const TmaMap* tma_x, const TmaMap* tma_sx,
                                             const MoeRings<STAGES>& rings, u32 base) {
  fp4_produce_pairs<STAGES, BM, BN, 128, 32, BM * 128, W4A8_ATOM_BYTES, STAGE_BYTES, SX_BYTES>(
      p, tma_x, rings.stages, rings.ring, rings.table, base, tma_sx);
}
