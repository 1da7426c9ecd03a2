// Activation math on the MUFU unit: single-instruction approximations (ex2, rcp; about 2 ulp),
// for epilogues whose results are rounded to 16 bits anyway. CUDA's expf and IEEE division add a
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
