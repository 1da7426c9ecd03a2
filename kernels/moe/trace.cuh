// The MoE kernels' phase stamps (`kiln moe bench --weights F --timeline`): with KILN_MOE_TRACE = 1
// the tile prefix kernel, the 4-bit experts' register path and kiln's bf16 grouped GEMM stamp the
// global timer (ns, one clock for every SM) and the SM clock at their phases into a buffer the host
// passes as a last kernel parameter, so a launch's timeline can be read beside the prefix kernel's
// (ncu replays a kernel alone: it cannot see a dependent launch's wait). A variant never
// dispatched; without the define every stamp compiles to nothing.
//
// The buffer is records of MOE_TRACE_EVENTS ns stamps then as many clock stamps (u64), one record
// a CTA (blockIdx.x), each stamp written by the one thread that sees its event; the prefix kernel
// gets a record of its own (the host's pointer is that record). The host names the events
// (`TRACE_EVENTS` in src/ops/moe/trace.rs) and keeps 0 for an event never stamped.
#pragma once
#include "common/stamp.cuh"

#ifndef KILN_MOE_TRACE
#define KILN_MOE_TRACE 0
#endif
constexpr bool MOE_TRACE = KILN_MOE_TRACE;

// The GEMMs' events. MT_FULL_*: consumer 0's wait for ring iteration 0, 1, 2, 4, 8, 16 and its
// unit's last has returned (the stage landed and the consumer got there: the later of the two),
// on its first unit; the prefix kernel stamps MT_ENTRY and MT_PREFIX_DONE (its tables written).
enum MoeTraceEvent {
  MT_ENTRY,
  MT_SETUP,
  MT_DEP_WAIT,
  MT_TABLES,
  MT_FIRST_LOADS,
  MT_LAST_LOADS,
  MT_FULL_0,
  MT_FULL_1,
  MT_FULL_2,
  MT_FULL_4,
  MT_FULL_8,
  MT_FULL_16,
  MT_FULL_LAST,
  MT_MAIN_END,
  MT_C0_END,
  MT_C1_END,
  MOE_TRACE_EVENTS
};
constexpr int MT_PREFIX_DONE = MT_SETUP;

// Stamps event e into record `rec` of `trace`.
__device__ __forceinline__ void moe_stamp(u64* trace, int rec, int e) {
  if constexpr (MOE_TRACE) stamp_event(trace + (size_t)rec * 2 * MOE_TRACE_EVENTS, MOE_TRACE_EVENTS, e);
}

// Consumer 0's stamps after its waits for ring iterations 0, 1, 2, 4, 8, 16 and `last` (its
// first unit's last), the MT_FULL_* events. A loop checks one register per stage against the next
// iteration to stamp (MOE_STAMP_NEVER in every other thread) and calls this, out of line, only
// there: round 1's form (a chain of compares in the stamping lane at every stage, inlined at
// every wait) added ~930 instructions to the 4-bit kernel and ~110-170 cycles to its stage
// (docs/moe.md, ledger F222). Returns the next iteration to stamp.
constexpr u32 MOE_STAMP_NEVER = 0xffffffffu;
#if KILN_MOE_TRACE
__device__ __noinline__ u32 moe_stamp_full(u64* trace, u32 it, u32 last) {
  if constexpr (MOE_TRACE) {
    const int e = it == 0    ? MT_FULL_0
                  : it == 1  ? MT_FULL_1
                  : it == 2  ? MT_FULL_2
                  : it == 4  ? MT_FULL_4
                  : it == 8  ? MT_FULL_8
                  : it == 16 ? MT_FULL_16
                             : -1;
    if (e >= 0) moe_stamp(trace, blockIdx.x, e);
    if (it == last) moe_stamp(trace, blockIdx.x, MT_FULL_LAST);
  }
  if (it >= last) return MOE_STAMP_NEVER;
  const u32 next = it == 0 ? 1 : it < 16 ? 2 * it : last;
  return next < last ? next : last;
}

// A ring whose wait_full stamps consumer 0's MT_FULL_* events (`next`: the iteration this thread
// stamps next, MOE_STAMP_NEVER in the others), for the kernels whose K loop is
// common/ws_pipeline.cuh's ws_kloop.
template <class Ring>
struct MoeTracedRing {
  const Ring& ring;
  u64* trace;
  u32 last;
  mutable u32 next;
  __device__ __forceinline__ int wait_full(u32 it) const {
    const int s = ring.wait_full(it);
    if (it == next) next = moe_stamp_full(trace, it, last);
    return s;
  }
};
#endif
