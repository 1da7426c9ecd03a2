// Attention backward, FlashAttention-3 style with dQ added by one TMA tensor reduce per
// warpgroup and query block (sm_90a; head dim 64 or 128): bwd_fa3_bulk_dq.cu's block (128 keys
// of one (batch, key/value head), a producer warp, two MMA warpgroups of 64 keys each, keys as
// the M of every product, dK and dV in registers, LSE and D read ahead of the wgmma waits), with
// what its H200 profile (2026-11-29, B2 H16 S8192 d128) blamed changed: about a fifth of its
// stall samples sat in the loop where 16 lanes of every warp issued one 256-byte bulk
// reduce-add each (elect, R2UR, UBLKRED, branch, flush: 16 a warp, one after another).
//   dQ    the warpgroup's fp32 partial (64 query rows x QN columns) is staged in a tile that a
//         rank-5 map over the accumulator describes ([B, H, Sq, D/32, 32]: each row cut into
//         128-byte pieces, one swizzle row each; box [64 rows][QN/32][32], 128B swizzle, so the
//         stores of 8 rows x 4 lanes spread over the banks without padding). Each warp stores
//         its 16 rows and fences them for the async proxy; warps 1-3 arrive at the warpgroup's
//         named barrier and go on, warp 0 waits there and one thread adds the whole tile with
//         `cp.reduce.async.bulk.tensor` (rows past Sq dropped by the map). That thread waits for
//         the tile to have been read before the next block's dSᵀ barrier, which every writer
//         passes before it rewrites the tile: one staging tile a warpgroup. The deterministic
//         mode keeps the ordered red.global adds on the counters (bwd_fa3_wgmma's order).
// dQ's split between the warpgroups (KILN_DQ_SPLIT): d128 by columns (both meet once every dSᵀ
// row is stored) or by keys (KILN_BWD_DQ_KEYS=1 on the host: all 128 columns of its own 64
// keys, twice the adds, one dSᵀ buffer); d64 by keys.
#include "attention/attn_bwd_args.cuh"
#include "attention/bwd_dq.cuh"
#include "attention/bwd_wgmma.cuh"
#include "attention/tma_4d.cuh"
#include "common/tma_5d.cuh"
#include "common/ws_pipeline.cuh"
#include "common/fast_math.cuh"

#if !defined(KILN_D) || !defined(KILN_STAGES) || !defined(KILN_DQ_SPLIT) || !defined(KILN_SMEM) || !defined(KILN_IN)
#error "KILN_D, KILN_STAGES, KILN_DQ_SPLIT, KILN_SMEM and KILN_IN must be defined by the host"
#endif

constexpr int D = KILN_D, BM = 64, BN = 128, STAGES = KILN_STAGES, DH = D / 64;
constexpr int THREADS = 384;
constexpr int SR = BM / 2, KR = D / 2;  // accumulator registers: Sᵀ / dPᵀ, dK / dV
constexpr int KP = BM / 16;             // k16 steps over the query block (register A chunks)
constexpr bool SPLIT_N = KILN_DQ_SPLIT == 0;
constexpr int QN = SPLIT_N ? D / 2 : D;  // dQ columns per consumer
constexpr int QKS = SPLIT_N ? BN / 16 : 64 / 16;  // dQ's k16 steps (keys)
constexpr int DQ_PIECES = QN / 32;                // 128-byte pieces of a staging row (dim 1 of the map)
constexpr u32 HALF_Q = BM * 128, HALF_KV = BN * 128;  // one 64-dim box: rows of 128 bytes
constexpr u32 Q_BYTES = DH * HALF_Q, KV_BYTES = DH * HALF_KV, STAGE_BYTES = 2 * Q_BYTES;
constexpr u32 DS_BYTES = BN * BM * 2;  // dSᵀ [BN][BM]: 128-byte rows (BM = 64)
// dSᵀ buffers: two, so a block's rows are stored while the previous block's dQ product may still
// read the other buffer (a barrier every block orders the two-blocks-apart reuse); one for d128
// split by keys (two would pass 227 KB), each warpgroup reading only its own rows and meeting
// its own warps before it rewrites them.
constexpr int DS_BUFS = !SPLIT_N && D == 128 ? 1 : 2;
constexpr u32 DQ_BYTES = BM * QN * 4;  // one consumer's dQ staging tile [BM][DQ_PIECES][32] fp32, swizzled
constexpr u32 OFF_V = KV_BYTES, OFF_RING = 2 * KV_BYTES, OFF_DS = OFF_RING + STAGES * STAGE_BYTES;
constexpr u32 OFF_DQ = OFF_DS + DS_BUFS * DS_BYTES;  // 1024-aligned: the tiles' swizzle follows address bits
constexpr u32 OFF_VEC = OFF_DQ + 2 * DQ_BYTES;       // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_BARS = OFF_VEC + STAGES * 2 * BM * 4;
constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
static_assert(D == 64 || D == 128, "head dim 64 or 128 (dK and dV of 64 keys x D in registers)");
static_assert(KILN_DQ_SPLIT == 0 || KILN_DQ_SPLIT == 1, "dQ split over columns (0) or keys (1)");
static_assert(!SPLIT_N || QN % 64 == 0, "a column split keeps whole 64-wide boxes of K");
static_assert(QN % 32 == 0 && OFF_DQ % 1024 == 0 && DQ_BYTES % 1024 == 0, "staging tiles of 128-byte pieces on the swizzle repeat");
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= THREADS * (65536 / THREADS / 8 * 8), "register split");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_tma_dq(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                        const __grid_constant__ TmaMap tdo, const __grid_constant__ TmaMap tdq, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 base = smem_align1024(smem_raw);
  const u32 sk = base, sv = base + OFF_V, ring = base + OFF_RING, sds = base + OFF_DS, sdq = base + OFF_DQ;
  float* vec = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + OFF_VEC);
  const u32 kv_full = base + OFF_BARS;
  const MbarRing<STAGES> qring{kv_full + 8};
  const int nb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, n0 = nb * BN;
  const int off = p.skv - p.sq;  // query i sees keys j <= i + off when causal
  const int m_first = p.causal ? max(0, n0 - off) / BM : 0;
  const int per_head = (p.sq + BM - 1) / BM - m_first;
  const int iters = p.group * per_head;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    bwd_setup(kv_full, qring, &tq, &tk, &tv, &tdo);
    tma_prefetch(&tdq);
  }
  __syncthreads();

  ws_roles<PRODUCER_REGS, CONSUMER_REGS, 32>(
      wg,
      [&] {
        const int lane = threadIdx.x;
        if (lane == 0) load_kv<DH, BN>(sk, sv, &tk, &tv, kv_full, n0, hk, b);
        for (int it = 0; it < iters; ++it) {
          const int h = hk * p.group + it / per_head, m0 = (m_first + it % per_head) * BM;
          const int s = qring.acquire(it);
          if (lane == 0) {
            mbar_expect_tx(qring.full(s), STAGE_BYTES);
            const u32 st = ring + s * STAGE_BYTES;
#pragma unroll
            for (int d = 0; d < DH; ++d) {
              tma_load_4d(st + d * HALF_Q, &tq, qring.full(s), 64 * d, m0, h, b);
              tma_load_4d(st + Q_BYTES + d * HALF_Q, &tdo, qring.full(s), 64 * d, m0, h, b);
            }
          }
          stage_lse_d<BM>(vec + s * 2 * BM, p, b, h, m0, lane);
          mbar_arrive(qring.full(s));
        }
      },
      [&](int c) {
        const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
        const int krow = 16 * w + g;  // this thread's keys within the consumer's 64: krow, krow + 8
        float dk[KR], dv[KR];
#pragma unroll
        for (int i = 0; i < KR; ++i) dk[i] = dv[i] = 0.0f;
        mbar_wait(kv_full, 0);
        const u32 skc = sk + c * 64 * 128, svc = sv + c * 64 * 128, sdqc = sdq + c * DQ_BYTES;
        const int col0 = SPLIT_N ? c * QN : 0;  // this consumer's first dQ column
        for (int it = 0; it < iters; ++it) {
          const int h = hk * p.group + it / per_head, mb = m_first + it % per_head, m0 = mb * BM;
          const int s = qring.wait_full(it);
          const u32 sq = ring + s * STAGE_BYTES, sdo = sq + Q_BYTES;
          const float* sl = vec + s * 2 * BM;
          // This thread's queries' LSE·log2e, read while the products run.
          float2 l[BM / 8];
#pragma unroll
          for (int j = 0; j < BM / 8; ++j) l[j] = *reinterpret_cast<const float2*>(sl + 8 * j + 2 * t);
          float st[SR], dp[SR];
          wgmma_fence();
          keys_by_queries<D, BM, BN>(st, skc, sq);
          wgmma_commit();
          keys_by_queries<D, BM, BN>(dp, svc, sdo);
          wgmma_commit();
          wgmma_wait<1>();
          fence_all(st);
          // Pᵀ: register i is key krow + 8·((i >> 1) & 1), query 8·(i >> 2) + 2t + (i & 1).
          const bool edge = n0 + BN > p.skv || m0 + BM > p.sq || (p.causal && n0 + BN - 1 > m0 + off);
#pragma unroll
          for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float pe = ex2_approx(fmaf(st[4 * j + e], p.scale_log2, -((e & 1) ? l[j].y : l[j].x)));
              if (edge) {
                const int key = n0 + c * 64 + krow + 8 * (e >> 1), q = m0 + 8 * j + 2 * t + (e & 1);
                if (key >= p.skv || q >= p.sq || (p.causal && key > q + off)) pe = 0.0f;
              }
              st[4 * j + e] = pe;
            }
          }
          float2 dd[BM / 8];  // D of the same queries, read while dPᵀ and dV run
#pragma unroll
          for (int j = 0; j < BM / 8; ++j) dd[j] = *reinterpret_cast<const float2*>(sl + BM + 8 * j + 2 * t);
          u32 pa[KP][4];
          pack_a<KP>(pa, st);
          wgmma_fence();
          keys_by_dims<D, BM>(dv, pa, sdo);
          wgmma_commit();
          wgmma_wait<1>();
          fence_all(dp);
#pragma unroll
          for (int j = 0; j < BM / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[4 * j + e] = st[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dd[j].y : dd[j].x));
          u32 dsa[KP][4];
          pack_a<KP>(dsa, dp);
          wgmma_fence();
          keys_by_dims<D, BM>(dk, dsa, sq);
          wgmma_commit();
          // dSᵀ rows (keys 64c + krow, + 8) into buffer it % DS_BUFS; with one buffer, once every
          // warp of the warpgroup is past the previous block's dQ product (which read all its rows).
          const u32 ds = sds + (it % DS_BUFS) * DS_BYTES;
          if (DS_BUFS == 1) named_barrier_sync(1 + c, 128);
          store_ds_t<BM>(ds, dsa, c * 64 + krow, t);
          fence_proxy_async_shared();
          // The thread that adds this warpgroup's dQ tile (warp 0, lane 0) waits until the
          // previous block's add has read it: every writer of the tile passes the barrier below
          // before it stores its rows again.
          if (w == 0 && lane == 0) tma_store_wait_read<0>();
          // Column split: every consumer's rows are needed (both warpgroups meet); key split:
          // only this warpgroup's.
          if (SPLIT_N) {
            named_barrier_sync(1, 256);
          } else {
            named_barrier_sync(1 + c, 128);
          }
          // d128 split by keys: dQ's 64 accumulators only fit once dK is done with dSᵀ's registers
          // (else ptxas serialises the wgmmas, C7512).
          if (QN > 64) wgmma_wait<0>();
          float dq[QN / 2];
          wgmma_fence();
          dq_from_ds<QN, QKS, BM, BN>(dq, ds, sk, SPLIT_N ? 0 : c * 64, col0 / 64);
          wgmma_commit();
          wgmma_wait<0>();
          fence_all(dq);
          if (lane == 0) mbar_arrive(qring.empty(s));  // Q and dO are read (Sᵀ, dPᵀ, dV, dK)
          // dQ register i: query row krow + 8·((i >> 1) & 1), column col0 + 8·(i >> 2) + 2t + (i & 1).
          u32* sem = p.dq_sem == nullptr ? nullptr : p.dq_sem + ((i64)b * p.heads_q + h) * p.m_blocks + mb;
          if (sem == nullptr) {
            // The warp's rows 16w .. 16w + 15 into the tile: row r, column x is in 128-byte piece
            // r·DQ_PIECES + x/32, 16-byte chunk (x % 32)/4 of it, swizzled as the map's 128B.
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
              for (int j = 0; j < QN / 8; ++j) {
                const int piece = (krow + 8 * hf) * DQ_PIECES + j / 4, chunk = 2 * (j % 4) + t / 2;
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sdqc + swizzle128_offset(piece, chunk) + 8 * (t & 1)),
                             "f"(dq[4 * j + 2 * hf]), "f"(dq[4 * j + 2 * hf + 1]));
              }
            fence_proxy_async_shared();
            // Warps 1-3 signal and go on; warp 0 waits for them, and one thread adds the tile.
            if (w != 0) {
              named_barrier_arrive(4 + c, 128);
            } else {
              named_barrier_sync(4 + c, 128);
              if (lane == 0) {
                tma_reduce_add_5d(&tdq, sdqc, 0, col0 / 32, m0, h, b);
                tma_store_commit();
              }
            }
          } else {
            // bwd_fa3_wgmma's atomics, in its order.
            float* acc = p.dq_acc + (((i64)b * p.heads_q + h) * p.sq + m0 + krow) * D + col0 + 2 * t;
            auto add_dq = [&] {
#pragma unroll
              for (int hf = 0; hf < 2; ++hf)
                if (m0 + krow + 8 * hf < p.sq)
#pragma unroll
                  for (int j = 0; j < QN / 8; ++j) red_add2(acc + 8 * hf * D + 8 * j, dq[4 * j + 2 * hf], dq[4 * j + 2 * hf + 1]);
            };
            add_dq_in_order(sem, nb, !SPLIT_N, c, 3, add_dq);
          }
        }
        if (w == 0 && lane == 0) tma_store_wait<0>();  // the last add done before the block's memory goes
        fence_all(dk);  // the last dK and dV wgmmas completed (the loop's final wait) before these reads
        fence_all(dv);
        // dK (scaled) and dV of this consumer's keys, in K's layout.
        store_dk_dv<D>(static_cast<in_t*>(p.dk) + b * p.kv_sb + hk * p.kv_sh, static_cast<in_t*>(p.dv) + b * p.kv_sb + hk * p.kv_sh, dk, dv,
                       p.scale, n0 + c * 64 + krow, p.skv, p.kv_ss, t);
      });
}
