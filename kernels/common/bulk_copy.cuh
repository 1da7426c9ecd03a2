// Bulk copy (sm_90): a contiguous run of bytes between global and shared memory without a tensor
// map; into shared memory completing on an mbarrier like a TMA tile (the bytes count towards the
// barrier's expect_tx), out of it as a bulk group (common/tma.cuh's commit and waits).
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

// Asks L2 to fetch `bytes` (a multiple of 16) from global `src` (16-byte aligned), without waiting
// and without a destination: bytes in flight from DRAM that hold no shared memory.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// Adds `bytes` (a multiple of 16) of fp32 at shared `src` into global `dst` (both 16-byte
// aligned), each element atomically in L2: dst[i] += src[i]. Asynchronous, in the issuing
// thread's bulk group: tma_store_commit(), and tma_store_wait_read() before rewriting `src`.
// The writers of `src` fence it first (fence_proxy_async_shared, then a barrier).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
