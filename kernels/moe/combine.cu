// MoE combine (sm_90, CUDA cores): a token's output row from the expert rows of its k pairs.
//   moe_combine_finish  the f32 accumulator the down projection's epilogue added the weighted
//                       rows into (atomically), converted to the output dtype;
//   moe_combine_rows    out[t] = sum over j = 0..k-1 of w[r] * rows[r], r = pair_row[t k + j],
//                       in that order (deterministic), w the routing weight or 1 (rows already
//                       weighted), summed in f32.
// A token with a dropped pair (pair_row -1: an expert id out of range; or a row past the rows
// given) gets NaN: its result is not a number rather than silently short of an expert. Blocks of 256 threads, 8 columns each;
// grid (ceil(H / 2048), T). H is a multiple of 8 (16-byte rows).
#include "common/types.cuh"

constexpr int THREADS = 256;

// 8 values of a row of `dtype` (0 bf16, 1 f16, 2 f32) from element i (a multiple of 8).
__device__ __forceinline__ void load8(const void* p, int dtype, i64 i, float (&v)[8]) {
  if (dtype == 2) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const float4 a = q[0], b = q[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
  const u32x4 w = *reinterpret_cast<const u32x4*>(static_cast<const u16*>(p) + i);
  const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = dtype == 0 ? half_to_float<bf16>(words[j / 2], j % 2) : half_to_float<f16>(words[j / 2], j % 2);
}

__device__ __forceinline__ void store8(void* p, int dtype, i64 i, const float (&v)[8]) {
  if (dtype == 2) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
    float4 a, b;
    a.x = v[0], a.y = v[1], a.z = v[2], a.w = v[3];
    b.x = v[4], b.y = v[5], b.z = v[6], b.w = v[7];
    q[0] = a;
    q[1] = b;
    return;
  }
  u32x4 w;
  w.x = dtype == 0 ? pack2<bf16>(v[0], v[1]) : pack2<f16>(v[0], v[1]);
  w.y = dtype == 0 ? pack2<bf16>(v[2], v[3]) : pack2<f16>(v[2], v[3]);
  w.z = dtype == 0 ? pack2<bf16>(v[4], v[5]) : pack2<f16>(v[4], v[5]);
  w.w = dtype == 0 ? pack2<bf16>(v[6], v[7]) : pack2<f16>(v[6], v[7]);
  *reinterpret_cast<u32x4*>(static_cast<u16*>(p) + i) = w;
}

// Whether token t has a dropped pair (a row outside 0 .. n_rows - 1); every thread of the block
// gets the answer.
__device__ __forceinline__ bool token_dropped(const int* pair_row, int t, int k, int n_rows) {
  __shared__ int dropped;
  if (threadIdx.x == 0) dropped = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < k; j += THREADS) {
    const int r = pair_row[(i64)t * k + j];
    if (r < 0 || r >= n_rows) dropped = 1;
  }
  __syncthreads();
  return dropped != 0;
}

extern "C" __global__ void __launch_bounds__(THREADS)
    moe_combine_finish(const float* acc, void* out, const int* pair_row, int tokens, int top_k, int h, int out_dtype) {
  const int t = blockIdx.x;
  const bool dropped = token_dropped(pair_row, t, top_k, 0x7fffffff);
  const int c = (blockIdx.y * THREADS + threadIdx.x) * 8;
  if (c >= h) return;
  float v[8];
  load8(acc, 2, (i64)t * h + c, v);
  if (dropped)
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __int_as_float(0x7fc00000);
  store8(out, out_dtype, (i64)t * h + c, v);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    moe_combine_rows(const void* rows, int rows_dtype, const float* row_weight, const int* pair_row, int n_rows, void* out,
                     int out_dtype, int tokens, int top_k, int h) {
  const int t = blockIdx.x;
  const bool dropped = token_dropped(pair_row, t, top_k, n_rows);
  const int c = (blockIdx.y * THREADS + threadIdx.x) * 8;
  if (c >= h) return;
  float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = 0; j < top_k && !dropped; ++j) {
    const int r = pair_row[(i64)t * top_k + j];
    const float w = row_weight != nullptr ? row_weight[r] : 1.0f;
    float v[8];
    load8(rows, rows_dtype, (i64)r * h + c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum[i] = fmaf(w, v[i], sum[i]);
  }
  if (dropped)
#pragma unroll
    for (int j = 0; j < 8; ++j) sum[j] = __int_as_float(0x7fc00000);
  store8(out, out_dtype, (i64)t * h + c, sum);
}
