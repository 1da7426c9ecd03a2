// Attention forward, FlashAttention-2 style, on warp-level tensor cores (mma.sync m16n8k16; the
// sm_80/sm_89 path, and Hopper's rung below wgmma). One block owns KILN_BM query rows of one
// (batch, head), one warp 16 of them, and walks the key/value tiles of KILN_BN keys:
//   S = Q·Kᵀ (fp32 accumulators) -> mask -> online softmax in fp32 with exp2 (scale·log2e folded
//   into one FMA) -> P rounded to the input type, straight from the accumulators into A
//   fragments -> O += P·V.
// K and V have one shared-memory tile each, filled by cp.async so that V(j) lands while S(j) is
// computed and K(j+1) while P(j)·V(j) is: FA2's two-buffer pipeline. Rows past the sequence ends
// are zero-filled and masked; causal blocks skip the key tiles wholly above their diagonal
// (bottom-right aligned), and run heaviest first. Shared tiles are XOR-swizzled by 16-byte chunk
// so ldmatrix and the copies hit distinct banks. Writes O (Q's layout) and LSE (natural log).
#include "attention/attn_args.cuh"
#include "common/cp_async.cuh"
#include "common/fast_math.cuh"
#include "common/mma_sync.cuh"

#define D KILN_D
#define BM KILN_BM
#define BN KILN_BN
#define WARPS (BM / 16)
#define THREADS (WARPS * 32)
#define CPR (D / 8)   // 16-byte chunks per row
#define ROW_BYTES (D * 2)
#define NT (BN / 8)   // n8 tiles of S per warp
#define DT (D / 8)    // n8 tiles of O per warp
#define Q_BYTES (BM * ROW_BYTES)
#define KV_BYTES (BN * ROW_BYTES)
// Q fragments stay in registers when they fit beside the O accumulators.
#define Q_IN_REGS (D <= 128)
#define NEG_INF __int_as_float(0xff800000)

static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
static_assert(BN % 16 == 0 && BM % 16 == 0, "tiles are multiples of 16");
static_assert(Q_BYTES + 2 * KV_BYTES <= KILN_SMEM, "KILN_SMEM must hold Q, K and V tiles");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

// Byte offset of chunk c of row r: the chunk XORed with the row's low 3 bits (CPR >= 8).
__device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * ROW_BYTES + ((c ^ (r & 7)) << 4)); }

// Copies ROWS rows of D elements from `src` (row stride `ss`) into a swizzled tile at `dst`;
// rows at or past `rows_left` are zero-filled (reading nothing, from the valid `base`).
template <int ROWS>
__device__ __forceinline__ void load_tile(u32 dst, const in_t* src, i64 ss, int rows_left, const in_t* base) {
  constexpr int RS = THREADS / CPR;
  static_assert(THREADS % CPR == 0 && ROWS % RS == 0, "whole rows per pass");
  const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
#pragma unroll
  for (int i = 0; i < ROWS / RS; ++i) {
    const int r = r0 + i * RS;
    const bool ok = r < rows_left;
    cp_async16_zfill(dst + swz(r, c), ok ? (const void*)(src + (i64)r * ss + c * 8) : (const void*)base, ok ? 16 : 0);
  }
}

#include "attention/mma_sync_warp.cuh"

extern "C" __global__ void __launch_bounds__(THREADS) attn_fa2_mma_sync(AttnArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 sq = smem_u32(smem), sk = sq + Q_BYTES, sv = sk + KV_BYTES;
  const int mb = gridDim.x - 1 - blockIdx.x; // causal: the longest rows first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  const int m0 = mb * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const in_t* qg = static_cast<const in_t*>(p.q) + b * p.q_sb + h * p.q_sh;
  const in_t* kg = static_cast<const in_t*>(p.k) + b * p.kv_sb + hk * p.kv_sh;
  const in_t* vg = static_cast<const in_t*>(p.v) + b * p.v_sb + hk * p.v_sh;
  const int off = p.skv - p.sq; // query i sees keys j <= i + off when causal
  const int rows = min(BM, p.sq - m0);
  const int kv_end = p.causal ? min(p.skv, m0 + rows + off) : p.skv;
  const int ntiles = kv_end <= 0 ? 0 : (kv_end - 1) / BN + 1;

  // Lane addresses: Q rows warp*16 + lane%16 at chunk lane/16 (A fragments), K rows 8*(lane/16)
  // + lane%8 at chunk (lane/8)%2 (B, two n8 tiles per x4), V rows 8*((lane/8)%2) + lane%8 at
  // chunk lane/16 (.trans B, two n8 tiles per x4).
  const u32 q_lane = swz(warp * 16 + (lane & 15), lane >> 4);
  const u32 k_lane = swz(((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);
  const u32 v_lane = swz((((lane >> 3) & 1) << 3) | (lane & 7), lane >> 4);

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = 0.0f;
  float m_r[2] = {NEG_INF, NEG_INF}, l_r[2] = {0.0f, 0.0f};
  u32 qf[Q_IN_REGS ? D / 16 : 1][4];

  if (ntiles > 0) {
    load_tile<BM>(sq, qg + (i64)m0 * p.q_ss, p.q_ss, rows, qg);
    load_tile<BN>(sk, kg, p.kv_ss, p.skv, kg);
    cp_async_commit();
  }
  for (int j = 0; j < ntiles; ++j) {
    const int n0 = j * BN;
    // K(j) (and Q) landed; every warp finished P·V(j-1), so V's tile is free.
    cp_async_wait<0>();
    __syncthreads();
    load_tile<BN>(sv, vg + (i64)n0 * p.v_ss, p.v_ss, p.skv - n0, vg);
    cp_async_commit();
#if Q_IN_REGS
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], sq + (q_lane ^ (kk << 5)));
    }
#endif
    float s[NT][4];
    qk(s, qf, sq, q_lane, sk, k_lane);

    if (n0 + BN > p.skv || (p.causal && n0 + BN - 1 > m0 + off)) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n0 + n * 8 + 2 * t + (e & 1);
          const int row = m0 + warp * 16 + g + (e >> 1) * 8;
          const int lim = p.causal ? min(p.skv, row + off + 1) : p.skv;
          if (col >= lim) s[n][e] = NEG_INF;
        }
    }
    softmax_tile(s, o, m_r, l_r, p.scale_log2);
    // V(j) landed; every warp finished reading K(j): refill K with tile j + 1.
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < ntiles) {
      load_tile<BN>(sk, kg + (i64)(n0 + BN) * p.kv_ss, p.kv_ss, p.skv - n0 - BN, kg);
      cp_async_commit();
    }
    pv(o, s, sv, v_lane);
  }

  in_t* og = static_cast<in_t*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* lse = p.lse + ((i64)b * p.heads_q + h) * p.sq;
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    float l = l_r[rh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = m0 + warp * 16 + g + rh * 8;
    if (row < p.sq) {
      in_t* orow = og + (i64)row * p.o_ss;
#pragma unroll
      for (int d = 0; d < DT; ++d)
        *reinterpret_cast<u32*>(orow + d * 8 + 2 * t) = pack2<in_t>(o[d][2 * rh] * inv, o[d][2 * rh + 1] * inv);
      if (t == 0) lse[row] = l > 0.0f ? (m_r[rh] + __log2f(l)) * 0.69314718055994531f : NEG_INF;
    }
  }
}
