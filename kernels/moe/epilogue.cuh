// Epilogue pieces of the MoE kernels: a clipped 8-column store (16-byte when aligned and in range)
// of the columns common/quad_transpose.cuh gives each lane.
#pragma once
#include "common/types.cuh"
#include "common/quad_transpose.cuh"

// Y(row, n .. n + 7) = v, only the columns below n_total.
template <class OutT>
__device__ __forceinline__ void moe_store8(OutT* y, i64 ldy, int n_total, i64 row, int n, const float (&v)[4][2]) {
  if (n >= n_total) return;
  OutT* dst = y + row * ldy + n;
  if (n + 8 > n_total || (reinterpret_cast<u64>(dst) % 16) != 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n + i < n_total) dst[i] = from_float<OutT>(v[i / 2][i % 2]);
    return;
  }
  if constexpr (sizeof(OutT) == 4) {
    float4 w0, w1;
    w0.x = v[0][0]; w0.y = v[0][1]; w0.z = v[1][0]; w0.w = v[1][1];
    w1.x = v[2][0]; w1.y = v[2][1]; w1.z = v[3][0]; w1.w = v[3][1];
    reinterpret_cast<float4*>(dst)[0] = w0;
    reinterpret_cast<float4*>(dst)[1] = w1;
  } else {
    u32x4 w;
    w.x = pack2<OutT>(v[0][0], v[0][1]);
    w.y = pack2<OutT>(v[1][0], v[1][1]);
    w.z = pack2<OutT>(v[2][0], v[2][1]);
    w.w = pack2<OutT>(v[3][0], v[3][1]);
    *reinterpret_cast<u32x4*>(dst) = w;
  }
}
