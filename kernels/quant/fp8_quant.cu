// Quantisation to FP8 (sm_89+): a row-major X [rows, cols] (bf16, f16 or f32, leading dimension
// ldx) to codes Q [rows, cols] (leading dimension ldq) and fp32 scales, one scale per group:
//   KILN_QGRAN 0  per tensor:  one scale; fp8_amax first reduces the tensor's amax into a word
//                              the host zeroed, fp8_quant then reads it.
//   KILN_QGRAN 1  per row:     scales[r]; one block of 256 threads per row (two passes).
//   KILN_QGRAN 2  1 x 128:     scales[kb * rows + r] (M-major, as DeepGEMM's and cuBLASLt's
//                              activation scales); one warp per group, 4 elements a lane.
//   KILN_QGRAN 3  128 x 128:   scales[rb * ceil(cols / 128) + kb]; one block per tile, 64
//                              elements a thread kept in registers between the two passes.
// A group's amax is max |x| (NaN ignored, from 0), its scale fp8_scale_for (fp32, or UE8M0 when
// ue8m0 != 0), each code fp8_quantize: the arithmetic of src/formats/scale.rs, so the CPU
// reference (src/reference/fp8.rs) is bit-exact. Groups at the edges hold fewer elements.
// KILN_QIN: 0 bf16, 1 f16, 2 f32. KILN_FP8: 0 e4m3fn, 1 e5m2.
#include "common/fp8.cuh"

#if !defined(KILN_QIN) || !defined(KILN_QGRAN) || !defined(KILN_FP8)
#error "fp8_quant.cu needs KILN_QIN, KILN_QGRAN and KILN_FP8 (src/ops/fp8/quant.rs defines them)"
#endif
#if KILN_QIN == 0
typedef bf16 qin_t;
#elif KILN_QIN == 1
typedef f16 qin_t;
#else
typedef float qin_t;
#endif
constexpr int FMT = KILN_FP8;

__device__ __forceinline__ float load_x(const qin_t* x, i64 i) { return to_float(x[i]); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The max of v over the block's 256 threads, returned to all of them.
__device__ __forceinline__ float block_max256(float v, float* red) {
  v = warp_max(v);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red may still be read from an earlier call
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < 8 ? red[lane] : 0.0f;
  return warp_max(v);
}

// Four codes for columns c0..c0+3 of row r (those inside cols), one 32-bit store when it can.
__device__ __forceinline__ void store4(u8* q, i64 ldq, int r, int c0, int cols, const float (&v)[4], float scale) {
  const i64 base = (i64)r * ldq + c0;
  if (c0 + 4 <= cols && (base & 3) == 0) {
    *reinterpret_cast<u32*>(q + base) = fp8x4_encode<FMT>(div_rn(v[0], scale), div_rn(v[1], scale),
                                                          div_rn(v[2], scale), div_rn(v[3], scale));
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (c0 + j < cols) q[base + j] = fp8_quantize<FMT>(v[j], scale);
}

__device__ __forceinline__ void load4(const qin_t* x, i64 ldx, int r, int c0, int cols, float (&v)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = c0 + j < cols ? load_x(x, (i64)r * ldx + c0 + j) : 0.0f;
}

#if KILN_QGRAN == 0
// The tensor's amax into *amax_bits (zeroed by the host): each block reduces a grid-stride share,
// then one atomicMax of its bit pattern (for non-negative floats the integer order is the
// numeric order; the block max is never NaN).
extern "C" __global__ void __launch_bounds__(256) fp8_amax(const qin_t* x, int rows, int cols, i64 ldx, u32* amax_bits) {
  __shared__ float red[8];
  float m = 0.0f;
  const i64 total = (i64)rows * cols;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    const i64 r = i / cols, c = i - r * cols;
    m = fmaxf(m, fabsf(load_x(x, r * ldx + c)));
  }
  m = block_max256(m, red);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}
#endif

extern "C" __global__ void __launch_bounds__(256)
    fp8_quant(const qin_t* x, int rows, int cols, i64 ldx, u8* q, i64 ldq, float* scales, const u32* amax_bits, int ue8m0) {
  __shared__ float red[8];
#if KILN_QGRAN == 0
  const float scale = fp8_scale_for<FMT>(__uint_as_float(*amax_bits), ue8m0 != 0);
  if (blockIdx.x == 0 && threadIdx.x == 0) scales[0] = scale;
  const int quads = (cols + 3) / 4;
  const i64 total = (i64)rows * quads;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    const int r = (int)(i / quads), c0 = 4 * (int)(i - (i64)r * quads);
    float v[4];
    load4(x, ldx, r, c0, cols, v);
    store4(q, ldq, r, c0, cols, v, scale);
  }
#elif KILN_QGRAN == 1
  const int r = blockIdx.x;
  float m = 0.0f;
  for (int c = threadIdx.x; c < cols; c += 256) m = fmaxf(m, fabsf(load_x(x, (i64)r * ldx + c)));
  const float scale = fp8_scale_for<FMT>(block_max256(m, red), ue8m0 != 0);
  if (threadIdx.x == 0) scales[r] = scale;
  for (int c0 = 4 * threadIdx.x; c0 < cols; c0 += 4 * 256) {
    float v[4];
    load4(x, ldx, r, c0, cols, v);
    store4(q, ldq, r, c0, cols, v, scale);
  }
#elif KILN_QGRAN == 2
  (void)red;
  const int kblocks = (cols + 127) / 128;
  const i64 g = (i64)blockIdx.x * 8 + threadIdx.x / 32;  // group: row-major over (row, kb)
  if (g >= (i64)rows * kblocks) return;
  const int r = (int)(g / kblocks), kb = (int)(g - (i64)r * kblocks);
  const int c0 = kb * 128 + 4 * (threadIdx.x % 32);
  float v[4];
  load4(x, ldx, r, c0, cols, v);
  const float m = warp_max(fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
  const float scale = fp8_scale_for<FMT>(m, ue8m0 != 0);
  if (threadIdx.x % 32 == 0) scales[(i64)kb * rows + r] = scale;
  store4(q, ldq, r, c0, cols, v, scale);
#else
  const int kblocks = (cols + 127) / 128;
  const int rb = blockIdx.x / kblocks, kb = blockIdx.x % kblocks;
  const int c0 = kb * 128 + 4 * (threadIdx.x % 32), r0 = rb * 128 + threadIdx.x / 32;
  float v[16][4];
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = r0 + 8 * i;
    if (r < rows) load4(x, ldx, r, c0, cols, v[i]);
    else v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0.0f;
    m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i][0]), fabsf(v[i][1])), fmaxf(fabsf(v[i][2]), fabsf(v[i][3]))));
  }
  const float scale = fp8_scale_for<FMT>(block_max256(m, red), ue8m0 != 0);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (r0 + 8 * i < rows) store4(q, ldq, r0 + 8 * i, c0, cols, v[i], scale);
#endif
}
