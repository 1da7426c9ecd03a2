// The GEMM problem as every GEMM kernel receives it: C = alpha * op(A) * op(B) + beta * C.
// A is M x K, B is K x N, C is M x N row-major with leading dimension ldc. Layout defines:
// KILN_A_ROW = 1 when A is row-major (K contiguous), KILN_B_ROW = 1 when B is row-major (N contiguous).
#pragma once
#include "common/types.cuh"

// The dtype and layout defines; the FP8 GEMM's input types are KILN_FP8_A/B instead of KILN_IN.
#if (!defined(KILN_IN) && !defined(KILN_FP8_A)) || !defined(KILN_OUT) || !defined(KILN_A_ROW) || \
    !defined(KILN_B_ROW)
#error "KILN_IN (or KILN_FP8_A/B), KILN_OUT, KILN_A_ROW and KILN_B_ROW must be defined by the host"
#endif

struct GemmArgs {
  const void* a;
  const void* b;
  void* c;
  int m, n, k;
  i64 lda, ldb, ldc;
  float alpha, beta;
};

// Element offsets of A(m, k) and B(k, n) for a layout known at compile time.
template <bool ROW> __device__ __forceinline__ i64 a_offset(i64 m, i64 k, i64 lda) {
  return ROW ? m * lda + k : k * lda + m;
}
template <bool ROW> __device__ __forceinline__ i64 b_offset(i64 k, i64 n, i64 ldb) {
  return ROW ? k * ldb + n : n * ldb + k;
}
