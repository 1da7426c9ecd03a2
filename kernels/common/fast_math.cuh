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

// 2^x on the FMA pipe, for a share of the exponentials of a kernel that MUFU's 16 a clock an SM
// holds up: x rounded to the nearest integer n by adding 1.5·2^23 (t's low mantissa bits then
// hold n), 2^(x − n) by a polynomial of degree DEG (3 or 4) on [−0.5, 0.5], and n added into the
// result's exponent. Relative error at most 7.6e-5 (degree 3) or 2.7e-6 (degree 4) over the
// reduced range, the f32 roundings of the evaluation included (coefficients fitted for relative
// error; the host's twin `ex2_poly` is tested against 2^x). x below −125 gives 2^−125 (not 0: the
// sum's exponent stays normal); NaN stays NaN; +inf gives NaN (ex2_approx: +inf). Eight or nine
// instructions on the FMA and integer pipes where ex2_approx issues one MUFU op.
template <int DEG> __device__ __forceinline__ float ex2_poly(float x) {
  static_assert(DEG == 3 || DEG == 4, "degree 3 or 4");
  float xc, t, j, f;
  asm("max.NaN.f32 %0, %1, 0fC2FA0000;" : "=f"(xc) : "f"(x));  // max(x, -125), NaN kept
  asm("add.rn.f32 %0, %1, 0f4B400000;" : "=f"(t) : "f"(xc));    // + 1.5·2^23: rounds to n
  asm("sub.rn.f32 %0, %1, 0f4B400000;" : "=f"(j) : "f"(t));     // n
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(f) : "f"(xc), "f"(j));    // x − n in [−0.5, 0.5]
  float p;
  if constexpr (DEG == 3) {
    p = fmaf(fmaf(fmaf(0.0551703647f, f, 0.242609233f), f, 0.693261027f), f, 0.999928176f);
  } else {
    p = fmaf(fmaf(fmaf(fmaf(0.00956997741f, f, 0.0559177026f), f, 0.240247458f), f, 0.69312185f), f, 0.999999285f);
  }
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));
}
