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
