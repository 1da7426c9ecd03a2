// MoE expert GEMMs with 4-bit weights for experts of many rows (sm_90a): the grouped GEMM
// Y = X·W[e]ᵀ and, with KILN_SWIGLU, the fused H = silu(X·W1[e]ᵀ) ⊙ (X·W3[e]ᵀ), as
// moe/fp4_experts.cu computes them, but each stage's weights are dequantised once per CTA into
// shared memory as bf16 (or f16), where both consumer warpgroups read them by wgmma, each for its
// own 128 of the tile's 256 tokens. fp4_experts.cu dequantises in registers, which a consumer
// cannot share: its tile of 128 tokens spends one weight decode per 128 tokens; here one decode
// feeds 256, half the decode work per multiply, and each consumer decodes one atom of a stage's
// two instead of two of four. The cost: the bf16 atoms' 16 KB of shared-memory stores per stage
// and a 256-thread barrier per stage between the consumers.
//
// Swapped operands as in fp4_experts.cu (Yᵀ = W·Xᵀ): A is a 64-row weight atom (64 output
// columns of W, or the gate or up rows of the SwiGLU's 64 output columns), from shared memory;
// B is the consumer's tokens of the X tile. A tile is one expert's up to 256 tokens by two
// atoms: the GEMM's 128 output columns, or the SwiGLU's 64 (gate and up). Each consumer runs at
// the wgmma width of its own tokens (16, 32, 64, 96, 128; none when it has no tokens, but it
// still decodes its atom for the other).
//
// Per K step g (ring iteration it): consumer c waits for stage g, decodes atom c of it into bf16
// slot g % 3 (stmatrix, in the 128B-swizzled K-major layout wgmma reads), fences the async proxy,
// meets the other consumer at named barrier 1, issues its wgmmas on both atoms of slot g % 3, and
// waits until only that batch is in flight, which frees stage g - 1. Slot reuse: before the
// barrier of step g each consumer has waited for its batch g - 2, so after it both batches that
// read slot (g - 2) % 3 = (g + 1) % 3 are done, and step g + 1 may overwrite it.
#include "common/bulk_copy.cuh"
#include "common/stmatrix.cuh"
#include "common/tma.cuh"
#include "common/wgmma_ss.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/fp4_experts.cuh"
#include "moe/fp4_weights.cuh"

#if !defined(KILN_SWIGLU) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM)
#error "KILN_SWIGLU, KILN_STAGES, KILN_MAX_EXPERTS and KILN_SMEM must be defined by the host"
#endif

constexpr bool kBf16 = KILN_IN == 0;
constexpr int TT = 128;                // tokens per consumer; a tile has 2 TT
constexpr int STAGES = KILN_STAGES, BK = 64, SLOTS = 3;
constexpr int BN = KILN_SWIGLU ? 64 : 128;  // output columns of a tile
constexpr int XBOX = 16;
constexpr u32 X_BYTES = 2 * TT * BK * 2;
constexpr u32 W_BYTES = 2 * FP4_ATOM_BYTES;
constexpr u32 STAGE_BYTES = X_BYTES + (W_BYTES + 1023) / 1024 * 1024;
constexpr u32 ATOM16_BYTES = 64 * BK * 2;  // one decoded atom: 64 rows of 128 bytes
constexpr u32 SLOT_BYTES = 2 * ATOM16_BYTES;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 2) * 4;
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + SLOTS * SLOT_BYTES + 2 * STAGES * 8 + MOE_RING_BYTES +
                               TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, slots, ring and tables need");

struct DqCtx {
  u32 base, slots;
  MbarRing<STAGES> ring;
  int katoms, c, t, lane;
};

// Decodes atom `a` of stage s into slot `slot`: this thread's A fragments (moe/fp4_weights.cuh),
// stored by stmatrix where a TMA load with the 128B swizzle would have put the atom's bf16 rows.
// For k16 step j, lanes 8i .. 8i + 7 address rows 16w + (lane % 8) + 8(i & 1) of matrix i, at
// 16-byte chunk 2j + (i >> 1) of the row, swizzled by the row's low three bits.
__device__ __forceinline__ void dq_decode(const DqCtx& x, int s, int slot) {
  u32 f[4][4];
  const u32 src = x.base + s * STAGE_BYTES + X_BYTES + x.c * FP4_ATOM_BYTES;
  fp4_load_fragments<kBf16>(src, x.t, f);
  const int i = x.lane / 8, row = 16 * (x.t / 32) + (x.lane % 8) + 8 * (i & 1);
  const u32 dst = x.slots + slot * SLOT_BYTES + x.c * ATOM16_BYTES + row * 128;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32 chunk = (u32)(2 * j + (i >> 1)) ^ (u32)(row & 7);
    stmatrix_x4(dst + chunk * 16, f[j][0], f[j][1], f[j][2], f[j][3]);
  }
}

// One K step's wgmmas: 4 k16 steps x both atoms of `slot` against this consumer's tokens of
// stage s.
template <int N>
__device__ __forceinline__ void dq_issue(const DqCtx& x, float (&acc)[2][TT / 2], int s, int slot, bool first) {
  const u32 sa = x.slots + slot * SLOT_BYTES, sb = x.base + s * STAGE_BYTES + x.c * TT * 128;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u64 db = wgmma_desc_sw128(sb + j * 32, 16, 1024);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const u64 da = wgmma_desc_sw128(sa + m * ATOM16_BYTES + j * 32, 16, 1024);
      wgmma_m64k16<in_t, N, 0, 0>(acc[m], da, db, (first && j == 0) ? 0 : 1);
    }
  }
  wgmma_commit();
}

// The K loop of one tile at width N (0: this consumer has no tokens; it decodes and meets the
// other at each step all the same).
template <int N>
__device__ __forceinline__ void dq_mainloop(const DqCtx& x, float (&acc)[2][TT / 2], u32& it) {
  int prev = -1;
  for (int kb = 0; kb < x.katoms; ++kb, ++it) {
    const int s = x.ring.wait_full(it), slot = (int)(it % SLOTS);
    dq_decode(x, s, slot);
    fence_proxy_async_shared();
    named_barrier_sync(1, 256);
    if constexpr (N > 0) {
      dq_issue<N>(x, acc, s, slot, kb == 0);
      wgmma_wait<1>();
      if (prev >= 0) x.ring.release(prev, x.lane);
      prev = s;
    } else {
      x.ring.release(s, x.lane);
    }
  }
  if constexpr (N > 0) {
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(acc[m][i]);
    x.ring.release(prev, x.lane);
  }
}

// Widths 128, 96, 64, 32, 16, then 0 (no tokens).
template <int W>
__device__ __forceinline__ void dq_dispatch(int width, const DqCtx& x, float (&acc)[2][TT / 2], u32& it) {
  if constexpr (W == 0) {
    dq_mainloop<0>(x, acc, it);
  } else {
    if (width >= W || (W == 16 && width > 0)) dq_mainloop<W>(x, acc, it);
    else dq_dispatch<(W > 32 ? W - 32 : W == 32 ? 16 : 0)>(width, x, acc, it);
  }
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_fp4_experts_dq(const __grid_constant__ TmaMap tma_x, const Fp4Args p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzles follow absolute address bits
  const u32 slots = base + STAGES * STAGE_BYTES;
  const int E = p.experts;
  const MoeRings<STAGES> rings(smem_raw, raw, slots + SLOTS * SLOT_BYTES, p.sched, E, 8, 8,  // lane 0 of each consumer warp
                               [] {}, [] {});
  const MoeTiles sp(rings.table, p.sched, E, p.tiles_n);
  const int wg = warpgroup_index();

  ws_roles<40, 232>(
      wg,
      [&] {
        fp4_produce_pairs<STAGES, 2 * TT, BN, BK, XBOX, X_BYTES, FP4_ATOM_BYTES, STAGE_BYTES>(p, &tma_x, rings.stages, rings.ring, rings.table, base);
      },
      [&](int c) {
        DqCtx x;
        x.base = base;
        x.slots = slots;
        x.ring = rings.stages;
        x.katoms = p.katoms;
        x.c = c;
        x.t = threadIdx.x % 128;
        x.lane = threadIdx.x % 32;
        u32 it = 0;
        for (int j = 0;; ++j) {
          const int t = rings.ring.take(j, x.lane);
          if (t >= sp.tiles) break;
          const MoeTile tile = moe_tile(rings.table, E, t, sp.tiles_m, p.tiles_n, p.group_m, p.by_expert, 2 * TT, BN);
          const int mine = min(max(tile.valid_rows - c * TT, 0), TT);
          const int width = mine == 0 ? 0 : fp4_width(mine);
          float acc[2][TT / 2];
          dq_dispatch<TT>(width, x, acc, it);
          if (mine == 0) continue;
          const int expert = sp.id(tile.expert);
          if constexpr (KILN_SWIGLU) {
            fp4_store_block(p, tile, x.t, acc[0], acc[1], p.escale[2 * expert], p.escale[2 * expert + 1], width,
                            tile.n0, c * TT);
          } else {
            const float s = p.escale[expert];
#pragma unroll
            for (int m = 0; m < 2; ++m)
              fp4_store_block(p, tile, x.t, acc[m], acc[m], s, s, width, tile.n0 + 64 * m, c * TT);
          }
        }
      });
}
