// Warp-level tensor cores (sm_80+): ldmatrix to fill fragments from shared memory, and
// mma.sync.m16n8k16 with fp32 accumulation. Fragment layouts (g = lane / 4, t = lane % 4; each
// .b32 register holds two 16-bit values, the lower column/k first):
//   A (16x16, row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8, col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C/D (16x8 f32): d0,d1 (g, 2t..2t+1)  d2,d3 (g+8, 2t..2t+1)
#pragma once
#include "common/types.cuh"

// Four 8x8 b16 matrices: lanes 8j..8j+7 give the 16-byte-aligned shared addresses of the 8 rows of
// matrix j; register j of lane l receives row l/4, columns 2(l%4)..+1 of matrix j.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}

// As ldmatrix_x4, each matrix transposed: register j of lane l receives rows 2(l%4)..+1 of column
// l/4. Loads a K-by-MN tile stored MN-contiguous as the fragments of its transpose.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}

// d += a * b for one 16x8x16 tile; T is the input type (bf16 or f16), accumulation in fp32.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<bf16>(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<f16>(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
