// d256's deterministic mode on the persistent walk (the host's bwd_fa3_d256_w2_persist:
// bwd_fa3_d256.cu with KILN_D256_PERSIST 1 and KILN_D256_DET 3). w2's two writer warps add the
// staged dQ tiles in det_rank's order, on bwd_fa3_d256_persist's walk: one CTA a SM taking key
// blocks ("tiles") from a counter, the next tile's first stage and K, V loaded under the current
// one's end. A non-persistent w2 block leaves only once its last ordered add has completed (its
// turn, the last of its group at that query tile, and the reduce), and the next block on that SM
// then loads K, V and its first stage with nothing under them: ~12,400 cycles a block in
// bwd_fa3_d256_tma's profile (H200, 2026-11-30), which persist took ~1.5 % off at 64-step walks.
//   Order: the counter hands the tiles out in the grid's order, so a wave of det_sms tiles (the
//   CTAs, one a SM) is w2's wave and the tiles' walks and ranks are w2's with the tile's index for
//   the grid's block (d256_tile_walk: causal, each head's key blocks in reverse; non-causal,
//   rotated within the wave's group, d256_tile_group). A tile waits only for tiles of its wave or
//   of earlier ones (rotated), or for later key blocks, handed out before it (causal), and every
//   CTA is resident, so each wave's tiles all get a CTA (det_schedule.rs's model: blocks in
//   order onto as many slots as SMs).
//   The writers (warps 1 and 2 of warpgroup 0, at the producer's 40 registers) take the ring's
//   iterations of their parity across the CTA's tiles (the ring counts on). They learn each tile
//   from a ring of four {j, index} entries (d256_tile_ring) that the producer writes with tile j's
//   K and V, -1 after the last: a writer reads entry j once the iterations before it are done,
//   polling until the producer has written it (a tile's K and V are loaded once the consumers
//   have read the previous one's, so the wait is at most about a step). Entry j's slot is written
//   again (tile j + 4) only after the ring's stages of tile j + 4 were released, by then every
//   writer is past tile j + 2.
#pragma once

// The rotated order's group of the tile at linear index t: det_group with t for the grid's block.
__device__ __forceinline__ DetGroup d256_tile_group(const AttnBwdArgs& p, int t) {
  const int nx = (p.skv + BN - 1) / BN, base = t - t % nx, w0 = t / p.det_sms * p.det_sms;
  DetGroup g;
  g.g0 = w0 > base ? w0 - base : 0;
  g.gn = min(nx, w0 + p.det_sms - base) - g.g0;
  g.gs = (p.sq + BM - 1) / BM / g.gn;
  return g;
}

// det_rank with the key blocks of a head counted from the problem (gridDim.x is the CTAs here).
__device__ __forceinline__ int d256_tile_rank(const BwdWalk& k, const AttnBwdArgs& p, const DetGroup& g, int mb) {
  if (p.det_order == 2) {
    const int nx = (p.skv + BN - 1) / BN, x = (mb + 1) * BM + k.off;  // key block n sees mb iff n·BN < x
    return min(nx - 1, (x - 1) / BN) - k.nb;
  }
  if (p.det_order == 1 && g.gs > 0) return g.g0 + (min(g.gn - 1, mb / g.gs) - (k.nb - g.g0) + g.gn) % g.gn;
  return k.nb;
}

// The ring of tiles: every slot's tag -1 (by thread 0 before bwd_start's barrier); tile j's
// entry {j, index} (the producer's lane 0, before its arrival on kv_full); entry j once the
// producer has written it (a writer's lane 0).
__device__ __forceinline__ void d256_tile_ring_init(const BwdSmem& sm) {
#pragma unroll
  for (int j = 0; j < 4; ++j) asm volatile("st.shared.v2.b32 [%0], {%1, %1};\n" ::"r"(d256_tile_ring(sm, j)), "r"(-1) : "memory");
}
__device__ __forceinline__ void d256_put_tile(const BwdSmem& sm, int j, int tile) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(d256_tile_ring(sm, j)), "r"(j), "r"(tile) : "memory");
}
__device__ __forceinline__ int d256_get_tile(const BwdSmem& sm, int j) {
  for (;;) {
    int tag, tile;
    asm volatile("ld.volatile.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(tag), "=r"(tile) : "r"(d256_tile_ring(sm, j)) : "memory");
    if (tag == j) return tile;
    __nanosleep(64);
  }
}

// Writer j of p.det_writers (w2's d256_writer over the CTA's tiles): per iteration of its parity,
// the tiles handed over (named barrier 8 + s), the block's turn, both reduces, the stage released
// once they have read it, the next iteration's counter read when it is of the same tile, then the
// completion and the bump.
__device__ __forceinline__ void d256_writer_tiles(const AttnBwdArgs& p, const BwdSmem& sm, const TmaMap* tdq, int j) {
  const int writers = p.det_writers == 2 ? 2 : 1;
  if (j >= writers) return;
  const bool lead = threadIdx.x % 32 == 0, det = p.dq_sem != nullptr;
  grid_dependency_wait();  // (the counters and the accumulator zeroed by the preprocess)
  u32 at = 0;              // the counter as last read (0: not yet)
  int g0 = 0, gi = j;      // the tile's first ring iteration, this writer's next
  for (int jt = 0;; ++jt) {
    int tile = 0;
    if (lead) tile = d256_get_tile(sm, jt);
    tile = __shfl_sync(0xffffffffu, tile, 0);
    if (tile < 0) break;
    const BwdWalk k = d256_tile_walk(p, tile);
    const DetGroup g = det && p.det_order == 1 ? d256_tile_group(p, tile) : DetGroup{0, 1, 0};
    // lane 0: iteration it's (head, query block), counter and turn
    auto slot = [&](int it, int& h, int& mb, u32& turn) -> u32* {
      det_walk_at(k, p, it, h, mb);
      turn = det ? (u32)d256_tile_rank(k, p, g, mb) : 0;
      return det ? p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb : nullptr;
    };
    for (; gi < g0 + k.iters; gi += writers) {
      const int it = gi - g0, s = sm.qring.slot(gi);
      named_barrier_sync(BAR_HANDOFF + s, 288);
      if (lead) {
        int h, mb;
        u32 turn;
        u32* sem = slot(it, h, mb, turn);
        if (det) {
          while (at < turn) at = ld_acquire(sem);
          fence_proxy_async_global();  // (the counter's acquire before the bulk adds)
        }
        const u32 st = sm.ring + s * STAGE_BYTES;
        reduce_dq_tile<1>(tdq, st + Q_BYTES, p.sq, k.b, h, mb * BM, 0, 1);
        reduce_dq_tile<1>(tdq, st, p.sq, k.b, h, mb * BM, QN, 1);
        tma_store_wait_read<0>();
        d256_release(sm, s, 8);  // (the consumers' 8 warps' arrivals)
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
    g0 += k.iters;
  }
  if (lead) tma_store_wait<0>();  // (the last tiles read before the CTA's memory goes)
}
