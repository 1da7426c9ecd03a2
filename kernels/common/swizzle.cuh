// The 128-byte swizzle of shared-memory tiles made of 128-byte rows: what a TMA load with
// CU_TENSOR_MAP_SWIZZLE_128B writes, what a TMA store through such a map reads, and the layout
// the wgmma 128B-swizzle descriptors expect. The pattern follows address bits, so a tile must
// start on 1024 bytes.
#pragma once
#include "common/types.cuh"

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in such a tile: the chunk index is
// XOR-ed with the row's position in its 8-row (1024-byte) group.
__device__ __forceinline__ u32 swizzle128_offset(int row, int chunk) { return (u32)(row * 128 + ((chunk ^ (row & 7)) << 4)); }

// The first 1024-byte boundary of dynamic shared memory, where swizzled tiles can start (the host
// allocates 1 KB of slack for it).
__device__ __forceinline__ u32 smem_align1024(const void* smem_raw) { return (smem_u32(smem_raw) + 1023u) & ~1023u; }
