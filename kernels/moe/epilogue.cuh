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

// A consumer thread's two fragment rows r0 and r0 + 8 of COLS columns (register i of f: row
// r0 + 8((i>>1)&1), column 8(i>>2) + 2q + (i&1), as the m64nN accumulator lays them out) into Y's
// rows row0 + r, columns col0 on: the quad transposes its four 8-column groups j0 .. j0 + 3 and
// each lane stores its group where r < valid_rows (every lane takes part in the transposes,
// stored row or not). The FP8 grouped GEMM's and the FP8 SwiGLU's register epilogue.
template <int COLS, class OutT, int NR>
__device__ __forceinline__ void moe_store_fragment(OutT* y, i64 ldy, int n_total, int row0, int valid_rows, int r0,
                                                   int col0, int q, const float (&f)[NR]) {
  static_assert(COLS % 32 == 0 && COLS / 2 <= NR, "COLS columns of the fragment, 32 at a time (the quad's groups)");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
#pragma unroll
    for (int j0 = 0; j0 < COLS / 8; j0 += 4) {
      float e[4][2];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        e[s][0] = f[4 * (j0 + s) + 2 * h];
        e[s][1] = f[4 * (j0 + s) + 2 * h + 1];
      }
      quad_transpose(e, q);
      if (r < valid_rows) moe_store8(y, ldy, n_total, (i64)(row0 + r), col0 + 8 * (j0 + q), e);
    }
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
