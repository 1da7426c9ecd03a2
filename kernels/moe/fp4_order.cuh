// The order in which the 4-bit experts' register path hands out its tiles (KILN_FP4_ORDER).
//
// By default tile t is global m-tile t / tiles_n of the tables' order (heaviest expert first,
// each expert's m-tiles in a row), so an expert's short last m-tile comes right after its
// whole ones and a CTA that took it early goes on to a whole tile late. With
// KILN_FP4_ORDER 1 every whole m-tile comes first (the tables' order), then every expert's short
// last m-tile: the long tiles start in the first wave and the short ones fill the gaps behind
// them. One expert of 272 rows and six of 130-161 at 128 tokens a tile are 7 whole and 7 short
// m-tiles of 16 n-tiles each on 132 CTAs: ~2.0 whole-tile times in the tables' order, ~1.6
// whole first (a greedy simulation at the tiles' paces; docs/moe.md ledger F101).
#pragma once

#if !defined(KILN_FP4_ORDER)
#define KILN_FP4_ORDER 0
#endif

// The global m-tile of rank r in the whole-first order over moe_tile_prefix's `table` (expert
// e's m-tiles from table[e], its rows table[2E + 1 + e]) for tiles of bm rows. O(E) steps: the
// host asks for it on launches of few experts only.
__device__ __forceinline__ int fp4_whole_first(const int* table, int experts, int r, int bm) {
  int whole = 0;
  for (int e = 0; e < experts; ++e) {
    const int n = table[2 * experts + 1 + e] / bm;
    if (r < whole + n) return table[e] + (r - whole);
    whole += n;
  }
  int k = r - whole;  // among the short last m-tiles
  for (int e = 0; e < experts; ++e) {
    if (table[2 * experts + 1 + e] % bm == 0) continue;
    if (k == 0) return table[e + 1] - 1;
    --k;
  }
  return 0;  // r is past the last m-tile: not asked for
}

// Tile t as moe_tile places it (the fixed order of one m-tile a group), after the m-tiles are
// put in the whole-first order where KILN_FP4_ORDER asks for it.
__device__ __forceinline__ MoeTile fp4_tile_at(const int* table, int experts, int t, int tiles_m, int tiles_n,
                                               int group, bool by_expert, int bm, int bn) {
  if constexpr (KILN_FP4_ORDER == 1) {
    const int g = fp4_whole_first(table, experts, t / tiles_n, bm);
    t = g * tiles_n + t % tiles_n;
  }
  return moe_tile(table, experts, t, tiles_m, tiles_n, group, by_expert, bm, bn);
}
