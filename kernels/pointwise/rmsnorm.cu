// RMSNorm of rows (sm_90, CUDA cores), transformers' rounding order: for each row r of x,
//   rstd = 1 / sqrt(mean(x[r]^2) + eps)          (f32 statistics)
//   out[r] = round(round(x[r] * rstd) * weight)   (as transformers' LlamaRMSNorm rounds)
// With a residual (FlashInfer's fused_add_rmsnorm, transformers' `hidden = residual + hidden`
// then the norm): residual[r] = round(residual[r] + x[r]) first, and the row normalised is that
// stored sum. Rows have their own strides; a row's columns are contiguous.
//   KILN_IN  0 bf16, 1 f16 (x, weight, residual and out share it)
//   KILN_VEC 8: 16-byte accesses, a row held in registers (cols a multiple of 8, rows 16-byte
//            aligned, at most 256 x PER x 8 = 16384 columns); 1: any shape, the row read twice.
// A group of `group` threads (a power of two, at most 256) takes one row; a block of 256
// threads takes 256 / group rows.
#include "common/types.cuh"

constexpr int THREADS = 256;
// Vectors of 8 a thread of the 16-byte variant keeps in registers.
constexpr int PER = 8;

struct NormArgs {
  const void* x;
  void* out;
  const void* weight;
  void* residual;  // null: no residual
  i64 x_rs, out_rs, res_rs;  // row strides, elements
  int rows, cols;
  int group;  // threads per row, a power of two
  float eps;
};

__device__ __forceinline__ void load8(const in_t* p, float (&v)[8]) {
  const u32x4 w = *reinterpret_cast<const u32x4*>(p);
  const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = half_to_float<in_t>(words[j / 2], j % 2);
}

__device__ __forceinline__ void store8(in_t* p, const float (&v)[8]) {
  u32x4 w;
  w.x = pack2<in_t>(v[0], v[1]);
  w.y = pack2<in_t>(v[2], v[3]);
  w.z = pack2<in_t>(v[4], v[5]);
  w.w = pack2<in_t>(v[6], v[7]);
  *reinterpret_cast<u32x4*>(p) = w;
}

// x rounded to the storage type and back.
__device__ __forceinline__ float rounded(float x) { return to_float(from_float<in_t>(x)); }

// The sum of `v` over the thread's group (every thread of the block calls it).
__device__ __forceinline__ float group_sum(float v, int group) {
  const int width = group < 32 ? group : 32;
  for (int o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (group <= 32) return v;
  __shared__ float part[THREADS / 32];
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) part[warp] = v;
  __syncthreads();
  const int first = warp & ~(group / 32 - 1);
  float s = 0.f;
  for (int w = 0; w < group / 32; ++w) s += part[first + w];
  return s;
}

extern "C" __global__ void __launch_bounds__(THREADS) rmsnorm(NormArgs p) {
  const int group = p.group;
  const int lane = threadIdx.x & (group - 1);
  const i64 row = (i64)blockIdx.x * (blockDim.x / group) + threadIdx.x / group;
  const bool live = row < p.rows;
  const in_t* x = static_cast<const in_t*>(p.x) + row * p.x_rs;
  in_t* res = p.residual ? static_cast<in_t*>(p.residual) + row * p.res_rs : nullptr;
  in_t* out = static_cast<in_t*>(p.out) + row * p.out_rs;
  const in_t* w = static_cast<const in_t*>(p.weight);
  float ss = 0.f;
#if KILN_VEC == 8
  const int nvec = p.cols / 8;
  float v[PER][8];
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int c = (lane + j * group) * 8;
    if (!live || c >= p.cols) continue;
    load8(x + c, v[j]);
    if (res) {
      float r[8];
      load8(res + c, r);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[j][i] = rounded(r[i] + v[j][i]);
      store8(res + c, v[j]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) ss = fmaf(v[j][i], v[j][i], ss);
  }
  const float rstd = rsqrtf(group_sum(ss, group) / (float)p.cols + p.eps);
  if (!live) return;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int c = (lane + j * group) * 8;
    if (lane + j * group >= nvec) continue;
    float wv[8], o[8];
    load8(w + c, wv);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = rounded(v[j][i] * rstd) * wv[i];
    store8(out + c, o);
  }
#else
  // Any shape and alignment: one element per access, the row read again for the output (from
  // the residual just written, when there is one: the same thread wrote those elements).
  if (live) {
    for (int c = lane; c < p.cols; c += group) {
      float xv = to_float(x[c]);
      if (res) {
        xv = rounded(to_float(res[c]) + xv);
        res[c] = from_float<in_t>(xv);
      }
      ss = fmaf(xv, xv, ss);
    }
  }
  const float rstd = rsqrtf(group_sum(ss, group) / (float)p.cols + p.eps);
  if (!live) return;
  const in_t* src = res ? res : x;
  for (int c = lane; c < p.cols; c += group)
    out[c] = from_float<in_t>(rounded(to_float(src[c]) * rstd) * to_float(w[c]));
#endif
}
