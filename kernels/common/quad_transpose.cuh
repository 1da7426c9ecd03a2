// The accumulator fragment's quad transpose, for 16-byte stores from wgmma / mma.sync results.
// In the m64nNk16 (and m16n8) fragment, lane quad q (= lane % 4) of a row holds columns 8j + 2q
// and 8j + 2q + 1 of every 8-column group j.
#pragma once
#include "common/types.cuh"

// A 4 x 4 transpose across the quad over four consecutive groups j0 .. j0 + 3 (two xor-shuffle
// rounds, each swapping one bit of the lane index with one bit of the group index) leaves lane q
// with group j0 + q: e[s] holds what group j0 + s held, X values (of type T) per group and lane.
// Every lane of the warp must take part.
template <class T, int X> __device__ __forceinline__ void quad_transpose_groups(T (&e)[4][X], int q) {
#pragma unroll
  for (int bit = 2; bit >= 1; bit >>= 1) {
    const bool hi = (q & bit) != 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if (s & bit) continue;  // the pair (s, s | bit)
#pragma unroll
      for (int x = 0; x < X; ++x) {
        const T send = hi ? e[s][x] : e[s | bit][x];
        const T recv = __shfl_xor_sync(0xffffffffu, send, bit);
        if (hi) e[s][x] = recv;
        else e[s | bit][x] = recv;
      }
    }
  }
}

// The fragment's two floats per group: afterwards e[i / 2][i % 2] is column 8(j0 + q) + i.
__device__ __forceinline__ void quad_transpose(float (&e)[4][2], int q) { quad_transpose_groups(e, q); }

// The same over values already packed in pairs (w[s] holds e[s][0] and e[s][1] of a 16-bit
// output): one shuffle per pair instead of two, and it can wait until the words are stored.
__device__ __forceinline__ void quad_transpose_packed(u32 (&w)[4], int q) {
  quad_transpose_groups(*reinterpret_cast<u32(*)[4][1]>(&w), q);
}
