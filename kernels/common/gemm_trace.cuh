// The cooperative GEMM's timeline instrumentation (gemm/wgmma_tma_ws.cu with KILN_TRACE = 1, the
// variant of `kiln profile --timeline`, never dispatched; the host passes the define for it only).
// ws points at TRACE_EVENTS (globaltimer ns, SM clock) pairs per CTA, u64[grid][2][TRACE_EVENTS],
// each event stamped by the one thread that sees it (the host lists them: `TRACE_EVENTS` in
// src/ops/gemm/). The launch is unsplit; a CTA of several units keeps the last unit's mainloop end.
#pragma once
#include "common/gemm_ws.cuh"
#include "common/stamp.cuh"

#ifndef KILN_TRACE
#define KILN_TRACE 0
#endif
constexpr bool TRACE = KILN_TRACE;

enum TraceEvent { T_ENTRY, T_SETUP, T_FIRST_LOADS, T_LAST_LOADS, T_C0_FIRST_FULL, T_C0_MAIN_END, T_C0_END, T_C1_END, TRACE_EVENTS };

__device__ __forceinline__ void trace_stamp(const Extras& ex, int e) {
  if (TRACE) stamp_event(reinterpret_cast<u64*>(ex.ws) + (size_t)blockIdx.x * 2 * TRACE_EVENTS, TRACE_EVENTS, e);
}
