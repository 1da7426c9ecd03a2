// Copies a rows x cols matrix of KILN_ES-byte elements from one row pitch to another (pitches in
// elements). wgmma_tma_ws reads operands whose rows TMA cannot address (row strides off 16 bytes)
// from such a copy with 128-byte rows, and writes C through one when C's rows are off 16 bytes.
// The element-wise loop is coalesced on both sides; each thread keeps four loads in flight.
#include "common/grid_dep.cuh"
#include "common/types.cuh"

#ifndef KILN_ES
#error "KILN_ES must be defined by the host"
#endif
#if KILN_ES == 2
typedef unsigned short elem_t;
#elif KILN_ES == 4
typedef unsigned int elem_t;
#else
#error "KILN_ES is 2 or 4"
#endif

constexpr int THREADS = 256, UNROLL = 4;

// Block (x, y) copies columns [x * 1024, x * 1024 + 1024) of rows y, y + gridDim.y, ...
extern "C" __global__ void __launch_bounds__(THREADS)
    pack_rows(const elem_t* __restrict__ src, long long src_ld, elem_t* __restrict__ dst, long long dst_ld, int rows,
              int cols) {
  const int c0 = blockIdx.x * (THREADS * UNROLL) + threadIdx.x;
  // The GEMM after this may launch now (its CTAs wait for this grid's completion in
  // grid_dependency_wait); a kernel launched without the attribute is unaffected.
  launch_dependents();
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const elem_t* s = src + r * src_ld;
    elem_t* d = dst + r * dst_ld;
    elem_t v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int c = c0 + u * THREADS;
      if (c < cols) v[u] = s[c];
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int c = c0 + u * THREADS;
      if (c < cols) d[c] = v[u];
    }
  }
}
