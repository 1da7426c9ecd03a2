// FP4 e2m1 on the device, with the arithmetic of src/formats/{fp4,nvfp4,mxfp4}.rs so that CPU and
// GPU agree bit for bit. Hopper has no e2m1 cvt: encoding compares against the midpoints between
// neighbouring magnitudes (ties to the even code), decoding is bit arithmetic. Codes 0..7 are
// 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. NVFP4 block scales are e4m3 (common/fp8.cuh),
// MXFP4's are E8M0 (2^(code - 127)).
#pragma once
#include "common/fp8.cuh"

constexpr u8 E2M1_MAX_CODE = 0x7;

// The e2m1 code of x: round to nearest, ties to even, magnitudes above 6 (infinity included)
// saturate, zero keeps its sign, NaN becomes +6 (formats::fp4::encode).
__device__ __forceinline__ u8 e2m1_encode(float x) {
  if (x != x) return E2M1_MAX_CODE;
  const u8 sign = (__float_as_uint(x) >> 28) & 0x8;
  const float a = fabsf(x);
  // `<=` where the lower neighbour's code is even, `<` where the upper one's is.
  const u8 m = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
             : a <= 2.5f  ? 4 : a < 3.5f  ? 5 : a <= 5.0f  ? 6 : 7;
  return sign | m;
}

// The exact value of the low nibble of `code`: exponent bits 2..1 (bias 1), mantissa bit 0.
__device__ __forceinline__ float e2m1_decode(u32 code) {
  const u32 e = (code >> 1) & 3, m = code & 1;
  // e = 0 is subnormal (0.m); otherwise 2^(e-1) * 1.m, built from the f32 fields directly.
  const float mag = e == 0 ? 0.5f * (float)m : __uint_as_float(((e + 126) << 23) | (m << 22));
  return (code & 8) ? -mag : mag;
}

// x * y rounded to nearest, never contracted into an fma.
__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// ---- NVFP4 (formats::nvfp4) ----

// The tensor scale of a tensor whose largest magnitude is amax: max(amax / 2688, 2^-126).
__device__ __forceinline__ float nvfp4_tensor_scale(float amax) {
  return fmaxf(div_rn(amax, 2688.0f), 1.17549435e-38f);
}

// The e4m3 code of a block's scale: e4m3(amax_block / 6 / g), two divisions each rounded.
__device__ __forceinline__ u8 nvfp4_block_scale(float block_amax, float g) {
  return fp8_encode<FP8_E4M3>(div_rn(div_rn(block_amax, 6.0f), g));
}

// x's code in a block whose scale decodes to s: e2m1(x / (s * g)); 0 when s is 0.
__device__ __forceinline__ u8 nvfp4_quantize_one(float x, float s, float g) {
  if (s == 0.0f) return 0;
  return e2m1_encode(div_rn(x, mul_rn(s, g)));
}

// ---- MXFP4 (formats::mxfp4) ----

// floor(log2(a)) of a finite a > 0 read from its bits; -127 - 2 for zero, so that the block
// scale below clamps an all-zero block to E8M0 code 0.
__device__ __forceinline__ int floor_log2_bits(float a) {
  const u32 bits = __float_as_uint(a) & 0x7FFFFFFFu;
  const int field = (int)(bits >> 23);
  const u32 man = bits & 0x007FFFFFu;
  if (field == 0) return man == 0 ? -1000 : -149 + 31 - __clz(man);
  return field - 127;
}

// The E8M0 code of a block's scale: floor(log2(amax)) - 2, clamped to -127..127, biased by 127.
__device__ __forceinline__ u8 mxfp4_block_scale(float block_amax) {
  const int e = floor_log2_bits(block_amax) - 2;
  return (u8)(min(max(e, -127), 127) + 127);
}

// The value of a (non-NaN) E8M0 code, exact in f32 (2^-127 is subnormal).
__device__ __forceinline__ float e8m0_value(u32 code) {
  return code >= 1 ? __uint_as_float(code << 23) : __uint_as_float(1u << 22);
}

__device__ __forceinline__ u8 mxfp4_quantize_one(float x, float scale) { return e2m1_encode(div_rn(x, scale)); }

// ---- the exact value rounded once to the output type ----

// f64 p (exact: at most 30 significant bits) rounded once to T. The f32 step rounds to odd
// (truncate, then set the last bit if anything was lost): 24 bits rounded to odd and then to 8
// or 11 bits to nearest is the single rounding of p, subnormals included.
template <class T> __device__ __forceinline__ T round_exact(double p) {
  float t;
  asm("cvt.rz.f32.f64 %0, %1;" : "=f"(t) : "d"(p));
  if constexpr (sizeof(T) == 4) {
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(p));
    return r;
  } else {
    if ((double)t != p) t = __uint_as_float(__float_as_uint(t) | 1u);
    return from_float<T>(t);
  }
}
