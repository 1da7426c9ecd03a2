// The attention backward's dQ accumulation, shared by its main kernels (bwd_fa2_mma_sync.cu,
// bwd_fa3_wgmma.cu): pairs of fp32 partials added into the global accumulator, and the acquire
// load of the deterministic mode's per-(head, query block) counters.
#pragma once
#include "common/types.cuh"

// acc[0] += a, acc[1] += b in global memory, each atomically (acc 8-byte aligned): one vector
// reduction on sm_90, half the atomic instructions of two.
__device__ __forceinline__ void red_add2(float* acc, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(acc), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(acc, a);
  atomicAdd(acc + 1, b);
#endif
}

// A counter read at GPU scope that orders this thread's later accesses after it.
__device__ __forceinline__ u32 ld_acquire(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A counter bumped with release semantics at GPU scope: this thread's earlier writes (and, after
// fence_proxy_async_global, its completed bulk adds) are seen by whoever reads the new value
// with acquire (the dQ writer's counters, bwd_dq_tile.cuh; bwd_fa3_d256.cu's ordered reduces).
__device__ __forceinline__ void red_release_add(u32* p, u32 v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Orders this thread's generic-proxy and async-proxy accesses to global memory (the counter's
// acquire before a bulk add; a completed bulk add before the release).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
