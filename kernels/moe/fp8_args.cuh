// The argument block of the FP8 MoE kernels (moe/fp8_grouped.cu, moe/fp8_swiglu.cu), laid out
// as `Fp8MoeArgs` in src/ops/moe/fp8_problem.rs, and the scale lookups they share.
#pragma once
#include "common/types.cuh"

struct Fp8MoeArgs {
  const int* sched;    // moe_tile_prefix's tables (moe/sched.cuh)
  void* y;             // bf16 rows in X's row space, ldy apart; or e4m3 codes (quantised output)
  const float* sx;     // X's 1x128 scales, M-major over all rows of X: sx[kb * x_rows + row]
  const float* sw;     // W's (the SwiGLU's W1) 128x128 scales: [E][ceil(N / 128)][ceil(K / 128)]
  const float* sw3;    // the SwiGLU's W3 scales, as sw
  const float* route;  // the SwiGLU's per-row routing weight, or null
  float* sy;           // the quantised output's 1x128 scales: sy[(n / 128) * x_rows + row]
  i64 ldy;
  int experts, n, k, x_rows;
  int tiles_n;
  int group_m;    // m-tiles swept together in the grouped tile order (any value >= 1 is correct)
  int by_expert;  // 1: the order goes expert by expert (moe/sched.cuh)
  int pad_;
};

// X's scale of K block kb for X row `row` of a tile with `valid` real rows from row0: rows past
// the expert's end weigh 0 (they hold another expert's rows or stale data, and are never
// stored).
__device__ __forceinline__ float fp8_moe_x_scale(const Fp8MoeArgs& p, int kb, int row0, int r, int valid) {
  return r < valid ? p.sx[(i64)kb * p.x_rows + row0 + r] : 0.0f;
}

// The 128x128 scale of expert e's N block nb and K block kb (0 past N, whose columns are never
// stored).
__device__ __forceinline__ float fp8_moe_w_scale(const float* s, const Fp8MoeArgs& p, int e, int nb, int kb) {
  const int nbs = (p.n + 127) / 128, kbs = (p.k + 127) / 128;
  return nb < nbs ? s[((i64)e * nbs + nb) * kbs + kb] : 0.0f;
}
