// The products and conversions the WGMMA attention backwards share (through bwd_fa3_block.cuh:
// bwd_fa3_wgmma.cu, bwd_fa3_bulk_dq.cu, bwd_fa3_tma_dq.cu): keys are the M of every product, so
// Sᵀ and dPᵀ are m64 accumulators of 64 keys x BM queries, dK and dV m64 accumulators of 64 keys
// x D, and Pᵀ and dSᵀ feed the next products as register A operands. Q, dO, K and V lie in shared
// memory as the TMA leaves them: boxes of 64 dims (128-byte rows, 128B swizzle), a box of BM
// query rows HALF_Q = BM·128 bytes, of BN key rows BN·128.
#pragma once
#include "attention/attn_bwd_args.cuh"
#include "attention/bwd_dq.cuh"
#include "attention/tma_4d.cuh"
#include "common/ring.cuh"
#include "common/mbarrier.cuh"
#include "common/swizzle.cuh"
#include "common/wgmma_rs.cuh"
#include "common/wgmma_ss.cuh"

template <int N> __device__ __forceinline__ void fence_all(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) wgmma_fence_operand(r[i]);
}

// An m64nN accumulator (N = 16·NK) rounded to the input type as NK register-A chunks of k16.
template <int NK> __device__ __forceinline__ void pack_a(u32 (&a)[NK][4], const float (&x)[NK * 8]) {
#pragma unroll
  for (int kk = 0; kk < NK; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) a[kk][e] = pack2<in_t>(x[8 * kk + 2 * e], x[8 * kk + 2 * e + 1]);
}

// Two packed pairs multiplied element by element, rounded to T (KILN_BWD_DS_PACKED's dSᵀ).
template <class T> __device__ __forceinline__ u32 mul2(u32 a, u32 b);
template <> __device__ __forceinline__ u32 mul2<bf16>(u32 a, u32 b) {
  u32 r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
template <> __device__ __forceinline__ u32 mul2<f16>(u32 a, u32 b) {
  u32 r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Register-A chunks pinned where they were packed: NVVM otherwise sinks each chunk's conversions
// to just before the wgmma that reads it, between the product's wgmmas, and ptxas then injects a
// warpgroup.arrive before each (C7519; seen at 128 query rows).
template <int NK> __device__ __forceinline__ void fence_packed(u32 (&a)[NK][4]) {
#pragma unroll
  for (int kk = 0; kk < NK; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[kk][e])::"memory");
}

// The descriptor of the 128B-swizzled operand `off` bytes past `at`: AT false, `at` is a shared
// address (wgmma_desc_sw128: mask, shift, or per wgmma); AT true, `at` is that address in 16-byte
// units (wgmma_desc_sw128_at: one add per wgmma on a base built once). Every product below takes
// its tile addresses in the form its AT says.
template <bool AT> __device__ __forceinline__ u64 desc_at(u32 at, u32 off, u32 lbo, u32 sbo) {
  return AT ? wgmma_desc_sw128_at(at + off / 16, lbo, sbo) : wgmma_desc_sw128(at + off, lbo, sbo);
}

// acc(64 keys x BM queries) = X·Yᵀ over D: X 64 rows of a [BN][D] tile at `sx` (row offset
// applied), Y the [BM][D] tile at `sy`, both K-major in 64-dim boxes.
template <int D, int BM, int BN, bool AT = false>
__device__ __forceinline__ void keys_by_queries(float (&acc)[BM / 2], u32 sx, u32 sy) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const u64 da = desc_at<AT>(sx, (kk / 4) * (BN * 128) + (kk % 4) * 32, 16, 1024);
    const u64 db = desc_at<AT>(sy, (kk / 4) * (BM * 128) + (kk % 4) * 32, 16, 1024);
    wgmma_m64k16<in_t, BM, 0, 0>(acc, da, db, kk > 0);
  }
}

// acc(64 keys x D) += Xᵀ·Y: Xᵀ in registers (keys x queries), Y the [BM][D] tile at `sy` read
// MN-major (K = queries: 16 rows = 2048 bytes; each 64-dim box BM·128 bytes on).
template <int D, int BM, bool AT = false>
__device__ __forceinline__ void keys_by_dims(float (&acc)[D / 2], const u32 (&xa)[BM / 16][4], u32 sy) {
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) wgmma_m64k16_rs<in_t, D, 1>(acc, xa[kk], desc_at<AT>(sy, kk * 2048, BM * 128, 1024), 1);
}

// This thread's dSᵀ rows (keys `row`, `row` + 8 of the block), rounded, into the buffer at `ds`:
// BM / 64 boxes [BN][64] of 128-byte rows (the TMA's 128B swizzle), box b holding queries 64b ..
// 64b + 63. Register pair (4j + 2hf, + 1) of the m64 accumulator is column chunk j % 8 of row +
// 8hf in box j / 8, at byte 4t of it.
template <int BM, int BN> __device__ __forceinline__ void store_ds_t(u32 ds, const u32 (&dsa)[BM / 16][4], int row, int t) {
#pragma unroll
  for (int j = 0; j < BM / 8; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds + (j / 8) * (BN * 128) + swizzle128_offset(row + 8 * hf, j % 8) + 4 * t),
                   "r"(dsa[j / 2][(j % 2) * 2 + hf]));
}

// dq(64 queries x QN dims from 64·box) = dS·K over the KS·16 keys from key_base: A = dS read
// MN-major from the dSᵀ buffer at `ds`, B = K (keys x dims) MN-major from the 64-dim box `box`
// of the [BN][D] tile at `sk`.
template <int QN, int KS, int BM, int BN, bool AT = false>
__device__ __forceinline__ void dq_from_ds(float (&dq)[QN / 2], u32 ds, u32 sk, int key_base, u32 box) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    const int key0 = key_base + 16 * kk;
    const u64 da = desc_at<AT>(ds, key0 * 128, BN * BM * 2, 1024);
    const u64 db = desc_at<AT>(sk, box * (BN * 128) + key0 * 128, BN * 128, 1024);
    wgmma_m64k16<in_t, QN, 1, 1>(dq, da, db, kk > 0);
  }
}

// The deterministic mode's dQ add for one query block, by both MMA warpgroups (threads 128 ..
// 383) at named barrier `bar`: key blocks 0 .. nb - 1 add into it first (the counter `sem` reads
// nb; bwd_fa2_mma_sync.cu), then add(), consumer 0's before consumer 1's when both add to every
// element (`both`), so each element's additions come in one order; then the counter is bumped.
// ANY: the warpgroups meet at `bar` from different instructions (bwd_fa3_d256.cu's consumers, a
// template instance each): named_barrier_sync_any, where bar.sync wants every thread at one
// instruction; compute-sanitizer's synccheck reported the aligned one in bwd_fa3_d256_tma's
// deterministic mode (H200, 2026-12-02: "Divergent thread(s) in block" at
// attn_bwd_fa3_d256+0x2fc0, consumer 1's first meeting here, consumer 0's at +0x8290).
template <bool ANY = false, class Add>
__device__ __forceinline__ void add_dq_in_order(u32* sem, int nb, bool both, int c, u32 bar, const Add& add) {
  auto meet = [&] { ANY ? named_barrier_sync_any(bar, 256) : named_barrier_sync(bar, 256); };
  if (threadIdx.x == 128)
    while (ld_acquire(sem) < (u32)nb) __nanosleep(64);
  meet();
  if (!both || c == 0) add();
  if (both) {
    __threadfence();
    meet();
    if (c == 1) add();
  }
  __threadfence();
  meet();
  if (threadIdx.x == 128) atomicAdd(sem, 1u);
}

// dK (times `scale`) and dV of this thread's keys `key`, `key` + 8, rounded into K's layout at
// `dkg` / `dvg` (the (batch, head)'s first row; `ss` elements a row); keys past `skv` skipped.
template <int D>
__device__ __forceinline__ void store_dk_dv(in_t* dkg, in_t* dvg, const float (&dk)[D / 2], const float (&dv)[D / 2], float scale, int key,
                                            int skv, i64 ss, int t) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    if (key + 8 * hf < skv) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const i64 at = (i64)(key + 8 * hf) * ss + 8 * j + 2 * t;
        *reinterpret_cast<u32*>(dkg + at) = pack2<in_t>(dk[4 * j + 2 * hf] * scale, dk[4 * j + 2 * hf + 1] * scale);
        *reinterpret_cast<u32*>(dvg + at) = pack2<in_t>(dv[4 * j + 2 * hf], dv[4 * j + 2 * hf + 1]);
      }
    }
  }
}

// One gradient of this thread's keys `key`, `key` + 8 (times `scale`), rounded into K's layout
// at `g` (store_dk_dv's, for a warpgroup that holds only dK or only dV: bwd_fa3_d256.cu).
template <int D>
__device__ __forceinline__ void store_key_rows(in_t* g, const float (&x)[D / 2], float scale, int key, int skv, i64 ss, int t) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    if (key + 8 * hf < skv) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<u32*>(g + (i64)(key + 8 * hf) * ss + 8 * j + 2 * t) = pack2<in_t>(x[4 * j + 2 * hf] * scale, x[4 * j + 2 * hf + 1] * scale);
    }
  }
}

// Thread 0's setup: the K/V barrier (one arrival, with the bytes), the ring's (full: the 32
// producer lanes, one of them with the TMA bytes; empty: the 8 consumer warps of each of the
// `ctas` CTAs that multicast into the stage), and the four maps prefetched. A block (or cluster)
// barrier follows, in the kernel.
template <int STAGES>
__device__ __forceinline__ void bwd_setup(u32 kv_full, const MbarRing<STAGES>& qring, const TmaMap* tq, const TmaMap* tk,
                                          const TmaMap* tv, const TmaMap* tdo, u32 ctas = 1) {
  mbar_init(kv_full, 1);
  qring.init(8 * ctas, 32);
  mbar_fence_init();
  tma_prefetch(tq);
  tma_prefetch(tk);
  tma_prefetch(tv);
  tma_prefetch(tdo);
}

// The producer's first load (its lane 0): K and V of the block's BN keys from n0 (head hk, batch
// b), DH boxes of 64 dims each, on kv_full.
template <int DH, int BN>
__device__ __forceinline__ void load_kv(u32 sk, u32 sv, const TmaMap* tk, const TmaMap* tv, u32 kv_full, int n0, int hk, int b) {
  mbar_arrive_expect_tx(kv_full, 2 * DH * BN * 128);
#pragma unroll
  for (int d = 0; d < DH; ++d) {
    tma_load_4d(sk + d * (BN * 128), tk, kv_full, 64 * d, n0, hk, b);
    tma_load_4d(sv + d * (BN * 128), tv, kv_full, 64 * d, n0, hk, b);
  }
}

// LSE (log2 units) and D of query rows m0 .. m0 + BM - 1 of head h into a stage's vectors `sl`
// ([BM] each), by the producer's 32 lanes: +inf and 0 past the end, so P is 0 there.
template <int BM> __device__ __forceinline__ void stage_lse_d(float* sl, const AttnBwdArgs& p, int b, int h, int m0, int lane) {
  const float* lse = p.lse + ((i64)b * p.heads_q + h) * p.sq;
  const float* dlt = p.delta + ((i64)b * p.heads_q + h) * p.sq;
#pragma unroll
  for (int r = lane; r < BM; r += 32) {
    const bool in = m0 + r < p.sq;
    sl[r] = in ? lse[m0 + r] * 1.4426950408889634f : __int_as_float(0x7f800000);
    sl[BM + r] = in ? dlt[m0 + r] : 0.0f;
  }
}

// The same for the rows of a sequence that starts `row0` rows into LSE and D (the windowed and
// packed variants: dense, (b · heads_q + h) · p.sq; packed, h · p.sq + its first packed row, p.sq
// the packed rows) and has sq rows. BM / 32 rows a lane, a trip count ptxas knows: stage_lse_d's
// loop from `lane` left the 24-register producer a register short of these variants' walk.
template <int BM>
__device__ __forceinline__ void stage_lse_d_rows(float* sl, const AttnBwdArgs& p, i64 row0, int m0, int sq, int lane) {
#pragma unroll
  for (int i = 0; i < BM / 32; ++i) {
    const int r = lane + 32 * i;
    const bool in = m0 + r < sq;
    sl[r] = in ? p.lse[row0 + m0 + r] * 1.4426950408889634f : __int_as_float(0x7f800000);
    sl[BM + r] = in ? p.delta[row0 + m0 + r] : 0.0f;
  }
}
