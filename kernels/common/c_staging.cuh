// The TMA-store epilogue's staging writes: one chunk of a consumer's 64-row accumulator tile
// (wgmma m64nN f32 fragment: register i of lane l in warp w holds row 16w + l/4 + 8((i>>1)&1),
// column 8(i>>2) + 2(l%4) + (i&1)) into a 1024-aligned 8 KB buffer of 64 rows x 128 bytes in the
// 128B swizzle a TMA store map with CU_TENSOR_MAP_SWIZZLE_128B reads. A chunk is 64 columns of
// 16-bit C or 32 of f32 C; `ch` is its index in the tile. store_staged_chunk is the sequence
// around the staging that sends a chunk to C by TMA.
#pragma once
#include "common/mbarrier.cuh"
#include "common/mem_ops.cuh"
#include "common/stmatrix.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"

// One chunk out through staging buffer `buf`, by one warpgroup (128 threads on named barrier
// `bar`, `leader` its first thread). The warpgroup alternates two buffers, so the bulk group
// two chunks back is the last one reading `buf`: the leader waits for it, the warpgroup writes
// the chunk (`stage()`), makes the writes visible to the async proxy, and the leader sends it
// to (c0, c1) of `map` in a group of its own. `accumulate` (beta == 1) adds it to C there
// instead of overwriting C (TMA's reduce-add: C is not read by the kernel).
template <class Stage>
__device__ __forceinline__ void store_staged_chunk(const TmaMap* map, u32 buf, u32 bar, bool leader, int c0, int c1,
                                                   bool accumulate, Stage stage) {
  if (leader) tma_store_wait_read<1>();
  named_barrier_sync(bar, 128);
  stage();
  fence_proxy_async_shared();
  named_barrier_sync(bar, 128);
  if (leader) {
    if (accumulate) tma_reduce_add_2d(map, buf, c0, c1);
    else tma_store_2d(map, buf, c0, c1);
    tma_store_commit();
  }
}

// 16-bit C: pair(J, x) is the x-th 16-bit pair of 16-column block J (accumulators 8J + 2x,
// 8J + 2x + 1). Block jj of the chunk is one stmatrix.x4 per warp: matrices (rows 0-7 | 8-15) x
// (cols 0-7 | 8-15) of the warp's 16 rows are pairs 0..3; lane l addresses row
// srow = 16w + (l & 15), 16-byte chunk 2jj + (l >> 4), stored at chunk ^ (row & 7): each 8x8
// matrix hits 8 distinct bank quads.
template <class Pair>
__device__ __forceinline__ void stage_chunk_16(u32 buf, int ch, int srow, int lane, Pair pair) {
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    const int J = 4 * ch + jj;
    const u32 chunk = 2 * jj + (lane >> 4);
    stmatrix_x4(buf + swizzle128_offset(srow, chunk), pair(J, 0), pair(J, 1), pair(J, 2), pair(J, 3));
  }
}

// f32 C: val(i) is accumulator i, scaled. 8-column group J = 4 ch + jj: the lane's two columns
// 2 (l % 4) of rows 16w + l/4 (accumulators 4J, 4J + 1) and 8 below (4J + 2, 4J + 3), 8 bytes
// each, in 16-byte chunk 2jj + (l % 4) / 2 of the 128-byte row, swizzled. A warp's 8 rows share
// bank groups in pairs: two wavefronts for its 256 bytes, the least there can be.
template <class Val>
__device__ __forceinline__ void stage_chunk_f32(u32 buf, int ch, int w, int lane, Val val) {
  const int frow = 16 * w + lane / 4;
  const u32 half = 8u * (lane & 1);
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    const int J = 4 * ch + jj, chunk = 2 * jj + ((lane & 3) >> 1);
    st_shared_f2(buf + swizzle128_offset(frow, chunk) + half, val(4 * J), val(4 * J + 1));
    st_shared_f2(buf + swizzle128_offset(frow + 8, chunk) + half, val(4 * J + 2), val(4 * J + 3));
  }
}
