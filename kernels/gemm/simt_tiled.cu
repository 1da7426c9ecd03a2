// GEMM, tiled SIMT: a 128x128 block tile, K in steps of 16 through shared memory (as fp32), each of
// 256 threads holding an 8x8 accumulator; 16-byte global loads where the layout and alignment allow
// (KILN_VEC = 1), register double buffering of the next K tile. fp32 FFMA only: no tensor cores.
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"

#define BM 128
#define BN 128
#define BK 16

// Loads 8 consecutive elements along the contiguous dimension, zero outside [0, limit).
__device__ __forceinline__ void load8(float (&r)[8], const in_t* base, i64 off, int start, int limit) {
#if KILN_VEC
  if (start + 8 <= limit) {
    u32x4 v = *reinterpret_cast<const u32x4*>(base + off);
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      in_t lo, hi;
      lo.bits = (u16)(w[i] & 0xffff);
      hi.bits = (u16)(w[i] >> 16);
      r[2 * i] = to_float(lo);
      r[2 * i + 1] = to_float(hi);
    }
    return;
  }
#endif
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = (start + i < limit) ? to_float(base[off + i]) : 0.0f;
}

// Fetch this thread's 8 elements of the A tile (rows m0.., cols k0..) and B tile into registers.
// Row-major A: thread t takes row t/2, k (t%2)*8..+8. Column-major A: k t/16, rows (t%16)*8..+8.
__device__ __forceinline__ void fetch(const GemmArgs& p, int m0, int n0, int k0, float (&ra)[8], float (&rb)[8]) {
  const int t = threadIdx.x;
  const in_t* a = static_cast<const in_t*>(p.a);
  const in_t* b = static_cast<const in_t*>(p.b);
  if (KILN_A_ROW) {
    int m = m0 + t / 2, k = k0 + (t % 2) * 8;
    if (m < p.m) load8(ra, a, (i64)m * p.lda + k, k, p.k);
    else for (int i = 0; i < 8; ++i) ra[i] = 0.0f;
  } else {
    int k = k0 + t / 16, m = m0 + (t % 16) * 8;
    if (k < p.k) load8(ra, a, (i64)k * p.lda + m, m, p.m);
    else for (int i = 0; i < 8; ++i) ra[i] = 0.0f;
  }
  if (KILN_B_ROW) {
    int k = k0 + t / 16, n = n0 + (t % 16) * 8;
    if (k < p.k) load8(rb, b, (i64)k * p.ldb + n, n, p.n);
    else for (int i = 0; i < 8; ++i) rb[i] = 0.0f;
  } else {
    int n = n0 + t / 2, k = k0 + (t % 2) * 8;
    if (n < p.n) load8(rb, b, (i64)n * p.ldb + k, k, p.k);
    else for (int i = 0; i < 8; ++i) rb[i] = 0.0f;
  }
}

// Shared tiles are stored K-major: as[k][m], bs[k][n].
__device__ __forceinline__ void stash(float (*as)[BM], float (*bs)[BN], const float (&ra)[8], const float (&rb)[8]) {
  const int t = threadIdx.x;
  if (KILN_A_ROW) {
#pragma unroll
    for (int i = 0; i < 8; ++i) as[(t % 2) * 8 + i][t / 2] = ra[i];
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) as[t / 16][(t % 16) * 8 + i] = ra[i];
  }
  if (KILN_B_ROW) {
#pragma unroll
    for (int i = 0; i < 8; ++i) bs[t / 16][(t % 16) * 8 + i] = rb[i];
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) bs[(t % 2) * 8 + i][t / 2] = rb[i];
  }
}

extern "C" __global__ void __launch_bounds__(256) gemm_simt_tiled(GemmArgs p) {
  __shared__ __align__(16) float as[BK][BM];
  __shared__ __align__(16) float bs[BK][BN];
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  float ra[8], rb[8];
  fetch(p, m0, n0, 0, ra, rb);
  for (int k0 = 0; k0 < p.k; k0 += BK) {
    __syncthreads();
    stash(as, bs, ra, rb);
    __syncthreads();
    if (k0 + BK < p.k) fetch(p, m0, n0, k0 + BK, ra, rb);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      // Rows ty*4..+4 and 64+ty*4..+4; columns tx*4..+4 and 64+tx*4..+4: float4 reads, no conflicts.
      float4 a0 = *reinterpret_cast<const float4*>(&as[kk][ty * 4]);
      float4 a1 = *reinterpret_cast<const float4*>(&as[kk][64 + ty * 4]);
      float4 b0 = *reinterpret_cast<const float4*>(&bs[kk][tx * 4]);
      float4 b1 = *reinterpret_cast<const float4*>(&bs[kk][64 + tx * 4]);
      float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
    }
  }
  out_t* c = static_cast<out_t*>(p.c);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (m >= p.m) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (n < p.n) store_scaled(c, (i64)m * p.ldc + n, acc[i][j], p.alpha, p.beta);
    }
  }
}
