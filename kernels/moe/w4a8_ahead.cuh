// `KILN_W4A8_FORM=wide-share-l2` and `wide-lean-l2` (ledger F231): each step, consumer threads ask
// L2 for the stage KILN_W4A8_AHEAD K blocks on (`prefetch.global.L2`, one 128-byte line a thread),
// so that the producer's copies of it find their lines in L2.
//
// Why: round 1's ncu (2026-12-02) of `wide-share` against `wide-lean`: the same cycles (4.695 M
// against 4.698 M) with the decode's chain shorter in the tiles of 65-128 rows, and the consumers'
// wait for landed stages up from 3.0 % to 12.5 % of the stall samples while the producer still
// waited for free stages (its retry loop ran ~0.8-1.1 M times for 468 K stages): the ring is full
// of copies in flight, so a stage's latency (its last line of ~260, X's from DRAM for the m-tile's
// first reader and the atoms' always) outlasts the ~3 steps of lookahead five 34 KB stages give.
// The prefetch needs no shared memory and no copy-engine request (F220: the producer's own
// bulk prefetches queued its real loads; F221: the threads' prefetches cost nothing).
//
// Lines a stage: the two atoms' 68 (consumer 2's threads 0-67), X's rows of the tile (consumers
// 0 and 1, row 128c + t), the latter only in every fourth n-tile's CTA: the m-tile's 32 n-tiles run
// side by side (the tiles are ordered expert by expert, each expert's n-tiles in a row), and one
// request a line is enough to bring it into L2.
#pragma once
#include "moe/w4a8_args.cuh"

#if defined(KILN_W4A8_AHEAD)
constexpr int W4A8_AHEAD = KILN_W4A8_AHEAD;
#else
constexpr int W4A8_AHEAD = 0;
#endif

// A thread's prefetch in a tile, in two registers (the consumers' 160 hold fin and the accumulator;
// a 64-bit address and its stride spilled): the line of ring iteration `it`, in 128-byte lines
// from the weights (consumer 2) or X (consumers 0 and 1), is line0 + it * (lines a K block) while
// it < end (the tile's K blocks AHEAD on from its first iteration; end 0: none).
struct W4Ahead {
  u32 line0, end;
};

// Lines a K block of consumer c's stream: two atoms' worth apart in the weights, one line in X.
template <u32 ATOM>
__device__ __forceinline__ u32 w4a8_ahead_lines(int c) {
  return c == 2 ? ATOM / 128 : 1u;
}

// Issues consumer c's prefetch of ring iteration `it` (nothing past the tile's K or without a line).
template <u32 ATOM>
__device__ __forceinline__ void w4a8_ahead_issue(const W4a8Args& p, const W4Ahead& a, int c, u32 it) {
  if (W4A8_AHEAD > 0 && it < a.end) {
    const unsigned char* base = c == 2 ? p.w : p.x;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + 128ull * (a.line0 + it * w4a8_ahead_lines<ATOM>(c))));
  }
}

// Thread t of consumer c in the tile whose first ring iteration is it0 (expert slot `id`, the
// tile's rows and columns in `tile`; BN output columns a tile, two atoms of ATOM bytes a K block).
// X's rows are ldx bytes apart, a multiple of 128 for the lines to be X's own (else the nearest).
template <int BN, u32 ATOM>
__device__ __forceinline__ W4Ahead w4a8_ahead(const W4a8Args& p, const MoeTile& tile, int id, int c, int t, u32 it0) {
  W4Ahead a{0, 0};
  if (W4A8_AHEAD == 0 || p.katoms <= W4A8_AHEAD) return a;
  const int ntile = tile.n0 / BN;
  u64 line;  // its line at K block AHEAD, in 128-byte lines from its stream's start
  if (c == 2) {
    if (t >= (int)(2 * ATOM / 128)) return a;
    const u64 block_bytes = (u64)p.katoms * ATOM;
    line = ((u64)id * p.expert_bytes + (u64)(2 * ntile + t / (ATOM / 128)) * block_bytes) / 128 + t % (ATOM / 128) +
           (u64)W4A8_AHEAD * (ATOM / 128);
  } else {
    const int r = 128 * c + t;
    if (ntile % 4 != 0 || r >= tile.valid_rows) return a;
    line = ((u64)(tile.row0 + r) * p.ldx) / 128 + W4A8_AHEAD;
  }
  a.line0 = (u32)line - it0 * w4a8_ahead_lines<ATOM>(c);
  a.end = it0 + (u32)(p.katoms - W4A8_AHEAD);
  return a;
}
