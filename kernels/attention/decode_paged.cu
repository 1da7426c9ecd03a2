// Decode over a paged KV cache (or a dense one, a page per sequence), flash-decoding style on
// mma.sync m16n8k16. One block owns one
// (sequence, KV head, split of the context) and 16 of the query rows that share the KV head:
// the group's heads times the query tokens (GQA packing), padded with zero rows; more rows take
// more blocks, which read the same pages together, mostly from L2. K/V rows are found page by
// page through the block table (ids fetched one tile ahead) and copied by cp.async into a
// KILN_STAGES-deep ring of 64-key tiles, so that several tiles stream from DRAM while one is
// computed: the kernel is bound by the cache's bytes, not by its math. The 4 warps split each
// tile's keys; each keeps its own online softmax in fp32 (exp2, scale folded in) and the four
// are merged in shared memory at the end. Causal is bottom-right: query token i sees keys
// j < context - sq + i + 1. With key starts (left padding) sequence b's keys begin at its start:
// its tiles from the one holding it, keys before it masked. One split writes O and LSE itself;
// several write fp32 O / l and their LSE for decode_combine. A bad context length, key start or
// page id gives NaN, never a wrong value.
#include "attention/decode_args.cuh"
#include "common/cp_async.cuh"
#include "common/fast_math.cuh"
#include "common/mma_sync.cuh"

#define D KILN_D
#define WN 4          // warps, each on a quarter of every tile's keys
#define THREADS 128
#define BN 64         // keys per stage
#define KW (BN / WN)  // keys of a tile per warp
#define STAGES KILN_STAGES
#define MROWS 16
#define CPR (D / 8)  // 16-byte chunks per row
#define ROW_BYTES (D * 2)
#define NT (KW / 8)  // n8 tiles of S per warp
#define DT (D / 8)   // n8 tiles of O per warp
#define Q_BYTES (MROWS * ROW_BYTES)
#define TILE_BYTES (BN * ROW_BYTES)
#define STAGE_BYTES (2 * TILE_BYTES)
#define RS (THREADS / CPR)  // rows one pass of the block copies
#define LR (BN / RS)        // rows of a tile each thread copies
#define Q_IN_REGS (D <= 128)
#define OST (D + 8)         // row stride (floats) of the merge area: fewer bank conflicts
#define NEG_INF __int_as_float(0xff800000)
#define QNAN __int_as_float(0x7fffffff)

static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
static_assert(KW % 16 == 0 && BN % RS == 0 && MROWS % RS == 0, "whole fragments and rows");
static_assert(Q_BYTES + STAGES * STAGE_BYTES <= KILN_SMEM, "KILN_SMEM must hold Q and the ring");
static_assert((WN - 1) * 16 * (OST + 2) * 4 <= STAGES * STAGE_BYTES, "the merge reuses the ring");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

// Byte offset of chunk c of row r: the chunk XORed with the row's low 3 bits (CPR >= 8).
__device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * ROW_BYTES + ((c ^ (r & 7)) << 4)); }

// The page ids of the rows this thread copies for the tile at key0 (-1 outside the sequence's
// keys kstart .. ctx - 1); an id outside the cache marks the block bad and is not read. A dense
// cache's page is sequence b.
__device__ __forceinline__ void fetch_pages(int (&pg)[LR], bool& bad, const DecodeArgs& p, const int* bt_row, int key0, int kstart, int ctx, int b) {
  const int r0 = threadIdx.x / CPR;
#pragma unroll
  for (int i = 0; i < LR; ++i) {
    const int key = key0 + r0 + i * RS;
    int page = -1;
    if (key >= kstart && key < ctx) {
      page = p.block_table ? __ldg(bt_row + (key >> p.page_shift)) : b;
      if (!page_ok(p, page)) {
        bad = true;
        page = -1;
      }
    }
    pg[i] = page;
  }
}

// Copies the K and V rows of the tile at key0 into the stage at `dst` (K, then V); rows without
// a page are zero-filled. Each cache has its own strides (page, slot, head); a dense cache's slot
// is the position itself.
__device__ __forceinline__ void load_kv(u32 dst, const DecodeArgs& p, const int (&pg)[LR], int key0, int hk) {
  const in_t* kc = static_cast<const in_t*>(p.k_cache);
  const in_t* vc = static_cast<const in_t*>(p.v_cache);
  const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
  const int slot_mask = p.block_table ? (1 << p.page_shift) - 1 : -1;
#pragma unroll
  for (int i = 0; i < LR; ++i) {
    const int r = r0 + i * RS, key = key0 + r;
    const bool ok = pg[i] >= 0;
    const i64 slot = key & slot_mask;
    const i64 ko = pg[i] * p.k_sp + slot * p.k_ss + hk * p.k_sh + c * 8;
    const i64 vo = pg[i] * p.v_sp + slot * p.v_ss + hk * p.v_sh + c * 8;
    cp_async16_zfill(dst + swz(r, c), ok ? (const void*)(kc + ko) : (const void*)kc, ok ? 16 : 0);
    cp_async16_zfill(dst + TILE_BYTES + swz(r, c), ok ? (const void*)(vc + vo) : (const void*)vc, ok ? 16 : 0);
  }
}

#include "attention/mma_sync_warp.cuh"

// (min 1 block per SM: ptxas may use every register it needs; the host counts the blocks that fit)
extern "C" __global__ void __launch_bounds__(THREADS, 1) decode_paged(DecodeArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 s_q = smem_u32(smem), s_kv = s_q + Q_BYTES;
  int idx = blockIdx.x;
  const int split = idx % p.splits;
  idx /= p.splits;
  const int mg = idx % p.m_groups;
  idx /= p.m_groups;
  const int hk = idx % p.heads_kv, b = idx / p.heads_kv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int wn = warp;
  const int rows = p.group * p.sq, row0 = mg * MROWS;
  const int ctx_given = context_of(p, b), start_given = start_of(p, b);
  const bool bad_len = !context_ok(p, ctx_given);
  const bool bad_start = !bad_len && (start_given < 0 || start_given > ctx_given);
  bool bad = bad_len || bad_start;
  const int ctx = bad ? 0 : ctx_given, kstart = bad ? 0 : start_given;
  // This split's tiles: an equal share of the sequence's (from the one holding its first key),
  // tile-aligned (possibly none).
  const int tile_lo = kstart / BN, tiles_all = (ctx + BN - 1) / BN;
  const int per_split = (max(0, tiles_all - tile_lo) + p.splits - 1) / p.splits;
  const int tile0 = tile_lo + split * per_split;
  const int ntiles = max(0, min(per_split, tiles_all - tile0));
  const int* bt_row = p.block_table + (i64)b * p.max_pages;

  // Row r of the block is query token (row0 + r) / group of head hk·group + (row0 + r) % group.
  {
    const in_t* qg = static_cast<const in_t*>(p.q);
    const int c = threadIdx.x % CPR;
#pragma unroll
    for (int r = threadIdx.x / CPR; r < MROWS; r += RS) {
      const int gr = row0 + r;
      const bool ok = gr < rows;
      const int i = ok ? gr / p.group : 0, h = hk * p.group + (ok ? gr % p.group : 0);
      const in_t* src = qg + b * p.q_sb + i * p.q_ss + h * p.q_sh + c * 8;
      cp_async16_zfill(s_q + swz(r, c), ok ? (const void*)src : (const void*)qg, ok ? 16 : 0);
    }
  }
  int pg[LR];
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ntiles) {
      fetch_pages(pg, bad, p, bt_row, (tile0 + s) * BN, kstart, ctx, b);
      load_kv(s_kv + s * STAGE_BYTES, p, pg, (tile0 + s) * BN, hk);
    }
    cp_async_commit(); // (Q rides with the first group)
  }
  if (STAGES - 1 < ntiles) fetch_pages(pg, bad, p, bt_row, (tile0 + STAGES - 1) * BN, kstart, ctx, b);

  // Keys this thread's rows may see (bottom-right causal); padding rows see the context.
  int lim[2];
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const int gr = row0 + g + 8 * rh;
    const int i = gr < rows ? gr / p.group : p.sq - 1;
    lim[rh] = p.causal ? ctx - p.sq + i + 1 : ctx;
  }
  const int lim_lo = min(lim[0], lim[1]);

  // Lane addresses as in fa2_mma_sync, offset to this warp's rows and key slice.
  const u32 q_lane = swz(lane & 15, lane >> 4);
  const u32 k_lane = swz(wn * KW + ((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);
  const u32 v_lane = swz(wn * KW + ((((lane >> 3) & 1) << 3) | (lane & 7)), lane >> 4);

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = 0.0f;
  float m_r[2] = {NEG_INF, NEG_INF}, l_r[2] = {0.0f, 0.0f};
  u32 qf[Q_IN_REGS ? D / 16 : 1][4];

  for (int j = 0; j < ntiles; ++j) {
    // Tile j (and Q) landed; every warp is past tile j - 1, so its stage takes tile j + STAGES - 1.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int jn = j + STAGES - 1;
    if (jn < ntiles) {
      load_kv(s_kv + (jn % STAGES) * STAGE_BYTES, p, pg, (tile0 + jn) * BN, hk);
      if (jn + 1 < ntiles) fetch_pages(pg, bad, p, bt_row, (tile0 + jn + 1) * BN, kstart, ctx, b);
    }
    cp_async_commit();
#if Q_IN_REGS
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], s_q + (q_lane ^ (kk << 5)));
    }
#endif
    const u32 sk = s_kv + (j % STAGES) * STAGE_BYTES;
    float s[NT][4];
    qk(s, qf, s_q, q_lane, sk, k_lane);
    const int key0 = (tile0 + j) * BN + wn * KW;
    if (key0 + KW > lim_lo || key0 < kstart) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + n * 8 + 2 * t + (e & 1);
          if (key >= lim[e >> 1] || key < kstart) s[n][e] = NEG_INF;
        }
    }
    softmax_tile(s, o, m_r, l_r, p.scale_log2);
    pv(o, s, sk + TILE_BYTES, v_lane);
  }
  cp_async_wait<0>();
  bad = __syncthreads_or(bad); // (also: every warp is done with the ring, which the merge reuses)
  if (bad && threadIdx.x == 0) report_bad(p, bad_len, bad && !bad_len && !bad_start, bad_start);
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    l_r[rh] += __shfl_xor_sync(0xffffffffu, l_r[rh], 1);
    l_r[rh] += __shfl_xor_sync(0xffffffffu, l_r[rh], 2);
  }

  // The key slices: warps wn > 0 hand (m, l, O) to warp 0.
  float* merge = reinterpret_cast<float*>(smem + Q_BYTES);
  float* ml = merge + (WN - 1) * 16 * OST; // [WN - 1][2][16]: m, then l
  if (wn > 0) {
    float* mo = merge + (wn - 1) * 16 * OST;
#pragma unroll
    for (int d = 0; d < DT; ++d)
#pragma unroll
      for (int rh = 0; rh < 2; ++rh)
        *reinterpret_cast<float2*>(mo + (g + 8 * rh) * OST + d * 8 + 2 * t) = make_float2(o[d][2 * rh], o[d][2 * rh + 1]);
    if (t == 0) {
      float* mw = ml + (wn - 1) * 32;
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        mw[g + 8 * rh] = m_r[rh];
        mw[16 + g + 8 * rh] = l_r[rh];
      }
    }
  }
  __syncthreads();
  if (wn > 0) return;
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const int row = g + 8 * rh;
    float m_all = m_r[rh];
#pragma unroll
    for (int w = 0; w < WN - 1; ++w) m_all = fmaxf(m_all, ml[w * 32 + row]);
    const float m_use = m_all == NEG_INF ? 0.0f : m_all;
    const float c0 = ex2_approx(m_r[rh] - m_use);
    l_r[rh] *= c0;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      o[d][2 * rh] *= c0;
      o[d][2 * rh + 1] *= c0;
    }
#pragma unroll
    for (int w = 0; w < WN - 1; ++w) {
      const float* mw = ml + w * 32;
      const float* mo = merge + w * 16 * OST + row * OST;
      const float cw = ex2_approx(mw[row] - m_use);
      l_r[rh] += mw[16 + row] * cw;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const float2 x = *reinterpret_cast<const float2*>(mo + d * 8 + 2 * t);
        o[d][2 * rh] = fmaf(x.x, cw, o[d][2 * rh]);
        o[d][2 * rh + 1] = fmaf(x.y, cw, o[d][2 * rh + 1]);
      }
    }
    m_r[rh] = m_all;
  }

  const i64 nr = (i64)p.batch * p.heads_q * p.sq;
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const int gr = row0 + g + 8 * rh;
    if (gr >= rows) continue;
    const int i = gr / p.group, h = hk * p.group + gr % p.group;
    const float l = l_r[rh];
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float lse = l > 0.0f ? (m_r[rh] + __log2f(l)) * 0.69314718055994531f : NEG_INF;
    if (bad) inv = lse = QNAN;
    const i64 row_id = ((i64)b * p.heads_q + h) * p.sq + i;
    if (p.splits == 1) {
      in_t* orow = static_cast<in_t*>(p.o) + b * p.o_sb + i * p.o_ss + h * p.o_sh;
#pragma unroll
      for (int d = 0; d < DT; ++d)
        *reinterpret_cast<u32*>(orow + d * 8 + 2 * t) = pack2<in_t>(o[d][2 * rh] * inv, o[d][2 * rh + 1] * inv);
      if (t == 0) p.lse[row_id] = lse;
    } else {
      float* prow = p.part_o + ((i64)split * nr + row_id) * D;
#pragma unroll
      for (int d = 0; d < DT; ++d)
        *reinterpret_cast<float2*>(prow + d * 8 + 2 * t) = make_float2(o[d][2 * rh] * inv, o[d][2 * rh + 1] * inv);
      if (t == 0) p.part_lse[(i64)split * nr + row_id] = lse;
    }
  }
}
