// The warp-specialised pipeline that the persistent Hopper kernels fill in (gemm/wgmma_tma_ws*,
// moe/grouped_gemm, moe/grouped_swapab, moe/swiglu_dual): warpgroup 0 is the producer, whose
// thread 0 issues every TMA load into a ring of shared stages (common/ring.cuh); the other
// warpgroups consume the stages with wgmma. The kernel supplies its tile layout and three steps:
// the producer's loads of one stage, the consumers' wgmmas on one stage, and what a consumer does
// with a finished tile (its epilogue); this file supplies the rest:
//   ws_roles    the register split (setmaxnreg: the producer gives registers to the consumers)
//               and who runs what;
//   ws_fill     one producer step: wait for the stage to be free, arm its full barrier with the
//               bytes the loads bring, load;
//   ws_kloop    a consumer's K loop over a unit's ring iterations, one wgmma batch in flight,
//               each stage freed once the batch after it is issued and its own has completed.
// Needs __launch_bounds__(threads, 1) on the kernel, so that ptxas knows the registers at entry.
// A move onto these keeps each kernel's CUBIN (compared by code: text, resources): NVVM's
// register numbering, which ptxas's output follows, moves with the inlining order, so where a
// step written as a function changed it the kernel writes that step out (the GEMM kernels and
// swiglu_dual split the roles inline; the ping-pong GEMM and the swap-AB kernel keep their K
// loops). The steps are passed by reference: a closure copied into a parameter changed the code.
#pragma once
#include "common/ring.cuh"
#include "common/swizzle.cuh"
#include "common/wgmma.cuh"

// The role split: warpgroup `wg` 0 drops to PRODUCER_REGS and its first PRODUCERS threads (1, or
// 32: a producer warp) run produce(); the others rise to CONSUMER_REGS and run consume(c) with
// c = wg - 1. The pool is what the launch allocates (65536 / threads rounded down to 8, per
// thread), not the whole register file: a split over it makes setmaxnreg.inc wait forever.
template <int PRODUCER_REGS, int CONSUMER_REGS, int PRODUCERS = 1, class Produce, class Consume>
__device__ __forceinline__ void ws_roles(int wg, const Produce& produce, const Consume& consume) {
  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (PRODUCERS == 1 ? threadIdx.x == 0 : threadIdx.x < PRODUCERS) produce();
  } else {
    warpgroup_reg_inc<CONSUMER_REGS>();
    consume(wg - 1);
  }
}

// The producer's fill of ring iteration `it`: waits for its stage, arms the stage's full barrier
// with `bytes` (boxes count whole, zero-filled parts included) and runs load(s, full barrier).
template <class Ring, class I, class Load>
__device__ __forceinline__ void ws_fill(const Ring& ring, I it, u32 bytes, const Load& load) {
  const int s = ring.acquire(it, bytes);
  load(s, ring.full(s));
}

// A consumer's K loop over nk ring iterations, `it` advanced past them. For each: wait until the
// stage has landed, mma(s, kb, acc_live, first) issues and commits its wgmmas (acc_live:
// accumulate onto earlier K blocks, else overwrite; first: this consumer's first batch of the
// unit), then wait until only this batch is in flight and free the stage of the one before
// (release(stage)). Returns the stage of the batch still in flight (the
// caller waits for it and frees it after the last), or -1 when this consumer issued none.
// SHARE = 2: the two consumers split the unit's K blocks, consumer c taking the iterations of
// parity c.
template <int SHARE = 1, class Ring, class Mma, class Release>
__device__ __forceinline__ int ws_kloop(const Ring& ring, u32& it, int nk, int c, const Mma& mma, const Release& release) {
  static_assert(SHARE == 1 || SHARE == 2, "one consumer per K block, or two taking turns");
  int prev = SHARE > 1 ? -1 : 0;  // the stage of the batch in flight
  for (int kb = 0; kb < nk; ++kb, ++it) {
    if (SHARE > 1 && (int)(it & 1) != c) continue;  // the other consumer's K block
    const int s = ring.wait_full(it);
    const bool acc_live = SHARE > 1 ? prev >= 0 : kb > 0;
    mma(s, kb, acc_live, SHARE > 1 ? prev < 0 : kb == 0);
    // Keep one batch in flight: once the previous one is done, its stage can be refilled.
    wgmma_wait<1>();
    if (acc_live) release(prev);
    prev = s;
  }
  return prev;
}
