// Split-K through an fp32 workspace, for the persistent kernels whose two consumer warpgroups (256
// threads, synchronised by one named barrier) hold a tile's fp32 accumulators in wgmma fragment
// order, N per thread: each slice stores its partial tile, counts itself on the tile's counter,
// and the slice that counts last adds the others (GEMM wgmma_tma_ws, MoE swiglu_dual).
// The atomic form (the FP8 GEMM's small-M path): one fp32 tile per split tile, zero between
// launches; each slice adds its partial into it at the L2 (red.add, no round trip), counts
// itself, and the last reads the sum and sets the tile back to zero: one read of one tile
// instead of the others' partials one after another.
//
// A partial tile is 256 x N floats, thread ct (0..255) owning float4 i4 * 256 + ct (i4 < N / 4):
// stores and loads are coalesced across the threads, and no transposition is needed.
#pragma once
#include "common/mbarrier.cuh"
#include "common/mem_ops.cuh"
#include "common/types.cuh"
#include "common/wgmma.cuh"

// Work unit u of a split-K schedule as (tile t, slice sp of ns slices): units below split_from
// are whole tiles, the others `splits` consecutive slices of one tile each.
__device__ __forceinline__ void unit_tile(int u, int split_from, int splits, int& t, int& sp, int& ns) {
  if (u < split_from) {
    t = u;
    sp = 0;
    ns = 1;
    return;
  }
  const u32 v = (u32)(u - split_from);
  t = split_from + (int)(v / (u32)splits);
  sp = (int)(v % (u32)splits);
  ns = splits;
}

// Slice sp's K blocks [kb0, kb1) of `kblocks`. 32-bit: kblocks < 2^25 and splits <= 8 (a 64-bit
// division spilled the GEMM's 40-register producer).
__device__ __forceinline__ void split_range(int sp, int splits, int kblocks, int& kb0, int& kb1) {
  if (splits == 1) {
    kb0 = 0;
    kb1 = kblocks;
    return;
  }
  kb0 = (int)((u32)(sp * kblocks) / (u32)splits);
  kb1 = (int)((u32)((sp + 1) * kblocks) / (u32)splits);
}

// Stream-K: the first of w K blocks that CTA g of G takes (32-bit: the host keeps w * G under
// 2^31).
__device__ __forceinline__ u32 sk_start(u32 g, u32 w, u32 G) { return g * w / G; }

// Stream-K: how many of the G ranges (CTA g's [sk_start(g), sk_start(g + 1))) hold some of the
// kb K blocks from y0 (a tile's; y0 + kb <= w), with w >= G so that no range is empty: the range
// holding K block y is the last g with g * w / G <= y, ((y + 1) * G - 1) / w.
__device__ __forceinline__ int sk_ranges(u32 y0, u32 kb, u32 w, u32 G) {
  return (int)(((y0 + kb) * G - 1) / w - ((y0 + 1) * G - 1) / w) + 1;
}

// This thread's share of the partial tile at `slot` (bypassing L1: another SM reads it).
template <int N>
__device__ __forceinline__ void split_store_partial(float* slot, int ct, const float (&acc)[N]) {
  static_assert(N % 4 == 0, "the partial tile is float4s per thread");
#pragma unroll
  for (int i4 = 0; i4 < N / 4; ++i4)
    st_cg_f4(slot + 4 * (i4 * 256 + ct), acc[4 * i4], acc[4 * i4 + 1], acc[4 * i4 + 2], acc[4 * i4 + 3]);
}

// After every thread's split_store_partial: counts the slice on `counter` (thread ct 0, once the
// whole partial is out) and tells all 256 threads whether it counted last (named barrier `bar`
// with an OR: no shared flag); the last resets the counter to 0 for the next launch.
__device__ __forceinline__ bool split_arrive(u32* counter, int ns, int ct, u32 bar) {
  fence_gpu();
  named_barrier_sync(bar, 256);
  u32 last = 0;
  if (ct == 0) {
    last = atom_add_gpu(counter, 1) == (u32)(ns - 1);
    if (last) *counter = 0;  // every slice has counted: ready for reuse
  }
  // Through a shuffle from lane 0: with the barrier's predicate feeding the caller's branch
  // directly, ptxas kept two more values in local memory in the 256-wide consumers.
  return __shfl_sync(0xffffffffu, (int)named_barrier_or(bar, 256, last != 0), 0) != 0;
}

// The last slice adds the other slices' partials (slot s2 of `slots`, 256 x N floats apart) into
// its accumulators. Groups of up to 8 float4 loads in flight (`split_load_group`); the empty
// asm after each add keeps the compiler from hoisting the next group's loads above them (bounded
// registers).
// The float4 loads of one group: the largest divisor of n4 (a thread's float4s) up to 8.
constexpr int split_load_group(int n4) {
  int g = n4 < 8 ? n4 : 8;
  while (n4 % g != 0) --g;
  return g;
}

template <int N>
__device__ __forceinline__ void split_add_others(const float* slots, int ns, int sp, int ct, float (&acc)[N]) {
  constexpr int G = split_load_group(N / 4);  // 8, but 7 for the 168- and 224-wide tiles
  static_assert(N % 4 == 0 && (N / 4) % G == 0, "the partial tile is groups of float4s per thread");
  fence_gpu();
#pragma unroll 1
  for (int s2 = 0; s2 < ns; ++s2) {
    if (s2 == sp) continue;
    const float* src = slots + (i64)s2 * (256 * N) + 4 * ct;
#pragma unroll
    for (int g = 0; g < N / 4 / G; ++g) {
      float v[G][4];
#pragma unroll
      for (int j = 0; j < G; ++j) ld_cg_f4(src + 4 * 256 * (G * g + j), v[j][0], v[j][1], v[j][2], v[j][3]);
#pragma unroll
      for (int j = 0; j < G; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          acc[4 * (G * g + j) + x] += v[j][x];
          wgmma_fence_operand(acc[4 * (G * g + j) + x]);
        }
    }
  }
}

// The atomic form: this thread's share of its slice's partial added into the tile's sum (`live`
// false: nothing to add, e.g. rows past M).
template <int N>
__device__ __forceinline__ void split_red_partial(float* tile, int ct, const float (&acc)[N], bool live) {
  static_assert(N % 4 == 0, "the partial tile is float4s per thread");
  if (!live) return;
#pragma unroll
  for (int i4 = 0; i4 < N / 4; ++i4)
    red_add_f4(tile + 4 * (i4 * 256 + ct), acc[4 * i4], acc[4 * i4 + 1], acc[4 * i4 + 2], acc[4 * i4 + 3]);
}

// The atomic form, in the slice that counted last (after split_arrive): the sum of every slice's
// partial, its own included, into acc (all loads in flight at once), and the tile set back to
// zero for the next launch (`live` false: this thread's share was never added to, and stays 0).
template <int N>
__device__ __forceinline__ void split_take_sum(float* tile, int ct, float (&acc)[N], bool live) {
  static_assert(N % 4 == 0, "the partial tile is float4s per thread");
  fence_gpu();
  if (!live) return;
#pragma unroll
  for (int i4 = 0; i4 < N / 4; ++i4)
    ld_cg_f4(tile + 4 * (i4 * 256 + ct), acc[4 * i4], acc[4 * i4 + 1], acc[4 * i4 + 2], acc[4 * i4 + 3]);
#pragma unroll
  for (int i4 = 0; i4 < N / 4; ++i4) st_cg_f4(tile + 4 * (i4 * 256 + ct), 0.0f, 0.0f, 0.0f, 0.0f);
}
