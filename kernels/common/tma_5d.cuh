// TMA (sm_90), rank 5: a box of a 5-D tensor map stored from (or added from) shared memory. A
// rank-5 map lets one box cover a tile whose rows are wider than a swizzle span: a row split
// into 128-byte pieces (dim 0) with the pieces as dim 1, e.g. an fp32 [rows][64] tile as
// [rows][2][32], each 128-byte piece a swizzle row.
#pragma once
#include "common/tma.cuh"

// Adds the box at shared `src` (laid out as a load through the same map would leave it;
// 1024-byte aligned for 128B swizzle) into the tensor at element coordinates (c0 innermost ..
// c4), elementwise and atomically in L2 in the map's element type; elements outside the tensor
// are dropped. Asynchronous, in the issuing thread's bulk group: tma_store_commit(), then
// tma_store_wait_read() before rewriting `src`. Its writers fence it first
// (fence_proxy_async_shared, then a barrier).
__device__ __forceinline__ void tma_reduce_add_5d(const TmaMap* map, u32 src, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
                   reinterpret_cast<u64>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
