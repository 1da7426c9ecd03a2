// The W4A8 experts with the weights as wgmma's register operand (`KILN_W4A8_FORM=rs`; sm_90a):
// the same problem, prepack, producer and stages as moe/fp4_experts_w4a8.cu, with the operands'
// roles swapped (Yᵀ = W·Xᵀ). Each consumer decodes its own 64 weight rows of every K block
// straight from the stage's prepacked atoms into its A fragments (e4m3, m64k32: register j of
// step kk holds row g + 8 (j & 1), k 32kk + 16 (j >> 1) + 4q .. + 3), and the tile's tokens are
// N, X read by both consumers from the stage as the B operand (K-major, 128B-swizzled by TMA).
// No decoded tile in shared memory, so no stores, fence or barrier between the consumers: each
// runs its own chain, and while one promotes the other's wgmmas keep the tensor pipe.
//
// Why (docs/moe.md, "What bounds W4A8 at 32,768 rows"): in the shared-memory form both
// consumers decode half a tile each, meet at a named barrier every K block and then read it, so
// the two warps of a scheduler run the same phase; the barrier, the fence and the stores went.
//
// Rows. SwiGLU: a thread's rows g and g + 8 are the gate and up rows of one output column,
// 32c + 8w + g of the tile's 64, so the epilogue has both in registers; the grouped GEMM:
// consumer c's rows are atom c's, column 64c + 16w + g + 8h. The prepack keeps the
// shared-memory form's byte order (row r's 32-block b of an atom is the 16 bytes at
// 2048 (b % 2) + 32 r + 16 (b / 2), its word i holding k 8i .. + 7, codes 0..3 the low half):
// lane q reads words q / 2 and 2 + q / 2 of the chunk and decodes their half q % 2.
//
// Tokens. N is 128 in every tile (a tile of at most 64 rows at n64, half the tensor work, is
// the next step: two widths in one kernel made ptxas serialise the wgmmas). A register's token is 8 (i / 4) + 2q + (i & 1): each K block's promotion multiplies
// by that token's X scale, read from the stage's staged scales (KILN_W4A8_SX=tma only: the box
// starts on the tile's first scale rounded down to 4, w4a8_sx_shift). Columns past the tile's
// rows read stale X and feed only their own tokens, never stored.
//
// Pipeline (one accumulator, promoted DeepGEMM-like; two A fragment sets): block j's batch in
// flight, the consumer waits for stage j + 1 and decodes it into the other set, waits for its
// batch, promotes it into fin with the scales, frees the stage (X read, atoms decoded) and
// issues block j + 1.
//
// KILN_W4A8_RS_BM = 192 (`KILN_W4A8_FORM=wide-rs`, ledger F171; with KILN_W4A8_FRAGS and
// KILN_W4A8_SXL): tiles of 192 tokens (`wide`'s m-tiles: one an expert of up to 192 rows), each
// consumer's batch four m64n192k32 into 96 accumulators, promoted into 96 (at 232 registers a
// consumer thread with one fragment set; two spilled). Why (docs/moe.md, F171): `wide-lean`'s
// step (~1,380 cycles against 768 of tensor work) is its decoding consumers' chain, decode,
// stores, fence, a 384-thread meet, promotion, issue, with shared memory ~72 % busy, 481 of its
// ~990 wavefronts a step the wgmmas' operands (each of 12 m64n128k32 reads its X rows and the
// whole decoded tile). Here no decoded tile is stored or read: each consumer decodes its own 64
// weight rows into registers and reads X once as B (the wgmmas' operands 384 wavefronts a step,
// the decode's stores gone). A consumer's chain a step (rs_kloop_wide): after its batch's wait,
// one round of shared loads (the next block's codes and tables, its table offsets read before
// the wait, and this block's scales, laid out lane-major before the wait), the permutes, the
// promotion and the issue, while the other consumer's batch (384 cycles) runs. The stage is
// freed as soon as its batch has completed. Every tile runs the full N 192 (the promotion skips
// the last 64 tokens of a tile of at most 128 rows).
#include "common/bulk_copy.cuh"
#include "common/fp8.cuh"
#include "common/tma.cuh"
#include "common/wgmma_fp8_rs.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/fp4_experts.cuh"
#include "moe/w4a8_args.cuh"
#include "moe/w4a8_lean.cuh"

#if !defined(KILN_SWIGLU) || !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SMEM)
#error "KILN_SWIGLU, KILN_STAGES, KILN_MAX_EXPERTS and KILN_SMEM must be defined by the host"
#endif
#if defined(KILN_W4A8_SXL)
constexpr bool kSxLanes = true;
#else
constexpr bool kSxLanes = false;
#endif
// KILN_W4A8_FRAGS (`KILN_W4A8_FORM=rs-frags`, with KILN_W4A8_SXL): the weights prepacked in the
// A fragments' order (src/ops/moe/fp4/w4a8.rs, `W4a8Order::Frags`): row r's 16 bytes for lane
// class q at byte 64r + 16q of the atom, word kk holding codes k 32kk + 4q .. + 3 (its low half)
// and k 32kk + 16 + 4q .. + 3 (its high half). One 16-byte load a row, each word's two halves
// decoded as the shared-memory form decodes them. Without it the rows' order (a row's 32-block
// kk in 16 bytes, word i k 8i .. + 7): a lane loads two words a block and decodes half of each.
#if defined(KILN_W4A8_FRAGS)
constexpr bool kFrags = true;
#else
constexpr bool kFrags = false;
#endif
static_assert(!kFrags || kSxLanes, "KILN_W4A8_FRAGS runs with KILN_W4A8_SXL (the host's rule)");

#ifndef KILN_W4A8_RS_BM
#define KILN_W4A8_RS_BM 128
#endif
constexpr int BM = KILN_W4A8_RS_BM, BK = 128, STAGES = KILN_STAGES;
constexpr bool kWide = BM == 192;  // `wide-rs` (F171)
static_assert(BM == 128 || (kWide && kFrags), "KILN_W4A8_RS_BM is 128, or 192 with KILN_W4A8_FRAGS (the host's rule)");
constexpr int NACC = BM / 2, TG = BM / 8;  // a consumer thread's accumulators; the tile's token groups of 8
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
static_assert(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * 168, "the warpgroups' registers exceed the launch's pool");
constexpr int BN = KILN_SWIGLU ? 64 : 128;  // output columns of a tile (two 64-row atoms)
constexpr u32 X_BYTES = BM * BK, W_BYTES = 2 * W4A8_ATOM_BYTES;
constexpr int SX_BOX = BM + 4;  // the staged X scales: a box from a multiple of 4 (the host's SX_BOX)
constexpr u32 SX_OFF = X_BYTES + W_BYTES, SX_BYTES = SX_BOX * 4;
constexpr u32 STAGE_BYTES = X_BYTES + (W_BYTES + SX_BYTES + 1023) / 1024 * 1024;  // the host's stage_bytes
// The host lays shared memory out as for the shared-memory form (its three decoded slots unused
// here), so that both forms have the same stages; `wide-rs` keeps 8 KB of them for the scale
// buffers (six stages of 34 KB instead of five).
constexpr u32 SLOTS_BYTES = kWide ? 8192 : 3 * 128 * BK, LUT_BYTES = 128;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 2) * 4;
// KILN_W4A8_SXL: a K block's X scales laid out lane-major for the promotion: lane class q's BM / 4
// (tokens 8j + 2q + e at float 2j + e) from float SXL_Q q (the 4-float pad puts the four classes'
// 16-byte loads on different banks). Four buffers a consumer, ring iteration i's in i % 4.
constexpr u32 SXL_Q = BM / 4 + 4, SXL_BYTES = 4 * SXL_Q * 4, SXL_BUFS = 4;
static_assert(2 * SXL_BUFS * SXL_BYTES <= SLOTS_BYTES, "the scale buffers fit the unused slots");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + SLOTS_BYTES + LUT_BYTES + 2 * STAGES * 8 + MOE_RING_BYTES +
                               TABLE_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, tables and ring need");

struct RsCtx {
  u32 base, lut;
  u32 sxl;  // KILN_W4A8_SXL: this consumer's lane-major scale buffers (in the unused slots' space)
  MbarRing<STAGES> ring;
  int c, w, g, q, lane;
  u32 code[2], offs[2];  // in a stage: this thread's rows' (h = 0, 1) first code chunk and offsets
};

// The A fragments of one K block: register 4kk + j is step kk's register j.
struct RsFrag {
  u32 r[16];
};

// Word x's half (sh 0: codes 0..3, sh 16: codes 4..7; ss the signs' shift, 0 or 4) as e4m3 bytes.
__device__ __forceinline__ u32 rs_half(u32 x, u32 t0, u32 t1, u32 sh, u32 ss) {
  return __byte_perm(t0, t1, (x >> sh) & 0x7777u) | ((x << ss) & 0x80808080u);
}

// Decodes this thread's A fragments of stage s: per row h and step kk, the 32-block kk's table
// (by its offset byte) and the codes lane q needs.
__device__ __forceinline__ void rs_decode(const RsCtx& x, int s, RsFrag& f) {
  const u32 st = x.base + s * STAGE_BYTES;
  const u32 sh = 16u * (u32)(x.q & 1), ss = 4u * (u32)(x.q & 1);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    u32 offs, c[4];
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(offs) : "r"(st + x.offs[h]));
    if constexpr (kFrags) {
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                   : "r"(st + x.code[h]));
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      // masked to a multiple of 8 inside the 16 tables whatever the bytes hold (the prepack
      // writes only such offsets; the 8-byte load must be aligned)
      const u32 toff = (offs >> (8 * kk)) & LUT_MASK;
      u32 t0, t1;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(t0), "=r"(t1) : "r"(x.lut + toff));
      if constexpr (kFrags) {
        f.r[4 * kk + h] = w4a8_bytes<0>(c[kk], t0, t1);
        f.r[4 * kk + 2 + h] = w4a8_bytes<1>(c[kk], t0, t1);
      } else {
        u32 w0, w1;
        const u32 at = st + x.code[h] + 2048u * (kk & 1) + 16u * (kk >> 1);
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w0) : "r"(at));
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w1) : "r"(at + 8));
        f.r[4 * kk + h] = rs_half(w0, t0, t1, sh, ss);
        f.r[4 * kk + 2 + h] = rs_half(w1, t0, t1, sh, ss);
      }
    }
  }
}

__device__ __forceinline__ void rs_fence_frag(RsFrag& f) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(f.r[i])::"memory");
}

// The four k32 wgmmas of stage s into the fresh accumulator: the fragments as A, the stage's X
// tile (128 tokens) as B; one batch. Every tile runs at N 128: a second width (n64 for the
// tiles of at most 64 rows), as a second inlined K loop or a branch around the batch, made
// ptxas serialise the wgmmas for registers (C7511; NVRTC 13.0).
__device__ __forceinline__ void rs_issue(const RsCtx& x, int s, float (&acc)[NACC], RsFrag& f) {
#pragma unroll
  for (int i = 0; i < NACC; ++i) wgmma_fence_operand(acc[i]);
  rs_fence_frag(f);
  wgmma_fence();
  const u32 sb16 = (x.base >> 4) + s * (STAGE_BYTES / 16);
  const u64 db = wgmma_desc_sw128_at(sb16, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const u32 a[4] = {f.r[4 * kk], f.r[4 * kk + 1], f.r[4 * kk + 2], f.r[4 * kk + 3]};
    wgmma_m64k32_fp8_rs<0, 0, BM>(acc, a, db + 2 * kk, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
#pragma unroll
  for (int i = 0; i < NACC; ++i) wgmma_fence_operand(acc[i]);
}

// KILN_W4A8_SXL (`KILN_W4A8_FORM=rs-lanes`): ring iteration i's X scales of the tile's 128
// tokens (stage s, `shift` bytes into its box) into this consumer's buffer i % SXL_BUFS,
// lane-major: thread t moves token t's; then the consumer's threads meet (named barrier 1 + c)
// before any reads them. In place, the 32 scales a promotion needs are 32 four-byte loads a
// thread (a token pair's two can sit on either side of an 8-byte line, as the box starts on the
// tile's first scale rounded down to 4); lane-major, 8 sixteen-byte loads. A buffer is written
// again four meetings later, when every thread has promoted from it (it reads buffer i between
// meetings i + 1 and i + 2).
__device__ __forceinline__ void rs_stage_scales(const RsCtx& x, int s, u32 shift, u32 i) {
  if constexpr (kSxLanes) {
    const int t = 32 * x.w + x.lane;
    const u32 src = x.base + s * STAGE_BYTES + SX_OFF + shift, dst = x.sxl + (i % SXL_BUFS) * SXL_BYTES;
    // `wide-rs`: thread t moves tokens t and, below 64, t + 128 (whose place is 2 x 16 floats on)
    float v, v2 = 0.0f;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(src + 4u * t));
    if (kWide && t < BM - 128) asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v2) : "r"(src + 4u * (t + 128)));
    const u32 pos = SXL_Q * ((t >> 1) & 3) + 2u * (t >> 3) + (t & 1);
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(dst + 4u * pos), "f"(v) : "memory");
    if (kWide && t < BM - 128) asm volatile("st.shared.f32 [%0], %1;" ::"r"(dst + 4u * (pos + 32)), "f"(v2) : "memory");
    named_barrier_sync(1 + x.c, 128);
  }
}

// fin += acc x (each register's token's X scale) for the token groups J0 .. J1 - 1 (tokens
// 8j .. 8j + 7). `sc`: this lane's first token's scale in the stage, or (KILN_W4A8_SXL) its lane
// class's first in the lane-major buffer.
template <int J0, int J1>
__device__ __forceinline__ void rs_promote(u32 sc, float (&fin)[NACC], const float (&acc)[NACC]) {
#pragma unroll
  for (int m = J0 / 2; m < J1 / 2; ++m) {
    float s[4];  // tokens 16m + 2q, + 1, 16m + 8 + 2q, + 1
    if constexpr (kSxLanes) {
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(s[0]), "=f"(s[1]), "=f"(s[2]), "=f"(s[3])
                   : "r"(sc + 16u * m));
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(s[e]) : "r"(sc + 64u * m + 32u * (e >> 1) + 4u * (e & 1)));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * m + h;
      fin[4 * j] = fmaf(s[2 * h], acc[4 * j], fin[4 * j]);
      fin[4 * j + 1] = fmaf(s[2 * h + 1], acc[4 * j + 1], fin[4 * j + 1]);
      fin[4 * j + 2] = fmaf(s[2 * h], acc[4 * j + 2], fin[4 * j + 2]);
      fin[4 * j + 3] = fmaf(s[2 * h + 1], acc[4 * j + 3], fin[4 * j + 3]);
    }
  }
}

// Waits for the batch in flight (its fragments `f` kept live until here), promotes it into fin
// with its X scales (ring iteration i, stage s, `shift` bytes into the box) and frees the stage.
// `narrow` (a tile of at most 64 rows): tokens 64 .. 127 are never stored, so only the first
// half is promoted.
__device__ __forceinline__ void rs_retire(const RsCtx& x, int s, u32 i, u32 shift, bool narrow, float (&fin)[NACC],
                                          float (&acc)[NACC], RsFrag& f) {
  wgmma_wait<0>();
  rs_fence_frag(f);
#pragma unroll
  for (int k = 0; k < 64; ++k) wgmma_fence_operand(acc[k]);
  const u32 sc = kSxLanes ? x.sxl + (i % SXL_BUFS) * SXL_BYTES + 4u * SXL_Q * (u32)x.q
                          : x.base + s * STAGE_BYTES + SX_OFF + shift + 8u * (u32)x.q;
  rs_promote<0, 8>(sc, fin, acc);
  if (!narrow) rs_promote<8, 16>(sc, fin, acc);
  x.ring.release(s, x.lane);
}

// Where the tile's first scale of K block kb sits in the stage's box, in bytes (the box starts at
// its index rounded down to 4: fp4_produce_pairs).
__device__ __forceinline__ u32 rs_sx_shift(int kb, int x_rows, int row0) {
  return 4u * ((u32)(kb * x_rows + row0) & 3u);
}

// A tile's K loop: nk blocks from ring iteration `it` (advanced past them) into fin.
__device__ __forceinline__ void rs_kloop(const RsCtx& x, u32& it, int nk, int x_rows, const MoeTile& tile,
                                         float (&fin)[NACC]) {
  const int row0 = tile.row0;
  const bool narrow = tile.valid_rows <= 64;
  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) fin[i] = 0.0f;
  RsFrag f0, f1;
  const auto shift = [&](int kb) { return rs_sx_shift(kb, x_rows, row0); };
  int s = x.ring.wait_full(it);
  rs_decode(x, s, f0);
  rs_stage_scales(x, s, shift(0), it);
  rs_issue(x, s, acc, f0);
  // at the top of a turn block j (stage s, fragments f0) is in flight
  for (int j = 0;; j += 2) {
    int s1 = 0;
    if (j + 1 < nk) {
      s1 = x.ring.wait_full(it + j + 1);
      rs_decode(x, s1, f1);
      rs_stage_scales(x, s1, shift(j + 1), it + j + 1);
    }
    rs_retire(x, s, it + j, shift(j), narrow, fin, acc, f0);
    if (j + 1 >= nk) break;
    rs_issue(x, s1, acc, f1);
    int s2 = 0;
    if (j + 2 < nk) {
      s2 = x.ring.wait_full(it + j + 2);
      rs_decode(x, s2, f0);
      rs_stage_scales(x, s2, shift(j + 2), it + j + 2);
    }
    rs_retire(x, s1, it + j + 1, shift(j + 1), narrow, fin, acc, f1);
    if (j + 2 >= nk) break;
    rs_issue(x, s2, acc, f0);
    s = s2;
  }
  it += nk;
}

// `wide-rs` (F171): the two rows' table offsets of stage s (a u32 of four 32-blocks' offset bytes
// a row), read while the batch before runs, so that the decode's code and table loads after the
// wait are one round, beside the promotion's scale loads.
// Row 1's code and offsets are row 0's moved by a constant (the SwiGLU's up row is the next atom's,
// the GEMM's eight rows on, KILN_W4A8_FRAGS), so that one register holds each pair's address.
constexpr u32 CODE_H = KILN_SWIGLU ? W4A8_ATOM_BYTES : 8 * 64, OFFS_H = KILN_SWIGLU ? W4A8_ATOM_BYTES : 8 * 4;
__device__ __forceinline__ void rs_offs(const RsCtx& x, int s, u32 (&o)[2]) {
  const u32 st = x.base + s * STAGE_BYTES + x.offs[0];
#pragma unroll
  for (int h = 0; h < 2; ++h) asm volatile("ld.shared.u32 %0, [%1];" : "=r"(o[h]) : "r"(st + h * OFFS_H));
}

// `wide-rs`: a stage's decode loads (KILN_W4A8_FRAGS): both rows' code words and the eight tables
// the offsets name.
struct RsRaw {
  u32 c[2][4], t[2][4][2];
};
__device__ __forceinline__ void rs_load_at(const RsCtx& x, int s, const u32 (&o)[2], RsRaw& r) {
  const u32 st = x.base + s * STAGE_BYTES + x.code[0];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.c[h][0]), "=r"(r.c[h][1]), "=r"(r.c[h][2]), "=r"(r.c[h][3])
                 : "r"(st + h * CODE_H));
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const u32 toff = (o[h] >> (8 * kk)) & LUT_MASK;  // masked as rs_decode masks it
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(r.t[h][kk][0]), "=r"(r.t[h][kk][1]) : "r"(x.lut + toff));
    }
}

// `wide-rs`: the loaded codes as the A fragments (rs_decode's KILN_W4A8_FRAGS bytes).
__device__ __forceinline__ void rs_permute(const RsRaw& r, RsFrag& f) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const W4Bytes b = w4a8_word_lean(r.c[h][kk], r.t[h][kk][0], r.t[h][kk][1]);
      f.r[4 * kk + h] = b.lo;
      f.r[4 * kk + 2 + h] = b.hi;
    }
}

// `wide-rs`: a tile's K loop with one fragment set. In step j (block j in flight, its fragments
// `f`): wait for stage j + 1, read its table offsets and lay its X scales out; wait for batch j
// and free its stage; then one round of shared loads, block j + 1's codes and tables and block
// j's scales, block j + 1's permutes into `f`, the promotion of block j (tokens 128-191 only in
// a tile of more than 128 rows: the three-way split spilled two of fin) and block j + 1's issue.
// 232 registers hold fin and the accumulator (192) with one fragment set and the loads in
// flight, without spills; two fragment sets (the decode a step ahead) spilled 40-60 bytes even
// at 240.
__device__ __forceinline__ void rs_kloop_wide(const RsCtx& x, u32& it, int nk, int x_rows, const MoeTile& tile,
                                              float (&fin)[NACC]) {
  const int row0 = tile.row0, rows = tile.valid_rows;
  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) fin[i] = 0.0f;
  RsFrag f;
  RsRaw r;
  u32 o[2];
  const auto shift = [&](int kb) { return rs_sx_shift(kb, x_rows, row0); };
  int s = x.ring.wait_full(it);
  rs_offs(x, s, o);
  rs_stage_scales(x, s, shift(0), it);
  rs_load_at(x, s, o, r);
  rs_permute(r, f);
  rs_issue(x, s, acc, f);
  for (int j = 0;; ++j) {
    const bool more = j + 1 < nk;
    int sn = 0;
    if (more) {
      sn = x.ring.wait_full(it + j + 1);
      rs_offs(x, sn, o);
      rs_stage_scales(x, sn, shift(j + 1), it + j + 1);
    }
    wgmma_wait<0>();
    rs_fence_frag(f);
#pragma unroll
    for (int k = 0; k < NACC; ++k) wgmma_fence_operand(acc[k]);
    x.ring.release(s, x.lane);
    // block j + 1's fragments before block j's promotion: 16 registers live through the
    // promotion instead of the loads' 24
    if (more) {
      rs_load_at(x, sn, o, r);
      rs_permute(r, f);
    }
    const u32 sc = x.sxl + ((it + j) % SXL_BUFS) * SXL_BYTES + 4u * SXL_Q * (u32)x.q;
    rs_promote<0, 16>(sc, fin, acc);
    if (rows > 128) rs_promote<16, TG>(sc, fin, acc);
    if (!more) break;
    rs_issue(x, sn, acc, f);
    s = sn;
  }
  it += nk;
}

// The stores of a consumer's tokens. Register 4j + e: token 8j + 2q + (e & 1), row g + 8 (e >> 1)
// (SwiGLU: the gate (e < 2) and up (e >= 2) rows of column 32c + 8w + g; GEMM: column
// 64c + 16w + g + 8h for e >> 1 = h). Lanes g and g ^ 1 hold adjacent columns: after one
// exchange with lane ^ 4 the even one stores token 2q's pair, the odd one token 2q + 1's.
__device__ __forceinline__ void rs_store(const RsCtx& x, const W4a8Args& p, const MoeTile& tile, int expert,
                                         const float (&fin)[NACC]) {
  out_t* y = static_cast<out_t*>(p.y);
  const bool even = (x.g & 1) == 0;
  const int halves = KILN_SWIGLU ? 2 : 1;
  const float* f = p.escale + (i64)expert * halves * p.n_pad + tile.n0;
  constexpr int H = KILN_SWIGLU ? 1 : 2;
#pragma unroll
  for (int h = 0; h < H; ++h) {
    const int col = KILN_SWIGLU ? 32 * x.c + 8 * x.w + x.g : 64 * x.c + 16 * x.w + x.g + 8 * h;
    const float fa = f[col], fu = KILN_SWIGLU ? f[p.n_pad + col] : 1.0f;  // inside n_pad (a multiple of 128)
#pragma unroll
    for (int j = 0; j < TG; ++j) {
      if (8 * j >= tile.valid_rows) break;  // no token of this group is stored
      const int t0 = 8 * j + 2 * x.q;
      float v0, v1;
      if constexpr (KILN_SWIGLU) {
        const i64 r0 = (i64)tile.row0 + t0;
        const float rt0 = (p.route != nullptr && t0 < tile.valid_rows) ? p.route[r0] : 1.0f;
        const float rt1 = (p.route != nullptr && t0 + 1 < tile.valid_rows) ? p.route[r0 + 1] : 1.0f;
        v0 = silu_tanh(fin[4 * j] * fa) * fin[4 * j + 2] * fu * rt0;
        v1 = silu_tanh(fin[4 * j + 1] * fa) * fin[4 * j + 3] * fu * rt1;
      } else {
        v0 = fin[4 * j + 2 * h] * fa;
        v1 = fin[4 * j + 2 * h + 1] * fa;
      }
      const float got = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
      const int tok = t0 + (even ? 0 : 1);
      if (tok < tile.valid_rows) {
        const i64 row = (i64)tile.row0 + tok;
        if (even) fp4_store2(y, p.ldy, p.n, row, tile.n0 + col, v0, got);
        else fp4_store2(y, p.ldy, p.n, row, tile.n0 + col - 1, got, v1);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_fp4_experts_w4a8_rs(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_sx,
                            const W4a8Args p) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);  // the 128B swizzles follow absolute address bits
  const u32 slots = base + STAGES * STAGE_BYTES, lut = slots + SLOTS_BYTES;
  const int E = p.experts;
  const MoeRings<STAGES> rings(smem_raw, raw, lut + LUT_BYTES, p.sched, E, 8, 8,  // lane 0 of each consumer warp
                               [] {}, [&] { w4a8_write_tables(smem_raw, raw, lut); });
  const MoeTiles sp(rings.table, p.sched, E, p.tiles_n);
  const int wg = warpgroup_index();

  ws_roles<PRODUCER_REGS, CONSUMER_REGS>(
      wg,
      [&] { w4a8_produce<STAGES, BM, BN, STAGE_BYTES, SX_BYTES>(p, &tma_x, &tma_sx, rings, base); },
      [&](int c) {
        RsCtx x;
        x.base = base;
        x.lut = lut;
        x.sxl = slots + c * SXL_BUFS * SXL_BYTES;
        x.ring = rings.stages;
        x.c = c;
        const int t = threadIdx.x % 128;
        x.w = t / 32;
        x.lane = t % 32;
        x.g = x.lane / 4;
        x.q = x.lane % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int atom = KILN_SWIGLU ? h : c;
          const int r = KILN_SWIGLU ? 32 * c + 8 * x.w + x.g : 16 * x.w + x.g + 8 * h;
          const u32 at = X_BYTES + atom * W4A8_ATOM_BYTES;
          x.code[h] = kFrags ? at + 64u * r + 16u * (u32)x.q : at + 32u * r + 4u * (u32)(x.q / 2);
          x.offs[h] = at + W4A8_ATOM_CODES + 4u * r;
          static_assert(!kWide || (CODE_H == (KILN_SWIGLU ? W4A8_ATOM_BYTES : 64u * 8) &&
                                   OFFS_H == (KILN_SWIGLU ? W4A8_ATOM_BYTES : 4u * 8)),
                        "row 1 is row 0 moved by CODE_H, OFFS_H");
        }
        u32 it = 0;
        for (int j = 0;; ++j) {
          const int tt = rings.ring.take(j, x.lane);
          if (tt >= sp.tiles) break;
          const MoeTile tile = moe_tile(rings.table, E, tt, sp.tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN);
          float fin[NACC];
          if constexpr (kWide) {
            rs_kloop_wide(x, it, p.katoms, p.x_rows, tile, fin);
          } else {
            rs_kloop(x, it, p.katoms, p.x_rows, tile, fin);
          }
          rs_store(x, p, tile, sp.id(tile.expert), fin);
        }
      });
}
