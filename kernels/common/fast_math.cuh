// Activation math on the MUFU unit: single-instruction approximations (ex2, rcp: about 2 ulp;
// tanh: about 2^-11 relative), for epilogues whose results are rounded to 16 bits anyway. CUDA's expf and IEEE division add a
// range fix-up and a per-element FCHK slow-path branch that cost more than the math itself.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// silu(g) = g / (1 + e^-g): two MUFU operations. Large negative g gives e^-g = inf, rcp 0, so
// -0; large positive g gives g; NaN stays NaN.
__device__ __forceinline__ float silu_fast(float g) {
  return g * rcp_approx(1.0f + ex2_approx(g * -1.4426950408889634f));
}

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// silu(g) = g·σ(g) = h + h·tanh(h) with h = g/2: one MUFU operation where silu_fast needs two.
// tanh's ~2^-11 relative error puts ~2.5e-4·|g| of absolute error on the result: below a bf16
// output's rounding, comparable to an f16 output's, too much for f32 (use silu_fast there).
__device__ __forceinline__ float silu_tanh(float g) {
  const float h = 0.5f * g;
  return fmaf(h, tanh_approx(h), h);
}
