// Attention backward, FlashAttention-3 style, with the next query block's Sᵀ issued before this
// block's dQ is staged (sm_90a; head dim 64 or 128): bwd_fa3_tma_dq.cu's block, ring, products
// and dQ tile (bwd_dq_tile.cuh), with what its H200 profile (2026-11-29, B2 H16 S8192 d128, the
// consumers' stall samples by phase) blamed changed:
//   - 15 % of the samples sat where no wgmma was in flight: the wait for dQ, its tile's stores,
//     fence, barrier and reduce, and the next block's loop head, in both warpgroups at once (the
//     dSᵀ barrier keeps them in phase). Here, once dQ is issued and dV and dK have completed (the
//     stage is released), the next block's Sᵀ is issued into the registers Pᵀ has left, and only
//     then is dQ waited for and staged: the tensor cores run Sᵀ under the staging and the loop
//     head. dPᵀ is issued at the top of the next block, where the old walk issued both. Live
//     across the staging: dK, dV, dQ and Sᵀ (192 accumulators at d128), so d128 splits dQ by
//     columns only (by keys, dQ's 64 accumulators would not fit beside the others).
//   - 23 % sat in the issue of Sᵀ and dPᵀ and 14 % in dQ's: between the HGMMAs, each descriptor
//     rebuilt from its address (mask, shift, two ors, then moved to a uniform register). Here
//     every product takes its tiles' addresses in 16-byte units from bases built once
//     (wgmma_desc_sw128_at: one add a wgmma), and the warpgroup index is broadcast
//     (warpgroup_index) so that the bases are warp-uniform.
// KILN_BWD_SAHEAD 0 (KILN_BWD_NO_AHEAD=1 on the host): each block issues its own Sᵀ beside dPᵀ
// and waits for dQ before its staging, as bwd_fa3_tma_dq does, with the descriptors by adds: what
// the descriptors alone buy. No turns (KILN_BWD_PINGPONG) and no key split at d128
// (KILN_BWD_DQ_KEYS): the host ignores both.
// KILN_BM 128 (the host's bwd_fa3_m128; d64 split by keys only): 128 query rows a step, so that
// the step's fixed costs are paid once per 128 rows (bwd_fa3_block.cuh: Q and dO boxes, dSᵀ boxes
// and dQ products and tiles in 64-row halves; dSᵀ from the rounded Pᵀ); a 2-stage ring and one
// dSᵀ buffer. With KILN_DQ_SPLIT 2 (the host's bwd_fa3_m128_rows) the consumers meet at the dSᵀ
// barrier and each computes its 64 query rows of dQ over all 128 keys: each dQ element added once
// a block instead of twice (L2 at 73 % of its peak in the d64 key split's H200 profile,
// 2026-11-29), 32 accumulators instead of 64, two dSᵀ buffers in the staging tiles' freed half.
// KILN_BWD_DET_WRITER 2 (the host's bwd_fa3_ordered_eager): the deterministic mode's dQ through
// the tile and a writer warp, in a fixed order per query block, each counter bumped as soon as
// its adds complete, instead of ordered atomics by the consumers (bwd_fa3_block.cuh: det_rank,
// the rotated walk; bwd_dq_tile.cuh: dq_writer). The atomics' profile (H200, 18d83d3, d128 B2 H16
// S8192, 326.8 TFLOPS: 0.53x the non-deterministic run) put 23 % of the stall samples on the
// __threadfence after each block's atomics, 11 % on the barrier behind the counter's spin and 8 %
// on the atomics: all on the consumers' path.
// KILN_BWD_DQ_LATE 1 (the host's bwd_fa3_dq_late; BM 64): two dQ staging tiles a warpgroup; each
// block's tile is stored with no fence or barrier of its own and added by a reduce issued after
// the next block's dSᵀ barrier, the writers' fences just before that barrier (bwd_dq_tile.cuh).
// KILN_BWD_WINDOW 1 (the host's tile for a problem with a sliding window): bwd_fa3_block.cuh's
// windowed walk and masks; the dense, unwindowed variants compile to the same SASS as before it.
// KILN_BWD_TAIL 1 (the host's KILN_BWD_TAIL knob): the last partial wave's key blocks split into
// parts that each walk a share of the query blocks, dK and dV summed by the last part to finish
// (bwd_tail.cuh); without the define, the same SASS as before it.
// KILN_BWD_DQ_FUSED 1 (the host's KILN_BWD_DQ_FUSED knob, the packed walk on d64's row split's
// tile or d128's column split's): each block's dQ tiles to a writer warp that adds them, counts
// the adds and has the last adder's rows converted in the kernel, so that no postprocess runs
// (bwd_dq_fused.cuh); 2, the converters also leave the accumulator zero for the next call; 3, no
// writer: the last key block of each (sequence, key/value head) converts it (fused_last_block).
#include "attention/bwd_fa3_block.cuh"
#include "attention/bwd_dq_tile.cuh"
#include "attention/bwd_dq_fused.cuh"

#if !defined(KILN_BWD_SAHEAD)
#error "KILN_BWD_SAHEAD (the next block's Sᵀ issued before this block's dQ staging: 0 or 1) must be defined by the host"
#endif
constexpr bool SA = KILN_BWD_SAHEAD != 0;
// LSE·log2e and D read into registers ahead of the waits at BM 64; at BM 128 (KILN_BM, the host's
// bwd_fa3_m128: d64 split by keys) where they are used, since 32 more registers each would not
// fit beside Sᵀ, dPᵀ, dK and dV.
constexpr bool LA = BM == 64;

static_assert(QN == 64, "d128 split by columns or d64 by keys: dQ in 32 accumulators beside dK, dV and the next Sᵀ");
// (the eager writer reads the next block's walk entry once this block's tiles are handed over:
// the consumers have waited for the next stage by then only when its Sᵀ is issued early)
static_assert(!DET_WRITER || SA, "KILN_BWD_DET_WRITER 2 needs KILN_BWD_SAHEAD 1");

// A consumer warpgroup's walk with Sᵀ one block ahead (bwd_consume's, otherwise): dK and dV
// zeroed, K and V waited for, block 0's Sᵀ issued, then per query block dPᵀ, bwd_grads, dQ, the
// stage released, the next block's Sᵀ, and dQ through the tile; then dK (scaled) and dV stored.
__device__ __forceinline__ void bwd_consume_ahead(int c, const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const DqTile& tile) {
  BwdThread th;
  th.c = c, th.w = (threadIdx.x / 32) % 4, th.lane = threadIdx.x % 32, th.t = th.lane & 3;
  th.krow = 16 * th.w + (th.lane >> 2);
  // Operand bases in 16-byte units (warp-uniform: c is).
  const u32 sk16 = sm.sk >> 4, skc16 = sk16 + c * (64 * 128 / 16), svc16 = (sm.sv >> 4) + c * (64 * 128 / 16);
  const u32 ring16 = sm.ring >> 4;
  float dk[KR], dv[KR];
#pragma unroll
  for (int i = 0; i < KR; ++i) dk[i] = dv[i] = 0.0f;
  // DQ_LATE (not in deterministic mode): block it's dQ tile is stored into buffer it % 2 at its end
  // and added after block it + 1's dSᵀ barrier; these are its head and rows.
  const bool late = DQ_LATE && p.dq_sem == nullptr;
  int h_prev = 0, m0_prev = 0;
  mbar_wait(sm.kv_full, 0);
  // Block 0's Sᵀ. Every Sᵀ is issued unconditionally (a wgmma on a path that ptxas cannot prove
  // uniform serialises them all, C7518): with no block, or after the last, it reads whatever the
  // stage holds and its result is dropped.
  float st[SR];
  if (SA) {
    if (k.iters > 0) sm.qring.wait_full(0);
    wgmma_fence();
    keys_by_queries<D, BM, BN, true>(st, skc16, ring16);
    wgmma_commit();
  }
  for (int it = 0; it < k.iters; ++it) {
    int h, mb;
    if (!DET_WRITER) walk_at(k, p, it, h, mb);
    // Stage s has landed (SA: waited before this block's Sᵀ was issued). Its index from the
    // iteration, not from the wait, so that the descriptors stay uniform.
    if (!SA) sm.qring.wait_full(it);
    const int s = sm.qring.slot(it);
    if (DET_WRITER) walk_get(sm, it, h, mb);  // (the walk may be rotated)
    const int m0 = mb * BM;
    const u32 sq16 = ring16 + s * (STAGE_BYTES / 16), sdo16 = sq16 + Q_BYTES / 16;
    const float* sl = sm.vec + s * 2 * BM;
    float2 l[BM / 8];
    if (LA) {
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) l[j] = *reinterpret_cast<const float2*>(sl + 8 * j + 2 * th.t);
    }
    // Sᵀ has completed (issued before the previous block's dQ staging). Waited for here, not
    // after dPᵀ is issued: a wait<1> for a group issued before the loop's back edge serialised
    // every wgmma (ptxas C7514).
    if (SA) {
      wgmma_wait<0>();
      fence_all(st);
    }
    float dp[SR];
    wgmma_fence();
    if (!SA) {
      keys_by_queries<D, BM, BN, true>(st, skc16, sq16);
      wgmma_commit();
    }
    keys_by_queries<D, BM, BN, true>(dp, svc16, sdo16);
    wgmma_commit();
    if (!SA) {
      wgmma_wait<1>();
      fence_all(st);
    }
    const u32 ds = bwd_grads<LA, DS_BUFS, true>(st, dp, l, dk, dv, p, k, sm, th, it, m0, sq16, sdo16, sl, [&] { tile.before_meet(); });
    // DQ_LATE: the previous block's tile, fenced by every writer (with its dSᵀ rows) before the
    // barrier just passed
    if (late && it > 0) tile.reduce(tile.buf((it - 1) & 1), p, k, h_prev, m0_prev, DQ_MH);
    // dQ's DQ_MH halves of 64 query rows, each from its dSᵀ box (the row split: this consumer's
    // half, box c, over all the keys)
    float dq[DQ_MH][QN / 2];
    wgmma_fence();
#pragma unroll
    for (int hh = 0; hh < DQ_MH; ++hh)
      dq_from_ds<QN, QKS, 64, BN, true>(dq[hh], (ds >> 4) + (SPLIT_M ? c : hh) * (BN * 128 / 16), sk16, MEET ? 0 : c * 64,
                                        SPLIT_N ? c * (QN / 64) : 0);
    wgmma_commit();
    // SA: dV and dK (Q and dO are read: Sᵀ, dPᵀ, dV, dK; Pᵀ's and dSᵀ's registers free); else all.
    if (SA) {
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    // The stage from an opaque copy of the iteration (bwd_block's: kept live, it spilled).
    int it_late = it;
    asm volatile("" : "+r"(it_late));
    if (th.lane == 0) mbar_arrive(sm.qring.empty(sm.qring.slot(it_late)));
    if (SA) {
      const int s1 = it + 1 < k.iters ? sm.qring.wait_full(it + 1) : s;
      wgmma_fence();
      keys_by_queries<D, BM, BN, true>(st, skc16, ring16 + s1 * (STAGE_BYTES / 16));
      wgmma_commit();
      wgmma_wait<1>();  // dQ; the next Sᵀ runs under its staging
    }
#pragma unroll
    for (int hh = 0; hh < DQ_MH; ++hh) fence_all(dq[hh]);
    if (late) {
      tile.store(dq, th, tile.buf(it & 1));
      h_prev = h, m0_prev = m0;
    } else if (DET_WRITER) {
      tile.hand_over(dq, th, it, det_writers(p));
    } else if (DQ_FUSED) {
      tile.hand_over(dq, th, it, 1);  // (to the fused writer: bwd_dq_fused.cuh)
    } else {
      // (DQ_LAST: p.dq_sem holds the end's counters, not the deterministic mode's)
      u32* sem = p.dq_sem == nullptr || DQ_LAST ? nullptr : p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb;
      tile.add(dq, p, k, th, h, m0, sem);
    }
  }
  // DQ_LATE: the last block's tile (no next barrier to meet at)
  if (late && k.iters > 0) {
    fence_proxy_async_shared();
    named_barrier_sync(4 + c, 128);
    tile.reduce(tile.buf((k.iters - 1) & 1), p, k, h_prev, m0_prev, DQ_MH);
  }
  if (SA) {
    wgmma_wait<0>();  // the Sᵀ after the last block (dropped)
    fence_all(st);
  }
  // (DQ_LAST: the last reduce waited for after dK and dV are stored, in fused_last_block)
  if (!DQ_LAST) tile.before_exit();
  fence_all(dk);  // the last dK and dV wgmmas completed (the loop's final wait) before these reads
  fence_all(dv);
  // KILN_BWD_TAIL: a part of a split key block stores dK and dV only if it is the last to finish,
  // with the other parts' partials added (bwd_tail.cuh)
  int slot, part;
  if (TAIL && tail_part(p, slot, part) && !tail_fixup<KR>(dk, dv, p, slot, part, c * 128 + (int)(threadIdx.x % 128))) return;
  store_dk_dv<D>(bwd_kv_rows(p.dk, p, k), bwd_kv_rows(p.dv, p, k), dk, dv, p.scale, k.n0 + c * 64 + th.krow, k.rows_k(p), p.kv_ss, th.t);
  if constexpr (DQ_LAST) fused_last_block(p, k, tile.adder, c * 128 + (int)(threadIdx.x % 128));
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_lookahead(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                           const __grid_constant__ TmaMap tdo, const __grid_constant__ TmaMap tdq, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // KILN_BWD_DQ_FUSED: a sequence without keys has no block with work (its dQ zeroed here), and
  // the conversion queue starts empty (published by bwd_start's barrier)
  if constexpr (DQ_FUSED || DQ_LAST) fused_zero_keyless(p);
  if constexpr (DQ_FUSED) {
    if (threadIdx.x == 0) fused_queue_init(smem_raw);
  }
  bwd_kernel<true>(
      smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, &tdq, p,
      [&](int c, const BwdWalk& k, const BwdSmem& sm) { bwd_consume_ahead(c, p, k, sm, dq_tile(&tdq, smem_raw, c)); },
      [&](const BwdWalk& k, const BwdSmem& sm, int j) {
        if constexpr (DQ_FUSED) {
          dq_fused_role(&tdq, sm, p, k, j);
        } else {
          dq_writer(&tdq, sm, p, k, j);
        }
      });
}
