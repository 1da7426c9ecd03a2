// The fuzz's GEMM reference and comparison, with no tensor cores and no vendor library: a plain
// fp32 tiled GEMM over any layout, leading dimensions, alpha and beta, and a pass that compares a
// kernel's output with it on the GPU, so that problems of any size are checked in full.
#include "common/types.cuh"

// dtype codes as DType::code: 0 bf16, 1 f16, 2 f32.
__device__ __forceinline__ float load_elem(const void* p, i64 i, int dtype) {
  if (dtype == 0) return to_float(((const bf16*)p)[i]);
  if (dtype == 1) return to_float(((const f16*)p)[i]);
  return ((const float*)p)[i];
}

constexpr int TILE = 64, KT = 16, THREADS = 256, PER = TILE / 16;

// ref[m, n] (packed, m x n) = alpha * sum_k A[m, k] B[k, n] + beta * C[m, n], with A[m, k] at
// a[m * a_sm + k * a_sk], B[k, n] at b[k * b_sk + n * b_sn], C[m, n] at c[m * ldc + n]; C is not
// read when beta is 0 (a kernel under test may not read it either, so it can hold poison).
extern "C" __global__ void __launch_bounds__(THREADS)
    gemm_reference(const void* __restrict__ a, const void* __restrict__ b,
                   const void* __restrict__ c, float* __restrict__ ref, int m, int n, int k,
                   i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 ldc, float alpha, float beta,
                   int in_dtype, int out_dtype) {
  __shared__ float as[KT][TILE + 1];
  __shared__ float bs[KT][TILE + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
  float acc[PER][PER] = {};
  for (int k0 = 0; k0 < k; k0 += KT) {
    // The contiguous index runs fastest across threads, so that the loads coalesce.
    for (int e = threadIdx.x; e < KT * TILE; e += THREADS) {
      const int kk = a_sk == 1 ? e % KT : e / TILE, mm = a_sk == 1 ? e / KT : e % TILE;
      const int gm = m0 + mm, gk = k0 + kk;
      as[kk][mm] = gm < m && gk < k ? load_elem(a, gm * a_sm + gk * a_sk, in_dtype) : 0.0f;
    }
    for (int e = threadIdx.x; e < KT * TILE; e += THREADS) {
      const int kk = b_sn == 1 ? e / TILE : e % KT, nn = b_sn == 1 ? e % TILE : e / KT;
      const int gn = n0 + nn, gk = k0 + kk;
      bs[kk][nn] = gn < n && gk < k ? load_elem(b, gk * b_sk + gn * b_sn, in_dtype) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      float af[PER], bf[PER];
#pragma unroll
      for (int i = 0; i < PER; ++i) af[i] = as[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < PER; ++j) bf[j] = bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < PER; ++i)
#pragma unroll
        for (int j = 0; j < PER; ++j) acc[i][j] = fmaf(af[i], bf[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < PER; ++i)
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
      if (gm >= m || gn >= n) continue;
      float v = alpha * acc[i][j];
      if (beta != 0.0f) v += beta * load_elem(c, gm * ldc + gn, out_dtype);
      ref[(i64)gm * n + gn] = v;
    }
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Over C's c_elems = (m - 1) * ldc + n elements: in range, non-finite values (NaN poison left
// unwritten) are counted in counts[0], the others add (got - ref)^2 to sums[0]; ref^2 adds to
// sums[1]; in the ldc padding, any element whose bits are no longer the all-ones poison is
// counted in counts[1]. sums and counts start at zero.
extern "C" __global__ void __launch_bounds__(THREADS)
    gemm_compare(const void* __restrict__ got, const float* __restrict__ ref, u64 n, u64 ldc,
                 u64 c_elems, int out_dtype, double* __restrict__ sums, u64* __restrict__ counts) {
  double diff2 = 0.0, ref2 = 0.0;
  u64 bad = 0, outside = 0;
  const u64 stride = (u64)gridDim.x * THREADS;
  for (u64 i = (u64)blockIdx.x * THREADS + threadIdx.x; i < c_elems; i += stride) {
    const u64 row = i / ldc, col = i % ldc;
    if (col < n) {
      const float r = ref[row * n + col];
      const float v = load_elem(got, (i64)i, out_dtype);
      ref2 += (double)r * r;
      if (isfinite(v)) {
        const double d = (double)v - r;
        diff2 += d * d;
      } else {
        ++bad;
      }
    } else {
      const bool poison = out_dtype == 2 ? ((const u32*)got)[i] == 0xFFFFFFFFu
                                         : ((const u16*)got)[i] == 0xFFFFu;
      outside += !poison;
    }
  }
  diff2 = warp_sum(diff2);
  ref2 = warp_sum(ref2);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    bad += __shfl_xor_sync(0xffffffffu, bad, o);
    outside += __shfl_xor_sync(0xffffffffu, outside, o);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&sums[0], diff2);
    atomicAdd(&sums[1], ref2);
    if (bad) atomicAdd(&counts[0], bad);
    if (outside) atomicAdd(&counts[1], outside);
  }
}
