// Dequantisation from the 4-bit formats: packed e2m1 codes [rows, K/2] (element 2i in the low
// nibble of byte i) and one scale per block of BLK along K to Y [rows, K] (leading dimension ldy;
// `out` 0 bf16, 1 f16, 2 f32): each value the exact code x block scale (x the NVFP4 tensor scale)
// rounded once, bit for bit what reference::fp4::round_bits gives.
//   KILN_FP4 0  NVFP4: BLK 16, e4m3 scales, an f32 tensor scale g.
//   KILN_FP4 1  MXFP4: BLK 32, E8M0 scales.
// A streaming kernel: per element it reads 0.5 byte (+ 1/BLK of a scale) and writes 2 or 4, so
// it must run at the copy rate. The unit is a chunk of 8 elements (one 32-bit word of codes, one
// 16-byte store of bf16/f16 output). A warp takes 128 chunks at a time, grid-stride: lane l the
// chunks l, l + 32, l + 64, l + 96, so each of its four code loads and each of its stores is a
// contiguous 128 or 512 bytes across the warp; all four loads (and their scales) are issued
// before the first decode.
// A scale with no value (E8M0's NaN 0xFF; for NVFP4 a negative e4m3 or its NaN 0x7F) records its
// block index in *first_bad (null: the caller vouches for the scales).
#include "common/fp4.cuh"

#if !defined(KILN_FP4)
#error "fp4_dequant.cu needs KILN_FP4 (src/ops/fp4/fp4_dequant.rs defines it)"
#endif
constexpr int BLK = KILN_FP4 == 0 ? 16 : 32;
constexpr int CHUNK = 8;                  // elements per 32-bit word of codes
constexpr int PER_LANE = 4;               // chunks a lane has in flight
constexpr int WARP_CHUNKS = 32 * PER_LANE;

__device__ __forceinline__ u32 ld_stream_u32(const u32* p) {
  u32 r;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ float mul_rz(float a, float b) {
  float r;
  asm("mul.rz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float fma_rn(float a, float b, float c) {
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
}

__device__ __forceinline__ bool scale_has_no_value(u32 sc) {
  return KILN_FP4 == 0 ? (sc & 0x80) != 0 || sc == 0x7F : sc == 0xFF;
}

// Element value a = e2m1 x block scale, exact in f32 (NVFP4: at most 6 significant bits;
// MXFP4: a power of two times the code, or an overflow to infinity that every output type
// shares). NVFP4's tensor scale g makes a * g up to 30 bits: f32 holds it rounded to odd
// (toward zero, the last bit set if anything was lost; fma gives the exact remainder), and one
// more rounding to 8 or 11 bits is then the single rounding of a * g. Where a * g is so small
// that the remainder could fall below f32's subnormals (|a g| < 2^-99), float64 does it.
template <class T> __device__ __forceinline__ T value_of(float a, float g) {
#if KILN_FP4 == 0
  if (g == 1.0f) return from_float<T>(a);  // the common case: a is exact, one rounding
  if constexpr (sizeof(T) == 4) {
    return mul_rn(a, g);
  } else {
    float t = mul_rz(a, g);
    if (a != 0.0f && fabsf(t) < 1.5777218e-30f)  // 2^-99
      return round_exact<T>((double)a * (double)g);
    if (fma_rn(a, g, -t) != 0.0f) t = __uint_as_float(__float_as_uint(t) | 1u);
    return from_float<T>(t);
  }
#else
  (void)g;
  return from_float<T>(a);
#endif
}

__device__ __forceinline__ float scale_value(u32 sc) {
#if KILN_FP4 == 0
  return fp8_decode<FP8_E4M3>((u8)sc);
#else
  return e8m0_value(sc);
#endif
}

__device__ __forceinline__ u32 bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ u32 bits_of(bf16 v) { return v.bits; }
__device__ __forceinline__ u32 bits_of(f16 v) { return v.bits; }

// The 8 elements of one word of codes, scaled, written at y[at..at + 8): one or two 16-byte
// stores when `vec`, else element by element.
template <class T>
__device__ __forceinline__ void write_chunk(T* y, i64 at, u32 word, float s, float g, bool vec) {
  T v[CHUNK];
#pragma unroll
  for (int i = 0; i < CHUNK; ++i) v[i] = value_of<T>(mul_rn(e2m1_decode(word >> (4 * i)), s), g);
  if (vec) {
    if constexpr (sizeof(T) == 4) {
      u32x4* p = reinterpret_cast<u32x4*>(y + at);
      p[0] = u32x4{bits_of(v[0]), bits_of(v[1]), bits_of(v[2]), bits_of(v[3])};
      p[1] = u32x4{bits_of(v[4]), bits_of(v[5]), bits_of(v[6]), bits_of(v[7])};
    } else {
      u32 w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = bits_of(v[2 * i]) | bits_of(v[2 * i + 1]) << 16;
      *reinterpret_cast<u32x4*>(y + at) = u32x4{w[0], w[1], w[2], w[3]};
    }
  } else {
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) y[at + i] = v[i];
  }
}

template <class T>
__device__ __forceinline__ void dequant(const u32* codes, const u8* scales, float g, int rows, int k, T* y, i64 ldy,
                                        u64* first_bad) {
  const int row_chunks = k / CHUNK;
  const i64 chunks = (i64)rows * row_chunks;
  const bool dense = ldy == k;
  // 16-byte stores need every chunk's start 16-byte aligned: the base and the row pitch
  const bool vec = (reinterpret_cast<u64>(y) % 16 == 0) && (ldy * (i64)sizeof(T)) % 16 == 0;
  const int lane = threadIdx.x % 32;
  const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const i64 warps = (i64)gridDim.x * blockDim.x / 32;
  for (i64 base = warp * WARP_CHUNKS; base < chunks; base += warps * WARP_CHUNKS) {
    u32 word[PER_LANE], sc[PER_LANE];
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
      const i64 c = base + lane + 32 * j;
      word[j] = c < chunks ? ld_stream_u32(codes + c) : 0u;
      sc[j] = c < chunks ? (u32)__ldg(scales + c / (BLK / CHUNK)) : 0u;
    }
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
      const i64 c = base + lane + 32 * j;
      if (c >= chunks) continue;
      if (first_bad && c % (BLK / CHUNK) == 0 && scale_has_no_value(sc[j])) atomicMin(first_bad, (u64)(c / (BLK / CHUNK)));
      i64 at = c * CHUNK;
      if (!dense) {
        const i64 r = c / row_chunks;
        at = r * ldy + (c - r * row_chunks) * CHUNK;
      }
      write_chunk<T>(y, at, word[j], scale_value(sc[j]), g, vec);
    }
  }
}

extern "C" __global__ void __launch_bounds__(256)
    fp4_dequant(const u8* codes, const u8* scales, float tensor_scale, int rows, int k, void* y, i64 ldy,
                u64* first_bad, int out) {
  const u32* words = reinterpret_cast<const u32*>(codes);
  if (out == 2) dequant<float>(words, scales, tensor_scale, rows, k, reinterpret_cast<float*>(y), ldy, first_bad);
  else if (out == 1) dequant<f16>(words, scales, tensor_scale, rows, k, reinterpret_cast<f16*>(y), ldy, first_bad);
  else dequant<bf16>(words, scales, tensor_scale, rows, k, reinterpret_cast<bf16*>(y), ldy, first_bad);
}
