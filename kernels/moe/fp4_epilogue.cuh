// The register path's epilogue for its wide tiles (64-256 tokens), KILN_FP4_EPI
// (`KILN_FP4_EPI=ahead|defer`, moe/fp4_experts.cu): a consumer's results packed first, then stored.
//
// Why: with the tokens as wgmma's N (swap-AB), a consumer thread holds 2 tokens of each group of
// 8 (32 in the 128-token tile) and fp4_store_block reads each token's routing weight from global
// memory right before the stores of its pair; the compiler cannot hoist a load
// above a store it cannot prove apart, so the SASS of the 128-token SwiGLU tile waits for 32
// dependent L2 or L1 round trips a tile, with the tensor pipe idle (both consumers finish a
// tile together). Here the routing weights of the thread's tokens are loaded at once (one round
// trip a chunk of 8 groups), the results packed to 16-bit pairs (the pair a lane stores after one exchange
// with lane ^ 4, as fp4_store_block) and stored: at once (KILN_FP4_EPI 1), or (2) row half 1 at
// once and row half 0 by fp4_flush after the next unit's first wgmma batch is issued, so those
// stores drain under the tensor work (kiln's bf16 SwiGLU defers its stores the same way; all 32
// packed registers held over would spill).
// Needs KILN_SWIGLU, out_t and Fp4Args (moe/fp4_experts.cuh).
#pragma once

// A consumer thread's packed results of one tile held over (KILN_FP4_EPI 2): v[j] is the pair it
// stores for row half 0 (output columns 16w + g, g's even lane the pair's first) and token group
// j; what the stores need beside. `pending` while not yet stored.
template <int J>
struct Fp4Packed {
  u32 v[J];  // row half 0's pairs (half 1 is stored at once: 32 more live registers would spill)
  i64 row0;   // the tile's first row of Y
  int valid;  // its tokens
  int col0;   // the consumer's first output column
  int width;  // the wgmma width the tile ran at: groups from width / 8 on were never computed
  bool pending;
};

// dst[0], dst[1] = the packed pair v, dst being column n of its row: only columns below n_total;
// one word when aligned, else halves.
__device__ __forceinline__ void fp4_store2_packed(out_t* dst, int n, int n_total, u32 v) {
  if (n >= n_total) return;
  if (n + 1 < n_total && (reinterpret_cast<u64>(dst) % 4) == 0) {
    *reinterpret_cast<u32*>(dst) = v;
    return;
  }
  reinterpret_cast<u16*>(dst)[0] = (u16)(v & 0xffffu);
  if (n + 1 < n_total) reinterpret_cast<u16*>(dst)[1] = (u16)(v >> 16);
}

// The tile's results of this consumer thread (accumulators as fp4_store_block reads them): the
// factors, silu and routing weights applied, each pair exchanged with lane ^ 4 and packed, then
// handed to sink(h, j, pair) (a store, or a register of Fp4Packed).
template <int NA, class Sink>
__device__ __forceinline__ void fp4_finish_block(const Fp4Args& p, const MoeTile& tile, int t, const float (&gate)[NA],
                                                 const float (&up)[NA], float s_gate, float s_up, int width,
                                                 const Sink& sink) {
  constexpr int J = NA / 4, JC = J < 8 ? J : 8;  // token groups; a chunk's routing weights at once
  const int lane = t % 32, g = lane / 4, q = lane % 4;
  const bool even = (g & 1) == 0;
  const bool routed = KILN_SWIGLU && p.route != nullptr;
  const float* route = routed ? p.route + tile.row0 + 2 * q : nullptr;  // token 2q's; offsets from one base
  const int left = tile.valid_rows - 2 * q;                              // tokens from 2q on
#pragma unroll
  for (int j0 = 0; j0 < J; j0 += JC) {
    if (8 * j0 >= width) break;
    // this thread's tokens 8j + 2q and 8j + 2q + 1 of the chunk: every routing weight asked for
    // before any is used
    float r[JC][2];
#pragma unroll
    for (int c = 0; c < JC; ++c) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int o = 8 * (j0 + c) + x;  // the token's offset from 2q
        r[c][x] = (routed && 8 * (j0 + c) < width && o < left) ? route[o] : 1.0f;
      }
    }
#pragma unroll
    for (int c = 0; c < JC; ++c) {
      const int j = j0 + c;
      if (8 * j >= width) break;  // registers the tile's wgmma did not write
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v0 = gate[4 * j + 2 * h] * s_gate, v1 = gate[4 * j + 2 * h + 1] * s_gate;
        if constexpr (KILN_SWIGLU) {
          v0 = silu_tanh(v0) * (up[4 * j + 2 * h] * s_up) * r[c][0];
          v1 = silu_tanh(v1) * (up[4 * j + 2 * h + 1] * s_up) * r[c][1];
        }
        const float got = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
        sink(h, j, even ? pack2<out_t>(v0, got) : pack2<out_t>(got, v1));
      }
    }
  }
}

// The lane's store of pair (h, j) of a tile whose first row of Y is row0 and first column col0.
struct Fp4PairStore {
  out_t* y;     // the lane's token of group 0, its pair's first column of row half 0
  i64 step;     // a token group further
  int left;     // the tile's tokens from the lane's first on
  int n;        // the pair's first column (row half 0)
  bool aligned;  // every pair one aligned word inside the row
  __device__ __forceinline__ Fp4PairStore(const Fp4Args& p, int t, i64 row0, int valid, int col0) {
    const int lane = t % 32, w = t / 32, g = lane / 4, q = lane % 4;
    const int tok0 = 2 * q + (g & 1);  // g even: token 2q's pair, g odd: 2q + 1's
    left = valid - tok0;
    n = col0 + 16 * w + (g & ~1);
    y = static_cast<out_t*>(p.y) + (row0 + tok0) * p.ldy + n;
    step = 8 * p.ldy;
    // even N and ldy, Y on 4 bytes: a pair never straddles the end nor a word
    aligned = p.n % 2 == 0 && p.ldy % 2 == 0 && reinterpret_cast<u64>(p.y) % 4 == 0;
  }
  __device__ __forceinline__ void operator()(const Fp4Args& p, int h, int j, u32 v) const {
    if (8 * j >= left) return;
    if (aligned) {
      if (n + 8 * h < p.n) *reinterpret_cast<u32*>(y + j * step + 8 * h) = v;
    } else {
      fp4_store2_packed(y + j * step + 8 * h, n + 8 * h, p.n, v);
    }
  }
};

// The tile's results stored now (KILN_FP4_EPI 1).
template <int NA>
__device__ __forceinline__ void fp4_store_block_ahead(const Fp4Args& p, const MoeTile& tile, int t,
                                                      const float (&gate)[NA], const float (&up)[NA], float s_gate,
                                                      float s_up, int width, int col0) {
  const Fp4PairStore st(p, t, tile.row0, tile.valid_rows, col0);
  fp4_finish_block(p, tile, t, gate, up, s_gate, s_up, width, [&](int h, int j, u32 v) { st(p, h, j, v); });
}

// The tile's results packed into `k` for fp4_flush (KILN_FP4_EPI 2).
template <int NA>
__device__ __forceinline__ void fp4_pack_block(const Fp4Args& p, const MoeTile& tile, int t, const float (&gate)[NA],
                                               const float (&up)[NA], float s_gate, float s_up, int width, int col0,
                                               Fp4Packed<NA / 4>& k) {
  const Fp4PairStore st(p, t, tile.row0, tile.valid_rows, col0);
  fp4_finish_block(p, tile, t, gate, up, s_gate, s_up, width, [&](int h, int j, u32 v) {
    if (h == 0) k.v[j] = v;
    else st(p, h, j, v);
  });
  k.row0 = tile.row0;
  k.valid = tile.valid_rows;
  k.col0 = col0;
  k.width = width;
  k.pending = true;
}

// Stores `k` if it holds a tile not yet stored (lane g even stores token 2q's pair of columns,
// its own and lane ^ 4's, g odd token 2q + 1's, as fp4_store_block). The tile's scalars pass
// through an empty asm first, so that the compiler computes the stores' addresses here and does
// not keep 32 of them live across the next tile's first stage (where it deferred them).
template <int J>
__device__ __forceinline__ void fp4_flush(const Fp4Args& p, int t, Fp4Packed<J>& k) {
  if (!k.pending) return;
  k.pending = false;
  i64 row0 = k.row0;
  int valid = k.valid, col0 = k.col0, width = k.width;
  asm volatile("" : "+l"(row0), "+r"(valid), "+r"(col0), "+r"(width));
  const Fp4PairStore st(p, t, row0, valid, col0);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (8 * j >= width) break;
    st(p, 0, j, k.v[j]);
  }
}
