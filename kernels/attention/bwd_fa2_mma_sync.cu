// Attention backward, FlashAttention-2 style, on warp-level tensor cores (mma.sync m16n8k16).
// One block owns BN keys of one (batch, key/value head) and walks every query block of every
// query head that shares them (GQA: dK and dV summed in registers, no second pass), causal
// blocks from the first query block that sees its keys. Per query block of BM rows:
//   Sᵀ = K·Qᵀ -> Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e) (masked to 0) -> dV += Pᵀ·dO
//   dPᵀ = V·dOᵀ -> dSᵀ = Pᵀ ∘ (dPᵀ − D) -> dK += dSᵀ·Q -> dSᵀ to shared memory ->
//   dQ(block) += dS·K, added into the fp32 accumulator (atomics; in deterministic mode the key
//   blocks add in key order, each waiting on a per-(head, query block) counter, as FA3 does).
// A warp owns 16 keys (Sᵀ, dPᵀ rows) and D / DSPLIT columns of their dK and dV (d256: two
// warps share 16 keys, so that dK and dV fit in registers; each reduces Sᵀ and dPᵀ over its half
// of D and the pair swaps partial sums through shared memory).
// Q, dO, LSE and D of the next query block land by cp.async while this one is computed. Shared
// tiles are XOR-swizzled by 16-byte chunk so ldmatrix and the copies hit distinct banks.
// bwd_prep.cu computes D and zeroes the accumulator before, and converts dQ after.
#include "attention/attn_bwd_args.cuh"
#include "attention/bwd_dq.cuh"
#include "common/cp_async.cuh"
#include "common/fast_math.cuh"
#include "common/mma_sync.cuh"

#define D KILN_D
#define BM KILN_BM
#define BN KILN_BN
#define DSPLIT KILN_DSPLIT
#define KG (BN / 16)          // warps' key groups of 16 rows
#define WARPS (KG * DSPLIT)
#define THREADS (WARPS * 32)
#define ROW_BYTES (D * 2)
#define CPR (D / 8)           // 16-byte chunks per row
#define DW (D / DSPLIT)       // dK and dV columns per warp
#define DWT (DW / 8)          // their n8 tiles
#define QT (BM / 8)           // n8 tiles (queries) of a warp's Sᵀ and dPᵀ
#define DS_ROW_BYTES (BM * 2) // dSᵀ is [BN][BM]
#define RG (BM / 16)          // dQ: warps split BM x D into RG row groups ...
#define CG (WARPS / RG)       // ... and CG column groups
#define DQC (D / CG)
#define DQT (DQC / 8)
#define KV_BYTES (BN * ROW_BYTES)
#define Q_BYTES (BM * ROW_BYTES)
#define DS_BYTES (BN * DS_ROW_BYTES)
#define VEC_OFF (2 * KV_BYTES + 4 * Q_BYTES + DS_BYTES)
// DSPLIT 2: each warp's partial Sᵀ and dPᵀ, [2][WARPS][QT·4][32] fp32 (lane fastest: no conflict).
#define XCH_OFF (VEC_OFF + 4 * BM * 4)
#define XCH_BYTES (DSPLIT == 2 ? 2 * WARPS * QT * 4 * 32 * 4 : 0)
#define LOG2E 1.4426950408889634f
// The Sᵀ and dPᵀ reductions over D unroll 4 deep (d64: whole) and 8 at d256: fully unrolled,
// the hoisted fragment addresses spill beside dK and dV (128 and 64 + 64 registers).
#define KK_UNROLL (D == 256 ? 8 : 4)

static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
static_assert(BM == 32 || BM == 64, "query blocks of 32 or 64 rows");
static_assert(BN % 16 == 0 && DW % 16 == 0, "whole 16-wide tiles");
static_assert(WARPS % RG == 0 && DQT % 2 == 0 && DQT * 8 * CG == D, "dQ splits into n16 column groups");
static_assert(THREADS >= 2 * BM, "one thread per LSE and D value");
static_assert(XCH_OFF + XCH_BYTES <= KILN_SMEM,
              "KILN_SMEM must hold K, V, two Q and dO tiles, dSᵀ, LSE and D (and the pairs' partial sums)");
static_assert(DSPLIT == 1 || DSPLIT == 2, "one or two warps per 16 keys");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

// Byte offset of chunk c of row r in a tile of D-element rows (CPR >= 8).
__device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * ROW_BYTES + ((c ^ (r & 7)) << 4)); }

// Byte offset of chunk c of row r of dSᵀ: rows of 8 chunks XOR the row's low 3 bits; rows of 4
// (64 bytes, two rows per 128-byte line) XOR bits 1-2, so 8 consecutive rows hit 8 distinct
// 16-byte bank groups.
__device__ __forceinline__ u32 dsw(int r, int c) {
  return (u32)(r * DS_ROW_BYTES + ((c ^ (BM == 64 ? (r & 7) : ((r >> 1) & 3))) << 4));
}

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

// acc[QT] = X_w·Yᵀ: X the warp's 16 rows of a [.][D] tile (A, rows at `sx`), Y the BM rows of a
// [BM][D] tile (B, non-transposed: the reduction runs along D, over its part `dh` of DSPLIT).
__device__ __forceinline__ void rows_by_block(float (&acc)[QT][4], u32 sx, u32 a_lane, u32 sy, u32 b_lane, int dh) {
#pragma unroll
  for (int n = 0; n < QT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  const int kk0 = dh * (D / 16 / DSPLIT);
#pragma unroll KK_UNROLL
  for (int kk = kk0; kk < kk0 + D / 16 / DSPLIT; ++kk) {
    u32 a[4];
    ldmatrix_x4(a, sx + (a_lane ^ (kk << 5)));
#pragma unroll
    for (int np = 0; np < QT / 2; ++np) {
      u32 r[4];
      ldmatrix_x4(r, sy + ((b_lane + np * 16 * ROW_BYTES) ^ (kk << 5)));
      const u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_16816<in_t>(acc[2 * np], a, b0);
      mma_16816<in_t>(acc[2 * np + 1], a, b1);
    }
  }
}

// acc[DWT] += Xᵀ_w·Y: Xᵀ the warp's [16][BM] accumulators (A, rounded to the input type), Y the
// columns from chunk `c0` of a [BM][D] tile (B, transposed: the reduction runs along BM).
__device__ __forceinline__ void block_update(float (&acc)[DWT][4], const float (&x)[QT][4], u32 sy, u32 t_lane, int c0) {
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) {
    const u32 a[4] = {pack2<in_t>(x[2 * kk][0], x[2 * kk][1]), pack2<in_t>(x[2 * kk][2], x[2 * kk][3]),
                      pack2<in_t>(x[2 * kk + 1][0], x[2 * kk + 1][1]), pack2<in_t>(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < DWT / 2; ++dp) {
      u32 r[4];
      ldmatrix_x4_trans(r, sy + ((t_lane ^ ((c0 / 2 + dp) << 5)) + kk * 16 * ROW_BYTES));
      const u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_16816<in_t>(acc[2 * dp], a, b0);
      mma_16816<in_t>(acc[2 * dp + 1], a, b1);
    }
  }
}

// DSPLIT 2: adds the partner warp's partial sums (same keys, the other half of D) to `acc`
// through buffer `xb` (a byte offset into shared memory): both warps write, meet at the pair's
// named barrier, and read. Both end with the same bits (a + b == b + a). The buffer is written
// again only in the next step, after the block-wide barriers.
__device__ __forceinline__ void pair_sum(float (&acc)[QT][4], unsigned char* smem, int xb, int warp, int kw, int dh,
                                         int lane) {
  float* mine = reinterpret_cast<float*>(smem + xb) + warp * (QT * 4 * 32) + lane;
  float* theirs = reinterpret_cast<float*>(smem + xb) + (kw + KG * (1 - dh)) * (QT * 4 * 32) + lane;
#pragma unroll
  for (int n = 0; n < QT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) mine[(4 * n + e) * 32] = acc[n][e];
  asm volatile("bar.sync %0, 64;\n" ::"r"(1 + kw) : "memory");
#pragma unroll
  for (int n = 0; n < QT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] += theirs[(4 * n + e) * 32];
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) attn_bwd_fa2_mma_sync(AttnBwdArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 sk = smem_u32(smem), sv = sk + KV_BYTES, sq0 = sv + KV_BYTES, so0 = sq0 + 2 * Q_BYTES;
  const u32 ss = so0 + 2 * Q_BYTES;
  const float* vec = reinterpret_cast<const float*>(smem + VEC_OFF); // LSE [2][BM], then D [2][BM]
  const u32 svec = sk + VEC_OFF;
  const int nb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int n0 = nb * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int kw = warp % KG, dh = warp / KG;
  const int off = p.skv - p.sq; // query i sees keys j <= i + off when causal
  // Causal: the first query block with a row that sees key n0 (i >= n0 - off); n0 <= skv - 1
  // makes it at most the last block.
  const int m_first = p.causal ? max(0, n0 - off) / BM : 0;
  const int m_blocks = (p.sq + BM - 1) / BM;
  const int per_head = m_blocks - m_first;
  const int iters = p.group * per_head;
  const in_t* kg = static_cast<const in_t*>(p.k) + b * p.kv_sb + hk * p.kv_sh;
  const in_t* vg = static_cast<const in_t*>(p.v) + b * p.kv_sb + hk * p.kv_sh;

  // Lane addresses (as fa2_mma_sync.cu): A rows lane%16 at chunk lane/16; B rows 8*(lane/16) +
  // lane%8 at chunk (lane/8)%2 (two n8 tiles per x4); transposed B rows 8*((lane/8)%2) + lane%8
  // at chunk lane/16; transposed A from dSᵀ rows (keys) 8*(lane/16) + lane%8 at chunk (lane/8)%2.
  const u32 a_lane = swz(kw * 16 + (lane & 15), lane >> 4);
  const u32 b_lane = swz(((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);
  const u32 t_lane = swz((((lane >> 3) & 1) << 3) | (lane & 7), lane >> 4);
  const u32 ds_lane = dsw(((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);

  // Q, dO, LSE and D of iteration `it` into buffer `bf`.
  auto issue = [&](int it, int bf) {
    const int h = hk * p.group + it / per_head, m0 = (m_first + it % per_head) * BM;
    const i64 qo = b * p.q_sb + h * p.q_sh;
    const in_t* qg = static_cast<const in_t*>(p.q) + qo;
    const in_t* dg = static_cast<const in_t*>(p.dout) + qo;
    load_tile<BM>(sq0 + bf * Q_BYTES, qg + (i64)m0 * p.q_ss, p.q_ss, p.sq - m0, qg);
    load_tile<BM>(so0 + bf * Q_BYTES, dg + (i64)m0 * p.q_ss, p.q_ss, p.sq - m0, dg);
    if (threadIdx.x < 2 * BM) {
      const bool is_lse = threadIdx.x < BM;
      const int r = threadIdx.x % BM;
      const float* src = (is_lse ? p.lse : p.delta) + ((i64)b * p.heads_q + h) * p.sq;
      const bool ok = m0 + r < p.sq;
      const u32 dst = svec + 4 * ((is_lse ? 0 : 2 * BM) + bf * BM + r);
      cp_async4_zfill(dst, ok ? (const void*)(src + m0 + r) : (const void*)src, ok ? 4 : 0);
    }
  };

  float dk[DWT][4], dv[DWT][4];
#pragma unroll
  for (int n = 0; n < DWT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

  load_tile<BN>(sk, kg + (i64)n0 * p.kv_ss, p.kv_ss, p.skv - n0, kg);
  load_tile<BN>(sv, vg + (i64)n0 * p.kv_ss, p.kv_ss, p.skv - n0, vg);
  issue(0, 0);
  cp_async_commit();

  for (int it = 0; it < iters; ++it) {
    const int h = hk * p.group + it / per_head, mb = m_first + it % per_head, m0 = mb * BM, bf = it & 1;
    // This block's tiles landed; every warp finished the previous one (its buffers and dSᵀ).
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < iters) issue(it + 1, bf ^ 1);
    cp_async_commit();
    const u32 sq = sq0 + bf * Q_BYTES, so = so0 + bf * Q_BYTES;
    const float* lse = vec + bf * BM;
    const float* dlt = vec + 2 * BM + bf * BM;

    // Pᵀ: rows are this warp's keys n0 + 16kw + g (+8), columns queries m0 + 8n + 2t (+1).
    float s[QT][4];
    rows_by_block(s, sk, a_lane, sq, b_lane, dh);
    if (DSPLIT == 2) pair_sum(s, smem, XCH_OFF, warp, kw, dh, lane);
    const bool edge = n0 + BN > p.skv || m0 + BM > p.sq || (p.causal && n0 + BN - 1 > m0 + off);
#pragma unroll
    for (int n = 0; n < QT; ++n) {
      const float2 l = *reinterpret_cast<const float2*>(lse + 8 * n + 2 * t);
      const float l2[2] = {l.x * LOG2E, l.y * LOG2E};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pe = ex2_approx(fmaf(s[n][e], p.scale_log2, -l2[e & 1]));
        if (edge) {
          const int j = n0 + kw * 16 + g + 8 * (e >> 1), i = m0 + 8 * n + 2 * t + (e & 1);
          if (j >= p.skv || i >= p.sq || (p.causal && j > i + off)) pe = 0.0f;
        }
        s[n][e] = pe;
      }
    }
    block_update(dv, s, so, t_lane, dh * DW / 8);

    float ds[QT][4];
    rows_by_block(ds, sv, a_lane, so, b_lane, dh);
    if (DSPLIT == 2) pair_sum(ds, smem, XCH_OFF + XCH_BYTES / 2, warp, kw, dh, lane);
#pragma unroll
    for (int n = 0; n < QT; ++n) {
      const float2 dd = *reinterpret_cast<const float2*>(dlt + 8 * n + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = s[n][e] * (ds[n][e] - ((e & 1) ? dd.y : dd.x));
    }
    block_update(dk, ds, sq, t_lane, dh * DW / 8);
    if (dh == 0) {
#pragma unroll
      for (int n = 0; n < QT; ++n)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const u32 v = pack2<in_t>(ds[n][2 * hf], ds[n][2 * hf + 1]);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ss + dsw(kw * 16 + g + 8 * hf, n) + 4 * t), "r"(v));
        }
    }
    __syncthreads();

    // dQ rows m0 + 16rw.., columns DQC·cw..: dS (A: dSᵀ read transposed) times K (B: K's rows
    // read transposed), the reduction over this block's BN keys.
    const int rw = warp % RG, cw = warp / RG;
    float dq[DQT][4];
#pragma unroll
    for (int n = 0; n < DQT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      u32 a[4];
      ldmatrix_x4_trans(a, ss + ((ds_lane ^ (rw << 5)) + kk * 16 * DS_ROW_BYTES));
#pragma unroll
      for (int dp = 0; dp < DQT / 2; ++dp) {
        u32 r[4];
        ldmatrix_x4_trans(r, sk + ((t_lane ^ ((cw * DQC / 16 + dp) << 5)) + kk * 16 * ROW_BYTES));
        const u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        mma_16816<in_t>(dq[2 * dp], a, b0);
        mma_16816<in_t>(dq[2 * dp + 1], a, b1);
      }
    }
    u32* sem = p.dq_sem == nullptr ? nullptr : p.dq_sem + ((i64)b * p.heads_q + h) * p.m_blocks + mb;
    if (sem != nullptr) {
      // Key blocks 0..nb-1 all add into this query block before this one (a query that sees a
      // key sees every earlier key), and were scheduled before it (lower blockIdx.x).
      if (threadIdx.x == 0)
        while (ld_acquire(sem) < (u32)nb) __nanosleep(64);
      __syncthreads();
    }
    float* acc = p.dq_acc + (((i64)b * p.heads_q + h) * p.sq + m0 + rw * 16) * D + cw * DQC;
#pragma unroll
    for (int n = 0; n < DQT; ++n)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = g + 8 * hf;
        if (m0 + rw * 16 + r < p.sq) red_add2(acc + r * D + 8 * n + 2 * t, dq[n][2 * hf], dq[n][2 * hf + 1]);
      }
    if (sem != nullptr) {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(sem, 1u);
    }
  }

  // dK (scaled) and dV of this warp's keys and columns, in K's layout.
  in_t* dkg = static_cast<in_t*>(p.dk) + b * p.kv_sb + hk * p.kv_sh;
  in_t* dvg = static_cast<in_t*>(p.dv) + b * p.kv_sb + hk * p.kv_sh;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int j = n0 + kw * 16 + g + 8 * hf;
    if (j < p.skv) {
#pragma unroll
      for (int n = 0; n < DWT; ++n) {
        const i64 at = (i64)j * p.kv_ss + dh * DW + 8 * n + 2 * t;
        *reinterpret_cast<u32*>(dkg + at) = pack2<in_t>(dk[n][2 * hf] * p.scale, dk[n][2 * hf + 1] * p.scale);
        *reinterpret_cast<u32*>(dvg + at) = pack2<in_t>(dv[n][2 * hf], dv[n][2 * hf + 1]);
      }
    }
  }
}
