// One warp's 16 query rows on mma.sync m16n8k16: S = Q·Kᵀ over NT n8 tiles of keys, and O += P·V
// with P straight from S's accumulators: the FA2 forward's and the paged decode's inner products.
// The including file defines D, NT, DT, ROW_BYTES, Q_IN_REGS and in_t, and swizzles its tiles by
// 16-byte chunk (XOR with the row's chunk bits) as both kernels' copies do.
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
