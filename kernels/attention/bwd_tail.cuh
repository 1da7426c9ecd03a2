// KILN_BWD_TAIL 1 (the host's KILN_BWD_TAIL knob; bwd_fa3_lookahead.cu's dense walk, non-causal,
// not deterministic; and bwd_fa3_d256.cu's ordered writers, deterministic: tail_fixup_ordered): the grid's last partial wave split into shorter blocks. A non-causal grid
// of U equal key blocks on S SMs (one CTA each) runs ceil(U / S) waves where U / S is the work:
// at d64 B4 H16 S4096 and d128 B2 H16 S8192 (2,048 blocks on 132 SMs, 15.52 waves) the last wave
// keeps 68 SMs busy and leaves 64 idle, about 3 % of the call. Here the grid is 1D: blocks
// 0 .. p.tail_full - 1 are whole key blocks in the grid's order (key block fastest, then key/value
// head, then batch), and each of the last U - tail_full key blocks is p.tail_parts blocks, each
// walking its share of the key block's iterations (the query blocks of every query head of the
// group), so that the last wave's work spreads over every SM. dQ is added per query block as
// before (its tile's reduce); dK and dV of a split key block are sums over its parts: each part
// writes its fp32 partial to p.tail_acc, fences it and bumps the key block's counter; the part
// that bumps last adds the others' partials into its registers, resets the counter (zeroed when
// the workspace was allocated, so each launch leaves them at 0) and stores dK and dV. No part
// waits for another: any schedule of the parts completes.
#pragma once
#include "attention/attn_bwd_args.cuh"
#include "common/mbarrier.cuh"

#if defined(KILN_BWD_TAIL)
constexpr bool TAIL = KILN_BWD_TAIL != 0;
#else
constexpr bool TAIL = false;
#endif

// Whether block blockIdx.x of a split grid is a part, and which: part `part` of split key block
// `slot` (p.tail_parts > 0: the host's plan).
__device__ __forceinline__ bool tail_part(const AttnBwdArgs& p, int& slot, int& part) {
  const int r = (int)blockIdx.x - p.tail_full, n = max(p.tail_parts, 1);
  slot = r / n;
  part = r - slot * n;
  return p.tail_parts > 0 && r >= 0;
}

// Where block blockIdx.x of a split grid sits: key block nb of key/value head hk of batch b
// (a grid of nx key blocks x hkv heads), and its part (-1: the whole key block).
__device__ __forceinline__ void tail_unit(const AttnBwdArgs& p, int nx, int hkv, int& nb, int& hk, int& b, int& part) {
  int slot, u = blockIdx.x;
  if (tail_part(p, slot, part)) {
    u = p.tail_full + slot;
  } else {
    part = -1;
  }
  nb = u % nx;
  hk = (u / nx) % hkv;
  b = u / (nx * hkv);
}

// A part's iterations of a walk of `iters`: [it0, it0 + n), the shares as even as whole
// iterations allow.
__device__ __forceinline__ void tail_share(int iters, int parts, int part, int& it0, int& n) {
  it0 = (int)((long long)iters * part / parts);
  n = (int)((long long)iters * (part + 1) / parts) - it0;
}

// The parts' meeting, by the 256 consumer threads once each has written its partial: whether
// this part is the last of key block `slot`'s to arrive (thread 0 counts it and, last, resets the
// counter for the next launch), the others' partials then visible to its reads. Named barrier 1
// orders the fenced stores before the count, and again (named_barrier_or) the count before the
// reads, publishing thread 0's verdict.
// ANY: the consumers meet from two instructions (the d256 kernel's, one a template instance
// each: named_barrier_sync_any).
template <bool ANY = false>
__device__ __forceinline__ bool tail_last_part(const AttnBwdArgs& p, int slot, int ctid) {
  __threadfence();
  if (ANY) {
    named_barrier_sync_any(1, 256);
  } else {
    named_barrier_sync(1, 256);
  }
  bool last = false;
  if (ctid == 0) {
    last = atomicAdd(p.tail_sem + slot, 1u) == (u32)(p.tail_parts - 1);
    if (last) p.tail_sem[slot] = 0u;  // every part has arrived: ready for the next launch
  }
  if (!(ANY ? named_barrier_or_any(1, 256, last) : named_barrier_or(1, 256, last))) return false;
  __threadfence();
  return true;
}

// The consumers' last step of part `part` of split key block `slot` (all 256 consumer threads,
// ctid = 128·c + the thread's index in its warpgroup; dk, dv: this part's partials, KR each):
// whether this block stores dK and dV, having added the other parts' partials into dk and dv.
// Partials are laid out [slot][part][register quad][256 threads] as float4s, so that a warp's
// stores and loads are whole 512-byte lines; the parts meet at tail_last_part (named barrier 1,
// the consumers' meet, balanced once their walks are done).
template <int KR>
__device__ __forceinline__ bool tail_fixup(float (&dk)[KR], float (&dv)[KR], const AttnBwdArgs& p, int slot, int part, int ctid) {
  constexpr int Q4 = KR / 4;  // float4s of dk (and of dv) a thread
  const int parts = p.tail_parts;
  float4* acc = reinterpret_cast<float4*>(p.tail_acc);
  float4* mine = acc + (i64)(slot * parts + part) * (2 * Q4) * 256 + ctid;
#pragma unroll
  for (int i = 0; i < Q4; ++i) {
    mine[i * 256] = make_float4(dk[4 * i], dk[4 * i + 1], dk[4 * i + 2], dk[4 * i + 3]);
    mine[(Q4 + i) * 256] = make_float4(dv[4 * i], dv[4 * i + 1], dv[4 * i + 2], dv[4 * i + 3]);
  }
  if (!tail_last_part(p, slot, ctid)) return false;
  for (int q = 0; q < parts; ++q) {
    if (q == part) continue;
    const float4* other = acc + (i64)(slot * parts + q) * (2 * Q4) * 256 + ctid;
#pragma unroll
    for (int i = 0; i < Q4; ++i) {
      const float4 a = __ldcg(other + i * 256), v = __ldcg(other + (Q4 + i) * 256);
      dk[4 * i] += a.x, dk[4 * i + 1] += a.y, dk[4 * i + 2] += a.z, dk[4 * i + 3] += a.w;
      dv[4 * i] += v.x, dv[4 * i + 1] += v.y, dv[4 * i + 2] += v.z, dv[4 * i + 3] += v.w;
    }
  }
  return true;
}

// The deterministic mode's fixup of one gradient a consumer thread (bwd_fa3_d256.cu's split
// grid: consumer 0 holds dV, consumer 1 dK, KR values each): as tail_fixup, but the part that
// bumps last sums every part's partial in part order, its own read back from memory too, so that
// the sum is the same whichever part finishes last (tail_fixup adds its own registers first).
// Partials are [slot][part][register quad][256 threads] as float4s.
template <int KR>
__device__ __forceinline__ bool tail_fixup_ordered(float (&g)[KR], const AttnBwdArgs& p, int slot, int part, int ctid) {
  constexpr int Q4 = KR / 4;
  const int parts = p.tail_parts;
  float4* acc = reinterpret_cast<float4*>(p.tail_acc);
  float4* mine = acc + (i64)(slot * parts + part) * Q4 * 256 + ctid;
#pragma unroll
  for (int i = 0; i < Q4; ++i) mine[i * 256] = make_float4(g[4 * i], g[4 * i + 1], g[4 * i + 2], g[4 * i + 3]);
  if (!tail_last_part<true>(p, slot, ctid)) return false;
#pragma unroll
  for (int i = 0; i < KR; ++i) g[i] = 0.0f;  // (0 + part 0's: part 0's; a branch on q == 0 spilled at d256)
#pragma unroll 1
  for (int q = 0; q < parts; ++q) {
    const float4* from = acc + (i64)(slot * parts + q) * Q4 * 256 + ctid;
#pragma unroll
    for (int i = 0; i < Q4; ++i) {
      const float4 a = __ldcg(from + i * 256);
      g[4 * i] += a.x, g[4 * i + 1] += a.y, g[4 * i + 2] += a.z, g[4 * i + 3] += a.w;
    }
  }
  return true;
}
