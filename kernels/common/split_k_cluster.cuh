// Split-K summed in a cluster's shared memory (the FP8 GEMM's small-M path, Fp8Args.reduce 2):
// a tile's slices run as one cluster of CTAs, one slice each (rank = slice); once every CTA's
// consumers are past their K blocks, the peers write their fp32 partial tiles into the ring of
// rank 0 (free by then: each CTA has one unit) and rank 0 adds them in slice order, then stores
// C. One SM-to-SM exchange in place of the L2's three round trips (the atomic adds' fence, the
// counter, the sum's read). Pairs along N (`128ptne/2c`): a pair a slice, each CTA's partial into
// the ring of its own slice 0 (split_cluster_put_to). The partial is split_k.cuh's layout:
// 256 x N floats, thread ct (0..255) owning float4 i4 * 256 + ct.
#pragma once
#include "common/mbarrier.cuh"
#include "common/mem_ops.cuh"
#include "common/types.cuh"
#include "common/wgmma.cuh"

// This thread's share of its partial tile to `dst`, a slot's shared::cluster address.
template <int N>
__device__ __forceinline__ void split_cluster_store(u32 dst, int ct, const float (&acc)[N]) {
  static_assert(N % 4 == 0, "the partial tile is float4s per thread");
#pragma unroll
  for (int i4 = 0; i4 < N / 4; ++i4)
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + 16u * (i4 * 256 + ct)),
                 "f"(acc[4 * i4]), "f"(acc[4 * i4 + 1]), "f"(acc[4 * i4 + 2]), "f"(acc[4 * i4 + 3])
                 : "memory");
}

// This thread's share of its partial tile into slot `slot` (a shared address of this CTA, the
// same offset in rank 0's) of the cluster's rank 0.
template <int N>
__device__ __forceinline__ void split_cluster_put(u32 slot, int ct, const float (&acc)[N]) {
  u32 dst;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(dst) : "r"(slot));
  split_cluster_store(dst, ct, acc);
}

// The same into the cluster's rank `rank` (pairs along N summing their slices: the pair's slice 0).
template <int N>
__device__ __forceinline__ void split_cluster_put_to(u32 slot, u32 rank, int ct, const float (&acc)[N]) {
  split_cluster_store(mbar_peer(slot, rank), ct, acc);
}

// Rank 0: the peers' partials (slots 0 .. ns - 2 from `slots`, 256 x N floats apart, slice 1 ..
// ns - 1) added into acc, its own slice 0, in slice order.
template <int N>
__device__ __forceinline__ void split_cluster_sum(u32 slots, int ns, int ct, float (&acc)[N]) {
  static_assert(N % 4 == 0, "the partial tile is float4s per thread");
#pragma unroll 1
  for (int s2 = 1; s2 < ns; ++s2) {
    const u32 src = slots + (u32)(s2 - 1) * (256u * N * 4u) + 16u * ct;
#pragma unroll
    for (int i4 = 0; i4 < N / 4; ++i4) {
      float v[4];
      ld_shared_f4(src + 16u * (i4 * 256), v[0], v[1], v[2], v[3]);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        acc[4 * i4 + x] += v[x];
        wgmma_fence_operand(acc[4 * i4 + x]);
      }
    }
  }
}
