// The online softmax of FlashAttention on wgmma accumulators (fp32, log2 units, exp2 with the
// scale folded in), for kernels/attention/fa3_wgmma.cu. Included after the kernel's constants:
// it reads BN (keys per tile), SR (score registers per thread), NT (8-column groups), BM (rows per
// block), KILN_EMU, KILN_LAZY and KILN_WINDOW.
#pragma once
#include "attention/window.cuh"
#include "common/fast_math.cuh"

#define NEG_INF __int_as_float(0xff800000)

// 2^x for x <= 0 on the FMA and integer pipes: x = i + f with i = round(x) (the 1.5·2^23 trick
// leaves i in the low mantissa bits), 2^f on [-0.5, 0.5] by a degree-3 fit (relative error
// 1.0e-4, below bf16's and f16's rounding of P), and i added to the exponent. x is clamped at
// -126, so a masked score gives 2^-126 instead of 0: negligible beside any visible key, and a row
// with no visible key at all is recognised by its running max (-inf) at the end.
__device__ __forceinline__ float ex2_emu(float x) {
  x = fmaxf(x, -126.0f);
  const float t = x + 12582912.0f;
  const float f = x - (t - 12582912.0f);
  float q = fmaf(0.0559228614f, f, 0.242646076f);
  q = fmaf(q, f, 0.693120931f);
  q = fmaf(q, f, 0.999924107f);
  return __int_as_float(__float_as_int(q) + (__float_as_int(t) << 23));
}

// The online softmax state of this thread's two rows (row0 and row0 + 8), in log2 units.
struct Softmax {
  float m[2], l[2];
  int row0, t, m0, off, skv; // off = skv - sq: query i sees keys j <= i + off when causal
  bool causal;
  float scale_log2;
#if KILN_WINDOW
  // Query i sees keys i + off - wl ..= i + off + wr (causal folded into wr; unbounded: 2^30).
  int wl, wr;
#endif

  // Masks and exponentiates the scores of the key tile at n0 in place; `corr` is the factor O
  // must be rescaled by before this tile's P·V is added.
  // Register i: row row0 + 8((i>>1)&1), column n0 + 8(i>>2) + 2t + (i&1).
  __device__ __forceinline__ void tile(float (&sc)[SR], int n0, float (&corr)[2]) {
#if KILN_WINDOW
    // Only tiles that cut the block's first row's right edge or its last row's left edge (or
    // the keys' end) are masked.
    if (n0 + BN > skv || n0 + BN - 1 > m0 + off + wr || n0 < m0 + BM - 1 + off - wl) {
#pragma unroll
      for (int i = 0; i < SR; ++i) {
        const int col = n0 + 8 * (i >> 2) + 2 * t + (i & 1);
        const int row = row0 + 8 * ((i >> 1) & 1);
        if (!window_sees(row, col, off, wl, wr, skv)) sc[i] = NEG_INF;
      }
    }
#else
    if (n0 + BN > skv || (causal && n0 + BN - 1 > m0 + off)) {
#pragma unroll
      for (int i = 0; i < SR; ++i) {
        const int col = n0 + 8 * (i >> 2) + 2 * t + (i & 1);
        const int row = row0 + 8 * ((i >> 1) & 1);
        const int lim = causal ? min(skv, row + off + 1) : skv;
        if (col >= lim) sc[i] = NEG_INF;
      }
    }
#endif
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      float mx = NEG_INF;
#pragma unroll
      for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * rh], sc[4 * n + 2 * rh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_cand = fmaxf(m[rh], mx * scale_log2);
#if KILN_LAZY
      // Lazy rescaling: the running max moves only when a tile's exceeds it by more than
      // KILN_LAZY (log2 units), so most tiles leave O and l alone (corr = 1, no rescale). P is
      // then at most 2^KILN_LAZY: exact enough in fp32 sums and in bf16/f16 (same relative
      // rounding), and l, O and the LSE all use the same stale max, so the result is unchanged.
      const bool bump = m_cand > m[rh] + (float)KILN_LAZY;  // -inf + T = -inf: the first key bumps
      const float m_new = bump ? m_cand : m[rh];
#else
      const float m_new = m_cand;
#endif
      const float m_use = m_new == NEG_INF ? 0.0f : m_new; // a row with no visible key yet
#if KILN_LAZY
      corr[rh] = bump ? ex2_approx(m[rh] - m_use) : 1.0f;  // a row still at -inf has O = 0 and l = 0
#else
      corr[rh] = ex2_approx(m[rh] - m_use);
#endif
      m[rh] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 4 * n + 2 * rh + e;
          const float x = fmaf(sc[i], scale_log2, -m_use);
          sc[i] = (KILN_EMU > 0 && n % (KILN_EMU > 0 ? KILN_EMU : 1) == KILN_EMU - 1) ? ex2_emu(x) : ex2_approx(x);
          sum += sc[i];
        }
      l[rh] = l[rh] * corr[rh] + sum; // this lane's partial; the quad is summed at the end
    }
  }
};
