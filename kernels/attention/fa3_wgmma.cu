// Attention forward, FlashAttention-3 style (sm_90a; head dim 64, 128 or 256): warp
// specialisation with WGMMA and TMA. Warpgroup 0 is the producer (setmaxnreg down; one thread
// TMA-loads each work item's Q tile and the K and V tiles of every key block into a KILN_STAGES
// ring, each guarded by full/empty mbarriers); KILN_CWG consumer warpgroups (setmaxnreg up) each
// own 64 of the block's 64·KILN_CWG query rows and walk key tiles of KILN_BN keys:
//   S = Q·Kᵀ     wgmma m64nBNk16, both operands K-major from 128B-swizzled shared tiles
//   softmax      online, fp32, exp2 with scale·log2e folded into one FMA, on the accumulators
//   O += P·V     wgmma m64nDk16 with P as the register A operand (never stored), V read
//                MN-major (transposed descriptor) from its shared tile
// KILN_OVERLAP = 1: S(j+1) is issued together with P(j)·V(j) and its softmax runs while that
// product is on the tensor cores (FA3's intra-warpgroup overlap). KILN_PINGPONG = 1: the
// consumers take turns issuing their wgmmas (named barriers), so one warpgroup's softmax runs
// while the others' products occupy the tensor cores (FA3's inter-warpgroup ping-pong; measured
// slower here). K and V complete and are released on separate barriers: S(j) starts while V(j)
// is still landing, and K(j)'s slot refills while P(j)·V(j) still reads V(j). The grid walks
// work items (query block, head, batch): one block each, or persistently, fewer blocks taking
// every gridDim.x-th item (or, KILN_DYNAMIC, the next item of a global counter) while the
// producer loads the next item under the current one's tail. KILN_LAZY > 0: a row's running max
// moves only by more than KILN_LAZY (log2), so most key tiles skip the rescale of O.
// Q/K/V are addressed by rank-4 tensor maps [batch, heads, seq, dim] (boxes of 64 dims) whose
// strides give BSHD or BHSD and whose bounds zero-fill the sequence tails; causal items skip key
// tiles above the diagonal (bottom-right aligned) and run heaviest first, their blocks aligned to
// the last query row. Writes O (Q's layout)
// and LSE.
// KILN_VARLEN = 1: a packed batch (Q [total_q, H, D], K/V [total_k, Hkv, D], cumulative offsets
// p.cu_q and p.cu_k): item (query block, head, sequence), the blocks of each sequence aligned to its
// last row; the producer skips the blocks above its first row (varlen_rowless). The maps are
// [1, heads, total, dim]: a K/V tile may
// reach into the next sequence's rows, which the softmax masks as keys past this sequence's end
// (their P is 0), and Q rows past the end are computed but never stored: a consumer whose 64 rows
// are not all inside the sequence stores through masked 16-byte stores, since a TMA store would
// write the next sequence's rows (the map's bound is the packed end, not the sequence's). The
// offsets are checked here, since they may never have been on the host (`varlen_rows`): a bad
// sequence's rows come out NaN and p.errors records it.
// KILN_WINDOW = 1: the sliding window (p.win_left, p.win_right, causal folded into win_right by
// the host, unbounded sides as 2^30): an item walks only the key tiles some row's window reaches,
// and the tiles that cut a window's edge are masked.
#include "attention/attn_args.cuh"
#include "attention/tma_4d.cuh"
#include "common/wgmma_rs.cuh"
#include "common/wgmma_ss.cuh"
#include "common/ring.cuh"
#include "common/stmatrix.cuh"
#include "common/quad_transpose.cuh"
#include "common/swizzle.cuh"

#if !defined(KILN_D) || !defined(KILN_BN) || !defined(KILN_CWG) || !defined(KILN_STAGES) || !defined(KILN_OVERLAP) || \
    !defined(KILN_PINGPONG) || !defined(KILN_EMU) || !defined(KILN_LAZY) || !defined(KILN_DYNAMIC) || !defined(KILN_QBUF) || \
    !defined(KILN_SMEM) || !defined(KILN_IN) || !defined(KILN_VARLEN) || !defined(KILN_WINDOW)
#error "KILN_D, KILN_BN, KILN_CWG, KILN_STAGES, KILN_OVERLAP, KILN_PINGPONG, KILN_EMU, KILN_LAZY, KILN_DYNAMIC, KILN_QBUF, KILN_SMEM, KILN_IN, KILN_VARLEN and KILN_WINDOW must be defined by the host"
#endif
// The defines, all from the host (src/ops/attention/fa3_wgmma.rs):
//   KILN_D       head dim, 64, 128 or 256;  KILN_BN keys per tile;  KILN_CWG consumer warpgroups;
//   KILN_STAGES  K/V ring depth;  KILN_OVERLAP, KILN_PINGPONG  the schedules above (0 or 1);
//   KILN_EMU     0, or P: every P-th 8-column group of scores is exponentiated on the FMA pipe
//                (polynomial) instead of the MUFU unit, which at head dim 64 is as busy as the
//                tensor cores;
//   KILN_LAZY    0 (rescale O on every new row max), or T: keep a row's max until a tile's exceeds
//                it by more than T in log2 units (online_softmax.cuh);
//   KILN_DYNAMIC 1: a persistent grid whose blocks take work items from a global counter (p.work)
//                as they free up, in the items' order (longest causal rows first), instead of
//                every gridDim.x-th item: the uneven causal items balance themselves and each
//                block still loads the next item under the current one's tail;
//   KILN_QBUF    Q buffers, 1 or 2. With 2 the producer loads the next item's Q while the
//                consumers still read the current one's, and each consumer stores its O through
//                its 64 rows of the item's Q buffer (stmatrix, then a TMA store) instead of
//                4-byte stores that touch eight rows each.
//   KILN_VARLEN, KILN_WINDOW  packed sequences, the sliding window (0 or 1; above).

constexpr int D = KILN_D, BN = KILN_BN, CWG = KILN_CWG, BM = 64 * CWG, STAGES = KILN_STAGES, QBUF = KILN_QBUF;
constexpr int THREADS = 128 * (CWG + 1);
constexpr int SR = BN / 2, OR = D / 2;  // accumulator registers per thread: S and O
constexpr int NT = BN / 8, OT = D / 8, KP = BN / 16, DH = D / 64;
constexpr u32 HALF_Q = BM * 128, HALF_KV = BN * 128;  // one 64-dim box: rows of 128 bytes
constexpr u32 Q_BYTES = DH * HALF_Q, KV_BYTES = DH * HALF_KV, STAGE_BYTES = 2 * KV_BYTES;
// The register split: three consumers share the file four ways. The block is launched with
// THREADS x (65536 / THREADS rounded down to 8) registers (384 x 168 = 64512 for two consumers,
// 512 x 128 for three), and setmaxnreg only redistributes those. d256 once gave its consumers
// 240 (O alone takes 128) and the producer 24, which the work counter spilled; its consumers fit
// in 232 (ptxas, no spills, with or without overlap), so all two-consumer kernels split 40 / 232.
constexpr int PRODUCER_REGS = CWG == 3 ? 32 : 40;
constexpr int CONSUMER_REGS = CWG == 3 ? 160 : 232;
static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
static_assert(CWG == 2 || CWG == 3, "two or three consumer warpgroups");
static_assert(BN % 16 == 0 && BN <= 256, "key tile: a multiple of 16, at most 256 (TMA box)");
static_assert(HALF_KV % 1024 == 0, "key tiles must keep 128B-swizzled boxes 1024-byte aligned");
static_assert(128 * PRODUCER_REGS + 128 * CWG * CONSUMER_REGS <= THREADS * (65536 / THREADS / 8 * 8),
              "setmaxnreg would ask for more registers than the block was launched with");
static_assert(QBUF == 1 || QBUF == 2, "one or two Q buffers");
// O leaves through the Q buffer: with two, the producer refills an item's buffer only for the item
// after next, so it is free from the item's last S until every consumer has stored its rows.
constexpr bool TMA_O = QBUF == 2;
// Barriers: Q full and Q empty per Q buffer, full/empty K and V per stage; then 16 bytes for the
// published items (one per Q buffer) and the parts flag.
static_assert(KILN_SMEM >= 1024 + QBUF * Q_BYTES + STAGES * STAGE_BYTES + (2 * QBUF + 4 * STAGES) * 8 + 16,
              "KILN_SMEM too small");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

#include "attention/online_softmax.cuh"

template <int N> __device__ __forceinline__ void fence_all(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) wgmma_fence_operand(r[i]);
}

// Issues S = Q·Kᵀ for this consumer's 64 rows (Q at `sqc`, K tile at `sk`) and commits it.
__device__ __forceinline__ void issue_s(float (&sc)[SR], u32 sqc, u32 sk) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const u64 da = wgmma_desc_sw128(sqc + (kk / 4) * HALF_Q + (kk % 4) * 32, 16, 1024);
    const u64 db = wgmma_desc_sw128(sk + (kk / 4) * HALF_KV + (kk % 4) * 32, 16, 1024);
    wgmma_m64k16<in_t, BN, 0, 0>(sc, da, db, kk > 0);  // the first step overwrites (p = false)
  }
  wgmma_commit();
}

// P (the exponentiated scores) rounded to the input type, in the A-operand register layout.
__device__ __forceinline__ void pack_p(u32 (&pa)[KP][4], const float (&sc)[SR]) {
#pragma unroll
  for (int kk = 0; kk < KP; ++kk) {
    pa[kk][0] = pack2<in_t>(sc[8 * kk + 0], sc[8 * kk + 1]);
    pa[kk][1] = pack2<in_t>(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack2<in_t>(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack2<in_t>(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

// Keeps the packed P where it was computed (as fence_all does for accumulators).
__device__ __forceinline__ void fence_p(u32 (&pa)[KP][4]) {
#pragma unroll
  for (int kk = 0; kk < KP; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
}

// Issues O += P·V with P in A registers and the V tile at `sv`, and commits it. The caller has
// fenced O after its last change (a fence here, behind an S wgmma already in flight, would read
// O inside that pipeline stage and serialise it).
__device__ __forceinline__ void issue_pv(float (&o)[OR], const u32 (&pa)[KP][4], u32 sv) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KP; ++kk) {
    // V is [keys][dim]: MN-major for B (K = keys, N = dim); 16 keys = 2048 bytes; each further
    // 64-wide chunk of dim is the next box, HALF_KV bytes on (LBO).
    const u64 db = wgmma_desc_sw128(sv + kk * 2048, HALF_KV, 1024);
    wgmma_m64k16_rs<in_t, D, 1>(o, pa[kk], db, 1);
  }
  wgmma_commit();
}

// With lazy rescaling (KILN_LAZY > 0) most tiles leave the max, and so O, unchanged: a thread
// whose two rows did not move skips the OR multiplies.
__device__ __forceinline__ void rescale(float (&o)[OR], const float (&corr)[2]) {
  if (KILN_LAZY && corr[0] == 1.0f && corr[1] == 1.0f) return;
#pragma unroll
  for (int i = 0; i < OR; ++i) o[i] *= corr[(i >> 1) & 1];
}

// Ping-pong turns: consumer c waits on named barrier 1 + c (until the previous consumer has
// issued), issues its wgmmas, then lets the next one go. Each barrier counts the 128 threads
// that wait plus the 128 of the warpgroup that signals.
__device__ __forceinline__ void turn_wait(int c) {
  if (KILN_PINGPONG) named_barrier_sync(1 + c, 256);
}
__device__ __forceinline__ void turn_pass(int c) {
  if (KILN_PINGPONG) asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (c + 1) % CWG) : "memory");
}


// Items in parts (the last, partial wave's, non-causal, whose items are all alike): p.parts (2 or
// 3) blocks take a share of an item's key tiles each, and the last to finish merges the others'
// partial states and stores the rows, so the last wave takes a half or a third as long. Not with
// ping-pong, whose turns assume every consumer of a block walks the same tiles.
#define KILN_PARTS (!KILN_PINGPONG)

// Which (query block, head, batch) work item `t` is: blocks of a few heads at a time (so blocks
// that run together share their K and V in L2), the longest causal rows first.
// With KILN_PARTS, items from p.parts_from on run as p.parts work units each (consecutive), one
// per share of the key tiles (`kt0` the first); `parted` numbers such an item among them (-1: a
// whole item) and `part` is the share. With KILN_WINDOW the item's tiles start at `kt0` too (the
// first tile its rows' windows reach). With KILN_VARLEN the batch index is the sequence, and
// `sq`, `skv` its lengths (else the problem's), `qs`, `ks` its first packed rows.
#define KILN_KT0 (KILN_PARTS || KILN_WINDOW)
// Item `ut` (a whole item's index) as its query block i (0: the bottom one) and (batch, head)
// pair bh = batch · heads_q + head. Items come in groups of `order_bh` pairs; within a group the
// query block index i varies slowest, so a group runs all its heads' heaviest causal blocks first
// (LPT over the group, whose K and V stay together in L2) instead of one head's heavy-to-light
// run after another, whose last heavy items left a tail. 1: head after head.
__device__ __forceinline__ void item_block(unsigned ut, const AttnArgs& p, unsigned& i, unsigned& bh) {
  const unsigned nmb = ((unsigned)p.sq + BM - 1) / BM;  // with KILN_VARLEN p.sq is the longest
  const unsigned G = (unsigned)p.order_bh, per = G * nmb;
  const unsigned g = ut / per, r = ut - g * per;
  const unsigned gs = min(G, (unsigned)(p.heads_q * p.batch) - g * G);  // the last group may be short
  i = r / gs;
  bh = g * G + (r - i * gs);
}

#if KILN_VARLEN
static_assert(KILN_DYNAMIC, "packed batches take their items from the work counter");
// Sequence b's first packed query row qs and its query rows sq, its first key row ks and keys
// skv, from the offsets. Offsets that are not cumulative within the packed rows (a start past
// its end or below 0, an end past the packed length, a first offset other than 0, a last other
// than the packed length) or a sequence longer than p.sq (the longest, which sized the grid) make
// it bad: its rows are clamped into the packed ones (at most p.sq of them) and it gets no key,
// skv = -1, which its consumers write as NaN.
__device__ __forceinline__ void varlen_rows(const AttnArgs& p, int b, int& qs, int& sq, int& ks, int& skv) {
  qs = __ldg(p.cu_q + b);
  ks = __ldg(p.cu_k + b);
  const int qe = __ldg(p.cu_q + b + 1), ke = __ldg(p.cu_k + b + 1);
  const bool ok = 0 <= qs && qs <= qe && qe <= p.total_q && qe - qs <= p.sq && 0 <= ks && ks <= ke && ke <= p.total_k &&
                  (b > 0 || (qs | ks) == 0) && (b + 1 < p.batch || (qe == p.total_q && ke == p.total_k));
  if (ok) {
    sq = qe - qs;
    skv = ke - ks;
    return;
  }
  qs = min(max(qs, 0), p.total_q);
  sq = min(max(qe, qs), p.total_q - qs < p.sq ? p.total_q : qs + p.sq) - qs;
  ks = 0;
  skv = -1;
}
// Whether packed item t lies wholly above its sequence's first row: the grid is sized by the
// longest sequence, so every shorter one leaves such items (at 32 sequences of 128 to 8192
// rows, 42 % of them), which have no row to compute or store. The producer fetches past them
// instead of handing them to the consumers, which cost a Q buffer's turn and broke the
// prefetch of the next item's Q and K/V. (Packed launches run no item in parts: t is a whole
// item's index.)
// A bad sequence is recorded here (every one of its items passes by), whether or not its items
// have rows left.
__device__ __forceinline__ bool varlen_rowless(int t, const AttnArgs& p) {
  unsigned i, bh;
  item_block((unsigned)t, p, i, bh);
  const int b = (int)(bh / (unsigned)p.heads_q);
  int qs, sq, ks, skv;
  varlen_rows(p, b, qs, sq, ks, skv);
  if (skv < 0 && p.errors != nullptr) *reinterpret_cast<volatile u32*>(p.errors) = 1u;
  return sq <= (int)i * BM;
}
#endif

struct Work {
  int m0, h, b, ntiles, sq, skv;
#if KILN_KT0
  int kt0;
#endif
#if KILN_PARTS
  int parted, part;
#endif
#if KILN_VARLEN
  int qs, ks;
#endif
  __device__ __forceinline__ Work(int t, const AttnArgs& p) {
    // Unsigned: the 32-register producer of three consumers has no room for signed division's
    // temporaries (they spilled its loop counters at d128).
    unsigned ut = (unsigned)t;
#if KILN_PARTS
    const unsigned from = (unsigned)p.parts_from, np = (unsigned)p.parts, u = ut - from, q = u / np;
    const bool in_parts = ut >= from;
    parted = in_parts ? (int)q : -1;
    part = in_parts ? (int)(u - q * np) : 0;
    ut = in_parts ? from + q : ut;
#endif
    unsigned i, bh;
    item_block(ut, p, i, bh);
    h = (int)(bh % (unsigned)p.heads_q);
    b = (int)(bh / (unsigned)p.heads_q);
#if KILN_VARLEN
    varlen_rows(p, b, qs, sq, ks, skv);
    // Every sequence's blocks end at its last row, causal or not (block i from the bottom):
    // blocks past its first row (i >= its own block count) have no row and no tile.
    m0 = sq - (int)(i + 1) * BM;
#else
    sq = p.sq;
    skv = p.skv;
    // Causal blocks are aligned to the last query row: a ragged block (S not a multiple of BM)
    // then sits at the top, starting at a negative row, where the diagonal leaves it a key tile
    // or two, instead of at the bottom, where its dead rows would walk every key (S 4096 in
    // 192-row blocks: 6 % of the causal work). Rows below 0 are zero-filled by TMA, see no key
    // and are not stored. Non-causal blocks start at row 0: a ragged one costs the same anywhere.
    // (q_row0, from the host: 0, or sq - nmb·BM when causal.)
    const unsigned nmb = ((unsigned)p.sq + BM - 1) / BM;
    m0 = (int)((nmb - 1 - i) * BM) + p.q_row0;
#endif
    const int rows = min(BM, sq - m0);
#if KILN_WINDOW
    // Rows max(m0, 0) .. m0 + rows - 1 see keys from the first one's left edge to the last one's
    // right edge (the host folds causal into win_right; an unbounded side is 2^30).
    const int off = skv - sq, kv_lo = max(0, max(m0, 0) + off - p.win_left);
    const int kv_end = min(skv, m0 + rows + off + p.win_right);
    kt0 = kv_lo / BN;
    ntiles = kv_end <= kv_lo || m0 + BM <= 0 ? 0 : (kv_end - 1) / BN + 1 - kt0;
#else
    const int kv_end = p.causal ? min(skv, m0 + rows + skv - sq) : skv;
    ntiles = kv_end <= 0 || (KILN_VARLEN && m0 + BM <= 0) ? 0 : (kv_end - 1) / BN + 1;
#if KILN_KT0
    kt0 = 0;
#endif
#endif
#if KILN_PARTS
    if (in_parts) {
      const int first = kt0 + part * ntiles / (int)np;
      ntiles = kt0 + (part + 1) * ntiles / (int)np - first;
      kt0 = first;
    }
#endif
  }
  // Coordinates of this item's query row `row` and key `key` in the maps, and the map's batch.
#if KILN_VARLEN
  __device__ __forceinline__ int q_coord(int row) const { return qs + row; }
  __device__ __forceinline__ int kv_coord(int key) const { return ks + key; }
  __device__ __forceinline__ int map_b() const { return 0; }
#else
  __device__ __forceinline__ int q_coord(int row) const { return row; }
  __device__ __forceinline__ int kv_coord(int key) const { return key; }
  __device__ __forceinline__ int map_b() const { return b; }
#endif
};

// Consumers of a block starting at row m0 whose 64 rows all lie outside [0, sq): the dead rows of
// a ragged block (S % BM rows; at S 4096 in 192-row blocks, the last block of each head is a
// third full: 3 % of the non-causal work), below the last row, or above row 0 when causal blocks
// are aligned to the last row. They skip the item (KILN_IDLE_SKIP): no tiles for them, and the
// producer releases each K/V tile on their behalf. Not with intra-warpgroup overlap, whose
// prologue and epilogue assume every consumer has tiles, nor with ping-pong, whose turns pass
// through every consumer.
#define KILN_IDLE_SKIP (!KILN_OVERLAP && !KILN_PINGPONG)
__device__ __forceinline__ bool consumer_idle(int m0, int c, int sq) { return m0 + 64 * c >= sq || m0 + 64 * c + 64 <= 0; }
__device__ __forceinline__ unsigned idle_consumers(int m0, int sq) {
  unsigned n = 0;
#pragma unroll
  for (int c = 0; c < CWG; ++c) n += consumer_idle(m0, c, sq);
  return n;
}

// A partial state (max, sum, O) in a workspace slice, thread by thread: thread tid's registers
// at slice[i * 128], so the thread of another warpgroup (or block) that holds the same rows and
// columns reads them coalesced, with no shuffles.
__device__ __forceinline__ void store_partial(float* slice, const float (&o)[OR], const float (&m)[2], const float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < OR; ++i) slice[i * 128] = o[i];
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    slice[(OR + rh) * 128] = m[rh];
    slice[(OR + 2 + rh) * 128] = l[rh];
  }
}

// Folds the partial state in `slice` into this thread's: both are rescaled to their common max
// and added. AROUND_L1: `slice` was written by another SM (read with ld.global.cg).
template <bool AROUND_L1>
__device__ __forceinline__ void fold_partial(float (&o)[OR], float (&m)[2], float (&l)[2], const float* slice) {
  auto load = [](const float* x) { return AROUND_L1 ? __ldcg(x) : *x; };
  float a[2], b[2];
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const float m1 = load(slice + (OR + rh) * 128), l1 = load(slice + (OR + 2 + rh) * 128);
    const float mx = fmaxf(m[rh], m1);  // a row's max is the same in its four threads
    a[rh] = m[rh] == NEG_INF ? 0.0f : ex2_approx(m[rh] - mx);
    b[rh] = m1 == NEG_INF ? 0.0f : ex2_approx(m1 - mx);
    m[rh] = mx;
    l[rh] = a[rh] * l[rh] + b[rh] * l1;
  }
#pragma unroll
  for (int i = 0; i < OR; ++i) o[i] = fmaf(o[i], a[(i >> 1) & 1], load(slice + i * 128) * b[(i >> 1) & 1]);
}

// A split item (KILN_IDLE_SKIP, p.split_ws set): a non-causal block with at most 64 rows would
// leave CWG - 1 consumers idle while one walks every key. Instead the first SPLIT consumers take
// consumer 0's rows (its Q) and every SPLIT-th key tile each, and their partial states are merged
// here: consumers 1.. store their (max, sum, O) in this block's slice of the workspace
// (store_partial) and consumer 0 folds them into its own (fold_partial). SPLIT divides STAGES
// so that each consumer's tiles keep to its own slots of the ring, whose phases it then sees one
// after another: with three consumers on a 2-deep ring, a consumer's next tile would be two
// phases ahead of a slot it had not watched, and a parity wait cannot tell those phases apart
// (measured: wrong results and launch failures). Two consumers on a 3-deep ring share slots
// too: one a lap ahead of the other's still-landing tile (TMA completes out of order) would
// pass its parity wait at once (the GEMM's 64-row tiles hit this, kernels/gemm/wgmma_tma_ws.cu),
// so that config does not split.
constexpr int split_consumers(int cwg, int stages) { return cwg <= 1 ? 1 : stages % cwg == 0 ? cwg : split_consumers(cwg - 1, stages); }
constexpr int SPLIT = split_consumers(CWG, STAGES);
constexpr int SPLIT_FLOATS = OR + 4;
constexpr u32 SPLIT_BAR = CWG + 1;  // a named barrier past the ping-pong turns (1..CWG)
constexpr u32 O_BAR = CWG + 2;      // O_BAR + c: consumer c's own (TMA_O), past SPLIT_BAR
__device__ __forceinline__ void split_merge(float (&o)[OR], float (&m)[2], float (&l)[2], int c, float* ws) {
  float* slices = ws + threadIdx.x % 128;
  if (c > 0 && c < SPLIT) store_partial(slices + (c - 1) * SPLIT_FLOATS * 128, o, m, l);
  named_barrier_sync(SPLIT_BAR, 128 * CWG);  // orders those stores before consumer 0's loads
  if (c == 0) {
#pragma unroll 1
    for (int from = 1; from < SPLIT; ++from) fold_partial<false>(o, m, l, slices + (from - 1) * SPLIT_FLOATS * 128);
  }
  named_barrier_sync(SPLIT_BAR, 128 * CWG);  // the slice is free for the block's next split item
}

#if KILN_PARTS
// An item in parts (see KILN_PARTS): every consumer stores its partial (max, sum, O) in this
// part's slice of p.parts_ws, one thread counts the part done, and the block that finishes last
// reads the other parts' slices (around L1: other SMs wrote them) and merges them. Returns
// whether this block stores the rows.
__device__ __forceinline__ bool parts_merge(float (&o)[OR], float (&m)[2], float (&l)[2], int c, int parted, int part,
                                            const AttnArgs& p, volatile int& last) {
  const int tid = threadIdx.x % 128;
  auto slice = [&](int q) { return p.parts_ws + ((i64)(parted * p.parts + q) * CWG + c) * SPLIT_FLOATS * 128 + tid; };
  store_partial(slice(part), o, m, l);
  __threadfence();  // the stores reach the device before the count that publishes them
  named_barrier_sync(SPLIT_BAR, 128 * CWG);
  if (threadIdx.x == 128) {
    const u32 before = atomicAdd(p.parts_done + parted, 1u);
    const bool is_last = before + 1 == (u32)p.parts;
    if (is_last) p.parts_done[parted] = 0;  // every part is in: ready for the next launch
    last = is_last;
  }
  named_barrier_sync(SPLIT_BAR, 128 * CWG);
  if (!last) return false;
  __threadfence();
#pragma unroll 1
  for (int q = 0; q < p.parts; ++q)
    if (q != part) fold_partial<true>(o, m, l, slice(q));
  return true;
}
#endif

// The grid walks the work items: one per block (gridDim.x = all of them), or persistently (fewer
// blocks, each taking every gridDim.x-th item), where the producer loads the next item's Q and
// K/V while the consumers finish the last P·V and store O of the current one.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_fa3_wgmma(const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv,
                   const __grid_constant__ TmaMap to, AttnArgs p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 base = smem_align1024(smem_raw);
  const u32 sq = base, ring = base + QBUF * Q_BYTES, bars = ring + STAGES * STAGE_BYTES;
  // Q buffer b (the qi-th Q a block loads goes to buffer qi % QBUF, whose barriers then complete
  // their (qi / QBUF)-th phase).
  auto bar_q = [&](int b) { return bars + 8 * b; };
  auto q_empty = [&](int b) { return bars + 8 * (QBUF + b); };
  // K and V of a stage are released separately: K as soon as its S is computed, so the next K
  // can land while this tile's P·V still reads V (a 2-deep ring then keeps a tile of slack).
  constexpr u32 KV_BARS = 16 * QBUF;
  // Barrier arrays: full K, full V, empty K, empty V (common/ring.cuh), STAGES each.
  const MbarRing<STAGES, 2 * STAGES> kring{bars + KV_BARS}, vring{bars + KV_BARS + 8 * STAGES};
  // KILN_DYNAMIC: the item the producer published in each Q buffer, after the barriers.
  volatile int* item = reinterpret_cast<int*>(smem_raw + (bars - smem_u32(smem_raw)) + KV_BARS + 32 * STAGES);
  // KILN_PARTS: whether this block finished an item in parts last (parts_merge), next to them.
  volatile int& last_part = item[2];
  const int items = ((p.sq + BM - 1) / BM) * p.heads_q * p.batch;
#if KILN_PARTS
  const int total = items + (items - min(p.parts_from, items)) * (p.parts - 1);  // work units
#else
  const int total = items;
#endif
  // Not warpgroup_index() (common/wgmma.cuh): its descriptors are already uniform here, and it
  // tips the 160-register d128 consumers into spilling.
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int b = 0; b < QBUF; ++b) {
      mbar_init(bar_q(b), 1);
      mbar_init(q_empty(b), 4 * CWG);  // one arrival per consumer warp
    }
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(kring.full(s), 1);
      mbar_init(vring.full(s), 1);
      mbar_init(kring.empty(s), 4 * CWG);
      mbar_init(vring.empty(s), 4 * CWG);
    }
    mbar_fence_init();
  }
  __syncthreads();

  // `it` counts the K/V tiles this block has streamed (its ring position), `qi` its items, each
  // one phase of its Q buffer's bar_q and q_empty, whether a Q was loaded for it or not.
  int it = 0, qi = 0;
  if (wg == 0) {
    warpgroup_reg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
#if KILN_DYNAMIC
      // Fetch an item, wait until the consumers are done with the Q buffer's last item, publish
      // the item in `item` (bar_q's completion orders it before their read), load it. Items with no
      // key tile are published without loads (the consumers still write their O and LSE); the
      // sentinel `total` tells them to stop.
      for (;;) {
        const int t = (int)atomicAdd(p.work, 1u);
#if KILN_VARLEN
        if (t < total && varlen_rowless(t, p)) continue;
#endif
        const int b = qi % QBUF;
        if (qi >= QBUF) mbar_wait(q_empty(b), (qi / QBUF - 1) & 1);
        item[b] = t < total ? t : total;
        if (t >= total) {
          mbar_arrive(bar_q(b));
          break;
        }
        const Work wk(t, p);
        ++qi;
        if (wk.ntiles == 0) {
          mbar_arrive(bar_q(b));
          continue;
        }
#else
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const Work wk(t, p);
        const int b = qi % QBUF;
        if (qi >= QBUF) mbar_wait(q_empty(b), (qi / QBUF - 1) & 1);  // every consumer is done with it
        ++qi;
        if (wk.ntiles == 0) {  // nothing to load; the consumers still write O and LSE
          mbar_arrive(bar_q(b));
          continue;
        }
#endif
        const int hk = wk.h / p.group;
#if KILN_KT0
#define KT0 wk.kt0
#else
#define KT0 0
#endif
#if KILN_IDLE_SKIP
        // Consumers whose 64 rows all lie outside the sequence (see `idle` below) read no tile of
        // this item: their releases are given with each load (they count towards its phase).
        const u32 idle_arrivals = 4 * idle_consumers(wk.m0, wk.sq);
#endif
        mbar_arrive_expect_tx(bar_q(b), Q_BYTES);
#pragma unroll
        for (int d = 0; d < DH; ++d) tma_load_4d(sq + b * Q_BYTES + d * HALF_Q, &tq, bar_q(b), 64 * d, wk.q_coord(wk.m0), wk.h, wk.map_b());
        for (int j = 0; j < wk.ntiles; ++j, ++it) {
          const int s = it % STAGES;
          const u32 sk = ring + s * STAGE_BYTES, sv = sk + KV_BYTES, par = ((it / STAGES) & 1) ^ 1;
          mbar_wait(kring.empty(s), par);
          mbar_arrive_expect_tx(kring.full(s), KV_BYTES);
#pragma unroll
          for (int d = 0; d < DH; ++d) tma_load_4d(sk + d * HALF_KV, &tk, kring.full(s), 64 * d, wk.kv_coord((KT0 + j) * BN), hk, wk.map_b());
#if KILN_IDLE_SKIP
          if (idle_arrivals) mbar_arrive_count(kring.empty(s), idle_arrivals);
#endif
          mbar_wait(vring.empty(s), par);
          mbar_arrive_expect_tx(vring.full(s), KV_BYTES);
#pragma unroll
          for (int d = 0; d < DH; ++d) tma_load_4d(sv + d * HALF_KV, &tv, vring.full(s), 64 * d, wk.kv_coord((KT0 + j) * BN), hk, wk.map_b());
#if KILN_IDLE_SKIP
          if (idle_arrivals) mbar_arrive_count(vring.empty(s), idle_arrivals);
#endif
        }
      }
#if KILN_DYNAMIC
      // The last block to finish fetching returns the counters to 0 for the next launch: every
      // other block has made its final fetch before counting itself done.
      __threadfence();
      if (atomicAdd(p.work + 1, 1u) == gridDim.x - 1) {
        p.work[0] = 0;
        p.work[1] = 0;
        __threadfence();
      }
#endif
    }
    return;
  }

  warpgroup_reg_inc<CONSUMER_REGS>();
  const int c = wg - 1, w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  auto warp_arrive = [&](u32 bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  for (int k = 0;; ++k) {
    const int qb = qi % QBUF;  // this item's Q buffer
    const u32 sqb = sq + qb * Q_BYTES;
#if KILN_DYNAMIC
    mbar_wait(bar_q(qb), (qi / QBUF) & 1);  // the item is published (and its Q loaded) with this phase
    const int tile = item[qb];
#else
    const int tile = blockIdx.x + k * gridDim.x;
#endif
    if (tile >= total) break;
    const Work wk(tile, p);
#if KILN_PARTS
    const bool parted = wk.parted >= 0;
#else
    constexpr bool parted = false;
#endif
#if KILN_KT0
    const int kt0 = __shfl_sync(0xffffffffu, wk.kt0, 0);
#else
    constexpr int kt0 = 0;
#endif
#if !KILN_IDLE_SKIP
    const int ntiles = wk.ntiles;
    const u32 sqc = sqb + c * 64 * 128;  // this consumer's 64 rows in each Q box
#else
    // An idle consumer (idle_consumers) walks no tile; its rows are not stored. The count goes
    // through a lane-0 broadcast, which ptxas knows is warp-uniform: as a plain select it took
    // a vector register, and the 160-register consumers spilled P in the loop (120 bytes).
    // A split item (split_merge): the first SPLIT consumers read consumer 0's rows of Q and walk
    // every SPLIT-th tile from their own index (the producer releases each tile for the
    // consumers that do not read it, as for idle ones). The same broadcast keeps the per-item
    // values uniform.
    const bool split = SPLIT > 1 && p.split_ws != nullptr && !p.causal && wk.sq - wk.m0 <= 64 && !parted;
    const bool walks = split ? c < SPLIT : !consumer_idle(wk.m0, c, wk.sq);
    const int ntiles = __shfl_sync(0xffffffffu, walks ? wk.ntiles : 0, 0);
    const int j0 = __shfl_sync(0xffffffffu, split ? c : 0, 0), step = __shfl_sync(0xffffffffu, split ? SPLIT : 1, 0);
    const u32 sqc = sqb + __shfl_sync(0xffffffffu, split ? 0 : c, 0) * 64 * 128;  // its 64 rows in each Q box
#endif
    const int row0 = wk.m0 + c * 64 + 16 * w + g;  // this thread's rows: row0 and row0 + 8
#if KILN_WINDOW && KILN_IDLE_SKIP
    // The window masks by the rows the consumer computes: in a split item, consumer 0's (j0 is
    // its index there, else 0). row0 stays its own rows, past the end, so that its stores skip
    // them. (Masked by row0, consumer 1 of a ragged block of at most 64 rows shifted every
    // window 64 rows right: wrong O and LSE, NaN where a row saw no key; 2026-11-29.)
    const int mask_row0 = row0 - 64 * j0;
#else
    const int mask_row0 = row0;
#endif
    Softmax sm{{NEG_INF, NEG_INF}, {0.0f, 0.0f}, mask_row0, t, wk.m0, wk.skv - wk.sq, wk.skv, p.causal != 0, p.scale_log2
#if KILN_WINDOW
               , p.win_left, p.win_right
#endif
    };
    float o[OR];
#pragma unroll
    for (int i = 0; i < OR; ++i) o[i] = 0.0f;
    const int it0 = it;
    auto stage = [&](int j) { return ring + ((it0 + j) % STAGES) * STAGE_BYTES; };
    auto slot = [&](int j) { return (it0 + j) % STAGES; };
    auto phase = [&](int j) { return (u32)(((it0 + j) / STAGES) & 1); };
    // Ping-pong: the last consumer opens the first turn; every turn passes to the next consumer,
    // except the last consumer's final one (nobody waits for it), so each barrier's arrivals
    // match its waits within every work item.
    const int turns = ntiles > 0 ? ntiles + KILN_OVERLAP : 0;
    if (turns > 0 && c == CWG - 1) turn_pass(c);
    auto pass = [&](int k) {
      if (c != CWG - 1 || k + 1 < turns) turn_pass(c);
    };
#if !KILN_DYNAMIC
    mbar_wait(bar_q(qb), (qi / QBUF) & 1);  // idle consumers too: see q_empty below
#endif
    float sc[SR], corr[2];
    u32 pa[KP][4];
#if KILN_OVERLAP
    // Intra-warpgroup overlap (FA3's order): S(j+1) = Q·K(j+1)ᵀ is issued, O is rescaled for
    // tile j while S(j+1) runs (O is no operand of it), then O += P(j)·V(j) is issued; the softmax
    // of S(j+1) runs while P(j)·V(j) is still on the tensor cores. P(j) was packed at the end of
    // the previous step, once P(j-1)·V(j-1) had released the registers.
    if (ntiles > 0) {
      mbar_wait(kring.full(slot(0)), phase(0));
      turn_wait(c);
      issue_s(sc, sqc, stage(0));
      pass(0);
      wgmma_wait<0>();
      fence_all(sc);
      warp_arrive(kring.empty(slot(0)));
      sm.tile(sc, kt0 * BN, corr);
      pack_p(pa, sc);
      fence_p(pa);
    }
    fence_all(o);
    // Every tile but the last has a successor; the loop body is branch-free so that ptxas can see
    // that wait<1> retires S(j+1) (the older group) while P(j)·V(j) stays in flight.
    for (int j = 0; j + 1 < ntiles; ++j) {
      mbar_wait(kring.full(slot(j + 1)), phase(j + 1));
      mbar_wait(vring.full(slot(j)), phase(j));
      turn_wait(c);
      issue_s(sc, sqc, stage(j + 1));
      rescale(o, corr);
      fence_all(o);
      issue_pv(o, pa, stage(j) + KV_BYTES);
      pass(j + 1);
      wgmma_wait<1>();
      fence_all(sc);
      warp_arrive(kring.empty(slot(j + 1)));
      sm.tile(sc, (kt0 + j + 1) * BN, corr);
      wgmma_wait<0>();
      fence_all(o);
      warp_arrive(vring.empty(slot(j)));
      pack_p(pa, sc);
      fence_p(pa);
    }
    if (ntiles > 0) {
      const int j = ntiles - 1;
      if (!TMA_O) warp_arrive(q_empty(qb));  // every S of this item is done: its Q buffer may take the next Q
      mbar_wait(vring.full(slot(j)), phase(j));
      turn_wait(c);
      rescale(o, corr);
      fence_all(o);
      issue_pv(o, pa, stage(j) + KV_BYTES);
      pass(ntiles);
      wgmma_wait<0>();
      fence_all(o);
      warp_arrive(vring.empty(slot(j)));
    }
#else
#if KILN_IDLE_SKIP
    for (int j = j0; j < ntiles; j += step) {
#else
    constexpr int step = 1;
    for (int j = 0; j < ntiles; ++j) {
#endif
      mbar_wait(kring.full(slot(j)), phase(j));
      turn_wait(c);
      issue_s(sc, sqc, stage(j));
      wgmma_wait<0>();
      fence_all(sc);
      warp_arrive(kring.empty(slot(j)));
      if (!TMA_O && j + step >= ntiles) warp_arrive(q_empty(qb));
      sm.tile(sc, (kt0 + j) * BN, corr);
      rescale(o, corr);
      fence_all(o);
      pack_p(pa, sc);
      mbar_wait(vring.full(slot(j)), phase(j));
      issue_pv(o, pa, stage(j) + KV_BYTES);
      pass(j);
      wgmma_wait<0>();
      fence_all(o);
      warp_arrive(vring.empty(slot(j)));
    }
#endif
    // Consumers whose S loop did not run release Q here, once its load has completed (so that
    // the arrival belongs to this item's phase, not to the last one's).
#if KILN_IDLE_SKIP
    const bool no_s = j0 >= ntiles;
#else
    const bool no_s = ntiles == 0;
#endif
    // With TMA_O every consumer releases the buffer after its O store instead (below). Every
    // item, with key tiles or not, takes one phase of its Q buffer's barriers.
    if (!TMA_O && no_s) warp_arrive(q_empty(qb));
    it += wk.ntiles;
    ++qi;

    int row_end = wk.sq;  // rows at and past it are not stored
#if KILN_PARTS
    // Only the last part's block stores (its barriers also re-sync consumers that skipped the
    // unit, as below).
    if (parted && !parts_merge(o, sm.m, sm.l, c, wk.parted, wk.part, p, last_part)) row_end = 0;
#endif
#if KILN_IDLE_SKIP
    // Consumer 0 stores the merged rows. The others' own rows lie past the end (a split block
    // has at most 64), so the stores below skip them: no early `continue`, which made ptxas
    // spill P in the loop (ledger #15).
    if (parted) {
    } else if (split) {
      split_merge(o, sm.m, sm.l, c, p.split_ws + (i64)blockIdx.x * (SPLIT - 1) * SPLIT_FLOATS * 128);
    } else if (idle_consumers(wk.m0, wk.sq) > 0) {
      // A consumer that skipped this item has not seen its tiles land: once the others have
      // (they waited for every one), its parity waits on the next item's tiles, each one phase
      // after one of these in its slot, are unambiguous again. (split_merge's barriers do this
      // for split items.)
      named_barrier_sync(SPLIT_BAR, 128 * CWG);
    }
#endif
#if KILN_VARLEN
    in_t* og = static_cast<in_t*>(p.o) + (i64)wk.qs * p.o_ss + wk.h * p.o_sh;
    float* lse = p.lse + (i64)wk.h * p.total_q + wk.qs;  // LSE [heads, total_q]
#else
    in_t* og = static_cast<in_t*>(p.o) + wk.b * p.o_sb + wk.h * p.o_sh;
    float* lse = p.lse + ((i64)wk.b * p.heads_q + wk.h) * p.sq;
#endif
    float inv[2];
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      float l = sm.l[rh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool seen = sm.m[rh] != NEG_INF && l > 0.0f;  // the row saw at least one key
      // (a packed sequence with bad offsets, skv = -1: NaN, never a plausible value)
      const float none = KILN_VARLEN && wk.skv < 0 ? __int_as_float(0x7fffffff) : 0.0f;
      inv[rh] = seen ? __fdividef(1.0f, l) : none;
      const int row = row0 + 8 * rh;
      if (t == 0 && row >= 0 && row < row_end) lse[row] = seen ? (sm.m[rh] + __log2f(l)) * 0.69314718055994531f : none == 0.0f ? NEG_INF : none;
    }
    // O through this consumer's rows of the Q buffer (TMA_O): every S of the item is done, and
    // the buffer is refilled only once all consumers have released it after their store. The
    // box is written as a TMA load of it would have left it (128-byte rows of 64 dims,
    // swizzle128_offset). The store skips rows past the sequence's end, but
    // a box starting above row 0 (the top causal block's, aligned to the last row) faulted
    // (CUDA_ERROR_ILLEGAL_INSTRUCTION, H100), so that one consumer stores directly. A packed
    // sequence's rows end before the map's (the next sequence follows): only a consumer whose 64
    // rows all lie inside it stores by TMA, the last, partial one through the masked stores.
    const int own_row = wk.m0 + c * 64;  // this consumer's first row
    if (TMA_O && own_row >= 0 && (!KILN_VARLEN || own_row + 64 <= row_end)) {
      if (own_row < row_end) {
        const u32 slice = sqb + c * 64 * 128;
        const int srow = 16 * w + (lane & 15);
#pragma unroll
        for (int n = 0; n < OT; n += 2) {
          // Matrices: rows 0-7 | 8-15 of the warp's 16, columns of 8-column groups n | n + 1;
          // lanes 8j .. 8j + 7 address matrix j's rows.
          const int group = n + (lane >> 4);
          const u32 addr = slice + (group / 8) * HALF_Q + swizzle128_offset(srow, group % 8);
          stmatrix_x4(addr, pack2<in_t>(o[4 * n] * inv[0], o[4 * n + 1] * inv[0]),
                      pack2<in_t>(o[4 * n + 2] * inv[1], o[4 * n + 3] * inv[1]),
                      pack2<in_t>(o[4 * n + 4] * inv[0], o[4 * n + 5] * inv[0]),
                      pack2<in_t>(o[4 * n + 6] * inv[1], o[4 * n + 7] * inv[1]));
        }
        fence_proxy_async_shared();
        named_barrier_sync(O_BAR + c, 128);
        if (threadIdx.x % 128 == 0) {
#pragma unroll
          for (int d = 0; d < DH; ++d) tma_store_4d(&to, slice + d * HALF_Q, 64 * d, wk.q_coord(own_row), wk.h, wk.map_b());
          tma_store_commit();
          tma_store_wait_read<0>();  // before warp 0's release below lets the producer refill it
        }
      }
    } else {
      // 16-byte stores: after the quad transpose each lane holds 8 consecutive columns of its
      // row (rows are 16-byte aligned: the TMA maps demand it), where the 4-byte stores of the
      // fragment touched eight rows per instruction and throttled the LSU.
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const int row = row0 + 8 * rh;
        const bool in_range = row >= 0 && row < row_end;
        in_t* orow = og + (i64)row * p.o_ss;
#pragma unroll
        for (int j0 = 0; j0 < OT; j0 += 4) {
          float e[4][2];
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            e[s][0] = o[4 * (j0 + s) + 2 * rh] * inv[rh];
            e[s][1] = o[4 * (j0 + s) + 2 * rh + 1] * inv[rh];
          }
          quad_transpose(e, t);
          if (in_range) {
            u32x4 v;
            v.x = pack2<in_t>(e[0][0], e[0][1]);
            v.y = pack2<in_t>(e[1][0], e[1][1]);
            v.z = pack2<in_t>(e[2][0], e[2][1]);
            v.w = pack2<in_t>(e[3][0], e[3][1]);
            *reinterpret_cast<u32x4*>(orow + 8 * (j0 + t)) = v;
          }
        }
      }
    }
    if (TMA_O) warp_arrive(q_empty(qb));
  }
  // The bulk stores have read shared memory; their writes finish before the block retires.
  if (TMA_O && threadIdx.x % 128 == 0) tma_store_wait<0>();
}
