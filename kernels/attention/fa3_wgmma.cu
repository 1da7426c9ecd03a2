// Attention forward, FlashAttention-3 style (sm_90a; head dim 128): warp specialisation with
// WGMMA and TMA. 384 threads: warpgroup 0 is the producer (setmaxnreg down to 40; one thread
// TMA-loads the Q tile once and the K and V tiles of every key block into a KILN_STAGES ring,
// each guarded by full/empty mbarriers); warpgroups 1 and 2 are consumers (setmaxnreg up to 232),
// each owning 64 of the block's 128 query rows (KILN_OVERLAP = 1: S(j+1) is issued together with
// P(j)·V(j) and its softmax runs while that product is on the tensor cores):
//   S = Q·Kᵀ     wgmma m64n128k16, both operands K-major from 128B-swizzled shared tiles
//   softmax      online, fp32, exp2 with scale·log2e folded into one FMA, on the accumulators
//   O += P·V     wgmma m64n128k16 with P as the register A operand (never stored), V read
//                MN-major (transposed descriptor) from its shared tile
// K and V complete on separate barriers, so S(j) starts while V(j) is still landing. Q/K/V are
// addressed by rank-4 tensor maps [batch, heads, seq, dim] whose strides give BSHD or BHSD and
// whose bounds zero-fill the sequence tails; causal blocks skip key tiles above the diagonal
// (bottom-right aligned) and run heaviest first. Writes O (Q's layout) and LSE (natural log).
#include "attention/attn_args.cuh"
#include "attention/tma_4d.cuh"
#include "attention/wgmma_rs.cuh"
#include "common/mbarrier.cuh"

#ifndef KILN_STAGES
#define KILN_STAGES 3
#endif
// 1: issue the next tile's Q·Kᵀ beside this tile's P·V and run the softmax under the latter.
#ifndef KILN_OVERLAP
#define KILN_OVERLAP 1
#endif

constexpr int D = 128, BM = 128, BN = 128, STAGES = KILN_STAGES, NT = BN / 8, OT = D / 8;
constexpr u32 HALF_Q = BM * 128, HALF_KV = BN * 128;  // one 64-wide half: rows of 128 bytes
constexpr u32 Q_BYTES = 2 * HALF_Q, KV_BYTES = 2 * HALF_KV, STAGE_BYTES = 2 * KV_BYTES;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 65536, "register file overcommitted");
static_assert(KILN_SMEM >= 1024 + Q_BYTES + STAGES * STAGE_BYTES + (1 + 3 * STAGES) * 8, "KILN_SMEM too small");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void fence_all(float (&r)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) wgmma_fence_operand(r[i]);
}

// Issues S = Q·Kᵀ for this consumer's 64 rows (Q at `sqc`, K tile at `sk`) and commits it.
__device__ __forceinline__ void issue_s(float (&sc)[64], u32 sqc, u32 sk) {
#pragma unroll
  for (int i = 0; i < 64; ++i) sc[i] = 0.0f;
  fence_all(sc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const u64 da = wgmma_desc_sw128(sqc + (kk / 4) * HALF_Q + (kk % 4) * 32, 16, 1024);
    const u64 db = wgmma_desc_sw128(sk + (kk / 4) * HALF_KV + (kk % 4) * 32, 16, 1024);
    wgmma_m64k16<in_t, BN, 0, 0>(sc, da, db, 1);
  }
  wgmma_commit();
}

// P (the exponentiated scores) rounded to the input type, in the A-operand register layout.
__device__ __forceinline__ void pack_p(u32 (&pa)[BN / 16][4], const float (&sc)[64]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    pa[kk][0] = pack2<in_t>(sc[8 * kk + 0], sc[8 * kk + 1]);
    pa[kk][1] = pack2<in_t>(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack2<in_t>(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack2<in_t>(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

// Keeps the packed P where it was computed (as fence_all does for accumulators).
__device__ __forceinline__ void fence_p(u32 (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
}

// Issues O += P·V with P in A registers and the V tile at `sv`, and commits it. The caller has
// fenced O after its last change (a fence here, behind an S wgmma already in flight, would read
// O inside that pipeline stage and serialise it).
__device__ __forceinline__ void issue_pv(float (&o)[64], const u32 (&pa)[BN / 16][4], u32 sv) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    // V is [keys][dim]: MN-major for B (K = keys, N = dim); 16 keys = 2048 bytes; the second
    // 64-wide half of dim is the next box, HALF_KV bytes on (LBO).
    const u64 db = wgmma_desc_sw128(sv + kk * 2048, HALF_KV, 1024);
    wgmma_m64n128k16_rs<in_t, 1>(o, pa[kk], db, 1);
  }
  wgmma_commit();
}

__device__ __forceinline__ void rescale(float (&o)[64], const float (&corr)[2]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
}

// The online softmax state of this thread's two rows (row0 and row0 + 8), in log2 units.
struct Softmax {
  float m[2], l[2];
  int row0, t, m0, off, skv; // off = skv - sq: query i sees keys j <= i + off when causal
  bool causal;
  float scale_log2;

  // Masks and exponentiates the scores of the key tile at n0 in place; `corr` is the factor O
  // must be rescaled by before this tile's P·V is added.
  // Register i: row row0 + 8((i>>1)&1), column n0 + 8(i>>2) + 2t + (i&1).
  __device__ __forceinline__ void tile(float (&sc)[64], int n0, float (&corr)[2]) {
    if (n0 + BN > skv || (causal && n0 + BN - 1 > m0 + off)) {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int col = n0 + 8 * (i >> 2) + 2 * t + (i & 1);
        const int row = row0 + 8 * ((i >> 1) & 1);
        const int lim = causal ? min(skv, row + off + 1) : skv;
        if (col >= lim) sc[i] = NEG_INF;
      }
    }
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      float mx = NEG_INF;
#pragma unroll
      for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * rh], sc[4 * n + 2 * rh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[rh], mx * scale_log2);
      const float m_use = m_new == NEG_INF ? 0.0f : m_new; // a row with no visible key yet
      corr[rh] = ex2(m[rh] - m_use);
      m[rh] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 4 * n + 2 * rh + e;
          sc[i] = ex2(fmaf(sc[i], scale_log2, -m_use));
          sum += sc[i];
        }
      l[rh] = l[rh] * corr[rh] + sum; // this lane's partial; the quad is summed at the end
    }
  }
};

extern "C" __global__ void __launch_bounds__(384, 1)
    attn_fa3_wgmma(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv, AttnArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 sq = base, ring = base + Q_BYTES, bars = ring + STAGES * STAGE_BYTES;
  const u32 bar_q = bars;
  auto full_k = [&](int s) { return bars + 8 + 8 * s; };
  auto full_v = [&](int s) { return bars + 8 + 8 * (STAGES + s); };
  auto empty = [&](int s) { return bars + 8 + 8 * (2 * STAGES + s); };

  const int mb = gridDim.x - 1 - blockIdx.x;  // causal: the longest rows first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  const int m0 = mb * BM;
  const int off = p.skv - p.sq;
  const int rows = min(BM, p.sq - m0);
  const int kv_end = p.causal ? min(p.skv, m0 + rows + off) : p.skv;
  const int ntiles = kv_end <= 0 ? 0 : (kv_end - 1) / BN + 1;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(bar_q, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(empty(s), 8);  // one arrival per consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0 && ntiles > 0) {
      mbar_arrive_expect_tx(bar_q, Q_BYTES);
      tma_load_4d(sq, &tq, bar_q, 0, m0, h, b);
      tma_load_4d(sq + HALF_Q, &tq, bar_q, 64, m0, h, b);
      for (int j = 0; j < ntiles; ++j) {
        const int s = j % STAGES;
        mbar_wait(empty(s), ((j / STAGES) & 1) ^ 1);
        const u32 sk = ring + s * STAGE_BYTES, sv = sk + KV_BYTES;
        mbar_arrive_expect_tx(full_k(s), KV_BYTES);
        tma_load_4d(sk, &tk, full_k(s), 0, j * BN, hk, b);
        tma_load_4d(sk + HALF_KV, &tk, full_k(s), 64, j * BN, hk, b);
        mbar_arrive_expect_tx(full_v(s), KV_BYTES);
        tma_load_4d(sv, &tv, full_v(s), 0, j * BN, hk, b);
        tma_load_4d(sv + HALF_KV, &tv, full_v(s), 64, j * BN, hk, b);
      }
    }
    return;
  }

  warpgroup_reg_inc<CONSUMER_REGS>();
  const int c = wg - 1, w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int row0 = m0 + c * 64 + 16 * w + g;  // this thread's rows: row0 and row0 + 8
  const u32 sqc = sq + c * 64 * 128;          // this consumer's 64 rows in each Q half
  Softmax sm{{NEG_INF, NEG_INF}, {0.0f, 0.0f}, row0, t, m0, off, p.skv, p.causal != 0, p.scale_log2};
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  auto stage = [&](int j) { return ring + (j % STAGES) * STAGE_BYTES; };
  auto phase = [&](int j) { return (u32)((j / STAGES) & 1); };
  auto release = [&](int j) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(j % STAGES));
  };
  if (ntiles > 0) mbar_wait(bar_q, 0);
  float sc[64], corr[2];
  u32 pa[BN / 16][4];
#if KILN_OVERLAP
  // Intra-warpgroup overlap (FA3's order): S(j+1) = Q·K(j+1)ᵀ and O += P(j)·V(j) are issued
  // back to back; the softmax of S(j+1) runs while P(j)·V(j) is still on the tensor cores, and O
  // is rescaled only once that product is done. P(j) was packed at the end of the previous step.
  if (ntiles > 0) {
    mbar_wait(full_k(0), 0);
    issue_s(sc, sqc, stage(0));
    wgmma_wait<0>();
    fence_all(sc);
    sm.tile(sc, 0, corr);
    pack_p(pa, sc);
    fence_p(pa);
  }
  fence_all(o);
  // Every tile but the last has a successor; the loop body is branch-free so that ptxas can see
  // that wait<1> retires S(j+1) (the older group) while P(j)·V(j) stays in flight.
  for (int j = 0; j + 1 < ntiles; ++j) {
    mbar_wait(full_k((j + 1) % STAGES), phase(j + 1));
    issue_s(sc, sqc, stage(j + 1));
    mbar_wait(full_v(j % STAGES), phase(j));
    issue_pv(o, pa, stage(j) + KV_BYTES);
    wgmma_wait<1>();
    fence_all(sc);
    sm.tile(sc, (j + 1) * BN, corr);
    wgmma_wait<0>();
    fence_all(o);
    release(j);
    // Pinned here, before the next tile's wgmmas are issued: a rescale or pack sunk past them
    // would touch registers inside a wgmma pipeline stage and serialise it.
    rescale(o, corr);
    fence_all(o);
    pack_p(pa, sc);
    fence_p(pa);
  }
  if (ntiles > 0) {
    const int j = ntiles - 1;
    mbar_wait(full_v(j % STAGES), phase(j));
    issue_pv(o, pa, stage(j) + KV_BYTES);
    wgmma_wait<0>();
    fence_all(o);
    release(j);
  }
#else
  for (int j = 0; j < ntiles; ++j) {
    mbar_wait(full_k(j % STAGES), phase(j));
    issue_s(sc, sqc, stage(j));
    wgmma_wait<0>();
    fence_all(sc);
    sm.tile(sc, j * BN, corr);
    rescale(o, corr);
    fence_all(o);
    pack_p(pa, sc);
    mbar_wait(full_v(j % STAGES), phase(j));
    issue_pv(o, pa, stage(j) + KV_BYTES);
    wgmma_wait<0>();
    fence_all(o);
    release(j);
  }
#endif
  float (&m_r)[2] = sm.m;
  float (&l_r)[2] = sm.l;

  in_t* og = static_cast<in_t*>(p.o) + b * p.q_sb + h * p.q_sh;
  float* lse = p.lse + ((i64)b * p.heads_q + h) * p.sq;
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    float l = l_r[rh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = row0 + 8 * rh;
    if (row < p.sq) {
      in_t* orow = og + (i64)row * p.q_ss;
#pragma unroll
      for (int n = 0; n < OT; ++n)
        *reinterpret_cast<u32*>(orow + 8 * n + 2 * t) = pack2<in_t>(o[4 * n + 2 * rh] * inv, o[4 * n + 2 * rh + 1] * inv);
      if (t == 0) lse[row] = l > 0.0f ? (m_r[rh] + __log2f(l)) * 0.69314718055994531f : NEG_INF;
    }
  }
}
