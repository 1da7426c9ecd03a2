// The sliding window's rule, written once for the attention kernels that take it (fa3_wgmma.cu's
// KILN_WINDOW through online_softmax.cuh, the backward's KILN_BWD_WINDOW in bwd_fa3_block.cuh):
// query i of a (sq, skv) sequence sees keys j with i + off − wl <= j <= i + off + wr and
// 0 <= j < skv, off = skv − sq (bottom-right), the causal mask folded into wr by the host
// (`Window::bounds`), an unbounded side as 2^30. The host's `Window::visible` is the same rule.
#pragma once

// Whether query `q` sees key `key` (inside 0 .. skv - 1).
__device__ __forceinline__ bool window_sees(int q, int key, int off, int wl, int wr, int skv) {
  return key >= q + off - wl && key <= min(skv - 1, q + off + wr);
}

// The query rows 0 .. sq - 1 that see some key of k0 .. k1 (inside 0 .. skv - 1): lo .. hi, empty
// when hi < lo. (Query i's keys run from i + off − wl to i + off + wr: it sees one of k0 .. k1
// when i + off − wl <= k1 and i + off + wr >= k0, wl + wr >= 0.)
__device__ __forceinline__ void window_rows(int k0, int k1, int off, int wl, int wr, int sq, int& lo, int& hi) {
  lo = max(0, k0 - off - wr);
  hi = min(sq - 1, k1 - off + wl);
}

// The first key (inside 0 .. skv - 1) that some query of q0 .. q1 sees, when any does.
__device__ __forceinline__ int window_first_key(int q0, int off, int wl) { return max(0, q0 + off - wl); }
