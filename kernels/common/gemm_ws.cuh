// What the two warp-specialised GEMM kernels (gemm/wgmma_tma_ws.cu, cooperative, and
// gemm/wgmma_tma_ws_pingpong.cu) share: the launch extras and the grouped tile order. (Their
// register epilogue is common/wgmma_epilogue.cuh's, as the single-warpgroup kernels'.)
#pragma once
#include "common/types.cuh"

#ifndef KILN_GROUP_M
#define KILN_GROUP_M 8
#endif

// Per-launch extras beside GemmArgs (mirrors `Extras` in src/ops/gemm/wgmma_tma_ws.rs).
//   splits > 1 (split-K):
//   cluster tiles t < split_from are one unit each; the others are `splits` units each, unit
//   split_from + (t - split_from) * splits + sp taking K blocks
//   [sp * kblocks / splits, (sp + 1) * kblocks / splits). Each such unit writes its fp32 partial
//   tile to ws (in the accumulator fragment order, so no transposition), then counts itself on
//   its tile's counter; the unit that arrives last adds the other partials into its registers,
//   resets the counter to 0 for the next launch, and runs the epilogue. ws and counters are
//   indexed by split block tile: (t - split_from) * CLUSTER + rank.
//   sk_w > 0 (stream-K; single 128-row CTAs only, splits then ignored): tiles t < split_from are
//   whole units as above; the sk_w K blocks of the tiles from split_from on, laid end to end, are
//   cut into one contiguous range per CTA, CTA g taking [sk_start(g), sk_start(g + 1)). A range
//   covers the tail of one tile, whole tiles and the head of another; a tile whose K blocks lie
//   in several ranges is reduced as a split tile (partials, counter, last arriver), CTA g's
//   partial going to ws slot 2g (the tile its range starts in) or 2g + 1 (the tile it ends in),
//   its counter at t - split_from.
struct Extras {
  float* ws;
  u32* counters;
  int splits;
  int split_from;
  u32 sk_w;
};

// Tile t of the grouped order: KILN_GROUP_M tile-rows are swept column by column, then the next
// group. Mirrors `tile_coords` in src/ops/gemm/wgmma_tma_ws.rs.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = KILN_GROUP_M * tiles_n;
  const int group = t / per_group;
  const int first_m = group * KILN_GROUP_M;
  const int rows = min(tiles_m - first_m, KILN_GROUP_M);
  const int r = t - group * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}
