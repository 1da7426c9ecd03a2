// Attention backward, FlashAttention-3 style (sm_90a; head dim 64 or 128): warp specialisation
// with WGMMA and TMA on the skeleton of common/ws_pipeline.cuh. One block owns BN = 128 keys of
// one (batch, key/value head) and walks every query block (BM = 64 rows) of every query head of
// its group (GQA: dK and dV summed in registers), causal blocks from the first query block that
// sees its keys (bottom-right).
//   Producer warp (warpgroup 0, setmaxnreg down): K and V by TMA once; then per query block Q
//   and dO by TMA and LSE·log2e and D = rowsum(dO ∘ O) by its 32 lanes into a STAGES-deep ring
//   (full: 32 arrivals, one with the TMA bytes; empty: the 8 consumer warps).
//   Two MMA warpgroups (setmaxnreg up), consumer c owning keys 64c .. 64c + 63 of the block, with
//   keys as the M of every product (the accumulators of the transposed problem):
//     Sᵀ  = K_c·Qᵀ                wgmma SS m64 n64 (K-major both)
//     dPᵀ = V_c·dOᵀ               wgmma SS m64 n64, issued right behind Sᵀ
//     Pᵀ  = exp2(Sᵀ·scale·log2e − LSE·log2e), masked to 0 (tails, causal)
//     dV += Pᵀ·dO                 wgmma RS m64 nD: Pᵀ rounded, as register A; dO MN-major
//     dSᵀ = Pᵀ ∘ (dPᵀ − D)
//     dK += dSᵀ·Q                 wgmma RS m64 nD: dSᵀ as register A; Q MN-major
//     dSᵀ -> shared memory (128B-swizzled [key][query] rows, two buffers)
//     dQ  = dS·K                  wgmma SS, A = dS and B = K both MN-major (read transposed)
//   KILN_DQ_SPLIT 0 (d128): the consumers meet at a named barrier once every dSᵀ row is stored,
//   and consumer c computes dQ's columns D/2·c .. over all BN keys (m64 n(D/2), one 64-wide box
//   of K each). 1 (d64): each consumer computes all D columns over its own 64 keys (m64 nD) and
//   both add them (twice the atomics, no barrier between the warpgroups).
//   dQ is added into the fp32 accumulator with red.global.add.v2.f32 (deterministic mode: in key
//   block order, each block waiting on the per-(head, query block) counter as
//   bwd_fa2_mma_sync.cu does, and with the key split consumer 0 before consumer 1), then
//   bwd_prep.cu's postprocess scales and rounds it.
// The maps are rank 4 over [batch, heads, seq, dim] (boxes of 64 dims), their strides giving
// BSHD or BHSD; rows past a sequence's end arrive as zeros (LSE +inf there, D 0, so P is 0).
#include "attention/attn_bwd_args.cuh"
#include "attention/bwd_dq.cuh"
#include "attention/bwd_wgmma.cuh"
#include "attention/tma_4d.cuh"
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
constexpr u32 HALF_Q = BM * 128, HALF_KV = BN * 128;  // one 64-dim box: rows of 128 bytes
constexpr u32 Q_BYTES = DH * HALF_Q, KV_BYTES = DH * HALF_KV, STAGE_BYTES = 2 * Q_BYTES;
constexpr u32 DS_BYTES = BN * BM * 2;  // dSᵀ [BN][BM]: 128-byte rows (BM = 64)
constexpr u32 OFF_V = KV_BYTES, OFF_RING = 2 * KV_BYTES, OFF_DS = OFF_RING + STAGES * STAGE_BYTES;
constexpr u32 OFF_VEC = OFF_DS + 2 * DS_BYTES;  // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_BARS = OFF_VEC + STAGES * 2 * BM * 4;
constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
static_assert(D == 64 || D == 128, "head dim 64 or 128 (dK and dV of 64 keys x D in registers)");
static_assert(KILN_DQ_SPLIT == 0 || KILN_DQ_SPLIT == 1, "dQ split over columns (0) or keys (1)");
static_assert(!SPLIT_N || QN % 64 == 0, "a column split keeps whole 64-wide boxes of K");
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= THREADS * (65536 / THREADS / 8 * 8), "register split");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_wgmma(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                       const __grid_constant__ TmaMap tdo, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 base = smem_align1024(smem_raw);
  const u32 sk = base, sv = base + OFF_V, ring = base + OFF_RING, sds = base + OFF_DS;
  float* vec = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + OFF_VEC);
  const u32 kv_full = base + OFF_BARS;
  const MbarRing<STAGES> qring{kv_full + 8};
  const int nb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, n0 = nb * BN;
  const int off = p.skv - p.sq;  // query i sees keys j <= i + off when causal
  const int m_first = p.causal ? max(0, n0 - off) / BM : 0;
  const int per_head = (p.sq + BM - 1) / BM - m_first;
  const int iters = p.group * per_head;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) bwd_setup(kv_full, qring, &tq, &tk, &tv, &tdo);
  __syncthreads();

  ws_roles<PRODUCER_REGS, CONSUMER_REGS, 32>(
      wg,
      [&] {
        const int lane = threadIdx.x;
        if (lane == 0) load_kv<DH, BN>(sk, sv, &tk, &tv, kv_full, n0, hk, b);
        for (int it = 0; it < iters; ++it) {
          const int h = hk * p.group + it / per_head, m0 = (m_first + it % per_head) * BM;
          const int s = qring.acquire(it);
          stage_lse_d<BM>(vec + s * 2 * BM, p, b, h, m0, lane);
          if (lane == 0) {
            mbar_arrive_expect_tx(qring.full(s), STAGE_BYTES);
            const u32 st = ring + s * STAGE_BYTES;
#pragma unroll
            for (int d = 0; d < DH; ++d) {
              tma_load_4d(st + d * HALF_Q, &tq, qring.full(s), 64 * d, m0, h, b);
              tma_load_4d(st + Q_BYTES + d * HALF_Q, &tdo, qring.full(s), 64 * d, m0, h, b);
            }
          } else {
            mbar_arrive(qring.full(s));
          }
        }
      },
      [&](int c) {
        const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
        const int krow = 16 * w + g;  // this thread's keys within the consumer's 64: krow, krow + 8
        float dk[KR], dv[KR];
#pragma unroll
        for (int i = 0; i < KR; ++i) dk[i] = dv[i] = 0.0f;
        mbar_wait(kv_full, 0);
        const u32 skc = sk + c * 64 * 128, svc = sv + c * 64 * 128;
        for (int it = 0; it < iters; ++it) {
          const int h = hk * p.group + it / per_head, mb = m_first + it % per_head, m0 = mb * BM;
          const int s = qring.wait_full(it);
          const u32 sq = ring + s * STAGE_BYTES, sdo = sq + Q_BYTES;
          const float* sl = vec + s * 2 * BM;
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
            const float2 l = *reinterpret_cast<const float2*>(sl + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float pe = ex2_approx(fmaf(st[4 * j + e], p.scale_log2, -((e & 1) ? l.y : l.x)));
              if (edge) {
                const int key = n0 + c * 64 + krow + 8 * (e >> 1), q = m0 + 8 * j + 2 * t + (e & 1);
                if (key >= p.skv || q >= p.sq || (p.causal && key > q + off)) pe = 0.0f;
              }
              st[4 * j + e] = pe;
            }
          }
          u32 pa[KP][4];
          pack_a<KP>(pa, st);
          wgmma_fence();
          keys_by_dims<D, BM>(dv, pa, sdo);
          wgmma_commit();
          wgmma_wait<1>();
          fence_all(dp);
#pragma unroll
          for (int j = 0; j < BM / 8; ++j) {
            const float2 dd = *reinterpret_cast<const float2*>(sl + BM + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[4 * j + e] = st[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dd.y : dd.x));
          }
          u32 dsa[KP][4];
          pack_a<KP>(dsa, dp);
          wgmma_fence();
          keys_by_dims<D, BM>(dk, dsa, sq);
          wgmma_commit();
          // dSᵀ rows (keys 64c + krow, + 8) into buffer it & 1.
          const u32 ds = sds + (it & 1) * DS_BYTES;
          store_ds_t<BM>(ds, dsa, c * 64 + krow, t);
          fence_proxy_async_shared();
          // Column split: every consumer's rows are needed (both warpgroups meet); key split:
          // only this warpgroup's.
          if (SPLIT_N) {
            named_barrier_sync(1, 256);
          } else {
            named_barrier_sync(1 + c, 128);
          }
          float dq[QN / 2];
          wgmma_fence();
          dq_from_ds<QN, QKS, BM, BN>(dq, ds, sk, SPLIT_N ? 0 : c * 64, SPLIT_N ? c * (QN / 64) : 0);
          wgmma_commit();
          wgmma_wait<0>();
          fence_all(dq);
          if (lane == 0) mbar_arrive(qring.empty(s));  // Q and dO are read (Sᵀ, dPᵀ, dV, dK)
          // dQ register i: query row krow + 8·((i >> 1) & 1), column col0 + 8·(i >> 2) + 2t + (i & 1).
          const int col0 = SPLIT_N ? c * QN : 0;
          float* acc = p.dq_acc + (((i64)b * p.heads_q + h) * p.sq + m0 + krow) * D + col0 + 2 * t;
          auto add_dq = [&] {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
              if (m0 + krow + 8 * hf < p.sq)
#pragma unroll
                for (int j = 0; j < QN / 8; ++j) red_add2(acc + 8 * hf * D + 8 * j, dq[4 * j + 2 * hf], dq[4 * j + 2 * hf + 1]);
          };
          u32* sem = p.dq_sem == nullptr ? nullptr : p.dq_sem + ((i64)b * p.heads_q + h) * p.m_blocks + mb;
          if (sem == nullptr) {
            add_dq();
          } else {
            add_dq_in_order(sem, nb, !SPLIT_N, c, 3, add_dq);
          }
        }
        fence_all(dk);  // the last dK and dV wgmmas completed (the loop's final wait) before these reads
        fence_all(dv);
        // dK (scaled) and dV of this consumer's keys, in K's layout.
        store_dk_dv<D>(static_cast<in_t*>(p.dk) + b * p.kv_sb + hk * p.kv_sh, static_cast<in_t*>(p.dv) + b * p.kv_sb + hk * p.kv_sh, dk, dv,
                       p.scale, n0 + c * 64 + krow, p.skv, p.kv_ss, t);
      });
}
