// A WGMMA operand tile that TMA cannot address (a row stride that is not a multiple of 16 bytes,
// or a base off 16 bytes), copied in place by a producer warpgroup into the same 128B-swizzled
// shared layout a TMA load with CU_TENSOR_MAP_SWIZZLE_128B writes, so the consumers' wgmma
// descriptors read it unchanged. Each copy is as wide as every row start of the operand allows
// (16, 8 or 4 bytes by cp.async; 2 bytes, an odd stride, by plain loads and shared stores), and
// what lies outside the operand is zero-filled.
//
// The tile is ROWS rows along the operand's strided dimension x COLS elements (a multiple of 64)
// along its contiguous one, stored as COLS / 64 boxes of ROWS rows of 128 bytes, box b at
// b * ROWS * 128: a K-major operand is one box of BM (or BN) rows of 64 K; an MN-major one is
// boxes of 64 K rows of 64 M (or N) elements (common/gemm_ws.cuh). Eight threads copy one row's
// 128 bytes (cp_tile_w).
#pragma once
#include "common/cp_async.cuh"
#include "common/swizzle.cuh"

// The widest copy (16, 8, 4 or 2 bytes) that every row start of a 16-bit operand at `ptr`
// with rows `ld` elements apart allows.
__device__ __forceinline__ int cp_tile_bytes(const void* ptr, i64 ld) {
  const u64 x = reinterpret_cast<u64>(ptr) | (u64)(ld * 2) | 16u;
  return (int)(x & (~x + 1u));
}

// Copies 8 bytes, the first src_bytes (0..8) of them from src (8-byte aligned; not read when
// src_bytes is 0), zero-filling the rest.
__device__ __forceinline__ void cp_async8_zfill(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// As cp_async4_zfill (common/cp_async.cuh) with any src_bytes 0..4.
__device__ __forceinline__ void cp_async4_zfill_n(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// The 16-byte chunk at dst from the n (0..8) 16-bit elements at src, zeros after them, with W-byte
// copies (src W-byte aligned; 2: plain loads and one shared store, complete when this returns).
template <int W>
__device__ __forceinline__ void cp_tile_chunk(u32 dst, const u16* src, const u16* any, int n) {
  if constexpr (W == 16) {
    cp_async16_zfill(dst, n > 0 ? (const void*)src : (const void*)any, 2 * n);
  } else if constexpr (W == 2) {
    copy_elems16(dst, src, n);
  } else {
    constexpr int E = W / 2;  // elements per copy
#pragma unroll
    for (int q = 0; q < 16 / W; ++q) {
      const int v = min(max(n - q * E, 0), E);
      const void* s = v > 0 ? (const void*)(src + q * E) : (const void*)any;
      if constexpr (W == 8) cp_async8_zfill(dst + q * W, s, 2 * v);
      else cp_async4_zfill_n(dst + q * W, s, 2 * v);
    }
  }
}

// Thread t's (0..127) share of the tile whose row r, element e is operand element
// (r0 + r, c0 + e) at src[(r0 + r) * ld + c0 + e], rows from r_lim and elements from c_lim on
// being zeros; W-byte copies (cp_tile_bytes). Thread t copies 16-byte chunk t % 8 of rows t / 8,
// t / 8 + 16, ..: eight threads cover a row's 128 bytes.
template <int ROWS, int COLS, int W>
__device__ __forceinline__ void cp_tile_w(u32 dst, const u16* src, i64 ld, int r0, int r_lim, int c0, int c_lim, int t) {
  static_assert(ROWS % 16 == 0 && COLS % 64 == 0, "whole 16-row groups of whole 64-element boxes");
  const int j = t % 8;
#pragma unroll 1
  for (int b = 0; b < COLS / 64; ++b) {
    const int c = c0 + 64 * b + 8 * j;
    const int n = min(max(c_lim - c, 0), 8);
#pragma unroll 2
    for (int r = t / 8; r < ROWS; r += 16) {
      const int g = r0 + r;
      const int nr = g < r_lim ? n : 0;
      cp_tile_chunk<W>(dst + b * ROWS * 128 + swizzle128_offset(r, j), src + (i64)g * ld + c, src, nr);
    }
  }
}

// cp_tile_w at the width `bytes` (cp_tile_bytes) picks.
template <int ROWS, int COLS>
__device__ __forceinline__ void cp_tile(u32 dst, const void* src_, i64 ld, int r0, int r_lim, int c0, int c_lim, int bytes,
                                        int t) {
  const u16* src = static_cast<const u16*>(src_);
  switch (bytes) {
    case 16: cp_tile_w<ROWS, COLS, 16>(dst, src, ld, r0, r_lim, c0, c_lim, t); break;
    case 8: cp_tile_w<ROWS, COLS, 8>(dst, src, ld, r0, r_lim, c0, c_lim, t); break;
    case 4: cp_tile_w<ROWS, COLS, 4>(dst, src, ld, r0, r_lim, c0, c_lim, t); break;
    default: cp_tile_w<ROWS, COLS, 2>(dst, src, ld, r0, r_lim, c0, c_lim, t); break;
  }
}
