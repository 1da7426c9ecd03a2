// GEMM epilogues: alpha/beta scaling and conversion to the output type. With beta == 0 the old C
// is never read (BLAS semantics), so C may hold anything, NaN included.
#pragma once
#include "common/types.cuh"

template <class OutT>
__device__ __forceinline__ void store_scaled(OutT* c, i64 idx, float acc, float alpha, float beta) {
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * to_float(c[idx]);
  c[idx] = from_float<OutT>(v);
}
