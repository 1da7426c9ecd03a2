// What the two warp-specialised GEMM kernels (gemm/wgmma_tma_ws.cu, cooperative, and
// gemm/wgmma_tma_ws_pingpong.cu) share: the launch extras, the grouped tile order and the
// register epilogue's 8-element store. Needs the problem defines (in_t / out_t, KILN_OUT).
#pragma once
#include "common/epilogue.cuh"
#include "common/gemm_args.cuh"
#include "common/quad_transpose.cuh"
#include "common/types.cuh"

#ifndef KILN_GROUP_M
#define KILN_GROUP_M 8
#endif

// Per-launch extras beside GemmArgs (mirrors `Extras` in src/ops/gemm/wgmma_tma_ws.rs).
//   splits > 1 (split-K):
//   cluster tiles t < split_from are one unit each; the others are `splits` units each, unit
//   split_from + (t - split_from) * splits + sp taking K blocks
//   [sp * kblocks / splits, (sp + 1) * kblocks / splits). Each such unit writes its fp32 partial
//   tile to ws (in the accumulator fragment order, so no transposition), then counts itself on
//   its tile's counter; the unit that arrives last adds the other partials into its registers,
//   resets the counter to 0 for the next launch, and runs the epilogue. ws and counters are
//   indexed by split block tile: (t - split_from) * CLUSTER + rank.
//   sk_w > 0 (stream-K; single 128-row CTAs only, splits then ignored): tiles t < split_from are
//   whole units as above; the sk_w K blocks of the tiles from split_from on, laid end to end, are
//   cut into one contiguous range per CTA, CTA g taking [sk_start(g), sk_start(g + 1)). A range
//   covers the tail of one tile, whole tiles and the head of another; a tile whose K blocks lie
//   in several ranges is reduced as a split tile (partials, counter, last arriver), CTA g's
//   partial going to ws slot 2g (the tile its range starts in) or 2g + 1 (the tile it ends in),
//   its counter at t - split_from.
struct Extras {
  float* ws;
  u32* counters;
  int splits;
  int split_from;
  u32 sk_w;
};

// Rows of the K-major A box the host's tensor map holds (mirrors `a_box_rows` in
// src/ops/gemm/wgmma_tma_ws.rs): a problem with fewer rows than a tile loads only those, rounded
// up to 8 (whole swizzle atoms), so a stage's A bytes are that many rows. TMA's zero fill of the
// rest was not free: with 64-row tiles at N = K = 4096, M = 8 ran 27 % slower than M = 64 (H100,
// session 14). The tile's rows past the box keep whatever shared memory held; the accumulator
// rows they feed lie past M, and no epilogue stores them.
template <int BM_>
__device__ __forceinline__ u32 a_box_rows(int m) {
  return m < BM_ ? (u32)((m + 7) & ~7) : (u32)BM_;
}

// Tile t of the grouped order: KILN_GROUP_M tile-rows are swept column by column, then the next
// group. Mirrors `tile_coords` in src/ops/gemm/wgmma_tma_ws.rs.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = KILN_GROUP_M * tiles_n;
  const int group = t / per_group;
  const int first_m = group * KILN_GROUP_M;
  const int rows = min(tiles_m - first_m, KILN_GROUP_M);
  const int r = t - group * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

// The register epilogue's store (its transposes: common/quad_transpose.cuh).
// C(m, n .. n + 7) = alpha * e + beta * C, storing only in-range elements; 16-byte accesses when
// all 8 are in range and aligned. C is read only when beta != 0.
__device__ __forceinline__ void store8(out_t* c, const GemmArgs& p, int m, int n, const float (&e)[4][2]) {
  if (m >= p.m || n >= p.n) return;
  const i64 idx = (i64)m * p.ldc + n;
  out_t* dst = c + idx;
  if (n + 8 > p.n || (reinterpret_cast<u64>(dst) % 16) != 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (n + i < p.n) store_scaled(c, idx + i, e[i / 2][i % 2], p.alpha, p.beta);
    return;
  }
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = p.alpha * e[i / 2][i % 2];
#if KILN_OUT == 2
  float4* d4 = reinterpret_cast<float4*>(dst);
  if (p.beta != 0.0f) {
    const float4 o0 = d4[0], o1 = d4[1];
    const float o[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] += p.beta * o[i];
  }
  float4 w0, w1;
  w0.x = v[0]; w0.y = v[1]; w0.z = v[2]; w0.w = v[3];
  w1.x = v[4]; w1.y = v[5]; w1.z = v[6]; w1.w = v[7];
  d4[0] = w0;
  d4[1] = w1;
#else
  u32x4* d = reinterpret_cast<u32x4*>(dst);
  if (p.beta != 0.0f) {
    const u32x4 o = *d;
    const u32 ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out_t lo, hi;
      lo.bits = (u16)(ow[i] & 0xffff);
      hi.bits = (u16)(ow[i] >> 16);
      v[2 * i] += p.beta * to_float(lo);
      v[2 * i + 1] += p.beta * to_float(hi);
    }
  }
  u32x4 w;
  w.x = pack2<out_t>(v[0], v[1]);
  w.y = pack2<out_t>(v[2], v[3]);
  w.z = pack2<out_t>(v[4], v[5]);
  w.w = pack2<out_t>(v[6], v[7]);
  *d = w;
#endif
}

// The register epilogue's stores of 8-column groups J0.. of a consumer's 64-row accumulator
// tile (N registers, N / 4 groups; register i holds row `row` + 8((i >> 1) & 1) of the warp's
// rows, column 8(i >> 2) + 2q + (i & 1), q = lane % 4), at columns n0..: fours of groups through
// the quad transpose, then store8. A short last four (the 168- and 224-wide tiles' last columns)
// is padded with zeros that no lane stores. Every lane of the warp shuffles.
template <int J0, int N>
__device__ __forceinline__ void store_acc_groups(out_t* c, const GemmArgs& p, int row, int n0, const float (&acc)[N],
                                                 int q) {
  constexpr int G = N / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j0 = J0; j0 < G; j0 += 4) {
      float e[4][2];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int j = j0 + s < G ? j0 + s : j0;
        e[s][0] = j0 + s < G ? acc[4 * j + 2 * h] : 0.0f;
        e[s][1] = j0 + s < G ? acc[4 * j + 2 * h + 1] : 0.0f;
      }
      quad_transpose(e, q);
      if (j0 + q < G) store8(c, p, row + 8 * h, n0 + 8 * (j0 + q), e);
    }
  }
}
