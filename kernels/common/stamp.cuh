// One phase stamp of an instrumented variant (the GEMM timeline's KILN_TRACE, the MoE kernels'
// KILN_MOE_TRACE): the global timer and the SM clock, read back to back, into a record.
//   A record is `events` ns stamps then as many clock stamps (u64), one record a CTA; the host
// reads them as `ops::stamps::Stamps` (0 where an event was never stamped).
#pragma once
#include "common/types.cuh"

// Stamps event e of the record at `rec` (a record of `events` events).
__device__ __forceinline__ void stamp_event(u64* rec, int events, int e) {
  u64 g, c;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  rec[e] = g;
  rec[events + e] = c;
}
