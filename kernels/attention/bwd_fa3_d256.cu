// Attention backward at head dim 256, FlashAttention-3 style (sm_90a). At d256 the other WGMMA
// backwards' split (each consumer owns 64 keys and holds their dK and dV, 64 x D fp32 each) would
// need 256 accumulator registers a thread; here both consumers work on the same 64 keys and each
// holds one of the two gradients, 64 x 256 fp32 = 128 registers:
//   Block: BN = 64 keys of one (batch, key/value head) (KILN_BN), walking every 64-row query block
//   of every query head of its group as bwd_fa3_block.cuh's walk does; K and V (32 KB each)
//   resident, Q and dO (64 KB a stage) through a 2-stage ring fed by its producer warp.
//   Consumer 0 (Pᵀ, dV):  Sᵀ = K·Qᵀ (SS m64n64, k over 256 dims), Pᵀ = exp2(…) masked on edge
//                         blocks, Pᵀ in fp32 into the exchange buffer, dV += Pᵀ·dO (RS m64n256).
//   Consumer 1 (dSᵀ, dK): dPᵀ = V·dOᵀ (SS m64n64), Pᵀ from the exchange buffer (thread i reads
//                         what thread i of consumer 0 wrote: the same accumulator positions),
//                         dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ·Q (RS m64n256), dSᵀ rounded into
//                         shared memory (two buffers).
//   Both, once dSᵀ is stored: dQ = dS·K over the 64 keys for their own 128 dims (SS m64n128,
//   consumer c dims 128c ..), added with red.global.add.v2.f32 (bwd_fa3_block.cuh's
//   add_dq_atomics: any order, or in key block order on the deterministic mode's counters, each
//   consumer's columns its own, so every element's additions keep one order).
// Each consumer's tensor work a block is the same: one m64n64k256, one m64n256k64, one m64n128k64.
// A walk that issued each consumer's next Sᵀ or dPᵀ before this block's dQ (dQ then in two halves
// for registers) ran 0.97x this one on an H200 (2026-11-29, ledger D1): not kept.
// KILN_D256_DQ 1 (the host's bwd_fa3_d256_tma): dQ staged and added by TMA tensor reduce instead
// of atomics. An H200 profile of the atomics (2026-11-29, B4 H16 S4096, 315 TFLOPS) had the L2 at
// 90 % of its throughput and ~40 % of the stall samples on the 32 REDG.64 a thread a block (lg
// throttle) and on the instructions waiting for them to release their registers; each REDG of a
// warp is 8 one-sector requests to 8 rows, where a reduce sends whole 128-byte lines. There is no
// room for a staging tile beside the ring (231 KB), so each consumer stages its 64 x 128 fp32 (32
// KB) in the ring stage the block has just finished reading, in the half that the other consumer
// has finished with too: consumer 0 in dO's (consumer 1's dPᵀ was complete before dSᵀ), consumer 1
// in Q's (consumer 0's Sᵀ was complete before Pᵀ), as four boxes of 32 columns (one 128-byte
// piece a row: the 8 rows of a 64-bit store on 8 swizzle patterns, 2 wavefronts, where one box
// of 128 columns would take 4). Warp 0's first thread adds the four boxes
// (bwd_dq_stage.cuh) and releases the stage for the producer once the reduce has read it, which
// it waits for after the next block's first product is issued: the empty barrier's 8 arrivals
// come as 4 from each consumer's adder. The deterministic mode keeps the ordered atomics (and the
// release by every warp once dV or dK is done), except with KILN_D256_DET:
// KILN_D256_DET 3 (the host's bwd_fa3_d256_w2; with KILN_D256_DQ 1): the deterministic
// mode staged as above, the adds by writer warps of the producer warpgroup (d256_writer) in the
// order and on the walks of the d64/d128 dQ writer (det_rank, det_walk: non-causal walks rotated
// so that the blocks of a wave reach a query block a few steps apart in the order they add;
// causal key blocks launched in reverse, the last first), so that neither a turn nor a reduce's
// completion is waited for in a consumer's path. With the atomics every block walked the query
// blocks in the same order, so block n waited at each one for block n - 1's adds, fence and bump
// (0.30-0.55x the non-deterministic run, H200 2026-11-30). The first forms, each consumer's adder
// waiting for the turn (1) and bumping early (2), lost to the writers in two rounds and were
// deleted on 2026-11-30 (ledger D31, D50).
// KILN_D256_TRACE 1 (with KILN_D256_DET; the host's --det-trace, a diagnostic never dispatched):
// each writer stamps its turn, issue, completion and bump into p.det_trace (d256_stamp).
// KILN_BWD_CLUSTER 2 (the host's bwd_fa3_d256_pair, with KILN_D256_DQ 1): two adjacent key blocks
// as a cluster walking the same query blocks, each stage's Q and dO loaded half by each CTA and
// multicast to both (bwd_fa3_block.cuh), so the L2 serves a stage once per pair: with dQ's
// reduce, a block's L2 traffic goes from 64 KB of loads and 64 KB of adds to 32 and 64. Every
// release of a stage goes to both CTAs' empty barriers.
// Named barriers: 1 (dSᵀ stored, both), 3 (the deterministic adds), 4 (Pᵀ written: consumer 0
// arrives, 1 waits), 5 (Pᵀ read: consumer 1 arrives, 0 waits before it writes the next), 6 + c
// (consumer c's staged dQ rows fenced: warps 1-3 arrive, warp 0 waits), 8 + s (KILN_D256_DET 3:
// both consumers' tiles of ring stage s staged: they arrive, its writer waits).
#include "attention/bwd_fa3_block.cuh"
#include "attention/bwd_dq_stage.cuh"
#include "common/grid_dep.cuh"

#if !defined(KILN_D256_DQ)
#error "KILN_D256_DQ (dQ by atomics, 0, or staged in the ring and added by TMA reduce, 1) must be defined by the host"
#endif
constexpr bool DQ_STAGED = KILN_D256_DQ != 0;
static_assert(!D256_DET || DQ_STAGED, "KILN_D256_DET orders the staged dQ's reduces (KILN_D256_DQ 1)");
#if defined(KILN_D256_DET)
static_assert(KILN_D256_DET == 3,
              "KILN_D256_DET: 3 (writer warps); the consumers' own ordered adds (1, 2) and the halves ordered apart (4) were deleted on 2026-11-30");
#endif
// KILN_D256_DET 3 (D256_WRITER, bwd_fa3_block.cuh): named barrier 8 + s, ring stage s's two tiles
// staged (the consumers' 256 threads arrive, the writer's 32 wait). Stage s is rewritten only
// after the writer has released it, so a barrier sees one stage's arrivals at a time.
constexpr u32 BAR_HANDOFF = 8;
static_assert(!D256_WRITER || STAGES == 2, "a writer barrier per ring stage: 8 and 9");

// KILN_D256_DQ_PARTS 2 (the host's bwd_fa3_d256_w2_cols2 and _cols2t, with KILN_D256_DET 3): each
// (head, query block)'s order split by columns into P parts of 256 / P, each with its own counter
// (dq_sem holds P a tile, [tile][P]), so that an adder's part q waits for the previous adder's
// part q only, not its whole tile. With one order a tile (w2) each hop of the chain is the whole
// 64 KB reduce's completion (~2.37 us after the issue, of which ~1.70 its read out of the stage)
// plus the bump and its sight (~1.1 us): ~3.4 us against a non-deterministic step of ~3.1 (H200,
// 2026-12-01, ledger D104). A part's reduce is 64 / P KB, so a part's hop is its own read, the
// latency after it, the bump and its sight. Every element is still added in rank order (its
// part's), so runs are bitwise equal, and equal to w2's. d256_writer_parts says in what order.
#if defined(KILN_D256_DQ_PARTS)
constexpr int D256_DQ_PARTS = KILN_D256_DQ_PARTS;
#else
constexpr int D256_DQ_PARTS = 1;
#endif
// Four parts (bwd_fa3_d256_w2_cols4) lost 13-22 % to w2 in two calls (H200, 2026-12-01, ledger
// D110, D112): lane 0 took every part's turn and the previous part's bump before the stage was read
// out, so the stage was held ~3.8 us and the producer's ring stalled; deleted.
static_assert(D256_DQ_PARTS == 1 || D256_DQ_PARTS == 2, "KILN_D256_DQ_PARTS: 1 or 2 column parts (4 was deleted on 2026-12-01)");
static_assert(D256_DQ_PARTS == 1 || D256_WRITER, "KILN_D256_DQ_PARTS orders the writers' reduces (KILN_D256_DET 3)");
// The last part bumped before the next block's counter is read (KILN_D256_DQ_EAGER, the host's
// bwd_fa3_d256_w2_cols2e) was level with _cols2 in two calls (+0.3-1.1 %, then -0.9 to +0.4 %;
// H200, 2026-12-01/02, ledger D111, D121): deleted.

// KILN_D256_TRACE 1 (the host's --det-trace; a diagnostic, never dispatched): each writer's lane 0
// stamps its adds into p.det_trace, a record of TRACE_WORDS u32 per (block, role, iteration) at
// ((block · 2 + role) · group · m_blocks + it) (block: the grid's linear index; role 0, the
// layout keeping a slot for the deleted consumer adders' role 1): [0] the counter's index in
// dq_sem, [1] the turn awaited, [13] the SM, [14] bumps a block (1); the global timer (ns, low 32
// bits) at [2] the turn's wait begun, [3] the turn seen (the reduce issued next), [4] the
// completion's wait begun, [5] the completion seen, [6] the bump made, [7] the step's start (the
// tiles handed over), [15] the tiles read and the stage released; the SM clock (low 32 bits) at
// [8..12] for [2..6]. src/ops/attention_backward/bwd_fa3_d256_ordered.rs reads it, scripts/det_trace.py sums
// it up.
#if defined(KILN_D256_TRACE)
constexpr bool D256_TRACE = KILN_D256_TRACE != 0;
#else
constexpr bool D256_TRACE = false;
#endif
static_assert(!D256_TRACE || D256_DET, "KILN_D256_TRACE stamps the ordered adds (KILN_D256_DET 3)");
enum D256Event { EV_READY = 2, EV_TURN, EV_CW0, EV_CW1, EV_BUMP, EV_STEP, EV_READ = 15 };
constexpr int TRACE_WORDS = 16;
__device__ __forceinline__ u32* d256_trace_at(const AttnBwdArgs& p, int role, int it) {
  const i64 blk = blockIdx.x + (i64)gridDim.x * (blockIdx.y + (i64)gridDim.y * blockIdx.z);
  return p.det_trace + ((blk * 2 + role) * (i64)(p.group * p.m_blocks) + it) * TRACE_WORDS;
}
__device__ __forceinline__ void d256_stamp(const AttnBwdArgs& p, int role, int it, int ev) {
  if (!D256_TRACE || p.det_trace == nullptr) return;
  u64 g, c;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  u32* r = d256_trace_at(p, role, it);
  r[ev] = (u32)g;
  if (ev >= EV_READY && ev <= EV_BUMP) r[ev + 6] = (u32)c;
}
__device__ __forceinline__ void d256_trace_head(const AttnBwdArgs& p, int role, int it, const u32* sem, u32 turn, u32 bumps) {
  if (!D256_TRACE || p.det_trace == nullptr) return;
  u32 sm_id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_id));
  u32* r = d256_trace_at(p, role, it);
  r[0] = (u32)(sem - p.dq_sem), r[1] = turn, r[13] = sm_id, r[14] = bumps;
}

static_assert(D == 256 && BN == 64 && BM == 64 && SPLIT_N && QN == 128, "d256: 64 keys, 64 queries, dQ split by 128 columns");
// KILN_BWD_TAIL 1 (the host's bwd_fa3_d256_w2_cols2t, with KILN_D256_DET 3, non-causal): the
// grid's last partial wave split into parts (bwd_tail.cuh), each walking a contiguous share of its
// key block's rotated walk and adding each dQ tile at the key block's rank, so that the order of
// every tile's adds, and the sums, are the whole grid's; the split key block's dV and dK summed
// over its parts in part order by the last to finish (tail_fixup_ordered). With the order the
// waves move as one (each block waits at every tile for the block ahead of it), so the 4 blocks
// of B1 H16 S16384's 32nd wave (4,096 on 132 SMs) cost a whole wave of 256 steps, ~3 % of the
// call; the non-deterministic split (bwd_fa3_d256_tail, deleted on 2026-11-30, ledger D50) tied,
// its independent blocks ending 3 % apart anyway. A part waits only for adders of lower rank:
// earlier waves' whole blocks, or parts of the same wave, which all fit on the SMs at once (the
// host's r x parts <= SMs; det_schedule.rs runs it).
static_assert(!TAIL || (D256_WRITER && !D256_TRACE), "KILN_BWD_TAIL at d256: the ordered writers' split (KILN_D256_DET 3), not traced");

// KILN_D256_P16 1 (the knob KILN_BWD_D256_P16): Pᵀ handed over as consumer 0 packs it for dV
// (16-bit pairs: 8 KB a block, [KP][128 threads] of uint4), not in fp32 (16 KB), and consumer 1's
// dSᵀ = Pᵀ ∘ (dPᵀ − D) takes the rounded Pᵀ (as bwd_fa3_m128's P_ROUNDED: one more rounding of
// the input type, 2^-9 of the element in bf16). The H200 profile of bwd_fa3_d256_tma (B4 H16
// S4096, 2026-11-29: the L2 at 80.6 % of its throughput, the tensor pipe 45.4 %) put 7.7 % of the
// stall samples on the exchange's STS.128 and LDS.128; half the bytes, half the instructions.
#if defined(KILN_D256_P16)
constexpr bool P16 = KILN_D256_P16 != 0;
#else
constexpr bool P16 = false;
#endif
// KILN_D256_PERSIST 1 (the host's bwd_fa3_d256_persist; with KILN_D256_DQ 1, not deterministic, one
// CTA a cluster): a persistent grid, one CTA a SM, taking key blocks ("tiles") from a global
// counter (p.tail_sem[0]; [1] counts the CTAs done, and the last returns both to 0) as they free
// up, in the grid's order (or lpt_block's, causal with p.lpt_heads), instead of one CTA a key
// block. An H200 profile of bwd_fa3_d256_tma (B4 H16 S4096, 2026-11-30) fitted a block's fixed
// cost at ~12,400 cycles (~2.3 of its steps: the launch, K and V and the ring's first stage
// loaded with nothing to overlap, the last reduce waited for, dK and dV stored, the drain), 3.5 %
// of a non-causal walk of 64 steps and 6.7 % of a causal one, where cuDNN's backward is
// persistent. Here the producer loads the next tile's first stage while the consumers finish the
// current one, then its K and V once both consumers' last dQ products have read them (kv_empty,
// 8 arrivals: every consumer warp), so that only K and V's load is left between two tiles, partly
// under the dK and dV stores. The ring, the dSᵀ buffers and the Pᵀ hand-over count on across
// the CTA's tiles (d256_consume's PT); the tile's index reaches the consumers through shared
// memory with K and V (kv_full), -1 when there are no more. The kernel waits for the preprocess
// (griddepcontrol.wait: the host launches it as a programmatic dependent) only once the first K
// and V loads are issued.
#if defined(KILN_D256_PERSIST)
constexpr bool D256_PERSIST = KILN_D256_PERSIST != 0;
#else
constexpr bool D256_PERSIST = false;
#endif
static_assert(!D256_PERSIST || (DQ_STAGED && !D256_DET && BWD_CLUSTER == 1 && !BWD_WINDOW && !BWD_VARLEN),
              "KILN_D256_PERSIST: the staged dQ (KILN_D256_DQ 1), not deterministic, dense, one CTA a cluster");

// Pᵀ exchanged in fp32, [SR / 4][128 threads] of float4 (a warp's 32 float4 stores are 512
// contiguous bytes), or packed (P16).
constexpr u32 PX_BYTES = 64 * BM * (P16 ? 2 : 4);
constexpr u32 OFF_DS = 2 * KV_BYTES + STAGES * STAGE_BYTES;
constexpr u32 OFF_PX = OFF_DS + 2 * DS_BYTES;
constexpr u32 OFF_VEC = OFF_PX + PX_BYTES;  // per stage: LSE·log2e [BM], then D [BM]
constexpr u32 OFF_BARS = OFF_VEC + STAGES * 2 * BM * 4;
// (D256_PERSIST: kv_empty and the tile's index after the ring's barriers, 16 bytes more)
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES) + (D256_PERSIST ? 16 : 0), "KILN_SMEM too small");
constexpr u32 BAR_DS = 1, BAR_P_READY = 4, BAR_P_FREE = 5, BAR_TILE = 6;  // (3: add_dq_in_order's)
static_assert(Q_BYTES == 64 * QN * 4, "a consumer's staged dQ (64 x 128 fp32) fills one half of a ring stage");

// A shared address in 16-byte units, as the descriptors' start field takes it (bwd_wgmma.cuh's
// desc_at: one add a wgmma onto it). In a cluster a CTA's shared addresses carry its rank from bit
// 24 (the shared::cluster window), which the 14-bit field cannot hold: unmasked, rank 1's rank bit
// landed in the leading byte offset, and the pair's first device run (7cc6536) gave wrong
// gradients. The CTA's own window is the low 18 bits.
__device__ __forceinline__ u32 d256_at16(u32 addr) { return (BWD_CLUSTER > 1 ? addr & 0x3FFFF : addr) >> 4; }

// D256_PERSIST: K and V read by every consumer warp (8 arrivals), and the tile index shared with them.
__device__ __forceinline__ u32 d256_kv_empty(const BwdSmem& sm) { return sm.kv_full + 8 * (1 + 2 * STAGES); }
__device__ __forceinline__ u32 d256_tile_at(const BwdSmem& sm) { return d256_kv_empty(sm) + 8; }

// Stage s released by `count` arrivals of this thread: on this CTA's empty barrier, or on both
// CTAs' when paired (BWD_CLUSTER 2: both multicast into it).
__device__ __forceinline__ void d256_release(const BwdSmem& sm, int s, u32 count) {
  if (BWD_CLUSTER == 1) {
    if (count == 1) {
      mbar_arrive(sm.qring.empty(s));
    } else {
      mbar_arrive_count(sm.qring.empty(s), count);
    }
  } else {
#pragma unroll
    for (int r = 0; r < BWD_CLUSTER; ++r) mbar_arrive_cluster_count(mbar_peer(sm.qring.empty(s), r), count);
  }
}


// What both consumers do once dSᵀ of block it is stored: dQ's 128 columns of consumer c over the
// 64 keys, waited for and added (sem: the deterministic mode's counter, else null): by atomics,
// or (staged) into the tile at `tile` and, by warp 0's first thread (D256_WRITER: by the writer),
// through the map `tdq`.
__device__ __forceinline__ void d256_dq(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const BwdThread& th, int it, int h,
                                        int m0, u32* sem, bool staged, const TmaMap* tdq, u32 tile) {
  float dq[QN / 2];
  wgmma_fence();
  dq_from_ds<QN, QKS, BM, BN, true>(dq, d256_at16(sm.sds) + (it & 1) * (DS_BYTES / 16), d256_at16(sm.sk), 0, th.c * (QN / 64));
  wgmma_commit();
  wgmma_wait<0>();
  fence_all(dq);
  if (!staged) {
    add_dq_atomics(dq, p, k, th, h, m0, sem);
    return;
  }
  stage_dq_rows<1, 1>(reinterpret_cast<const float (&)[1][QN / 2]>(dq), th.krow, th.t, tile);
  fence_proxy_async_shared();
  if (D256_WRITER) {
    named_barrier_arrive(BAR_HANDOFF + sm.qring.slot(it), 288);  // (the writer adds both tiles)
    return;
  }
  // Warps 1-3 signal and go on; warp 0 waits for them, and its first thread adds the tile.
  if (th.w != 0) {
    named_barrier_arrive(BAR_TILE + th.c, 128);
  } else {
    named_barrier_sync(BAR_TILE + th.c, 128);
    if (th.lane == 0) reduce_dq_tile<1>(tdq, tile, p.sq, k.b, h, m0, th.c * QN, 1);
  }
}

// Consumer C's walk, written once for both: its gradient g (C 0: dV, 1: dK) zeroed, K and V
// waited for; per query block its first product acc (C 0: Sᵀ = K·Qᵀ, 1: dPᵀ = V·dOᵀ), its middle
// (below), the stage released and its half of dQ; then g stored in K's layout (dK times scale).
//   C 0: Pᵀ masked on edge blocks, written to `px` once consumer 1 has read the previous block's,
//        dV += Pᵀ·dO; then it waits for dSᵀ.
//   C 1: Pᵀ read from `px` once written, dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ·Q, dSᵀ stored; then
//        both meet.
// Staged (DQ_STAGED, not deterministic): the stage is released by warp 0's first thread once the
// reduce has read the tile, after the next block's first product is issued (and after the walk);
// D256_WRITER (deterministic, or the rotated diagnostic): by the writer, which adds the tiles (the
// consumers hand them over and go on).
// PT (D256_PERSIST, d256_consume_tiles): one tile of the CTA's; g0 its first ring iteration (the
// ring, the dSᵀ buffers and the Pᵀ hand-over count on across tiles); K and V waited for by the
// caller; the stage of the tile's last block released at the next tile's first product and the
// last reduce waited for at the CTA's end; kv_empty arrived on once K and V are read.
template <int C, bool PT = false>
__device__ __forceinline__ void d256_consume(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const BwdThread& th, float4* px,
                                             const TmaMap* tdq, int g0 = 0) {
  float g[KR];
#pragma unroll
  for (int i = 0; i < KR; ++i) g[i] = 0.0f;
  const int tid = threadIdx.x % 128;
  const u32 ring16 = d256_at16(sm.ring);
  const u32 x16 = d256_at16(C == 0 ? sm.sk : sm.sv), y_off16 = C == 0 ? 0 : Q_BYTES / 16;  // acc = X·Yᵀ, Y = Q or dO
  // (D256_DET: the deterministic mode staged too, the writer's reduces in det_rank's order)
  const bool staged = DQ_STAGED && (D256_DET || p.dq_sem == nullptr), adder = staged && !D256_WRITER && th.w == 0 && th.lane == 0;
  if (!PT) mbar_wait(sm.kv_full, 0);
  float acc[SR];
  for (int it = 0; it < k.iters; ++it) {
    int h, mb;
    walk_at(k, p, it, h, mb);  // (TAIL: from the part's first iteration)
    if (D256_DET && !p.causal && mb >= k.per_head) mb -= k.per_head;  // a rotated walk wraps (det_walk)
    const int m0 = mb * BM;
    const int gi = PT ? g0 + it : it;  // the ring's iteration
    sm.qring.wait_full(gi);
    // the stage from the iteration, not from the wait, so that the descriptors stay uniform;
    // operand addresses in 16-byte units (every descriptor an add: bwd_wgmma.cuh's desc_at)
    const int s = sm.qring.slot(gi);
    const u32 sq16 = ring16 + s * (STAGE_BYTES / 16), sdo16 = sq16 + Q_BYTES / 16;
    const float* sl = sm.vec + s * 2 * BM;
    float2 v[BM / 8];  // this thread's queries' LSE·log2e (C 0) or D (C 1), read while acc runs
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) v[j] = *reinterpret_cast<const float2*>(sl + C * BM + 8 * j + 2 * th.t);
    wgmma_fence();
    keys_by_queries<D, BM, BN, true>(acc, x16, sq16 + y_off16);
    wgmma_commit();
    if (adder && gi > 0) {
      // the previous block's tile read: its stage (both consumers' adders, 4 arrivals each) free
      tma_store_wait_read<0>();
      d256_release(sm, sm.qring.slot(gi - 1), 4);
    }
    wgmma_wait<0>();
    fence_all(acc);
    if constexpr (C == 0) {
      // masked on edge blocks only (bwd_grads' test: keys past Skv, queries past Sq, causal pairs)
      if (k.n0 + BN > p.skv || m0 + BM > p.sq || (p.causal && k.n0 + BN - 1 > m0 + k.off)) {
        p_from_s<true, true>(acc, v, sl, p, k, th.krow, th.t, m0);
      } else {
        p_from_s<true, false>(acc, v, sl, p, k, th.krow, th.t, m0);
      }
      u32 pa[KP][4];
      if (P16) pack_a<KP>(pa, acc);
      if (gi > 0) named_barrier_sync(BAR_P_FREE, 256);  // consumer 1 has read the previous block's
      if (P16) {
#pragma unroll
        for (int kk = 0; kk < KP; ++kk) reinterpret_cast<uint4*>(px)[kk * 128 + tid] = make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
      } else {
#pragma unroll
        for (int i = 0; i < SR / 4; ++i) px[i * 128 + tid] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
      }
      named_barrier_arrive(BAR_P_READY, 256);
      if (!P16) pack_a<KP>(pa, acc);
      wgmma_fence();
      keys_by_dims<D, BM, true>(g, pa, sdo16);
      wgmma_commit();
    } else {
      named_barrier_sync(BAR_P_READY, 256);
      if (P16) {
#pragma unroll
        for (int kk = 0; kk < KP; ++kk) {
          const uint4 q = reinterpret_cast<const uint4*>(px)[kk * 128 + tid];
          const u32 w[4] = {q.x, q.y, q.z, q.w};  // pa[kk][e]: registers 8kk + 2e, + 1
#pragma unroll
          for (int e = 0; e < 4; ++e)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const int n = 8 * kk + 2 * e + hf;  // query 8(n / 4) + 2t + hf
              acc[n] = half_to_float<in_t>(w[e], hf) * (acc[n] - (hf ? v[n / 4].y : v[n / 4].x));
            }
        }
      } else {
#pragma unroll
        for (int i = 0; i < SR / 4; ++i) {
          const float4 pe = px[i * 128 + tid];  // register 4i + e: query 8i + 2t + (e & 1)
          acc[4 * i] = pe.x * (acc[4 * i] - v[i].x);
          acc[4 * i + 1] = pe.y * (acc[4 * i + 1] - v[i].y);
          acc[4 * i + 2] = pe.z * (acc[4 * i + 2] - v[i].x);
          acc[4 * i + 3] = pe.w * (acc[4 * i + 3] - v[i].y);
        }
      }
      // (PT: after every block; consumer 0 takes the CTA's last arrival in d256_consume_tiles)
      if (PT || it + 1 < k.iters) named_barrier_arrive(BAR_P_FREE, 256);
      u32 dsa[KP][4];
      pack_a<KP>(dsa, acc);
      wgmma_fence();
      keys_by_dims<D, BM, true>(g, dsa, sq16);
      wgmma_commit();
      // dSᵀ rows (keys krow, krow + 8) into buffer it % 2: its last readers, block it - 2's dQ
      // products, completed before both consumers met at block it - 1's barrier.
      store_ds_t<BM, BN>(sm.sds + (gi & 1) * DS_BYTES, dsa, th.krow, th.t);
      fence_proxy_async_shared();
    }
    // dV (C 0) or dK (C 1) has completed: Q and dO are read by this warpgroup, and Pᵀ's or dSᵀ's
    // registers are free before dQ's. Consumer 1 meets consumer 0 first (its dSᵀ is stored).
    // (the consumers meet here from two instructions, one a template instance: the non-aligned
    // barrier, named_barrier_sync_any)
    if (C == 1) named_barrier_sync_any(BAR_DS, 256);
    wgmma_wait<0>();
    int it_late = gi;  // (bwd_block's opaque copy: the stage recomputed, not kept live)
    asm volatile("" : "+r"(it_late));
    if (!staged && th.lane == 0) d256_release(sm, sm.qring.slot(it_late), 1);
    if (C == 0) named_barrier_sync_any(BAR_DS, 256);
    u32* sem = p.dq_sem == nullptr ? nullptr : p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb;
    // consumer 0's tile in the stage's dO half, consumer 1's in its Q half
    d256_dq(p, k, sm, th, gi, h, m0, sem, staged, tdq, sm.ring + sm.qring.slot(it_late) * STAGE_BYTES + (C == 0 ? Q_BYTES : 0));
  }
  // PT: this warp's products that read K and V have completed (the last dQ's wait)
  if (PT && th.lane == 0) mbar_arrive(d256_kv_empty(sm));
  if (adder && !PT) {
    tma_store_wait<0>();  // the last tile added before the block's memory goes
    if (BWD_CLUSTER > 1 && k.iters > 0) d256_release(sm, sm.qring.slot(k.iters - 1), 4);  // (the pair's producers wait for it)
  }
  fence_all(g);
  if constexpr (TAIL_WALK) {
    // a part of a split key block: its partial out, and the last part to finish stores the sum
    int slot, part;
    if (tail_part(p, slot, part) && !tail_fixup_ordered<KR>(g, p, slot, part, 128 * C + threadIdx.x % 128)) return;
  }
  store_key_rows<D>(static_cast<in_t*>(C == 0 ? p.dv : p.dk) + k.b * p.kv_sb + k.hk * p.kv_sh, g, C == 0 ? 1.0f : p.scale,
                    k.n0 + th.krow, p.skv, p.kv_ss, th.t);
}

// D256_DQ_PARTS: the boxes of column part q (256 / P columns: consumer c = q / (P / 2)'s tile,
// staged in the stage's dO half for c 0 and its Q half for c 1, as d256_writer's two reduces)
// added by TMA reduce from ring stage `st`, as one bulk group.
__device__ __forceinline__ void d256_reduce_part(const TmaMap* tdq, u32 st, int q, int sq, int b, int h, int m0) {
  constexpr int COLS = D / D256_DQ_PARTS, BOXES = COLS / 32;
  const int c = q * COLS / QN, g0 = (q * COLS % QN) / 32;
  const u32 tile = st + (c == 0 ? Q_BYTES : 0);
#pragma unroll
  for (int g = g0; g < g0 + BOXES; ++g)
    if (m0 < sq) tma_reduce_add_5d(tdq, tile + g * (MH * 64 * 128), 0, c * (QN / 32) + g, m0, h, b);
  tma_store_commit();
}

// D256_DQ_PARTS: d256_writer with the tile's order in P column parts, each on its own counter
// (sem + q). Lane 0 takes the parts in one order, the same for every adder (0 .. P - 1): part
// q's turn waited for and its reduce issued, then part q - 1's completion waited for and its
// counter bumped, so that the next adder, which takes the parts in the same order, can issue part
// q - 1 while this one's later parts are still being read; the last part bumped once the stage is
// released. The same order for every adder makes the chains a pipeline: part q of the previous
// adder was issued and bumped just before the part this adder waits for next. (An order rotated by
// the rank, the first form named in the doc, would make each adder wait first for the part that
// the previous one issued second: a bump later a hop.) A writer waiting for part q's turn holds
// only part q - 1's bump of the same tile, which only later adders of that tile wait for, so
// waits still follow steps (det_schedule.rs). Stamps (KILN_D256_TRACE): part 0's chain only (role
// 0, its counter in word 0): at four parts (deleted, D112) the last part's as well spilled the
// writer's 24 registers.
__device__ __forceinline__ void d256_writer_parts(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const TmaMap* tdq, int j) {
  constexpr int P = D256_DQ_PARTS;
  const int writers = p.det_writers == 2 ? 2 : 1;
  if (j >= writers) return;
  const bool lead = threadIdx.x % 32 == 0, det = p.dq_sem != nullptr;
  const DetGroup g = det ? det_group(k, p) : DetGroup{0, 1, 0};
  // lane 0: iteration it's (head, query block), part 0's counter and the turn (every part's)
  auto slot = [&](int it, int& h, int& mb, u32& turn) -> u32* {
    det_walk_at(k, p, it, h, mb);
    turn = det ? (u32)det_rank(k, p, g, mb) : 0;
    return det ? p.dq_sem + (((i64)k.b * p.heads_q + h) * p.m_blocks + mb) * P : nullptr;
  };
  u32 at = 0;  // part 0's counter as last read (0: not yet)
  for (int it = j; it < k.iters; it += writers) {
    const int s = sm.qring.slot(it);
    named_barrier_sync(BAR_HANDOFF + s, 288);
    if (lead) {
      int h, mb;
      u32 turn;
      u32* sem = slot(it, h, mb, turn);
      d256_trace_head(p, 0, it, sem, turn, 1);
      d256_stamp(p, 0, it, EV_STEP);
      const u32 st = sm.ring + s * STAGE_BYTES;
#pragma unroll
      for (int q = 0; q < P; ++q) {
        if (q == 0) d256_stamp(p, 0, it, EV_READY);
        if (det) {
          u32 a = q == 0 ? at : 0;
          while (a < turn) a = ld_acquire(sem + q);
          fence_proxy_async_global();  // (the counter's acquire before the bulk adds)
        }
        if (q == 0) d256_stamp(p, 0, it, EV_TURN);
        d256_reduce_part(tdq, st, q, p.sq, k.b, h, mb * BM);
        if (det && q > 0) {
          // part q - 1 complete (every bulk group but part q's) and bumped
          if (q == 1) d256_stamp(p, 0, it, EV_CW0);
          tma_store_wait<1>();
          if (q == 1) d256_stamp(p, 0, it, EV_CW1);
          fence_proxy_async_global();
          red_release_add(sem + (q - 1), 1);
          if (q == 1) d256_stamp(p, 0, it, EV_BUMP);
        }
      }
      tma_store_wait_read<0>();
      d256_release(sm, s, 8);  // (the consumers' 8 warps' arrivals, as the staged adders' 4 + 4)
      d256_stamp(p, 0, it, EV_READ);
      at = 0;
      if (det) {
        // the next block's part 0 counter read first (as d256_writer), then the last part's
        // completion and bump
        int h2, mb2;
        u32 turn2;
        if (it + writers < k.iters) at = ld_acquire(slot(it + writers, h2, mb2, turn2));
        tma_store_wait<0>();
        fence_proxy_async_global();
        red_release_add(sem + (P - 1), 1);
      }
    }
    __syncwarp();
  }
  if (lead) tma_store_wait<0>();  // (the last tiles read before the block's memory goes)
}

// D256_WRITER: writer j of p.det_writers (warp 1 + j of warpgroup 0; with 2, warps 1 and 2 take
// the iterations of parity j, one ring stage each; else warp 1 takes them all), its lane 0 adding
// both consumers' tiles of a block (consumer 0's columns staged in the stage's dO half, consumer
// 1's in its Q half) in det_rank's order: the tiles handed over (named barrier 8 + s), the block's
// turn waited for, both reduces issued, the stage released once they have read it, then the adds'
// completion waited for and the counter bumped once (a block's turn is its rank). The consumers
// wait for neither the turn nor the completion, where the first form's adders waited for the
// completion at the next block's first product and for the turn at the add, each a stall of the
// whole warpgroup (H200, 2026-11-30: 0.56-0.69x the non-deterministic run). The bump comes before
// the next turn is waited for (a waiting writer holds no bump: det_schedule.rs), and the next
// block's counter is read before the completion is waited for, so that the read's round trip
// overlaps it (as bwd_dq_tile.cuh's eager writer).
__device__ __forceinline__ void d256_writer(const AttnBwdArgs& p, const BwdWalk& k, const BwdSmem& sm, const TmaMap* tdq, int j) {
  if constexpr (D256_DQ_PARTS > 1) {
    d256_writer_parts(p, k, sm, tdq, j);
    return;
  }
  const int writers = p.det_writers == 2 ? 2 : 1;
  if (!D256_WRITER || j >= writers) return;
  const bool lead = threadIdx.x % 32 == 0, det = p.dq_sem != nullptr;
  const DetGroup g = det ? det_group(k, p) : DetGroup{0, 1, 0};
  // lane 0: iteration it's (head, query block), counter and turn
  auto slot = [&](int it, int& h, int& mb, u32& turn) -> u32* {
    det_walk_at(k, p, it, h, mb);
    turn = det ? (u32)det_rank(k, p, g, mb) : 0;
    return det ? p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb : nullptr;
  };
  u32 at = 0;  // the counter as last read (0: not yet)
  for (int it = j; it < k.iters; it += writers) {
    const int s = sm.qring.slot(it);
    named_barrier_sync(BAR_HANDOFF + s, 288);
    if (lead) {
      int h, mb;
      u32 turn;
      u32* sem = slot(it, h, mb, turn);
      d256_trace_head(p, 0, it, sem, turn, 1);
      d256_stamp(p, 0, it, EV_STEP);
      d256_stamp(p, 0, it, EV_READY);
      if (det) {
        while (at < turn) at = ld_acquire(sem);
        fence_proxy_async_global();  // (the counter's acquire before the bulk adds)
      }
      d256_stamp(p, 0, it, EV_TURN);
      const u32 st = sm.ring + s * STAGE_BYTES;
      reduce_dq_tile<1>(tdq, st + Q_BYTES, p.sq, k.b, h, mb * BM, 0, 1);
      reduce_dq_tile<1>(tdq, st, p.sq, k.b, h, mb * BM, QN, 1);
      tma_store_wait_read<0>();
      d256_release(sm, s, 8);  // (the consumers' 8 warps' arrivals, as the staged adders' 4 + 4)
      d256_stamp(p, 0, it, EV_READ);
      at = 0;
      if (det) {
        // the next block's counter read first (an acquire: no later access moves above it; this
        // block's bump is later), then the completion and the bump
        int h2, mb2;
        u32 turn2;
        if (it + writers < k.iters) at = ld_acquire(slot(it + writers, h2, mb2, turn2));
        d256_stamp(p, 0, it, EV_CW0);
        tma_store_wait<0>();
        d256_stamp(p, 0, it, EV_CW1);
        fence_proxy_async_global();
        red_release_add(sem, 1);
        d256_stamp(p, 0, it, EV_BUMP);
      }
    }
    __syncwarp();
  }
  if (lead) tma_store_wait<0>();  // (the last tiles read before the block's memory goes)
}

// D256_PERSIST: the tiles (key blocks of every key/value head and batch) and tile t's walk: in
// the grid's order (key blocks fastest), or lpt_block's over the linear index (p.lpt_heads > 0,
// causal: chunks of lpt_heads pairs, key block slowest within a chunk).
__device__ __forceinline__ int d256_tiles(const AttnBwdArgs& p) { return (p.skv + BN - 1) / BN * (p.heads_q / p.group) * p.batch; }
__device__ __forceinline__ BwdWalk d256_tile_walk(const AttnBwdArgs& p, int t) {
  const int nx = (p.skv + BN - 1) / BN, hkv = p.heads_q / p.group;
  int nb, pair;
  if (p.lpt_heads > 0) {
    const int g = p.lpt_heads, chunk = t / (g * nx), r = t - chunk * g * nx;
    const int gc = min(g, hkv * p.batch - chunk * g);
    pair = chunk * g + r % gc, nb = r / gc;
  } else {
    nb = t % nx, pair = t / nx;
  }
  BwdWalk k;
  k.nb = nb, k.hk = pair % hkv, k.b = pair / hkv, k.it0 = 0;
  k.n0 = nb * BN;
  k.off = p.skv - p.sq;
  k.m_first = p.causal ? max(0, k.n0 - k.off) / BM : 0;
  k.per_head = (p.sq + BM - 1) / BM - k.m_first;
  k.iters = p.group * k.per_head;
  return k;
}

// D256_PERSIST's register split: the producer's loop over tiles spilled 12 bytes at 24 registers.
constexpr int PERSIST_PRODUCER_REGS = 40, PERSIST_CONSUMER_REGS = 232;
static_assert(128 * PERSIST_PRODUCER_REGS + 256 * PERSIST_CONSUMER_REGS <= THREADS * (65536 / THREADS / 8 * 8), "setmaxnreg's split");

// D256_PERSIST: the producer warp's tiles. Tile j: its first stage, then (j > 0) K and V once
// the consumers have read the previous tile's (kv_empty), the tile's index written before the
// arrival on kv_full, then its other stages; the next tile fetched once this one's stages are
// issued (so that the counter hands tiles out as late as the ring allows). When the counter runs
// past the tiles, -1 and a plain arrival on kv_full. Stages count on across tiles (g0).
__device__ __forceinline__ void d256_produce_tiles(const AttnBwdArgs& p, const BwdSmem& sm, const TmaMap* tq, const TmaMap* tk,
                                                   const TmaMap* tv, const TmaMap* tdo) {
  const int lane = threadIdx.x;
  const int tiles = d256_tiles(p);
  auto fetch = [&] {
    int t = 0;
    if (lane == 0) t = (int)atomicAdd(p.tail_sem, 1u);
    return __shfl_sync(0xffffffffu, t, 0);
  };
  int tile = fetch(), g0 = 0;
  for (int j = 0;; ++j) {
    const bool done = tile >= tiles;
    const BwdWalk k = d256_tile_walk(p, done ? 0 : tile);
    const int iters = done ? 0 : k.iters;
    const int kv_at = j == 0 ? 0 : min(1, iters);
    for (int it = 0; it <= iters; ++it) {
      if (it == kv_at) {
        if (j > 0) mbar_wait(d256_kv_empty(sm), (j - 1) & 1);
        if (lane == 0) {
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(d256_tile_at(sm)), "r"(done ? -1 : tile) : "memory");
          if (done) {
            mbar_arrive(sm.kv_full);
          } else {
            load_kv<DH, BN>(sm.sk, sm.sv, tk, tv, sm.kv_full, k.n0, k.hk, k.b);
          }
        }
        if (j == 0) grid_dependency_wait();  // the preprocess's D (and zeroed dQ) before the first stage
      }
      if (it == iters) break;
      int h, mb;
      walk_at(k, p, it, h, mb);
      const int m0 = mb * BM;
      const int s = sm.qring.acquire(g0 + it);
      if (lane == 0) {
        mbar_expect_tx(sm.qring.full(s), STAGE_BYTES);
        const u32 st = sm.ring + s * STAGE_BYTES;
#pragma unroll
        for (int d = 0; d < DH; ++d) {
          tma_load_4d(st + d * HALF_Q, tq, sm.qring.full(s), 64 * d, m0, h, k.b);
          tma_load_4d(st + Q_BYTES + d * HALF_Q, tdo, sm.qring.full(s), 64 * d, m0, h, k.b);
        }
      }
      stage_lse_d<BM>(sm.vec + s * 2 * BM, p, k.b, h, m0, lane);
      mbar_arrive(sm.qring.full(s));
    }
    if (done) break;
    g0 += iters;
    tile = fetch();
  }
  // The last CTA to finish fetching returns the counters to 0 for the next launch: every other
  // CTA has made its final fetch before counting itself done (fa3_wgmma.cu's KILN_DYNAMIC).
  if (lane == 0) {
    __threadfence();
    if (atomicAdd(p.tail_sem + 1, 1u) == gridDim.x - 1) {
      p.tail_sem[0] = 0;
      p.tail_sem[1] = 0;
      __threadfence();
    }
  }
}

// D256_PERSIST: consumer C's tiles, each once its K and V (and index) have landed, until -1;
// then consumer 0 takes consumer 1's arrival after the last Pᵀ it read, and the adder waits for
// its last reduce before the CTA's memory goes.
template <int C>
__device__ __forceinline__ void d256_consume_tiles(const AttnBwdArgs& p, const BwdSmem& sm, const BwdThread& th, float4* px,
                                                   const TmaMap* tdq) {
  grid_dependency_wait();  // (the zeroed dQ accumulator before any reduce; the stages wait for D)
  int g0 = 0;
  for (int j = 0;; ++j) {
    mbar_wait(sm.kv_full, j & 1);
    int tile;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(tile) : "r"(d256_tile_at(sm)) : "memory");
    if (tile < 0) break;
    const BwdWalk k = d256_tile_walk(p, tile);
    d256_consume<C, true>(p, k, sm, th, px, tdq, g0);
    g0 += k.iters;
  }
  if (C == 0 && g0 > 0) named_barrier_sync(BAR_P_FREE, 256);
  if (th.w == 0 && th.lane == 0) tma_store_wait<0>();
}

// The staged variant takes the accumulator's map (tdq) after dO's, as bwd_fa3_tma_dq does.
#if KILN_D256_DQ
#define D256_DQ_MAP , const __grid_constant__ TmaMap tdq_map
#define D256_DQ_PTR &tdq_map
#else
#define D256_DQ_MAP
#define D256_DQ_PTR nullptr
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_fa3_d256(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                      const __grid_constant__ TmaMap tdo D256_DQ_MAP, AttnBwdArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const TmaMap* tdq = D256_DQ_PTR;
  auto consume = [&](int c, const BwdWalk& k, const BwdSmem& sm) {
    BwdThread th;
    th.c = c, th.w = (threadIdx.x / 32) % 4, th.lane = threadIdx.x % 32, th.t = th.lane & 3;
    th.krow = 16 * th.w + (th.lane >> 2);
    float4* px = reinterpret_cast<float4*>(sm.vec) - PX_BYTES / 16;  // the exchange buffer, just below the vectors
    if (c == 0) {
      d256_consume<0>(p, k, sm, th, px, tdq);
    } else {
      d256_consume<1>(p, k, sm, th, px, tdq);
    }
  };
  if constexpr (D256_PERSIST) {
    if (threadIdx.x == 0) mbar_init(d256_kv_empty(bwd_smem(smem_raw, OFF_VEC, OFF_BARS)), 8);  // (bwd_start fences the inits)
    const BwdSmem sm = bwd_start(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, tdq);
    ws_roles<PERSIST_PRODUCER_REGS, PERSIST_CONSUMER_REGS, 32>(
        warpgroup_index(), [&] { d256_produce_tiles(p, sm, &tq, &tk, &tv, &tdo); },
        [&](int c) {
          BwdThread th;
          th.c = c, th.w = (threadIdx.x / 32) % 4, th.lane = threadIdx.x % 32, th.t = th.lane & 3;
          th.krow = 16 * th.w + (th.lane >> 2);
          float4* px = reinterpret_cast<float4*>(sm.vec) - PX_BYTES / 16;
          if (c == 0) {
            d256_consume_tiles<0>(p, sm, th, px, tdq);
          } else {
            d256_consume_tiles<1>(p, sm, th, px, tdq);
          }
        });
  } else if constexpr (D256_WRITER) {
    bwd_kernel<true>(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, tdq, p, consume,
                     [&](const BwdWalk& k, const BwdSmem& sm, int j) { d256_writer(p, k, sm, tdq, j); });
  } else {
    bwd_kernel<true>(smem_raw, OFF_VEC, OFF_BARS, &tq, &tk, &tv, &tdo, tdq, p, consume);
  }
}
