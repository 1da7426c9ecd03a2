// FP8 on the device (sm_89+): e4m3fn and e5m2 codes to and from f32, and the scale recipes, with
// the same arithmetic as the CPU (src/formats/fp8.rs, src/formats/scale.rs) so the two agree bit
// for bit. Encoding is PTX cvt.rn.satfinite: one rounding to nearest, ties to even; magnitudes
// at or above the largest finite value (448, 57344; infinities included) saturate to it with
// their sign; NaN becomes a NaN code. Decoding is exact (through f16, which holds every value of
// both formats).
#pragma once
#include "common/types.cuh"

typedef unsigned char u8;

// Format selectors (the host's Fp8Format::define): 0 = e4m3fn, 1 = e5m2.
constexpr int FP8_E4M3 = 0, FP8_E5M2 = 1;

template <int FMT> struct Fp8Max;
template <> struct Fp8Max<FP8_E4M3> { static constexpr float value = 448.0f; };
template <> struct Fp8Max<FP8_E5M2> { static constexpr float value = 57344.0f; };

// Two codes in a 16-bit value: `hi` in bits 15..8, `lo` in bits 7..0.
template <int FMT> __device__ __forceinline__ u16 fp8x2_encode(float hi, float lo) {
  u16 r;
  if constexpr (FMT == FP8_E4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four codes in a 32-bit value, x0 in the lowest byte (the order they have in memory).
template <int FMT> __device__ __forceinline__ u32 fp8x4_encode(float x0, float x1, float x2, float x3) {
  return (u32)fp8x2_encode<FMT>(x1, x0) | ((u32)fp8x2_encode<FMT>(x3, x2) << 16);
}

template <int FMT> __device__ __forceinline__ u8 fp8_encode(float x) { return (u8)(fp8x2_encode<FMT>(0.0f, x) & 0xff); }

// Two codes (the low byte first) to a packed f16 pair (the low half first).
template <int FMT> __device__ __forceinline__ u32 fp8x2_to_f16x2(u16 codes) {
  u32 r;
  if constexpr (FMT == FP8_E4M3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(codes));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(codes));
  return r;
}

template <int FMT> __device__ __forceinline__ float fp8_decode(u8 code) {
  return half_to_float<f16>(fp8x2_to_f16x2<FMT>((u16)code), 0);
}

// a / b rounded to nearest (IEEE), whatever the compile flags say about division.
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// The scale of a block whose largest magnitude is amax (src/formats/scale.rs::scale_for):
// max(amax / MAX, 2^-126), and with ue8m0 rounded up to a power of two.
template <int FMT> __device__ __forceinline__ float fp8_scale_for(float amax, bool ue8m0) {
  const float s = fmaxf(div_rn(amax, Fp8Max<FMT>::value), 1.17549435e-38f);
  const u32 bits = __float_as_uint(s);
  if (ue8m0 && (bits & 0x007FFFFFu) != 0) return __uint_as_float((bits & 0x7F800000u) + 0x00800000u);
  return s;
}

// x's code under `scale` (src/formats/scale.rs::quantize_one).
template <int FMT> __device__ __forceinline__ u8 fp8_quantize(float x, float scale) {
  return fp8_encode<FMT>(div_rn(x, scale));
}
