// Attention backward at head dim 256, FlashAttention-3 style (sm_90a). At d256 the other WGMMA
// backwards' split (each consumer owns 64 keys and holds their dK and dV, 64 x D fp32 each) would
// need 256 accumulator registers a thread; here both consumers work on the same 64 keys and each
// holds one of the two gradients, 64 x 256 fp32 = 128 registers:
//   Block: BN = 64 keys of one (batch, key/value head) (KILN_BN), walking every 64-row query block
//   of every query head of its group as bwd_fa3_block.cuh's walk does; K and V (32 KB each)
//   resident, Q and dO (64 KB a stage) through a 2-stage ring fed by its producer warp.
//   Consumer 0 (Pᵀ, dV):  Sᵀ = K·Qᵀ (SS m64n64, k over 256 dims), Pᵀ = exp2(…) masked on edge
//                         blocks, Pᵀ in fp32 into the exchange buffer, dV += Pᵀ·dO (RS m64n256).
//   Consumer 1 (dSᵀ, dK): dPᵀ = V·dOᵀ (SS m64n64), Pᵀ from the exchange buffer (thread i reads
//                         what thread i of consumer 0 wrote: the same accumulator positions),
//                         dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ·Q (RS m64n256), dSᵀ rounded into
//                         shared memory (two buffers).
//   Both, once dSᵀ is stored: dQ = dS·K over the 64 keys for their own 128 dims (SS m64n128,
//   consumer c dims 128c ..), added with red.global.add.v2.f32 (bwd_fa3_block.cuh's
//   add_dq_atomics: any order, or in key block order on the deterministic mode's counters, each
//   consumer's columns its own, so every element's additions keep one order).
// Each consumer's tensor work a block is the same: one m64n64k256, one m64n256k64, one m64n128k64.
// A walk that issued each consumer's next Sᵀ or dPᵀ before this block's dQ (dQ then in two halves
// for registers) ran 0.97x this one on an H200 (2026-11-29, ledger D1): not kept.
// Named barriers: 1 (dSᵀ stored, both), 3 (the deterministic adds), 4 (Pᵀ written: consumer 0
// arrives, 1 waits), 5 (Pᵀ read: consumer 1 arrives, 0 waits before it writes the next).
#include "attention/bwd_fa3_block.cuh"

static_assert(D == 256 && BN == 64 && BM == 64 && SPLIT_N && QN == 128, "d256: 64 keys, 64 queries, dQ split by 128 columns");

// Pᵀ exchanged in fp32, [SR / 4][128 threads] of float4: a warp's 32 float4 stores are 512
// contiguous bytes.
constexpr u32 PX_BYTES = 64 * BM * 4;
constexpr u32 OFF_DS = 2 * KV_BYTES + STAGES * STAGE_BYTES;
constexpr u32 OFF_PX = OFF_DS + 2 * DS_BYTES;
constexpr u32 OFF_VEC = OFF_PX + PX_BYTES;  // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_BARS = OFF_VEC + STAGES * 2 * BM * 4;
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");
constexpr u32 BAR_DS = 1, BAR_P_READY = 4, BAR_P_FREE = 5;  // (3: add_dq_in_order's)

// What both consumers do once dSᵀ of block it is stored: dQ's 128 columns of consumer c over the
// 64 keys, waited for and added (sem: the deterministic mode's counter, else null).
__device__ __forceinline__ void d256_dq(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const BwdThread& th, int it, int h,
                                        int m0, u32* sem) {
  float dq[QN / 2];
  wgmma_fence();
  dq_from_ds<QN, QKS, BM, BN, true>(dq, (sm.sds >> 4) + (it & 1) * (DS_BYTES / 16), sm.sk >> 4, 0, th.c * (QN / 64));
  wgmma_commit();
  wgmma_wait<0>();
  fence_all(dq);
  add_dq_atomics(dq, p, k, th, h, m0, sem);
}

// Consumer C's walk, written once for both: its gradient g (C 0: dV, 1: dK) zeroed, K and V
// waited for; per query block its first product acc (C 0: Sᵀ = K·Qᵀ, 1: dPᵀ = V·dOᵀ), its middle
// (below), the stage released and its half of dQ; then g stored in K's layout (dK times scale).
//   C 0: Pᵀ masked on edge blocks, written to `px` once consumer 1 has read the previous block's,
//        dV += Pᵀ·dO; then it waits for dSᵀ.
//   C 1: Pᵀ read from `px` once written, dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ·Q, dSᵀ stored; then
//        both meet.
template <int C> __device__ __forceinline__ void d256_consume(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const BwdThread& th,
                                                              float4* px) {
  float g[KR];
#pragma unroll
  for (int i = 0; i < KR; ++i) g[i] = 0.0f;
  const int tid = threadIdx.x % 128;
  const u32 ring16 = sm.ring >> 4;
  const u32 x16 = (C == 0 ? sm.sk : sm.sv) >> 4, y_off16 = C == 0 ? 0 : Q_BYTES / 16;  // acc = X·Yᵀ, Y = Q or dO
  mbar_wait(sm.kv_full, 0);
  float acc[SR];
  for (int it = 0; it < k.iters; ++it) {
    const int h = k.hk * p.group + it / k.per_head, mb = k.m_first + it % k.per_head, m0 = mb * BM;
    sm.qring.wait_full(it);
    // the stage from the iteration, not from the wait, so that the descriptors stay uniform;
    // operand addresses in 16-byte units (every descriptor an add: bwd_wgmma.cuh's desc_at)
    const int s = sm.qring.slot(it);
    const u32 sq16 = ring16 + s * (STAGE_BYTES / 16), sdo16 = sq16 + Q_BYTES / 16;
    const float* sl = sm.vec + s * 2 * BM;
    float2 v[BM / 8];  // this thread's queries' LSE·log2e (C 0) or D (C 1), read while acc runs
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) v[j] = *reinterpret_cast<const float2*>(sl + C * BM + 8 * j + 2 * th.t);
    wgmma_fence();
    keys_by_queries<D, BM, BN, true>(acc, x16, sq16 + y_off16);
    wgmma_commit();
    wgmma_wait<0>();
    fence_all(acc);
    if constexpr (C == 0) {
      // masked on edge blocks only (bwd_grads' test: keys past Skv, queries past Sq, causal pairs)
      if (k.n0 + BN > p.skv || m0 + BM > p.sq || (p.causal && k.n0 + BN - 1 > m0 + k.off)) {
        p_from_s<true, true>(acc, v, sl, p, k, th.krow, th.t, m0);
      } else {
        p_from_s<true, false>(acc, v, sl, p, k, th.krow, th.t, m0);
      }
      if (it > 0) named_barrier_sync(BAR_P_FREE, 256);  // consumer 1 has read the previous block's
#pragma unroll
      for (int i = 0; i < SR / 4; ++i) px[i * 128 + tid] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
      named_barrier_arrive(BAR_P_READY, 256);
      u32 pa[KP][4];
      pack_a<KP>(pa, acc);
      wgmma_fence();
      keys_by_dims<D, BM, true>(g, pa, sdo16);
      wgmma_commit();
    } else {
      named_barrier_sync(BAR_P_READY, 256);
#pragma unroll
      for (int i = 0; i < SR / 4; ++i) {
        const float4 pe = px[i * 128 + tid];  // register 4i + e: query 8i + 2t + (e & 1)
        acc[4 * i] = pe.x * (acc[4 * i] - v[i].x);
        acc[4 * i + 1] = pe.y * (acc[4 * i + 1] - v[i].y);
        acc[4 * i + 2] = pe.z * (acc[4 * i + 2] - v[i].x);
        acc[4 * i + 3] = pe.w * (acc[4 * i + 3] - v[i].y);
      }
      if (it + 1 < k.iters) named_barrier_arrive(BAR_P_FREE, 256);
      u32 dsa[KP][4];
      pack_a<KP>(dsa, acc);
      wgmma_fence();
      keys_by_dims<D, BM, true>(g, dsa, sq16);
      wgmma_commit();
      // dSᵀ rows (keys krow, krow + 8) into buffer it % 2: its last readers, block it - 2's dQ
      // products, completed before both consumers met at block it - 1's barrier.
      store_ds_t<BM, BN>(sm.sds + (it & 1) * DS_BYTES, dsa, th.krow, th.t);
      fence_proxy_async_shared();
    }
    // dV (C 0) or dK (C 1) has completed: Q and dO are read by this warpgroup, and Pᵀ's or dSᵀ's
    // registers are free before dQ's. Consumer 1 meets consumer 0 first (its dSᵀ is stored).
    if (C == 1) named_barrier_sync(BAR_DS, 256);
    wgmma_wait<0>();
    int it_late = it;  // (bwd_block's opaque copy: the stage recomputed, not kept live)
    asm volatile("" : "+r"(it_late));
    if (th.lane == 0) mbar_arrive(sm.qring.empty(sm.qring.slot(it_late)));
    if (C == 0) named_barrier_sync(BAR_DS, 256);
    u32* sem = p.dq_sem == nullptr ? nullptr : p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb;
    d256_dq(p, k, sm, th, it, h, m0, sem);
  }
  fence_all(g);
  store_key_rows<D>(static_cast<in_t*>(C == 0 ? p.dv : p.dk) + k.b * p.kv_sb + k.hk * p.kv_sh, g, C == 0 ? 1.0f : p.scale,
                    k.n0 + th.krow, p.skv, p.kv_ss, th.t);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_d256(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                      const __grid_constant__ TmaMap tdo, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bwd_kernel<true>(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, nullptr, p, [&](int c, const BwdWalk& k, const BwdSmem& sm) {
    BwdThread th;
    th.c = c, th.w = (threadIdx.x / 32) % 4, th.lane = threadIdx.x % 32, th.t = th.lane & 3;
    th.krow = 16 * th.w + (th.lane >> 2);
    float4* px = reinterpret_cast<float4*>(sm.vec) - PX_BYTES / 16;  // the exchange buffer, just below the vectors
    if (c == 0) {
      d256_consume<0>(p, k, sm, th, px);
    } else {
      d256_consume<1>(p, k, sm, th, px);
    }
  });
}
