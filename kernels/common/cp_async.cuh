// cp.async (sm_80+): asynchronous 16- and 4-byte global-to-shared copies, zero-filling what is
// not read, in commit groups that a thread waits for or completing on an mbarrier. Shared
// destinations are 32-bit shared-window addresses (smem_u32) and sources aligned to the copy's
// size.
#pragma once
#include "common/types.cuh"

// Copies the first src_bytes (0..16) of the 16 bytes at src and zero-fills the rest (src is not
// read when src_bytes is 0), with an L2 prefetch hint of 128 bytes.
__device__ __forceinline__ void cp_async16_zfill(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// Copies 16 bytes, all in range, with an L2 prefetch hint of 128 bytes.
__device__ __forceinline__ void cp_async16_full(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// As cp_async16_zfill without the L2 hint, and ordered as a memory access for the compiler (the
// single-warpgroup wgmma kernel, gemm/wgmma_cp_async.cu).
__device__ __forceinline__ void cp_async16_zfill_nohint(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most N of this thread's groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies 4 bytes (src_bytes 4) or zero-fills them (0, src not read): one float (a scale, a
// statistic) at a time.
__device__ __forceinline__ void cp_async4_zfill(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// Arrives on the mbarrier at `bar` once every cp.async this thread issued before has landed,
// without raising its pending count (the barrier's init count includes this arrival).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// The first n (0..8) 2-byte elements at src (any 2-byte alignment) into the 16-byte chunk at dst,
// the rest zero: the replacement of cp_async16_zfill for rows off 4 bytes (mma_sync.cu's
// KILN_ELEM_LOADS, cp_async_tile.cuh's 2-byte copies). src is not read when n == 0.
__device__ __forceinline__ void copy_elems16(u32 dst, const void* src, int n) {
  const u16* e = static_cast<const u16*>(src);
  u32 w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32 lo = 2 * j < n ? (u32)e[2 * j] : 0u;
    const u32 hi = 2 * j + 1 < n ? (u32)e[2 * j + 1] : 0u;
    w[j] = lo | (hi << 16);
  }
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
}
