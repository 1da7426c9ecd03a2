// Bulk copy (sm_90): a contiguous run of bytes from global to shared memory without a tensor map,
// completing on an mbarrier like a TMA tile (the bytes count towards the barrier's expect_tx).
#pragma once
#include "common/types.cuh"

// Copies `bytes` (a multiple of 16) from global `src` (16-byte aligned) to shared `dst`
// (16-byte aligned) and counts them on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               :
               : "r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
