// Quantisation to the 4-bit formats: a row-major X [rows, K] (bf16, f16 or f32, leading
// dimension ldx) to packed e2m1 codes [rows, K/2] (element 2i in the low nibble of byte i) and
// one scale per block along K (the way back is fp4_dequant.cu). One thread per block of BLK.
//   KILN_FP4 0  NVFP4: BLK 16, e4m3 scales, an fp32 tensor scale g. fp4_amax (KILN_AMAX) first
//               reduces the tensor's amax into a word the host zeroed; fp4_quant then derives g
//               from it, or takes the caller's g when amax_bits is null.
//   KILN_FP4 1  MXFP4: BLK 32, E8M0 scales (the OCP recipe); no tensor scale.
// Non-finite inputs have no e2m1 code: every kernel that reads X records the smallest linear
// index (r * K + c) of one in *first_bad (atomicMin; the host sets it to ~0 and refuses the
// result if it changed), as the CPU quantisers refuse them.
// KILN_QIN: 0 bf16, 1 f16, 2 f32 selects fp4_quant; KILN_AMAX fp4_amax, which takes its dtype as
// an argument (fewer variants to compile).
#include "common/fp4.cuh"

#if !defined(KILN_FP4)
#error "fp4_quant.cu needs KILN_FP4 (src/ops/fp4/fp4_quant.rs defines it)"
#endif
constexpr int BLK = KILN_FP4 == 0 ? 16 : 32;

__device__ __forceinline__ bool finite(float v) { return (__float_as_uint(v) & 0x7F800000u) != 0x7F800000u; }

#if defined(KILN_QIN)
#if KILN_QIN == 0
typedef bf16 qin_t;
#elif KILN_QIN == 1
typedef f16 qin_t;
#else
typedef float qin_t;
#endif

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block `b`'s elements as floats, and the linear index of its first non-finite one (~0 if none).
__device__ __forceinline__ u64 load_block(const qin_t* x, int k, i64 ldx, i64 b, float (&v)[BLK]) {
  const int per_row = k / BLK;
  const i64 r = b / per_row;
  const int c0 = (int)(b - r * per_row) * BLK;
  u64 bad = ~0ull;
#pragma unroll
  for (int j = BLK - 1; j >= 0; --j) {
    v[j] = to_float(x[r * ldx + c0 + j]);
    if (!finite(v[j])) bad = (u64)r * (u64)k + (u64)(c0 + j);
  }
  return bad;
}


extern "C" __global__ void __launch_bounds__(256)
    fp4_quant(const qin_t* x, int rows, int k, i64 ldx, u8* codes, u8* scales, const u32* amax_bits,
              float tensor_scale, float* tensor_scale_out, u64* first_bad) {
  const i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x;
#if KILN_FP4 == 0
  const float g = amax_bits ? nvfp4_tensor_scale(__uint_as_float(*amax_bits)) : tensor_scale;
  if (b == 0 && tensor_scale_out) *tensor_scale_out = g;
#else
  (void)amax_bits, (void)tensor_scale, (void)tensor_scale_out;
#endif
  if (b >= (i64)rows * (k / BLK)) return;
  float v[BLK];
  const u64 bad = load_block(x, k, ldx, b, v);
  if (bad != ~0ull) atomicMin(first_bad, bad);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < BLK; ++j) amax = fmaxf(amax, fabsf(v[j]));
#if KILN_FP4 == 0
  const u8 sc = nvfp4_block_scale(amax, g);
  const float s = fp8_decode<FP8_E4M3>(sc);
#else
  const u8 sc = mxfp4_block_scale(amax);
  const float s = e8m0_value(sc);
#endif
  scales[b] = sc;
  // BLK / 8 words of 8 codes each, element 8w + i in nibble i of word w.
#pragma unroll
  for (int w = 0; w < BLK / 8; ++w) {
    u32 packed = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#if KILN_FP4 == 0
      const u32 c = nvfp4_quantize_one(v[8 * w + i], s, g);
#else
      const u32 c = mxfp4_quantize_one(v[8 * w + i], s);
#endif
      packed |= c << (4 * i);
    }
    reinterpret_cast<u32*>(codes)[b * (BLK / 8) + w] = packed;
  }
}
#endif

#if defined(KILN_AMAX)
// Element i of a row-major matrix of dtype `in` (0 bf16, 1 f16, 2 f32) as a float.
__device__ __forceinline__ float load_any(const void* x, i64 i, int in) {
  if (in == 2) return reinterpret_cast<const float*>(x)[i];
  if (in == 1) return to_float(reinterpret_cast<const f16*>(x)[i]);
  return to_float(reinterpret_cast<const bf16*>(x)[i]);
}

// NVFP4's tensor amax into *amax_bits (the integer order of non-negative floats is their numeric
// order): a grid-stride share per thread, a warp reduction, one atomicMax per warp. The input
// dtype is an argument (one variant for all three: this pass is a small part of quantising).
extern "C" __global__ void __launch_bounds__(256)
    fp4_amax(const void* x, int rows, int k, i64 ldx, u32* amax_bits, u64* first_bad, int in) {
  float m = 0.0f;
  u64 bad = ~0ull;
  const i64 total = (i64)rows * k;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    const i64 r = i / k, c = i - r * k;
    const float v = load_any(x, r * ldx + c, in);
    if (finite(v)) m = fmaxf(m, fabsf(v));
    else bad = min(bad, (u64)i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) atomicMax(amax_bits, __float_as_uint(m));
  if (bad != ~0ull) atomicMin(first_bad, bad);
}
#endif
