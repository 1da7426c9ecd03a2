// cp.async (sm_80+): asynchronous 16-byte global-to-shared copies with zero fill.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes, or zero-fills them when `valid` is false (src-size 0 reads nothing).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
