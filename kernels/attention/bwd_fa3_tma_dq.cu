// Attention backward, FlashAttention-3 style with dQ added by one TMA tensor reduce per
// warpgroup and query block (sm_90a; head dim 64 or 128): bwd_fa3_bulk_dq.cu's block (128 keys
// of one (batch, key/value head), a producer warp, two MMA warpgroups of 64 keys each, keys as
// the M of every product, dK and dV in registers, LSE and D read ahead of the wgmma waits), with
// what its H200 profile (2026-11-29, B2 H16 S8192 d128) blamed changed: about a fifth of its
// stall samples sat in the loop where 16 lanes of every warp issued one 256-byte bulk
// reduce-add each (elect, R2UR, UBLKRED, branch, flush: 16 a warp, one after another).
//   dQ    the warpgroup's fp32 partial staged as one swizzled tile and added by one thread with
//         `cp.reduce.async.bulk.tensor` through a rank-5 map over the accumulator
//         (bwd_dq_tile.cuh, shared with bwd_fa3_lookahead.cu); the deterministic mode keeps the
//         ordered red.global adds on the counters (bwd_fa3_wgmma's order).
// dQ's split between the warpgroups (KILN_DQ_SPLIT): d128 by columns (both meet once every dSᵀ
// row is stored) or by keys (KILN_BWD_DQ_KEYS=1 on the host: all 128 columns of its own 64
// keys, twice the adds, one dSᵀ buffer); d64 by keys. KILN_BWD_PP 1 (KILN_BWD_PINGPONG=1 on the
// host): the warpgroups take turns to issue Sᵀ and dPᵀ (bwd_block), so that one's exponentials
// run under the other's products; with the key split nothing realigns them every block.
#include "attention/bwd_fa3_block.cuh"
#include "attention/bwd_dq_tile.cuh"

#if !defined(KILN_BWD_PP)
#error "KILN_BWD_PP (the warpgroups' turns at Sᵀ and dPᵀ: 0 or 1) must be defined by the host"
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_tma_dq(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                        const __grid_constant__ TmaMap tdo, const __grid_constant__ TmaMap tdq, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bwd_kernel<true>(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, &tdq, p, [&](int c, const BwdWalk& k, const BwdSmem& sm) {
    const DqTile tile = dq_tile(&tdq, smem_raw, c);
    bwd_consume<true, DS_BUFS, KILN_BWD_PP != 0>(
        c, p, k, sm, [&] { tile.before_meet(); },
        [&](const float (&dq)[QN / 2], const BwdThread& th, int h, int m0, u32* sem) { tile.add(dq, p, k, th, h, m0, sem); },
        [&] { tile.before_exit(); });
  });
}
