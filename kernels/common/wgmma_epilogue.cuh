// Epilogue for the single-warpgroup WGMMA GEMMs (wgmma_cp_async, wgmma_tma): stores one m64 x N
// fp32 accumulator fragment to C = alpha * acc + beta * C, clipped to M x N, with 16-byte
// accesses where the 8 outputs of a lane are in range and aligned. C is never read when beta == 0.
//
// Fragment layout (wgmma m64nNk16, f32): thread t of the warpgroup (warp w = t/32, lane l)
// holds in register i row 16w + l/4 + 8((i>>1)&1), column 8(i>>2) + 2(l%4) + (i&1).
#pragma once
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"
#include "common/quad_transpose.cuh"

// C(m, n .. n + 7) = alpha * e + beta * C for the in-range elements; one 16-byte (bf16/f16) or
// two 16-byte (f32) accesses when all 8 are in range and the address is 16-byte aligned.
template <class OutT>
__device__ __forceinline__ void wge_store8(OutT* c, const GemmArgs& p, int m, int n, const float (&e)[4][2]) {
  if (m >= p.m || n >= p.n) return;
  const i64 idx = (i64)m * p.ldc + n;
  OutT* dst = c + idx;
  if (n + 8 > p.n || (reinterpret_cast<u64>(dst) % 16) != 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n + i < p.n) store_scaled(c, idx + i, e[i / 2][i % 2], p.alpha, p.beta);
    return;
  }
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = p.alpha * e[i / 2][i % 2];
  if constexpr (sizeof(OutT) == 4) {
    float4* d4 = reinterpret_cast<float4*>(dst);
    if (p.beta != 0.0f) {
      const float4 o0 = d4[0], o1 = d4[1];
      const float o[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += p.beta * o[i];
    }
    float4 w0, w1;
    w0.x = v[0]; w0.y = v[1]; w0.z = v[2]; w0.w = v[3];
    w1.x = v[4]; w1.y = v[5]; w1.z = v[6]; w1.w = v[7];
    d4[0] = w0;
    d4[1] = w1;
  } else {
    u32x4* d = reinterpret_cast<u32x4*>(dst);
    if (p.beta != 0.0f) {
      const u32x4 o = *d;
      const u32 ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        OutT lo, hi;
        lo.bits = (u16)(ow[i] & 0xffff);
        hi.bits = (u16)(ow[i] >> 16);
        v[2 * i] += p.beta * to_float(lo);
        v[2 * i + 1] += p.beta * to_float(hi);
      }
    }
    u32x4 w;
    w.x = pack2<OutT>(v[0], v[1]);
    w.y = pack2<OutT>(v[2], v[3]);
    w.z = pack2<OutT>(v[4], v[5]);
    w.w = pack2<OutT>(v[6], v[7]);
    *d = w;
  }
}

// Stores the m64 x N accumulator `acc` of this warpgroup whose element (0, 0) is C(m0, n0).
// Executed by all 128 threads (the shuffles need whole warps); `t` is the thread's index within
// the warpgroup.
template <class OutT, int N>
__device__ __forceinline__ void wgmma_store_m64(const float (&acc)[N / 2], const GemmArgs& p, int m0, int n0, int t) {
  static_assert(N % 32 == 0, "the quad transpose takes 4 groups of 8 columns at a time");
  OutT* c = static_cast<OutT*>(p.c);
  const int w = t / 32, lane = t % 32, q = lane % 4;
  const int row = m0 + 16 * w + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j0 = 0; j0 < N / 8; j0 += 4) {
      float e[4][2];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        e[s][0] = acc[4 * (j0 + s) + 2 * h];
        e[s][1] = acc[4 * (j0 + s) + 2 * h + 1];
      }
      quad_transpose(e, q);
      wge_store8<OutT>(c, p, row + 8 * h, n0 + 8 * (j0 + q), e);
    }
  }
}
