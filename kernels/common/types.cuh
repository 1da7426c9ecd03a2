// kiln device types: bf16/fp16 storage types and float conversions, with no toolkit headers.
// Conversions use PTX cvt so the rounding is round-to-nearest-even, as the CPU reference does.
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct __align__(2) bf16 { u16 bits; };
struct __align__(2) f16 { u16 bits; };
struct __align__(16) u32x4 { u32 x, y, z, w; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(((u32)v.bits) << 16); }
__device__ __forceinline__ float to_float(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <> __device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

// Two floats packed into one 32-bit register of two 16-bit values (low half = first).
template <class T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<bf16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ u32 pack2<f16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// n pairs of floats a[from + 2i], a[from + 2i + 1], scaled by alpha, packed into dst[i]. (A
// template, so that a discarded `if constexpr` branch may name it for T = float, which has no
// pack2.)
template <class T, int NP, int N>
__device__ __forceinline__ void pack2_scaled(u32 (&dst)[NP], const float (&a)[N], int from, float alpha) {
#pragma unroll
  for (int i = 0; i < NP; ++i) dst[i] = pack2<T>(alpha * a[from + 2 * i], alpha * a[from + 2 * i + 1]);
}

// The low (hi = 0) or high 16-bit value of a packed pair, as a float.
template <class T> __device__ __forceinline__ float half_to_float(u32 packed, int hi) {
  T v;
  v.bits = (u16)(hi ? packed >> 16 : packed & 0xffffu);
  return to_float(v);
}

// The 32-bit shared-window address of a pointer to shared memory (what shared-memory PTX
// operands, mbarriers and TMA take).
__device__ __forceinline__ u32 smem_u32(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// A compile-time int as a value, so one generic lambda can be instantiated per constant.
template <int V> struct IntConst {
  static constexpr int value = V;
};

// Element types chosen by the host through defines: KILN_IN = 0 bf16, 1 f16; KILN_OUT adds 2 f32.
#if defined(KILN_IN)
#if KILN_IN == 0
typedef bf16 in_t;
#else
typedef f16 in_t;
#endif
#endif
#if defined(KILN_OUT)
#if KILN_OUT == 0
typedef bf16 out_t;
#elif KILN_OUT == 1
typedef f16 out_t;
#else
typedef float out_t;
#endif
#endif
