// Reads a buffer twice the L2 size end to end, so that L2 afterwards holds only clean lines of
// it. A memset flush leaves L2 full of dirty lines instead, and the next kernel pays for their
// write-back while it streams its own operands in: up to one extra write of every byte it reads.
#include "common/types.cuh"

constexpr int THREADS = 512, UNROLL = 4;

// `sink` is written only if the buffer's XOR hits a constant the zero-filled buffer never gives;
// the test keeps the loads alive without a store per block.
extern "C" __global__ void __launch_bounds__(THREADS)
    l2_read_flush(const u32x4* __restrict__ buf, u64 n16, u32* __restrict__ sink) {
  u32 acc = 0;
  const u64 stride = (u64)gridDim.x * THREADS;
  for (u64 i = (u64)blockIdx.x * THREADS + threadIdx.x; i < n16;
       i += stride * UNROLL) {
    u32x4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (i + u * stride < n16) v[u] = buf[i + u * stride];
      else v[u] = u32x4{0, 0, 0, 0};
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
