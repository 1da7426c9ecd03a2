// Epilogue pieces of the MoE kernels: the accumulator-fragment quad transpose that gives each
// lane 8 consecutive columns, and a clipped 8-column store (16-byte when aligned and in range).
#pragma once
#include "common/types.cuh"

// In the m64nNk16 fragment, lane quad q (= lane % 4) holds columns 8j + 2q and 8j + 2q + 1 for
// every j. A 4 x 4 transpose across the quad of four consecutive j (two xor-shuffle rounds) leaves
// lane q with the 8 consecutive columns 8(j0 + q) .. 8(j0 + q) + 7. Every lane must take part.
__device__ __forceinline__ void moe_quad_transpose(float (&e)[4][2], int q) {
#pragma unroll
  for (int bit = 2; bit >= 1; bit >>= 1) {
    const bool hi = (q & bit) != 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if (s & bit) continue;
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float send = hi ? e[s][x] : e[s | bit][x];
        const float recv = __shfl_xor_sync(0xffffffffu, send, bit);
        if (hi) e[s][x] = recv;
        else e[s | bit][x] = recv;
      }
    }
  }
}

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
