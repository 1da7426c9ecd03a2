// Gathered X rows for the MoE layer's gate/up GEMM (KILN_GATHER = 1): row r of the expert-sorted
// order reads X row row_map[r] (its token), so no gathered copy of X is ever written. Each row is
// one TMA load of a 64 x 1 box (128 bytes, 128B swizzle) into the tile's row-r slot. TMA's 128B
// swizzle is a function of the shared-memory address (16-byte chunk bits 4-6 XOR row bits 7-9),
// so a one-row box at (1024-aligned tile) + 128 r lands exactly where a box of the whole tile
// would have put that row, which is what the wgmma descriptors read. The producer warp's 32 lanes
// issue the loads (lane l takes rows l, l + 32, ...), lane 0 arms the stage first; the stage's
// expect_tx counts 128 bytes for every valid row (out-of-range coordinates are zero-filled and
// still count, so a bad index never hangs the ring).
#pragma once
#include "common/tma.cuh"

template <int SLOTS>
struct GatherRows {
  int src[SLOTS];  // X row of tile row lane + 32 i
  int rows;        // valid rows of the tile (rows past them are not loaded)

  // The X rows of tile rows [0, rows) from row_map[row0 ...] (every lane of the warp).
  __device__ __forceinline__ void load(const int* row_map, int row0, int valid, int lane) {
    rows = min(valid, 32 * SLOTS);
#pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
      const int r = lane + 32 * i;
      src[i] = r < rows ? row_map[row0 + r] : 0;
    }
  }

  // Loads K block k0 of this lane's rows: tile row r to shared address dst(r).
  template <class Dst>
  __device__ __forceinline__ void issue(const TmaMap* map, u32 bar, int k0, int lane, const Dst& dst) const {
#pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
      const int r = lane + 32 * i;
      if (r < rows) tma_load_2d(dst(r), map, bar, k0, src[i]);
    }
  }
};
