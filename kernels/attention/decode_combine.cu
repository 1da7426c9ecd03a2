// The second pass of flash-decoding: merges the splits of decode_paged into O and LSE. One warp
// per query row (sequence, head, token): weights exp(LSE_s - max) over the splits, O = Σ w_s O_s
// / Σ w_s, LSE = max + log Σ w_s. A split with no key (LSE -inf) weighs 0 and is not read; a
// NaN LSE (a bad block table or context length) makes the row NaN. The head dim is the
// argument block's (64, 128 or 256: 2, 4 or 8 columns per lane), so one variant per dtype.
#include "attention/decode_args.cuh"

#define MAX_VEC 8 // columns per lane at head dim 256
#define NEG_INF __int_as_float(0xff800000)
#define QNAN __int_as_float(0x7fffffff)

extern "C" __global__ void __launch_bounds__(128) decode_combine(DecodeArgs p) {
  const i64 nr = (i64)p.batch * p.heads_q * p.sq;
  const i64 row = (i64)blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= nr) return;
  float mx = NEG_INF;
  bool nan = false;
  for (int s = lane; s < p.splits; s += 32) {
    const float v = p.part_lse[s * nr + row];
    nan |= v != v;
    mx = fmaxf(mx, v);
  }
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
  nan = __any_sync(0xffffffffu, nan);
  const float mu = mx == NEG_INF ? 0.0f : mx;
  float sum = 0.0f;
  for (int s = lane; s < p.splits; s += 32) sum += expf(p.part_lse[s * nr + row] - mu);
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);

  const int d = p.head_dim, vec = d / 32;
  float acc[MAX_VEC];
#pragma unroll
  for (int v = 0; v < MAX_VEC; ++v) acc[v] = 0.0f;
  for (int s = 0; s < p.splits; ++s) {
    const float w = expf(p.part_lse[s * nr + row] - mu);
    if (w == 0.0f) continue;
    const float* src = p.part_o + (s * nr + row) * d + lane * vec;
#pragma unroll
    for (int v = 0; v < MAX_VEC; v += 2) {
      if (v < vec) {
        const float2 x = *reinterpret_cast<const float2*>(src + v);
        acc[v] = fmaf(w, x.x, acc[v]);
        acc[v + 1] = fmaf(w, x.y, acc[v + 1]);
      }
    }
  }
  const float inv = nan ? QNAN : (sum > 0.0f ? 1.0f / sum : 0.0f);
  const int i = (int)(row % p.sq);
  const i64 bh = row / p.sq;
  const int h = (int)(bh % p.heads_q);
  const i64 b = bh / p.heads_q;
  in_t* out = static_cast<in_t*>(p.o) + b * p.o_sb + i * p.o_ss + h * p.o_sh + lane * vec;
#pragma unroll
  for (int v = 0; v < MAX_VEC; v += 2)
    if (v < vec) *reinterpret_cast<u32*>(out + v) = pack2<in_t>(acc[v] * inv, acc[v + 1] * inv);
  if (lane == 0) p.lse[row] = nan ? QNAN : (mx == NEG_INF ? NEG_INF : mu + logf(sum));
}
