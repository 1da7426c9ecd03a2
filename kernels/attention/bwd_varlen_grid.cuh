// KILN_BWD_VARLEN 2 (the host's KILN_BWD_VARLEN_COMPACT; packed batches of at most 63 sequences):
// the packed backward's grid without its empty blocks. The packed grid of KILN_BWD_VARLEN 1 is
// the longest sequence's key blocks x key/value heads x sequences, and a block past its own
// sequence's keys returns at once: at the issue's packed batch (32 sequences of 128..8192 keys,
// 16 heads) 13,680 of its 32,768 blocks, each taking a SM that could run one with work. Here
// grid x runs over the sequences' key blocks back to back (z is 1): sequence z owns blocks
// base(z) .. base(z + 1) - 1 of each head, base(z) = floor(cu_k[z] / bn) + z, which is at least
// ceil(keys / bn) blocks (floor(a / bn) - floor(b / bn) >= ceil((a - b) / bn) - 1) and at most
// one more: gridDim.x = floor(total_k / bn) + sequences, at most one empty block a sequence.
#pragma once
#include "attention/attn_bwd_args.cuh"

#if defined(KILN_BWD_VARLEN)
constexpr bool VARLEN_COMPACT = KILN_BWD_VARLEN == 2;
#else
constexpr bool VARLEN_COMPACT = false;
#endif

// The sequences of a compact grid of `bn`-key blocks over p.skv (the packed keys) in all.
template <int bn>
__device__ __forceinline__ int varlen_compact_seqs(const AttnBwdArgs& p) {
  return (int)gridDim.x - p.skv / bn;
}

// Sequence z and key block nb of block blockIdx.x of a compact grid, by every thread (each warp on
// its own; the offsets come from L2 once a warp): lane l holds offsets l and l + 32 (the host
// allows at most 63 sequences), z is the last sequence whose base is <= blockIdx.x. False where
// the key offsets do not rise from 0 (then no block can be placed: the caller records the error
// and returns; the per-sequence checks are the caller's).
template <int bn>
__device__ __forceinline__ bool varlen_compact_block(const AttnBwdArgs& p, int& z, int& nb) {
  const int seqs = varlen_compact_seqs<bn>(p), lane = (int)(threadIdx.x % 32), x = blockIdx.x;
  const bool h0 = lane <= seqs, h1 = lane + 32 <= seqs;
  const int c0 = h0 ? __ldg(p.cu_k + lane) : 0, c1 = h1 ? __ldg(p.cu_k + lane + 32) : 0;
  // each offset against the next (lane 31's next is lane 0's second)
  int n0 = __shfl_down_sync(0xffffffffu, c0, 1);
  const int n1 = __shfl_down_sync(0xffffffffu, c1, 1), c1_first = __shfl_sync(0xffffffffu, c1, 0);
  if (lane == 31) n0 = c1_first;
  const bool bad = (lane == 0 && c0 != 0) || (lane < seqs && c0 > n0) || (lane + 32 < seqs && c1 > n1);
  if (__any_sync(0xffffffffu, bad) || seqs < 1 || seqs > 63) return false;
  // (the offsets are >= 0 and rise: the bases rise strictly, and base(0) = 0 <= x)
  const unsigned m0 = __ballot_sync(0xffffffffu, h0 && c0 / bn + lane <= x);
  const unsigned m1 = __ballot_sync(0xffffffffu, h1 && c1 / bn + lane + 32 <= x);
  z = min(__popc(m0) + __popc(m1) - 1, seqs - 1);
  const int a = __shfl_sync(0xffffffffu, c0, z & 31), b = __shfl_sync(0xffffffffu, c1, z & 31);
  nb = x - ((z < 32 ? a : b) / bn + z);
  return true;
}
