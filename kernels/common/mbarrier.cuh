// mbarrier (sm_90): shared-memory barriers with a transaction count, for TMA producer/consumer
// pipelines. A fresh barrier is in phase 0: waiting on parity 1 returns at once, parity 0 blocks
// until the first phase completes. Barriers are 8-byte words in shared memory, passed as their
// 32-bit shared-window address (smem_u32).
#pragma once
#include "common/types.cuh"

// One thread initialises; follow with mbar_fence_init() and a block barrier before any use.
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) and the rest of the cluster.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives once and adds `bytes` to the transaction count this phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Adds `bytes` to the transaction count of the current phase without arriving: a thread that
// starts a TMA before the writes its own arrival must cover.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives `count` times at once (for `count` threads that will not arrive themselves).
__device__ __forceinline__ void mbar_arrive_count(u32 bar, u32 count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Blocks until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "KILN_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra KILN_MBAR_WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Cluster scope (sm_90). A barrier's address in a peer CTA of the cluster: the same offset there.
__device__ __forceinline__ u32 mbar_peer(u32 bar, u32 cta_rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(bar), "r"(cta_rank));
  return r;
}

// Arrives on a barrier given as a shared::cluster address (from mbar_peer; own CTA included).
// Default (.release.cta) semantics, as CUTLASS's consumer release: the reads being released are
// wgmma's, already complete after wgmma.wait_group.
__device__ __forceinline__ void mbar_arrive_cluster(u32 cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}

// The same, `count` arrivals at once (for threads that will not arrive themselves).
__device__ __forceinline__ void mbar_arrive_cluster_count(u32 cluster_bar, u32 count) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0], %1;\n" ::"r"(cluster_bar), "r"(count) : "memory");
}

__device__ __forceinline__ u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Every thread of every CTA in the cluster (exited threads excepted) meets here; orders earlier
// shared-memory writes (barrier inits included) before later accesses from peers.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32), e.g.
// one warpgroup synchronising without the rest of the block.
__device__ __forceinline__ void named_barrier_sync(u32 id, u32 threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The same where the threads meet from different instructions (two warpgroups whose code is two
// template instances, say): bar.sync is barrier.sync.aligned, whose threads must all execute one
// instruction, and compute-sanitizer's synccheck reports the d256 backward's consumers meeting
// from two (H200, 2026-12-02: "Divergent thread(s) in block"); barrier.sync is the form that
// allows it.
__device__ __forceinline__ void named_barrier_sync_any(u32 id, u32 threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Named barrier `id` over `threads` threads that also ORs `pred` across them: every thread gets
// true if any passed true. Publishes one thread's decision to all without shared memory (a flag
// written before a bar.sync and read after it is what compute-sanitizer's racecheck reports as a
// hazard across named barriers: ledger #75, #77).
__device__ __forceinline__ bool named_barrier_or(u32 id, u32 threads, bool pred) {
  u32 any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 q, %1, 0;\n bar.red.or.pred p, %2, %3, q;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(any)
      : "r"((u32)pred), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
// named_barrier_or where the threads meet from different instructions (named_barrier_sync_any).
__device__ __forceinline__ bool named_barrier_or_any(u32 id, u32 threads, bool pred) {
  u32 any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 q, %1, 0;\n barrier.red.or.pred p, %2, %3, q;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(any)
      : "r"((u32)pred), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
// Counts this warp on named barrier `id` without waiting: the signalling half of a
// producer/consumer hand-off whose other half calls named_barrier_sync with the same count.
__device__ __forceinline__ void named_barrier_arrive(u32 id, u32 threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
