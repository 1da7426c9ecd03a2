// A consumer's fp32 dQ partial staged as a swizzled tile and added by one TMA tensor reduce, the
// two steps that place no buffer of their own: bwd_dq_tile.cuh's DqTile (bwd_fa3_tma_dq.cu,
// bwd_fa3_lookahead.cu: a tile a warpgroup past the ring) and bwd_fa3_d256.cu's staged dQ (the
// tile in the ring stage the block has finished reading). Include after
// attention/bwd_fa3_block.cuh.
//   The tile is [64 rows][DQ_PIECES][32] fp32 per 64 query rows, the box of a rank-5 map over the
//   accumulator ([B, H, Sq, D/32, 32]: each row cut into 128-byte pieces, one swizzle row each;
//   128B swizzle), so the 64-bit stores of 8 rows x 4 lanes spread over the banks without
//   padding. Rows past Sq fall outside the map and are dropped.
#pragma once
#include "common/tma_5d.cuh"

constexpr int DQ_PIECES = QN / 32;  // 128-byte pieces of a staging row (dim 1 of the map)

// Rows 64hh + krow, + 8 of dq (a consumer's m64 partials, H halves of 64 query rows; register i:
// row + 8·((i >> 1) & 1), column 8·(i >> 2) + 2t + (i & 1)) into the tile at `tile` (1024-byte
// aligned), as boxes of BP pieces (the map's dim 1): box g = x / (32·BP) holds columns 32·BP·g ..,
// each 64-row half of it 64·BP·128 bytes on from the last; in a box, row r, column x is in
// 128-byte piece r·BP + (x/32) % BP, 16-byte chunk (x % 32)/4 of it, swizzled as the map's 128B.
// BP = DQ_PIECES (one box a half: bwd_dq_tile.cuh) puts rows DQ_PIECES pieces apart, so at QN 128
// the 8 rows of a store share two swizzle patterns (4 wavefronts where 2 carry the bytes); BP = 1
// (bwd_fa3_d256.cu) gives every row its own.
template <int H, int BP = DQ_PIECES> __device__ __forceinline__ void stage_dq_rows(const float (&dq)[H][QN / 2], int krow, int t, u32 tile) {
  static_assert(DQ_PIECES % BP == 0, "whole boxes of pieces");
#pragma unroll
  for (int hh = 0; hh < H; ++hh)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int j = 0; j < QN / 8; ++j) {
        const int g = j / 4 / BP, piece = (64 * hh + krow + 8 * hf) * BP + (j / 4) % BP, chunk = 2 * (j % 4) + t / 2;
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(tile + g * (MH * 64 * BP * 128) + swizzle128_offset(piece, chunk) + 8 * (t & 1)),
                     "f"(dq[hh][4 * j + 2 * hf]), "f"(dq[hh][4 * j + 2 * hf + 1]));
      }
}

// By the thread that adds, once every writer has fenced its rows: the tile at `tile` (rows m0 ..
// of head h, batch b, columns col0 ..; `halves` of 64 rows; boxes of BP pieces, as stage_dq_rows
// stores them) added into the accumulator through `map` (boxes [64 rows][BP][32]), a reduce per
// box and 64 rows (NH halves at most; a half that starts past Sq is not issued), as one bulk group.
template <int BP = DQ_PIECES, int NH = MH>
__device__ __forceinline__ void reduce_dq_tile(const TmaMap* map, u32 tile, int sq, int b, int h, int m0, int col0, int halves) {
#pragma unroll
  for (int g = 0; g < DQ_PIECES / BP; ++g)
#pragma unroll
    for (int hh = 0; hh < NH; ++hh)
      if (hh < halves && m0 + 64 * hh < sq)
        tma_reduce_add_5d(map, tile + g * (NH * 64 * BP * 128) + hh * (64 * BP * 128), 0, col0 / 32 + g * BP, m0 + 64 * hh, h, b);
  tma_store_commit();
}
