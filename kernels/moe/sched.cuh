// MoE scheduling shared by the grouped kernels: the argument block, the per-expert tables the
// moe_tile_prefix kernel writes (copied to shared memory at kernel start), the binary search from
// a global m-tile to its expert, and the grouped tile order. Mirrors src/ops/moe/schedule.rs.
#pragma once
#include "common/types.cuh"

// The argument block of the MoE GEMM kernels, laid out as `MoeArgs` in src/ops/moe/mod.rs.
struct MoeArgs {
  const int* sched;    // moe_tile_prefix's tables: prefix[E + 1], start[E], rows[E]
  void* y;             // output rows, in the row space of X, ldy elements apart
  const float* route;  // SwiGLU: per-row routing weight, or null
  i64 ldy;
  int experts, n, k;
  int tiles_n;
  int interleaved;  // SwiGLU: W1 and W3 interleaved in blocks of 128 rows of one tensor
  int group_m;      // m-tiles swept together in the grouped tile order (any value >= 1 is correct)
};

// Table layout (ints): m-tile prefix sums [0, E], then each expert's first row [E + 1, 2E + 1),
// then its row count [2E + 1, 3E + 1). Int 3E + 1 of the workspace (not copied to shared memory)
// is the tile counter of the dynamically scheduled kernels, zeroed by moe_tile_prefix; ints
// [3E + 2, 4E + 2) the expert at each table position (the identity unless moe_tile_prefix sorted
// the experts heaviest first; only the swap-AB kernel asks for that and reads them).
__device__ __forceinline__ int moe_table_ints(int experts) { return 3 * experts + 1; }

// Every thread of the block copies part of the tables; follow with a block barrier.
__device__ __forceinline__ void moe_load_tables(int* dst, const int* src, int experts) {
  const int n = moe_table_ints(experts);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// The expert owning global m-tile g: prefix[e] <= g < prefix[e + 1] (so never an empty expert).
// Needs 0 <= g < prefix[experts]. log2(E) steps in shared memory.
__device__ __forceinline__ int moe_find_expert(const int* prefix, int experts, int g) {
  int lo = 0, hi = experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= g) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Tile t of the grouped order over (global m-tiles, n-tiles): `group` m-tiles are swept column
// by column, then the next group, so concurrent CTAs share W tiles (and X rows) through L2.
__device__ __forceinline__ void moe_tile_coords(int t, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
  const int per_group = group * tiles_n;
  const int first = (t / per_group) * group;
  const int rows = min(tiles_m - first, group);
  const int r = t - (first / group) * per_group;
  tm = first + r % rows;
  tn = r / rows;
}

// One tile's place: its expert, the X row of its first row, and the rows of it that are real.
struct MoeTile {
  int expert, row0, valid_rows, n0;
};

__device__ __forceinline__ MoeTile moe_tile(const int* table, int experts, int t, int tiles_m, int tiles_n, int group, int bm,
                                            int bn) {
  int g, tn;
  moe_tile_coords(t, tiles_m, tiles_n, group, g, tn);
  const int e = moe_find_expert(table, experts, g);
  const int local = (g - table[e]) * bm;
  MoeTile r;
  r.expert = e;
  r.row0 = table[experts + 1 + e] + local;
  r.valid_rows = min(table[2 * experts + 1 + e] - local, bm);
  r.n0 = tn * bn;
  return r;
}
