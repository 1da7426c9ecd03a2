// TMA (sm_90), rank 3: one box of a 3D tensor map (e.g. weights [E, N, K], K innermost) copied
// into shared memory, completing on an mbarrier. The host map is built by src/ops/moe/tma3d.rs.
// Out-of-bounds elements (past N or K of one expert) are zero-filled and still counted.
#pragma once
#include "common/tma.cuh"

// Loads the box at element coordinates (c0 innermost, c1, c2) into shared address `dst`
// (1024-byte aligned for 128B swizzle) and counts its bytes on `bar`.
__device__ __forceinline__ void tma_load_3d(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// As tma_load_3d, into the same shared address of every CTA of the cluster in `cta_mask`,
// counting the bytes on each one's barrier at `bar` (its own offset).
__device__ __forceinline__ void tma_load_3d_multicast(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2,
                                                      u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
}
