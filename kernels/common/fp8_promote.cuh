// The promoted, block-scaled FP8 K loop of one consumer warpgroup (sm_90a), as gemm/fp8_wgmma.cu
// runs it with KILN_PIPE = 1, written once for the kernels that take DeepSeek's scales (1x128 on
// the M operand, 128x128 on the N operand): each 128-deep K block (one stage, four k32 wgmmas)
// goes into a fresh accumulator, and while block j + 1's wgmmas run on the tensor cores, block
// j's sums are multiplied by their scales and added into `fin` on the CUDA cores (the tensor
// cores' FP8 accumulation keeps about 14 bits; fp32 promotion every 128 of K keeps the error
// below bf16's). Two accumulators take turns; the loop body has no branch and at its top exactly
// block j's batch is in flight, so ptxas sees each promotion read a finished batch (a conditional
// issue inside the loop serialised every wgmma in the dense kernel: C7514).
#pragma once
#include "common/ring.cuh"
#include "common/wgmma_fp8.cuh"

// One K block's scales for this thread: its two rows' A scales (rows r and r + 8 of the
// fragment), and the N operand's scales for the accumulator's column groups J < jb (b0) and the
// rest (b1).
struct Fp8BlockScales {
  float a0, a1, b0, b1;
};

// fin[j] += scale(j) * a[j], register j holding row + 8 ((j >> 1) & 1) and column group j >> 2.
template <int N>
__device__ __forceinline__ void fp8_promote(float (&fin)[N / 2], float (&a)[N / 2], const Fp8BlockScales& sc, int jb) {
#pragma unroll
  for (int j = 0; j < N / 2; ++j) wgmma_fence_operand(a[j]);
  const float s00 = sc.a0 * sc.b0, s10 = sc.a1 * sc.b0, s01 = sc.a0 * sc.b1, s11 = sc.a1 * sc.b1;
#pragma unroll
  for (int j = 0; j < N / 2; ++j) {
    const bool h = (j >> 1) & 1;
    const float f = (j >> 2) < jb ? (h ? s10 : s00) : (h ? s11 : s01);
    fin[j] = fmaf(f, a[j], fin[j]);
  }
}

// Part h of a consumer's N columns (HN wide, its registers HN / 2) into fin's registers
// h * HN / 2 on: fin += s0 * a on the fragment's first row, s1 * a on its second (row + 8).
// FRESH: fin = s * a instead, fin's old value dead (a tile's first K block where the last tile's
// epilogue is deferred under it; the same bits as adding to zero but for a zero's sign).
template <int HN, int N, bool FRESH = false>
__device__ __forceinline__ void fp8_promote_part(float (&fin)[N / 2], float (&a)[HN / 2], float s0, float s1, int h) {
#pragma unroll
  for (int j = 0; j < HN / 2; ++j) wgmma_fence_operand(a[j]);
#pragma unroll
  for (int j = 0; j < HN / 2; ++j) {
    const float f = ((j >> 1) & 1) ? s1 : s0;
    fin[h * (HN / 2) + j] = FRESH ? f * a[j] : fmaf(f, a[j], fin[h * (HN / 2) + j]);
  }
}

// Waits for ring iteration `it`'s stage and issues its four e4m3 x e4m3 m64nNk32 wgmmas into `a`
// as one batch, the first overwriting a. da0 / db0: the consumer's descriptors in stage 0.
// at_stage(s) runs once the stage has landed, before the wgmmas (STAGED: reads the block's
// scales from the stage's slot); its value is returned.
template <int N, int STAGES, u32 STAGE_BYTES, class AtStage>
__device__ __forceinline__ Fp8BlockScales fp8_issue_block(const MbarRing<STAGES>& ring, u32 it, float (&a)[N / 2], u64 da0,
                                                          u64 db0, const AtStage& at_stage) {
  const int s = ring.wait_full(it);
  const Fp8BlockScales sc = at_stage(s);
#pragma unroll
  for (int j = 0; j < N / 2; ++j) wgmma_fence_operand(a[j]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const u64 da = wgmma_desc_add(da0, s * STAGE_BYTES + kk * 32);
    const u64 db = wgmma_desc_add(db0, s * STAGE_BYTES + kk * 32);
    wgmma_m64k32_fp8<0, 0, N>(a, da, db, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
#pragma unroll
  for (int j = 0; j < N / 2; ++j) wgmma_fence_operand(a[j]);
  return sc;
}

// The promoted loop over nk >= 1 K blocks starting at ring iteration `it` (advanced past them):
// fin = sum over blocks of scales(j) * block j's product. Without STAGED, scales(j) returns block
// j's scales (called two blocks ahead of their use, for j up to nk + 1: return anything past
// nk - 1); with STAGED, scales(j, s) reads them from stage s once block j's stage has landed
// (in order, j < nk only: the scales that ride the ring with their stage, as the dense kernel's
// KILN_SSCALE). release(s) frees stage s (one arrival per warp). acc and acc2 are the two
// K-block accumulators (their values on entry are ignored).
template <int N, int STAGES, u32 STAGE_BYTES, bool STAGED = false, class Scales, class Release>
__device__ __forceinline__ void fp8_promoted_kloop(const MbarRing<STAGES>& ring, u32& it, int nk, u64 da0, u64 db0,
                                                   float (&fin)[N / 2], float (&acc)[N / 2], float (&acc2)[N / 2],
                                                   int jb, const Scales& scales, const Release& release) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) fin[i] = 0.0f;
  Fp8BlockScales s0{0.0f, 0.0f, 0.0f, 0.0f}, s1{0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (!STAGED) {
    s0 = scales(0);
    s1 = scales(1);
  }
  // issue(i, a, j): block j (ring iteration i) into a; `into` takes its scales when staged
  auto issue = [&](u32 i, float(&a)[N / 2], int j, Fp8BlockScales& into) {
    const Fp8BlockScales sc = fp8_issue_block<N, STAGES, STAGE_BYTES>(ring, i, a, da0, db0, [&](int s) {
      if constexpr (STAGED) return scales(j, s);
      else return Fp8BlockScales{0.0f, 0.0f, 0.0f, 0.0f};
    });
    if constexpr (STAGED) into = sc;
  };
  issue(it, acc, 0, s0);
  int j = 0;
  for (; j + 2 < nk; j += 2, it += 2) {
    issue(it + 1, acc2, j + 1, s1);
    wgmma_wait<1>();
    release(MbarRing<STAGES>::slot(it));
    fp8_promote<N>(fin, acc, s0, jb);
    if constexpr (!STAGED) s0 = scales(j + 2);
    issue(it + 2, acc, j + 2, s0);
    wgmma_wait<1>();
    release(MbarRing<STAGES>::slot(it + 1));
    fp8_promote<N>(fin, acc2, s1, jb);
    if constexpr (!STAGED) s1 = scales(j + 3);
  }
  if (j + 1 < nk) {  // two blocks left: j (in flight in acc) and j + 1
    issue(it + 1, acc2, j + 1, s1);
    wgmma_wait<1>();
    release(MbarRing<STAGES>::slot(it));
    fp8_promote<N>(fin, acc, s0, jb);
    wgmma_wait<0>();
    release(MbarRing<STAGES>::slot(it + 1));
    fp8_promote<N>(fin, acc2, s1, jb);
    it += 2;
  } else {  // one block left
    wgmma_wait<0>();
    release(MbarRing<STAGES>::slot(it));
    fp8_promote<N>(fin, acc, s0, jb);
    it += 1;
  }
}
