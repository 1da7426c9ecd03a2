// stmatrix (sm_90): a warp stores 8x8 matrices of 16-bit elements to shared memory. Each thread
// holds one 32-bit register (two elements) per matrix in the mma fragment layout: lane l has
// row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1. Lanes 8j .. 8j + 7 give the 16-byte-aligned
// shared addresses of rows 0..7 of matrix j.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
