// The softmax of the composed attention baseline: one warp per score row S[b, h, i, :] (fp32,
// written by a vendor GEMM), scaled, causally masked (bottom-right aligned), normalised in fp32
// with exp2 and the scale folded into log2(e); writes P in the input type (zeros where masked)
// and LSE = ln(sum(exp(scale * s))) (-inf for a row with no visible key).
#include "common/fast_math.cuh"
#include "common/types.cuh"

#define NEG_INF __int_as_float(0xff800000)
#define ROWS_PER_BLOCK 8

struct SoftmaxArgs {
  const float* s; // [rows, skv]
  void* p;        // [rows, skv], in_t
  float* lse;     // [rows]
  i64 rows;       // batch * heads * sq
  int sq, skv, causal;
  float scale_log2;
};

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * 32) attn_softmax(SoftmaxArgs a) {
  const i64 row = (i64)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;
  const int i = (int)(row % a.sq);
  const int lim = a.causal ? min(a.skv, max(0, i + a.skv - a.sq + 1)) : a.skv;
  const float* s = a.s + row * a.skv;
  in_t* p = static_cast<in_t*>(a.p) + row * a.skv;
  float mx = NEG_INF;
  for (int j = lane; j < lim; j += 32) mx = fmaxf(mx, s[j]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m = lim > 0 ? mx * a.scale_log2 : 0.0f;
  float sum = 0.0f;
  for (int j = lane; j < lim; j += 32) sum += ex2_approx(fmaf(s[j], a.scale_log2, -m));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int j = lane; j < a.skv; j += 32) p[j] = from_float<in_t>(j < lim ? ex2_approx(fmaf(s[j], a.scale_log2, -m)) * inv : 0.0f);
  if (lane == 0) a.lse[row] = sum > 0.0f ? (m + __log2f(sum)) * 0.69314718055994531f : NEG_INF;
}
