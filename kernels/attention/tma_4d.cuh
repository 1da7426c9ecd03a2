// TMA (sm_90), rank 4: one box of a 4-D tensor map, e.g. attention's Q/K/V/O as [batch, heads,
// seq, dim] in either storage order (the map's strides say which), copied into or out of shared
// memory.
#pragma once
#include "common/tma.cuh"

// Rank-4 TMA load (e.g. [batch, heads, seq, dim] with dim innermost): the box at element
// coordinates (c0 innermost .. c3) into shared `dst` (1024-byte aligned for 128B swizzle),
// completing its bytes on `bar`. Out-of-bounds elements are zero-filled and still counted.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The same load multicast: the box lands at `dst` in every CTA of the cluster in `cta_mask` (bit
// i: rank i), each completing its bytes on its own barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_4d_multicast(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2, int c3, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], "
      "%7;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(cta_mask)
      : "memory");
}

// Rank-4 TMA store: the box at shared `src` (laid out as a load with the same map would leave it)
// to element coordinates (c0 innermost .. c3); elements outside the tensor are not written.
// Asynchronous: tma_store_commit(), then wait before reusing `src` (common/tma.cuh).
__device__ __forceinline__ void tma_store_4d(const TmaMap* map, u32 src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<u64>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
