// The cooperative GEMM's work units (gemm/wgmma_tma_ws.cu): whole cluster tiles, split-K slices
// of a tile and stream-K pieces of a contiguous range of K blocks (the scheme: `Extras` in
// common/gemm_ws.cuh), and the reduction of a tile whose K blocks several units computed.
#pragma once
#include "common/gemm_ws.cuh"
#include "common/split_k.cuh"

// Stream-K piece at position pos of a range ending at end: tile t, K blocks [kb0, kb1). Every
// range is at least a tile long (the host gives stream-K at least one tile per CTA), so a tile
// has at most two contributors: a piece that is not the whole tile is its head (slice 0, the
// range ends in it) or its tail (slice 1, the next range starts in it).
__device__ __forceinline__ void sk_piece(u32 pos, u32 end, int split_from, int kblocks, int& t, int& kb0, int& kb1,
                                         int& sp, int& ns) {
  const u32 tr = pos / (u32)kblocks, tile0 = tr * (u32)kblocks;
  t = split_from + (int)tr;
  kb0 = (int)(pos - tile0);
  kb1 = (int)min((u32)kblocks, pos - tile0 + (end - pos));
  ns = kb1 - kb0 < kblocks ? 2 : 1;
  sp = kb0 == 0 ? 0 : 1;
}

// A CTA's walk over the work units of cluster tiles (CLUSTER CTAs along M). SK: stream-K compiled
// in (single 128-row CTAs with the split code); SPLITS: split-K compiled in. Stream-K counts as 0 slices per tile from split_from on (the
// ranges take those tiles), so that `units` stays one expression of uniform values: choosing
// between two expressions moved it out of the uniform registers and spilled the 256-wide tile's
// consumers.
template <int CLUSTER, bool SK, bool SPLITS>
struct GemmUnits {
  int kblocks;
  bool sk;
  int splits, split_from, units, cid, nclusters;
  // This CTA's stream-K range of K blocks, [sk_range[0], sk_range[1]), in shared memory (kept in
  // registers, its ends spilled the 256-wide tile's consumers).
  const u32* sk_range;

  __device__ __forceinline__ GemmUnits(const u32* sk_range_, const Extras& ex, int ctiles, int kblocks_)
      : kblocks(kblocks_),
        sk(SK && ex.sk_w != 0),
        splits(sk ? 0 : SPLITS ? ex.splits : 1),
        split_from(splits != 1 ? min(ex.split_from, ctiles) : ctiles),
        units(split_from + (ctiles - split_from) * splits),
        cid(blockIdx.x / CLUSTER),
        nclusters(gridDim.x / CLUSTER),
        sk_range(sk_range_) {}

  // Work units by token: u < units is whole or split-K unit u (this CTA takes cid, cid +
  // nclusters, ..); with stream-K, token units + nclusters + i is the piece of this CTA's range
  // that starts i K blocks in. Decodes token tok: tile t, K blocks [kb0, kb1), slice sp of ns.
  __device__ __forceinline__ void unit_of(int tok, int& t, int& kb0, int& kb1, int& sp, int& ns) const {
    if (!(SK && sk) || tok < units) {
      unit_tile(tok, split_from, splits, t, sp, ns);
      split_range(sp, ns, kblocks, kb0, kb1);
    } else {
      // The range's head (the first h K blocks of the tile it ends in) goes first, then the rest
      // in order: every CTA starts the stream-K phase at k = 0, and after its head each is at
      // the same k (mod the tile's K) as every other, so the CTAs stay in step along K and
      // share A and B slabs in L2 as whole tiles do. In plain range order each CTA started at
      // its own k, and problems whose A and B outgrow L2 ran at half speed (ledger #23).
      const u32 s0 = sk_range[0], e = sk_range[1], h = e % (u32)kblocks, i = (u32)(tok - units - nclusters);
      sk_piece(i < h ? e - h + i : s0 + i - h, i < h ? e : e - h, split_from, kblocks, t, kb0, kb1, sp, ns);
    }
  }

  // Advances u to this CTA's next unit: its token and K block count; false when none is left.
  // The consumers keep only the token through the K loop and decode the rest after it.
  __device__ __forceinline__ bool next(int& u, int& tok, int& nk) const {
    if (u < units) {
      tok = u;
      u += nclusters;
    } else if (SK && sk) {
      if (u < units + nclusters) u = units + nclusters;
      if (sk_range[0] + (u32)(u - units - nclusters) >= sk_range[1]) return false;
      tok = u;
    } else {
      return false;
    }
    int t, kb0, kb1, sp, ns;
    unit_of(tok, t, kb0, kb1, sp, ns);
    nk = kb1 - kb0;
    if (tok >= units) u += nk;
    return true;
  }

  // A split tile's reduction (ns > 1; common/split_k.cuh): this unit's partial goes to its slot,
  // slice s2's in slot base + s2 (split-K, base = bt * ns, bt the split block tile; stream-K, two
  // slices: CTA g's partial in slot 2g if its range starts in the tile, slice 1, else 2g + 1).
  // Returns whether this unit arrived last and added the others into acc (it then stores C).
  template <int TILE_FLOATS, int N>
  __device__ __forceinline__ bool reduce(const Extras& ex, int bt, int sp, int ns, float (&acc)[N]) const {
    const int ct = threadIdx.x - 128;
    const int base = sk ? 2 * cid + 1 - 2 * sp : bt * ns;
    float* tile_ws = ex.ws + (i64)base * TILE_FLOATS;
    split_store_partial(tile_ws + (i64)sp * TILE_FLOATS, ct, acc);
    if (!split_arrive(ex.counters + bt, ns, ct, 3)) return false;
    split_add_others(tile_ws, ns, sp, ct, acc);
    return true;
  }
};
