// What the 4-bit expert kernels share (moe/fp4_experts.cu, weights dequantised in registers;
// moe/fp4_experts_dq.cu, once per CTA into shared memory): the argument block, the wgmma widths
// a tile of a few tokens runs at, and the epilogue's stores. Needs KILN_SWIGLU and out_t.
#pragma once
#include "common/bulk_copy.cuh"
#include "common/fast_math.cuh"
#include "common/tma.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/sched.cuh"

// The argument block, laid out as `Fp4Args` in src/ops/moe/fp4/kernel.rs.
struct Fp4Args {
  const int* sched;            // moe_tile_prefix's tables, the tile counter, the expert ids
  void* y;                     // output rows in X's row space, ldy elements apart
  const float* route;          // SwiGLU: per-row routing weight, or null
  const float* escale;         // per expert (SwiGLU: gate, up) the epilogue factor
  const unsigned char* w;      // the prepacked weights
  i64 ldy, expert_bytes;       // expert_bytes: one expert's prepacked bytes
  int experts, n, katoms;      // katoms: 64-deep K atoms (K rounded up to 64)
  int tiles_n, group_m, by_expert;
};

// Y(row, n), Y(row, n + 1) = a, b; only columns below n_total; one word when aligned.
__device__ __forceinline__ void fp4_store2(out_t* y, i64 ldy, int n_total, i64 row, int n, float a, float b) {
  if (n >= n_total) return;
  out_t* dst = y + row * ldy + n;
  if (n + 1 < n_total && (reinterpret_cast<u64>(dst) % 4) == 0) {
    *reinterpret_cast<u32*>(dst) = pack2<out_t>(a, b);
    return;
  }
  dst[0] = from_float<out_t>(a);
  if (n + 1 < n_total) dst[1] = from_float<out_t>(b);
}

// The widths compiled: 8, 16, 32, then multiples of 32. Columns past the tile's loaded X rows
// read stale shared memory; each feeds only its own token's accumulator column, never stored.
__device__ __forceinline__ constexpr int fp4_width(int rows) {
  return rows <= 8 ? 8 : rows <= 16 ? 16 : rows <= 32 ? 32 : 32 * ((rows + 31) / 32);
}

// The stores of one 64-row block of wgmma results computed at width `width`: output columns
// col0 + (the block's rows), tokens tok0 + (its columns) of the tile. acc register i: output
// column col0 + 16w + g + 8((i>>1)&1) (w the warp in the warpgroup, g = lane/4), token
// 8(i>>2) + 2q + (i&1) (q = lane%4). Lanes g and g^1 hold adjacent columns: after one exchange
// with lane ^ 4 the even one stores token 2q's pair, the odd one token 2q+1's. SwiGLU: `gate`
// and `up` are the two projections' sums, each with its epilogue factor; else `gate` alone.
template <int NA>
__device__ __forceinline__ void fp4_store_block(const Fp4Args& p, const MoeTile& tile, int t, const float (&gate)[NA],
                                                const float (&up)[NA], float s_gate, float s_up, int width, int col0,
                                                int tok0) {
  out_t* y = static_cast<out_t*>(p.y);
  const int lane = t % 32, w = t / 32, g = lane / 4, q = lane % 4;
  const bool even = (g & 1) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * w + g + 8 * h;
    const int n = col0 + (even ? r : r - 1);
#pragma unroll
    for (int j = 0; j < NA / 4; ++j) {
      if (8 * j >= width) break;  // registers the tile's wgmma did not write
      const int tok = tok0 + 8 * j + 2 * q + (even ? 0 : 1);
      const i64 row = (i64)tile.row0 + tok;
      float v0 = gate[4 * j + 2 * h] * s_gate, v1 = gate[4 * j + 2 * h + 1] * s_gate;
      if constexpr (KILN_SWIGLU) {
        const float u0 = up[4 * j + 2 * h] * s_up, u1 = up[4 * j + 2 * h + 1] * s_up;
        // token tok0 + 8j + 2q is v0's, the next v1's; each has its own routing weight
        const int t0 = tok0 + 8 * j + 2 * q;
        const i64 row0 = (i64)tile.row0 + t0;
        const bool in0 = t0 < tile.valid_rows, in1 = t0 + 1 < tile.valid_rows;
        const float r0 = (p.route != nullptr && in0) ? p.route[row0] : 1.0f;
        const float r1 = (p.route != nullptr && in1) ? p.route[row0 + 1] : 1.0f;
        v0 = silu_tanh(v0) * u0 * r0;
        v1 = silu_tanh(v1) * u1 * r1;
      }
      const float got = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
      if (tok < tile.valid_rows) {
        if (even) fp4_store2(y, p.ldy, p.n, row, n, v0, got);
        else fp4_store2(y, p.ldy, p.n, row, n, got, v1);
      }
    }
  }
}

// The producer thread's walk over the tiles of the kernels whose tile is two weight atoms
// (moe/fp4_experts_dq.cu, moe/fp4_experts_w4a8*.cu): its CTA's first tile, then the global
// counter's; each published to the consumers, then fill(it, kb, tile, boxes, src, block_bytes) for
// each of its K atoms kb, ring iteration `it` counting on across tiles: `boxes` the tile's X boxes
// of XBOX rows (ceil(valid / XBOX)), `src` the atom kb of the tile's first weight block (weight
// blocks 2 tn and 2 tn + 1 of the expert: the GEMM's 64-row blocks of its 128 columns, or the
// SwiGLU's gate and up blocks of its 64, which the prepacks alternate), the second block_bytes on
// (a block's atoms follow each other along K).
template <int BM, int BN, int XBOX, u32 ATOM, class Args, class Fill>
__device__ __forceinline__ void fp4_walk_pairs(const Args& p, const MoeIndexRing& ring, const int* table,
                                               const Fill& fill) {
  const MoeTiles sp(table, p.sched, p.experts, p.tiles_n);
  u32 it = 0;
  int t = blockIdx.x;
  for (int j = 0;; ++j) {
    ring.publish(j, t);
    if (t >= sp.tiles) break;
    const MoeTile tile = moe_tile(table, p.experts, t, sp.tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
    const int boxes = (tile.valid_rows + XBOX - 1) / XBOX;
    const u64 block_bytes = (u64)p.katoms * ATOM;
    const unsigned char* src = p.w + (i64)sp.id(tile.expert) * p.expert_bytes + (u64)(2 * (tile.n0 / BN)) * block_bytes;
    for (int kb = 0; kb < p.katoms; ++kb, ++it, src += ATOM) fill(it, kb, tile, boxes, src, block_bytes);
    t = (int)gridDim.x + atomicAdd(sp.counter(), 1);
  }
}

// The producer thread of those kernels (fp4_walk_pairs): per K atom one stage, the tile's X rows
// at base + s * STAGE_BYTES in `boxes` TMA boxes (BK elements, 128 bytes a row), then its two
// atoms of ATOM bytes at X_BYTES further.
// SX_BYTES > 0 (W4A8's KILN_W4A8_SX=1): the K block's X scales of the tile's BM rows ride too, one
// box of `tma_sx` (the scales as one row) after the two atoms, from the tile's first scale
// `kb * x_rows + row0` rounded down to 4: a box must start on 16 bytes of global memory.
template <int STAGES, int BM, int BN, int BK, int XBOX, u32 X_BYTES, u32 ATOM, u32 STAGE_BYTES, u32 SX_BYTES = 0,
          class Args>
__device__ __forceinline__ void fp4_produce_pairs(const Args& p, const TmaMap* tma_x, const MbarRing<STAGES>& stages,
                                                  const MoeIndexRing& ring, const int* table, u32 base,
                                                  const TmaMap* tma_sx = nullptr) {
  tma_prefetch(tma_x);
  if constexpr (SX_BYTES > 0) tma_prefetch(tma_sx);
  fp4_walk_pairs<BM, BN, XBOX, ATOM>(p, ring, table, [&](u32 it, int kb, const MoeTile& tile, int boxes,
                                                          const unsigned char* src, u64 block_bytes) {
    const u32 bytes = boxes * XBOX * 128u + 2 * ATOM + SX_BYTES;  // X rows of 128 bytes
    ws_fill(stages, it, bytes, [&](int s, u32 bar) {
      const u32 sx = base + s * STAGE_BYTES;
      for (int b = 0; b < boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, tma_x, bar, kb * BK, tile.row0 + b * XBOX);
#pragma unroll
      for (int a = 0; a < 2; ++a) bulk_copy_g2s(sx + X_BYTES + a * ATOM, src + a * block_bytes, ATOM, bar);
      if constexpr (SX_BYTES > 0)
        tma_load_2d(sx + X_BYTES + 2 * ATOM, tma_sx, bar, (kb * p.x_rows + tile.row0) & ~3, 0);
    });
  });
}
