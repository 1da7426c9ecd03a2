// Epilogue pieces of the MoE kernels: a clipped 8-column store (16-byte when aligned and in range)
// of the columns common/quad_transpose.cuh gives each lane.
#pragma once
#include "common/types.cuh"
#include "common/quad_transpose.cuh"

// Y(row, n .. n + 7) = the 8 16-bit values packed in pairs in w (pack2<OutT>), only the columns
// below n_total; one 16-byte store when aligned and in range. Epilogues that keep a tile's
// results in registers to store them later call it directly.
template <class OutT>
__device__ __forceinline__ void moe_store8_packed(OutT* y, i64 ldy, int n_total, i64 row, int n, const u32 (&w)[4]) {
  static_assert(sizeof(OutT) == 2, "packed stores are for 16-bit outputs");
  if (n >= n_total) return;
  OutT* dst = y + row * ldy + n;
  if (n + 8 > n_total || (reinterpret_cast<u64>(dst) % 16) != 0) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(w);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n + i < n_total) reinterpret_cast<unsigned short*>(dst)[i] = h[i];
    return;
  }
  u32x4 v;
  v.x = w[0];
  v.y = w[1];
  v.z = w[2];
  v.w = w[3];
  *reinterpret_cast<u32x4*>(dst) = v;
}

// Y(row, n .. n + 7) = v, only the columns below n_total (16-byte stores when aligned and in range).
template <class OutT>
__device__ __forceinline__ void moe_store8(OutT* y, i64 ldy, int n_total, i64 row, int n, const float (&v)[4][2]) {
  if constexpr (sizeof(OutT) == 2) {
    const u32 w[4] = {pack2<OutT>(v[0][0], v[0][1]), pack2<OutT>(v[1][0], v[1][1]), pack2<OutT>(v[2][0], v[2][1]),
                      pack2<OutT>(v[3][0], v[3][1])};
    moe_store8_packed(y, ldy, n_total, row, n, w);
  } else {
    if (n >= n_total) return;
    OutT* dst = y + row * ldy + n;
    if (n + 8 > n_total || (reinterpret_cast<u64>(dst) % 16) != 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (n + i < n_total) dst[i] = v[i / 2][i % 2];
      return;
    }
    float4 w0, w1;
    w0.x = v[0][0]; w0.y = v[0][1]; w0.z = v[1][0]; w0.w = v[1][1];
    w1.x = v[2][0]; w1.y = v[2][1]; w1.z = v[3][0]; w1.w = v[3][1];
    reinterpret_cast<float4*>(dst)[0] = w0;
    reinterpret_cast<float4*>(dst)[1] = w1;
  }
}

// acc(row, n .. n + 7) += v (f32, atomically per element), only the columns below n_total: two
// 16-byte vector reductions (red.global.add.v4.f32, sm_90) when aligned and in range. The MoE
// layer's down projection adds each weighted row into its token's accumulator row this way;
// reductions return nothing, so the epilogue never waits for them.
__device__ __forceinline__ void moe_red8_f32(float* acc, i64 ld, int n_total, i64 row, int n, const float (&v)[4][2]) {
  if (n >= n_total) return;
  float* dst = acc + row * ld + n;
  if (n + 8 > n_total || (reinterpret_cast<u64>(dst) % 16) != 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n + i < n_total) asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(dst + i), "f"(v[i / 2][i % 2]) : "memory");
    return;
  }
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v[0][0]), "f"(v[0][1]), "f"(v[1][0]),
               "f"(v[1][1])
               : "memory");
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst + 4), "f"(v[2][0]), "f"(v[2][1]), "f"(v[3][0]),
               "f"(v[3][1])
               : "memory");
}
