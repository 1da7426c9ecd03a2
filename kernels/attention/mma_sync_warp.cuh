// One warp's 16 query rows on mma.sync m16n8k16: S = Q·Kᵀ over NT n8 tiles of keys, the online
// softmax of that tile, and O += P·V with P straight from S's accumulators: the FA2 forward's and
// the paged decode's tile step. The including file defines D, NT, DT, ROW_BYTES, Q_IN_REGS, in_t
// and NEG_INF, and swizzles its tiles by 16-byte chunk (XOR with the row's chunk bits) as both do.
#pragma once

// s = Q·Kᵀ for this warp's 16 rows and its NT * 8 keys at `sk`.
__device__ __forceinline__ void qk(float (&s)[NT][4], const u32 (&qf)[Q_IN_REGS ? D / 16 : 1][4], u32 sq, u32 q_lane, u32 sk, u32 k_lane) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    u32 a[4];
#if Q_IN_REGS
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] = qf[kk][e];
#else
    ldmatrix_x4(a, sq + (q_lane ^ (kk << 5)));
#endif
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      u32 r[4];
      ldmatrix_x4(r, sk + ((k_lane + np * 16 * ROW_BYTES) ^ (kk << 5)));
      const u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_16816<in_t>(s[2 * np], a, b0);
      mma_16816<in_t>(s[2 * np + 1], a, b1);
    }
  }
}

// The online softmax of one tile over this lane's rows g and g + 8 (a quad of lanes shares a row;
// log2 units, the scale folded into one FMA): s becomes P, O and l are rescaled by the new max.
// Masked scores are -inf; a row with no visible key yet keeps m = -inf and P = 0.
__device__ __forceinline__ void softmax_tile(float (&s)[NT][4], float (&o)[DT][4], float (&m_r)[2], float (&l_r)[2], float scale_log2) {
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    float mx = NEG_INF;
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * rh], s[n][2 * rh + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_r[rh], mx * scale_log2);
    const float m_use = m_new == NEG_INF ? 0.0f : m_new; // a row with no key yet
    const float corr = ex2_approx(m_r[rh] - m_use);
    m_r[rh] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 2 * rh; e < 2 * rh + 2; ++e) {
        s[n][e] = ex2_approx(fmaf(s[n][e], scale_log2, -m_use));
        sum += s[n][e];
      }
    l_r[rh] = l_r[rh] * corr + sum; // this lane's partial; the quad is summed by the caller
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      o[d][2 * rh] *= corr;
      o[d][2 * rh + 1] *= corr;
    }
  }
}

// o += P·V over the same NT * 8 keys, P taken from the (already exponentiated) S accumulators.
__device__ __forceinline__ void pv(float (&o)[DT][4], const float (&s)[NT][4], u32 sv, u32 v_lane) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    const u32 a[4] = {pack2<in_t>(s[2 * kk][0], s[2 * kk][1]), pack2<in_t>(s[2 * kk][2], s[2 * kk][3]),
                      pack2<in_t>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2<in_t>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < DT / 2; ++dp) {
      u32 r[4];
      ldmatrix_x4_trans(r, sv + ((v_lane ^ (dp << 5)) + kk * 16 * ROW_BYTES));
      const u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_16816<in_t>(o[2 * dp], a, b0);
      mma_16816<in_t>(o[2 * dp + 1], a, b1);
    }
  }
}
