// The epilogue for a C that TMA cannot address (rows off 16 bytes, N off 16 bytes), and for C
// stored transposed (swap-AB): a consumer warpgroup's 64-row fp32 accumulator tile goes out in
// chunks of 32 columns (a tile 144 wide ends in a half chunk), each staged as f32 in the
// 128B-swizzled layout of stage_chunk_f32 (common/c_staging.cuh) and stored back by rows: lane l
// of a warp stores column l of each of the warp's 16 rows, so every store instruction writes one
// 64-byte (16-bit C) or 128-byte (f32 C) run of a row, coalesced whatever C's alignment.
// alpha * acc + beta * C is formed in fp32 and rounded once; C is read (as coalesced) only where
// beta != 0. A warp stages and reads back only its own 16 rows, so a warp barrier is all the
// synchronisation it needs, and one 8 KB buffer per consumer.
#pragma once
#include "common/c_staging.cuh"
#include "common/epilogue.cuh"
#include "common/gemm_args.cuh"

// Accumulator i of a tile with NR per thread, 0 past the end (the half chunk's padding).
template <int NR>
__device__ __forceinline__ float acc_or_zero(const float (&acc)[NR], int i) {
  return i < NR ? acc[i < NR ? i : NR - 1] : 0.0f;
}

// The consumer's tile of N / 2 accumulators per thread (wgmma m64nN fragment) whose element (0, 0)
// is C(m0, n0), through the 8 KB buffer `buf`; w, lane: the thread's warp in the warpgroup and lane.
template <class OutT, int NR>
__device__ __forceinline__ void store_rows_staged(OutT* c, const GemmArgs& p, u32 buf, int m0, int n0, const float (&acc)[NR],
                                                  int w, int lane) {
  static_assert(NR % 8 == 0, "whole 16-column halves of 32-column chunks");
  constexpr int CHUNKS = (NR + 15) / 16;  // 32 columns: 16 accumulators per thread
  const int rows = min(p.m - m0 - 16 * w, 16);  // of this warp's rows, those inside C
  const int n_end = min(p.n, n0 + 2 * NR);     // (the half chunk's padding is not stored)
#pragma unroll
  for (int ch = 0; ch < CHUNKS; ++ch) {
    const int col = n0 + 32 * ch + lane;
    if (n0 + 32 * ch >= n_end) break;  // (uniform)
    __syncwarp();  // the lanes' reads of the chunk before are done
    stage_chunk_f32(buf, ch, w, lane, [&](int i) { return acc_or_zero(acc, i); });
    __syncwarp();
    if (col < n_end) {
      OutT* dst = c + (i64)(m0 + 16 * w) * p.ldc + col;
#pragma unroll 4
      for (int r = 0; r < rows; ++r) {
        // column `lane` of staged row 16w + r: 16-byte chunk lane / 4, swizzled
        const float v = ld_shared_f32(buf + swizzle128_offset(16 * w + r, lane / 4) + 4u * (lane % 4));
        store_scaled(dst, (i64)r * p.ldc, v, p.alpha, p.beta);
      }
    }
  }
}

// Swap-AB (KILN_C_T): the kernel computes C^T = B^T A^T, a problem of p.m = N rows and p.n = M
// columns, and its element (i, j) is C(j, i), at c[j * ldc + i]. The tile is staged as in
// store_rows_staged and read back down its columns: lane l takes staged row 16w + l % 16 (a column
// of C) and every other staged column from l / 16 (rows of C), so a store instruction writes two
// 32-byte (16-bit C) runs, each 16 consecutive elements of a row of C.
template <class OutT, int NR>
__device__ __forceinline__ void store_cols_staged(OutT* c, const GemmArgs& p, u32 buf, int m0, int n0, const float (&acc)[NR],
                                                  int w, int lane) {
  static_assert(NR % 8 == 0, "whole 16-column halves of 32-column chunks");
  constexpr int CHUNKS = (NR + 15) / 16;
  const int r = lane % 16, i = m0 + 16 * w + r;  // this lane's staged row: C's column i
  const int n_end = min(p.n, n0 + 2 * NR);
#pragma unroll
  for (int ch = 0; ch < CHUNKS; ++ch) {
    const int j0 = n0 + 32 * ch;
    if (j0 >= n_end) break;  // (uniform)
    __syncwarp();
    stage_chunk_f32(buf, ch, w, lane, [&](int x) { return acc_or_zero(acc, x); });
    __syncwarp();
    if (i < p.m) {
#pragma unroll 4
      for (int jj = lane / 16; jj < 32; jj += 2) {
        if (j0 + jj >= n_end) break;
        const float v = ld_shared_f32(buf + swizzle128_offset(16 * w + r, jj / 4) + 4u * (jj % 4));
        store_scaled(c, (i64)(j0 + jj) * p.ldc + i, v, p.alpha, p.beta);
      }
    }
  }
}
