// The ring of shared-memory stages that a producer fills and consumers drain, guarded by a
// full and an empty mbarrier per stage (common/mbarrier.cuh): the one place that says which
// stage a ring iteration uses and which phase of its barriers it waits on. Iteration `it` uses
// stage it % STAGES, and its barriers complete their (it / STAGES)-th phase: consumers wait on
// full with parity (it / STAGES) & 1; the producer waits on empty with the other parity, which
// a fresh barrier passes at once (the first lap finds every stage free).
//   full[s]:  count 1 (the producer's arrive.expect_tx) plus the stage's bytes.
//   empty[s]: one arrival per consumer warp that reads the stage (lane 0, once its reads are
//             done), on every CTA that multicasts into it.
// Iteration counters are any integer type: each kernel keeps its own (u32 or int), and the
// division is done in that type.
#pragma once
#include "common/mbarrier.cuh"

// EMPTY_AT: where the empty barriers start, in barriers after the full ones (STAGES: right after
// them; a kernel with two rings over the same stages interleaves their barrier arrays).
template <int STAGES, int EMPTY_AT = STAGES>
struct MbarRing {
  u32 bars;  // full[s] at bars + 8s, empty[s] at bars + 8(EMPTY_AT + s)

  __device__ __forceinline__ u32 full(int s) const { return bars + 8u * s; }
  __device__ __forceinline__ u32 empty(int s) const { return bars + 8u * (EMPTY_AT + s); }
  template <class I> static __device__ __forceinline__ int slot(I it) { return it % STAGES; }
  template <class I> static __device__ __forceinline__ u32 parity(I it) { return (it / STAGES) & 1; }

  // One thread, before mbar_fence_init() and the block (or cluster) barrier. `full_count`: the
  // producer's arrive.expect_tx, plus any arrivals for copies that are not TMA's.
  __device__ __forceinline__ void init(u32 empty_count, u32 full_count = 1) const {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), full_count);    // the producer's arrive.expect_tx
      mbar_init(empty(s), empty_count);  // the consumer warps' releases
    }
  }

  // The producer: waits until iteration it's stage is free and returns it. With a cluster this
  // also waits for the peers' consumers, whose stage this CTA's multicast overwrites.
  template <class I> __device__ __forceinline__ int acquire(I it) const {
    const int s = slot(it);
    mbar_wait(empty(s), parity(it) ^ 1);
    return s;
  }
  // acquire(), then arms full[s] with the bytes the stage's loads will deliver (zero-filled
  // parts of boxes count too).
  template <class I> __device__ __forceinline__ int acquire(I it, u32 bytes) const {
    const int s = acquire(it);
    mbar_arrive_expect_tx(full(s), bytes);
    return s;
  }

  // A consumer: waits until iteration it's stage has landed and returns it.
  template <class I> __device__ __forceinline__ int wait_full(I it) const {
    const int s = slot(it);
    mbar_wait(full(s), parity(it));
    return s;
  }

  // A consumer warp frees stage s: one arrival from lane 0, on every CTA of the cluster (CLUSTER
  // CTAs multicast into it). The reads being released are complete (wgmma.wait_group).
  template <int CLUSTER = 1> __device__ __forceinline__ void release(int s, int lane) const {
    if (lane != 0) return;
    if (CLUSTER == 1) {
      mbar_arrive(empty(s));
    } else {
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(mbar_peer(empty(s), r));
    }
  }
};
