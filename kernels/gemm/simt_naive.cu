// GEMM, naive SIMT: one thread per output element, fp32 FMA over K straight from global memory.
// The slowest rung, kept as the simplest thing that is obviously right.
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"

extern "C" __global__ void __launch_bounds__(256) gemm_simt_naive(GemmArgs p) {
  const int n = blockIdx.x * 16 + (threadIdx.x % 16);
  const int m = blockIdx.y * 16 + (threadIdx.x / 16);
  if (m >= p.m || n >= p.n) return;
  const in_t* a = static_cast<const in_t*>(p.a);
  const in_t* b = static_cast<const in_t*>(p.b);
  float acc = 0.0f;
  for (int k = 0; k < p.k; ++k) {
    acc += to_float(a[a_offset<KILN_A_ROW>(m, k, p.lda)]) * to_float(b[b_offset<KILN_B_ROW>(k, n, p.ldb)]);
  }
  store_scaled(static_cast<out_t*>(p.c), (i64)m * p.ldc + n, acc, p.alpha, p.beta);
}
