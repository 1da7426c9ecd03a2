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

// 16-bit C with beta = 0 (what a model's GEMM asks): the consumer's tile staged as rounded
// 16-bit pairs, a warp's 8 rows of BN at a time (8 x 2BN bytes per warp: all of the consumer's two
// 8 KB buffers at BN = 256), and stored by 16-byte-aligned windows of C's rows: lane l takes
// window l (and l + 32) of a row, the 8 elements of C between two 16-byte boundaries, so a store
// instruction writes 512 whole bytes of a row whatever the row's alignment (st.global.v4; the
// row's first and last windows, partly outside the tile, element by element). The window's
// elements are five staged 32-bit words from the row's shift on (its start's distance past a
// 16-byte boundary, the same for every lane), joined by funnel shifts. Staging:
// pair J of row r at 16-byte chunk J ^ r (of BN / 8), so a warp's 8 rows write distinct banks.
// Against store_rows_staged's 2-byte stores (64 bytes an instruction, partial sectors at each
// end) this is 8x fewer store instructions and whole sectors in the row's interior.
__device__ __forceinline__ void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void st_shared_u32(u32 a, u32 v) { asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory"); }

template <class OutT, int NR>
__device__ __forceinline__ void store_rows_vec16(OutT* c, const GemmArgs& p, u32 buf, int m0, int n0, const float (&acc)[NR],
                                                 int w, int lane) {
  static_assert(sizeof(OutT) == 2, "16-bit C");
  constexpr int BNT = 2 * NR, CH = BNT / 8, RB = 2 * BNT;  // tile width, its 16-byte chunks, row bytes
  static_assert(CH % 8 == 0, "the tile's width a multiple of 64 (the XOR swizzle of 8 chunks)");
  const u32 wbuf = buf + (u32)(w * 8 * RB);
  const int ncols = min(p.n - n0, BNT);
  const int rl = lane / 4, ql = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row0 = m0 + 16 * w + 8 * h;
    if (row0 >= p.m) break;  // (uniform)
    __syncwarp();             // the lanes' reads of the rows before are done
#pragma unroll
    for (int J = 0; J < CH; ++J)
      st_shared_u32(wbuf + rl * RB + ((J ^ rl) << 4) + 4 * ql,
                    pack2<OutT>(p.alpha * acc[4 * J + 2 * h], p.alpha * acc[4 * J + 2 * h + 1]));
    __syncwarp();
    const int rows = min(p.m - row0, 8);
    for (int r = 0; r < rows; ++r) {
      OutT* dst = c + (i64)(row0 + r) * p.ldc + n0;
      const int s = (int)(((u64)dst & 15) >> 1);  // elements of dst's 16-byte line before it
      OutT* line = dst - s;                       // 16-byte aligned
      const int nwin = (ncols + s + 7) >> 3;
      const u32 rbase = wbuf + r * RB, sh = 16u * (s & 1);
      // Window v starts at staged element 8v - s: in word 4v - ceil(s / 2), half-way where s is odd.
      for (int v = lane; v < nwin; v += 32) {
        const int q0 = 4 * v - ((s + 1) >> 1);
        u32 wd[5];
#pragma unroll
        for (int j = 0; j < 5; ++j) {  // (words outside the row only feed elements not stored)
          const int q = min(max(q0 + j, 0), CH * 4 - 1);
          wd[j] = ld_shared_u32(rbase + (((q >> 2) ^ r) << 4) + ((q & 3) << 2));
        }
        u32 o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = __funnelshift_r(wd[j], wd[j + 1], sh);
        const int e0 = 8 * v - s;  // the window's first element, from dst
        if (e0 >= 0 && e0 + 8 <= ncols) {
          st_global_v4(line + 8 * v, o[0], o[1], o[2], o[3]);
        } else {
#pragma unroll
          for (int x = 0; x < 8; ++x) {
            const int e = e0 + x;
            if (e >= 0 && e < ncols) line[8 * v + x].bits = (u16)(o[x / 2] >> (16 * (x & 1)));
          }
        }
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
