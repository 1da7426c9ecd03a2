// d256's deterministic mode in clusters of two (the host's bwd_fa3_d256_w2_pair: bwd_fa3_d256.cu
// with KILN_D256_DET 3 and KILN_BWD_CLUSTER 2): the two CTAs of a cluster hold two adjacent key
// blocks of one head, walk the same query blocks in the same order (their stages' Q and dO loaded
// once a pair and multicast, bwd_fa3_block.cuh) and sum their fp32 dQ partials in shared memory
// before ONE ordered reduce a pair and column half, where w2 (one CTA a cluster) makes one
// ordered reduce of both halves a block. With w2 at B1 H16 S16384 a query tile's 256 adders come
// one step apart and about half of the adds waited for the bump before them (H200, 2026-11-30,
// ledger D32); here a tile has half the adders, the rotated walks of a wave's pairs start three
// query blocks apart (66 pairs of a head a wave), and the tiles live in the L2 at once are 66,
// not 132 (the chains and the spread, D22, D51, lost by growing them).
//   Columns: CTA r owns dQ's half r (consumer r's 128 columns). Its consumer r stages its partial
//   in its own stage as w2's consumers do (consumer 0 in the dO half, 1 in the Q half); its other
//   consumer (1 - r, the sender) stores its partial into the peer's stage instead, in the half the
//   peer's own consumer does not stage in (the receive half: the Q half in CTA 0, dO's in CTA 1),
//   by st.async, whose bytes complete on the peer's xfull barrier: no release, no wait in the
//   sender's path but for the half to be free. Thread i of consumer c stores the same (row,
//   column) positions in either CTA (stage_dq_rows' layout), so the two tiles line up element by
//   element.
//   The receive half's last reader in each CTA is that CTA's sender (CTA 0's consumer 1 reads Q
//   for dK, CTA 1's consumer 0 dO for dV), so each sender frees the half in its own CTA for the
//   peer's sender once its products are complete (xfree in the peer, one arrival a warp), and
//   waits for its own xfree before it stores into the peer.
//   In the owner CTA warp 3 of warpgroup 0 (idle in w2, the summer) waits for its consumers'
//   hand-over and for xfull and adds the received tile into its own (own + peer: a sum of two,
//   the same bits whichever came first); the stage's writer (w2's two writer warps, one stage
//   each) then waits for the pair's turn and reduces the 64 x 128 sum into its column half. One
//   counter a (head, query block) takes two bumps a pair (one a half): the turn of the pair of
//   rank R is 2R, which only the pairs before it reach. The stage goes back to
//   both producers (the multicast) as in the pair: each writer releases it to both CTAs once its
//   reduce has read it, and the peer's sender's bytes landed before the sum.
// Waits: a sender waits only for the peer's sender at the same step (both CTAs wait for the same
// multicast stages), a writer for its pair's turn, which the pairs launched before it in the
// wave's rotation give (as w2's blocks): the pair is w2's block with 128 keys on SMs / 2 slots
// (det_schedule.rs runs those walks).
#pragma once
#include "common/mem_ops.cuh"

constexpr bool D256_PAIR = D256_WRITER && BWD_CLUSTER == 2;
constexpr u32 PAIR_TILE_BYTES = 64 * QN * 4;  // one consumer's 64 x 128 fp32 partial
static_assert(!D256_PAIR || PAIR_TILE_BYTES == Q_BYTES, "a partial fills one half of a ring stage");
// xfree[s] (4 arrivals: the peer's sender warps, its receive half of stage s read) and xfull[s]
// (1 arrival, the summer's, with the bytes of the peer's partial) after the ring's barriers.
constexpr u32 PAIR_BARS_BYTES = D256_PAIR ? 8 * 2 * STAGES : 0;
__device__ __forceinline__ u32 pair_xfree(const BwdSmem& sm, int s) { return sm.kv_full + 8 * (1 + 2 * STAGES + s); }
__device__ __forceinline__ u32 pair_xfull(const BwdSmem& sm, int s) { return sm.kv_full + 8 * (1 + 3 * STAGES + s); }

// By thread 0 before the block starts (bwd_start's cluster barrier publishes them).
__device__ __forceinline__ void pair_init(const BwdSmem& sm) {
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(pair_xfree(sm, s), 4);
    mbar_init(pair_xfull(sm, s), 1);
  }
  mbar_fence_init();
}

// Whether consumer c sends its partial to the peer (CTA c owns its columns).
__device__ __forceinline__ bool pair_sends(int c) { return c != (int)cluster_ctarank(); }

// A sender warp, once its products of stage s have completed (and the other consumer's, which
// read the receive half earlier): the receive half of this CTA free for the peer's sender.
__device__ __forceinline__ void pair_free(const BwdSmem& sm, int s, int lane) {
  if (lane == 0) mbar_arrive_cluster(mbar_peer(pair_xfree(sm, s), cluster_ctarank() ^ 1));
}

// The sender's partial dq (consumer c, iteration it) into the peer's receive half of its stage,
// at stage_dq_rows<1, 1>'s positions, by st.async on the peer's xfull: once the peer's receive
// half is free (this CTA's xfree).
__device__ __forceinline__ void pair_send(const float (&dq)[QN / 2], const BwdSmem& sm, int it, int c, int krow, int t) {
  const int s = sm.qring.slot(it);
  mbar_wait(pair_xfree(sm, s), sm.qring.parity(it));
  const u32 peer = cluster_ctarank() ^ 1;
  const u32 tile = mbar_peer(sm.ring + s * STAGE_BYTES + (c == 0 ? 0 : Q_BYTES), peer);
  const u32 bar = mbar_peer(pair_xfull(sm, s), peer);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int j = 0; j < QN / 8; ++j) {
      const u32 at = tile + (j / 4) * (64 * 128) + swizzle128_offset(krow + 8 * hf, 2 * (j % 4) + t / 2) + 8 * (t & 1);
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(at),
                   "f"(dq[4 * j + 2 * hf]), "f"(dq[4 * j + 2 * hf + 1]), "r"(bar)
                   : "memory");
    }
}

// The turn's rank of this pair among the pairs that add into query block mb, w2's det_rank with
// pairs for blocks (bwd_fa3_block.cuh's pair_group for the rotated order).
__device__ __forceinline__ int pair_rank(const BwdWalk& k, const AttnBwdArgs& p, const DetGroup& g, int mb) {
  const int pr = k.nb >> 1;
  if (p.det_order == 2) {
    const int x = (mb + 1) * BM + k.off;  // key block n sees mb iff n·BN < x
    return min((int)(gridDim.x >> 1) - 1, (x - 1) / (2 * BN)) - pr;
  }
  if (p.det_order == 1 && g.gs > 0) return g.g0 + (min(g.gn - 1, mb / g.gs) - (pr - g.g0) + g.gn) % g.gn;
  return pr;
}

// Named barrier 10 + s: stage s's sum made (the summer warp arrives, the stage's writer waits).
constexpr u32 BAR_SUMMED = 10;
static_assert(BAR_SUMMED + STAGES <= 16, "named barriers 0-15");

// The pair's sum in place: the own tile (at OWN past the stage) += the received one (at IN), this
// lane's 16 bytes of every 512 from `at` (the stage plus 16·lane).
template <u32 OWN, u32 IN> __device__ __forceinline__ void pair_sum(u32 at) {
#pragma unroll 2
  for (u32 end = at + PAIR_TILE_BYTES; at < end; at += 512) {
    float a0, a1, a2, a3, b0, b1, b2, b3;
    ld_shared_f4(at + OWN, a0, a1, a2, a3);
    ld_shared_f4(at + IN, b0, b1, b2, b3);
    st_shared_f4(at + OWN, a0 + b0, a1 + b1, a2 + b2, a3 + b3);
  }
}

// Warp 3 of warpgroup 0 (the summer; idle in w2), every iteration in turn: xfull armed with the
// peer's bytes, the consumers' hand-over (named barrier 8 + s) and the peer's partial waited for,
// the sum made by its 32 lanes and fenced for the reduce's read, then the stage's writer told
// (named barrier 10 + s). A warp of its own: in a writer, beside its walk state, the sum spilled
// at the producer warpgroup's 24 registers.
__device__ __forceinline__ void d256_pair_summer(const BwdWalk& k, const BwdSmem& sm) {
  const int lane = threadIdx.x % 32;
  const bool own_in_do = cluster_ctarank() == 0;  // (CTA 0's own tile in the dO half)
  for (int it = 0; it < k.iters; ++it) {
    const int s = sm.qring.slot(it);
    if (lane == 0) mbar_arrive_expect_tx(pair_xfull(sm, s), PAIR_TILE_BYTES);
    named_barrier_sync(BAR_HANDOFF + s, 288);
    mbar_wait(pair_xfull(sm, s), sm.qring.parity(it));
    const u32 at = sm.ring + s * STAGE_BYTES + 16 * lane;
    if (own_in_do) {
      pair_sum<Q_BYTES, 0>(at);
    } else {
      pair_sum<0, Q_BYTES>(at);
    }
    fence_proxy_async_shared();  // (the sums before the reduce's async read)
    named_barrier_arrive(BAR_SUMMED + s, 64);
  }
}

// Writer j of the owner CTA (w2's d256_writer on the pair's sums; j 2: the summer), lane 0: once
// its iteration's sum is made, the pair's turn (2·rank: both halves of every earlier pair), the
// sum reduced into this CTA's column half, the stage released to both CTAs once read, the next
// counter read, the completion waited for and one bump.
__device__ __forceinline__ void d256_pair_writer(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const TmaMap* tdq, int j) {
  if (j == 2) {
    d256_pair_summer(k, sm);
    return;
  }
  const int writers = p.det_writers == 2 ? 2 : 1;
  if (j >= writers) return;
  const bool lead = threadIdx.x % 32 == 0, det = p.dq_sem != nullptr;
  const int r = (int)cluster_ctarank();
  const DetGroup g = det ? pair_group(k, p) : DetGroup{0, 1, 0};
  auto slot = [&](int it, int& h, int& mb, u32& turn) -> u32* {
    det_walk_at(k, p, it, h, mb);
    turn = det ? 2u * (u32)pair_rank(k, p, g, mb) : 0u;
    return det ? p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb : nullptr;
  };
  u32 at = 0;
  for (int it = j; it < k.iters; it += writers) {
    const int s = sm.qring.slot(it);
    named_barrier_sync(BAR_SUMMED + s, 64);
    if (lead) {
      int h, mb;
      u32 turn;
      u32* sem = slot(it, h, mb, turn);
      if (det) {
        while (at < turn) at = ld_acquire(sem);
        fence_proxy_async_global();
      }
      reduce_dq_tile<1>(tdq, sm.ring + s * STAGE_BYTES + (r == 0 ? Q_BYTES : 0), p.sq, k.b, h, mb * BM, r * QN, 1);
      tma_store_wait_read<0>();
      d256_release(sm, s, 8);
      at = 0;
      if (det) {
        int h2, mb2;
        u32 turn2;
        if (it + writers < k.iters) at = ld_acquire(slot(it + writers, h2, mb2, turn2));
        tma_store_wait<0>();
        fence_proxy_async_global();
        red_release_add(sem, 1);
      }
    }
    __syncwarp();
  }
  if (lead) tma_store_wait<0>();
}
