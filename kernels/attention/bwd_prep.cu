// The attention backward's first and last passes, around bwd_fa2_mma_sync.cu:
//   attn_bwd_pre:  D = rowsum(dO * O) in fp32 per query row, the fp32 dQ accumulator zeroed
//                  (unless its pointer is null: KILN_BWD_DQ_FUSED 2's accumulator, which the
//                  main kernel leaves zero), and the counters zeroed when not null;
//   attn_bwd_post: dQ = scale * accumulator, rounded to the input type, in Q's layout.
// Both are memory-bound and take the head dim and dtype at run time; KILN_PASS (0 pre, 1 post)
// picks the one a compile holds. A block owns PREP_ROWS query rows of one (batch, head): grid
// (ceil(sq / PREP_ROWS), heads_q, batch).
#include "attention/attn_bwd_args.cuh"

#define PREP_ROWS 64
#define PREP_THREADS 256

// The preprocess of rows [r0, r0 + PREP_ROWS) of head (b, h): lanes split a row into 16-byte
// chunks (d / 8 lanes per row, 32 / (d / 8) rows per warp pass), partial dot products summed
// across the row's lanes.
#if !defined(KILN_PASS) || (KILN_PASS != 0 && KILN_PASS != 1)
#error "KILN_PASS must be 0 (preprocess) or 1 (postprocess)"
#endif

#if KILN_PASS == 0
template <class T> __device__ __forceinline__ void pre_rows(const AttnBwdArgs& p, int b, int h, int r0) {
  const int lpr = p.d / 8;             // lanes per row: 8, 16 or 32
  const int rpp = 32 / lpr;            // rows per warp pass
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / lpr, c = lane % lpr;
  const T* og = static_cast<const T*>(p.o) + b * p.q_sb + h * p.q_sh;
  const T* dg = static_cast<const T*>(p.dout) + b * p.q_sb + h * p.q_sh;
  float* delta = p.delta + ((i64)b * p.heads_q + h) * p.sq;
  for (int r = r0 + warp * rpp + sub; r - sub < r0 + PREP_ROWS; r += (PREP_THREADS / 32) * rpp) {
    float s = 0.0f;
    const bool ok = r < p.sq && r < r0 + PREP_ROWS;
    if (ok) {
      const u32x4 a = *reinterpret_cast<const u32x4*>(og + (i64)r * p.q_ss + c * 8);
      const u32x4 e = *reinterpret_cast<const u32x4*>(dg + (i64)r * p.q_ss + c * 8);
      const u32 av[4] = {a.x, a.y, a.z, a.w}, ev[4] = {e.x, e.y, e.z, e.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) s = fmaf(half_to_float<T>(av[i], hi), half_to_float<T>(ev[i], hi), s);
    }
    // Every lane of the warp takes part (rows past the end add 0): xor within the row's lanes.
    for (int o = lpr / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (ok && c == 0) delta[r] = s;
  }
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS) attn_bwd_pre(AttnBwdArgs p) {
  const int h = blockIdx.y, b = blockIdx.z, r0 = blockIdx.x * PREP_ROWS;
  if (p.dtype == 0) {
    pre_rows<bf16>(p, b, h, r0);
  } else {
    pre_rows<f16>(p, b, h, r0);
  }
  // This block's rows of the accumulator: contiguous, d floats a row.
  const int rows = min(PREP_ROWS, p.sq - r0);
  if (p.dq_acc != nullptr) {
    float4* acc = reinterpret_cast<float4*>(p.dq_acc + (((i64)b * p.heads_q + h) * p.sq + r0) * p.d);
    const int n4 = rows * p.d / 4;
    for (int i = threadIdx.x; i < n4; i += PREP_THREADS) acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // The counters of the main kernel's query blocks that start among these rows.
  if (p.dq_sem != nullptr) {
    u32* sem = p.dq_sem + ((i64)b * p.heads_q + h) * p.m_blocks;
    for (int m = (r0 + p.m_block - 1) / p.m_block + threadIdx.x; m < p.m_blocks && m * p.m_block < r0 + rows;
         m += PREP_THREADS)
      sem[m] = 0;
  }
}

#else
template <class T> __device__ __forceinline__ void post_rows(const AttnBwdArgs& p, int b, int h, int r0) {
  const int cpr = p.d / 8; // 16-byte output chunks per row
  const int rows = min(PREP_ROWS, p.sq - r0);
  const float* acc = p.dq_acc + (((i64)b * p.heads_q + h) * p.sq + r0) * p.d;
  T* dq = static_cast<T*>(p.dq) + b * p.q_sb + h * p.q_sh;
  for (int i = threadIdx.x; i < rows * cpr; i += PREP_THREADS) {
    const int r = i / cpr, c = i % cpr;
    const float4 x = *reinterpret_cast<const float4*>(acc + (i64)r * p.d + c * 8);
    const float4 y = *reinterpret_cast<const float4*>(acc + (i64)r * p.d + c * 8 + 4);
    u32x4 out;
    out.x = pack2<T>(x.x * p.scale, x.y * p.scale);
    out.y = pack2<T>(x.z * p.scale, x.w * p.scale);
    out.z = pack2<T>(y.x * p.scale, y.y * p.scale);
    out.w = pack2<T>(y.z * p.scale, y.w * p.scale);
    *reinterpret_cast<u32x4*>(dq + (i64)(r0 + r) * p.q_ss + c * 8) = out;
  }
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS) attn_bwd_post(AttnBwdArgs p) {
  const int h = blockIdx.y, b = blockIdx.z, r0 = blockIdx.x * PREP_ROWS;
  if (p.dtype == 0) {
    post_rows<bf16>(p, b, h, r0);
  } else {
    post_rows<f16>(p, b, h, r0);
  }
}
#endif
