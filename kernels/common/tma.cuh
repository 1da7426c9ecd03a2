// TMA (sm_90): tensor-map tiles copied from global to shared memory, completing on an mbarrier.
// The map is built on the host (src/device/tma.rs) and passed by value as a __grid_constant__
// kernel parameter; instructions take its generic address.
#pragma once
#include "common/types.cuh"

// The 128-byte CUtensorMap, declared here because device code includes no toolkit headers.
struct alignas(64) TmaMap {
  u64 opaque[16];
};

__device__ __forceinline__ void tma_prefetch(const TmaMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// Loads the box at element coordinates (c0 innermost, c1) into shared address `dst` (128-byte
// aligned; 1024-byte aligned for 128B swizzle) and counts its bytes on `bar`. Out-of-bounds
// elements are zero-filled and still counted.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// As tma_load_2d, but the box lands at `dst` in every CTA of the cluster whose bit is set in
// `cta_mask`, and completes bytes on the barrier at `bar`'s offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// Generic-proxy writes to shared memory (st.shared, stmatrix) become visible to the async proxy
// (a TMA store reading them). Every writing thread executes it, then a barrier, then the store.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Stores the box at shared address `src` (128-byte aligned; 1024 for 128B swizzle) to the
// element coordinates (c0 innermost, c1) of the map's tensor. Elements outside the tensor are
// not written. Asynchronous: commit with tma_store_commit(), and wait before reusing `src`.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<u64>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}

// As tma_store_2d, but each element is added to the tensor's (in the map's element type, f32
// or 16-bit), atomically per element: C += the box. Same completion, same dropped elements.
__device__ __forceinline__ void tma_reduce_add_2d(const TmaMap* map, u32 src, int c0, int c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<u64>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}

// Closes the issuing thread's pending bulk stores into one group.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits (in the issuing thread) until at most N of its groups still read shared memory: their
// source buffers may then be rewritten.
template <int N> __device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until at most N of the issuing thread's groups are incomplete (writes to global done).
template <int N> __device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
