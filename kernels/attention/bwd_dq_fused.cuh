// KILN_BWD_DQ_FUSED: dQ converted in the main kernel once its last adder has added, so that the
// postprocess (a pass over the packed rows' fp32 accumulator) is not launched. Include after
// attention/bwd_dq_tile.cuh.
//   The consumers hand each block's two dQ tiles to a writer warp (warp 1 of warpgroup 0) through
// DqTile::hand_over, as the deterministic writer takes them: at d64 (128-row steps split by rows)
// consumer c's 64 rows 64c .., at d128 (64-row steps split by columns) consumer c's 64 columns
// 64c .. of the step's 64 rows. The writer adds them by TMA reduce and hands them back once read;
// the next block's reduces issued, it waits for the previous block's to complete (a step later:
// no wait in practice), orders them before a counter bump (fence.proxy.async, then an acq_rel
// add) on the (sequence, head, 64 query rows) counter, and the adder that brings it to the number
// of key blocks whose walk reaches those rows (fused_adders: the window's rule, causal folded in)
// queues the rows for warps 2 and 3, which read the sums from L2, scale, round and store dQ in
// Q's layout (32 rows each). The consumers' path is as before except the reduce's issue and wait,
// which the writer takes; the writer never waits on the conversion unless its queue is full.
//   Rows no key block reaches (a causal sequence with more queries than keys, a window, a sequence
// without keys) get no add: key block 0 of each (sequence, key/value head) queues them as zeros
// (fused_zero_unreached), and a sequence without keys, which has no block with work, is zeroed by
// its grid block 0 before it returns (fused_zero_keyless).
//   The counters: p.dq_sem, u32 [heads_q][fused_slots], zeroed by the preprocess; rows r .. of
// sequence z take slot r / 64 + z (r the packed row of the 64-row unit's first row): distinct for
// distinct units, as a sequence's units start 64 rows apart and a later sequence's first unit
// starts on a later row.
//   KILN_BWD_DQ_FUSED 2 (DQ_ZERO): the converters store zeros over the sums they have read, so
// that the call leaves the accumulator as it found it, zero, and the preprocess need not zero it
// (the host's own accumulator, zeroed when allocated: dq_fused.rs). Every row that gets an add is
// converted after its last add: the adds of a (sequence, head, 64 rows) unit all complete before
// its counter is full, and a tile's rows past its sequence's end, added into the next sequence's
// rows, are zeros (their Pᵀ masked), which leave a zero a zero whenever they land.
#pragma once
#include "attention/bwd_dq.cuh"
#include "common/mem_ops.cuh"

// (DQ_ZERO, the converters leave the accumulator zero: KILN_BWD_DQ_FUSED 2, bwd_fa3_block.cuh)
// The 64-row units of a block's dQ, each with its counter: two at d64's 128-row step (the row
// split's tiles), one at d128's 64 (the column split's two tiles add to the same rows).
constexpr int FQ_UNITS = BM / 64;
constexpr int FQ_DEPTH = 16;                     // queued conversions
// (16-byte aligned: the header is zeroed by one 16-byte store; the barriers end on 8)
constexpr u32 OFF_FQ = (OFF_BARS + 8 * (1 + 2 * STAGES) + 15) / 16 * 16;  // header {tail, done[2], -}, then entries
constexpr u32 FQ_BYTES = 16 + 8 * FQ_DEPTH;
static_assert(!DQ_FUSED || (KILN_SMEM >= 1024 + OFF_FQ + FQ_BYTES && OFF_FQ % 16 == 0), "KILN_SMEM too small for the conversion queue");
static_assert(!DQ_FUSED || (DQ_MH == 1 && ((BM == 128 && SPLIT_M && QN == D) || (BM == 64 && SPLIT_N && QN == 64))),
              "the fused conversion takes the row split's 64-row tiles (d64, 128 rows a step) or the column split's 64-column ones (d128)");

// The counters a head holds: (packed rows - 1) / 64 + sequences.
__device__ __forceinline__ int fused_slots(const AttnBwdArgs& p) { return (p.sq - 1) / 64 + (int)gridDim.z; }

// How many key blocks of the sequence walk query block mb (window_rows' inverse: the keys the
// block's rows see are a .. b, and every key block that holds one of them walks it).
__device__ __forceinline__ int fused_adders(const BwdWalk& k, const AttnBwdArgs& p, int mb) {
  const int rq = k.rows_q(p), rk = k.rows_k(p), r0 = mb * BM, r1 = min(r0 + BM, rq) - 1;
  const int a = max(0, r0 + k.off - p.win_left), b = min(rk - 1, r1 + k.off + p.win_right);
  return b < a ? 0 : b / BN - a / BN + 1;
}

__device__ __forceinline__ u32 ld_acquire_cta_shared(u32 at) {
  u32 v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(v) : "r"(at) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_cta_shared(u32 at, u32 v) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
}
// The counter's add at GPU scope with acquire and release: this thread's completed (and fenced)
// bulk adds are seen by whoever reads a later value, and if this add is the last, every earlier
// adder's are seen here.
__device__ __forceinline__ u32 atom_acq_rel_add(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// The queue in shared memory: one writer (warp 1, lane 0) pushes, warps 2 and 3 each take every
// entry (their halves of its rows) and count what they have finished in done[0], done[1].
// An entry: the packed row of the first of `n` rows (n <= 64), head h, zero (no adds: store 0);
// h = -1 ends the queue.
struct FusedQueue {
  u32 base;  // tail at base, done[w] at base + 4 + 4w, entries from base + 16
  __device__ __forceinline__ void push(u32& tail, int row, int h, int n, bool zero) const {
    // (the slot is free once both converters have finished the entry FQ_DEPTH before it)
    while (tail - min(ld_acquire_cta_shared(base + 4), ld_acquire_cta_shared(base + 8)) >= FQ_DEPTH) __nanosleep(64);
    const u32 at = base + 16 + 8 * (tail % FQ_DEPTH);
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(at), "r"(row), "r"(h < 0 ? -1 : h | (n << 16) | ((int)zero << 24)) : "memory");
    st_release_cta_shared(base, ++tail);
  }
};

__device__ __forceinline__ FusedQueue fused_queue(u32 aligned_base) { return FusedQueue{aligned_base + OFF_FQ}; }

// By thread 0 before the block's start barrier: the queue empty.
__device__ __forceinline__ void fused_queue_init(unsigned char* smem_raw) {
  const u32 at = smem_align1024(smem_raw) + OFF_FQ;
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
}

// Converter w (0, 1: warps 2, 3): rows 32w .. 32w + 31 of each entry, FQ_RPP rows a pass (D / 8
// lanes a row of D fp32: 2 x 16 bytes in, 16 bytes of dQ out), two passes' loads in flight.
// DQ_ZERO: each lane stores zeros over the 32 bytes it has read (the lines are in L2, dirty from
// the reduces: no HBM bytes beyond those the sums' write-back costs anyway).
constexpr int FQ_LPR = D / 8, FQ_RPP = 32 / FQ_LPR;
__device__ __forceinline__ void fused_convert(const FusedQueue& q, const AttnBwdArgs& p, int w) {
  const int lane = threadIdx.x % 32, sub = lane / FQ_LPR, col = 8 * (lane % FQ_LPR);
  for (u32 pos = 0;; ++pos) {
    while (ld_acquire_cta_shared(q.base) <= pos) __nanosleep(128);
    int row, code;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(row), "=r"(code) : "r"(q.base + 16 + 8 * (pos % FQ_DEPTH)) : "memory");
    __syncwarp();
    if (code == -1) return;
    const int h = code & 0xffff, n = (code >> 16) & 0xff;
    const bool zero = (code >> 24) & 1;
    // (pointers stepped by two passes, one pair in flight: at the producer's 24 registers the
    // indexed form and an unrolled loop spilled)
    const int r0 = 32 * w + sub, r1 = min(n, 32 * w + 32);
    float* src = p.dq_acc + ((i64)h * p.sq + row + r0) * D + col;
    in_t* dst = static_cast<in_t*>(p.dq) + h * p.q_sh + (i64)(row + r0) * p.q_ss + col;
#pragma unroll 1
    for (int r = r0; r < r1; r += 2 * FQ_RPP, src += 2 * FQ_RPP * D, dst += 2 * FQ_RPP * p.q_ss) {
      // rows r and r + FQ_RPP (if in range): both loads in flight before either is used
      const bool two = r + FQ_RPP < r1;
      u32x4 out[2] = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}};
      if (!zero) {
        float x[2][8];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float* s = i == 0 || two ? src + i * FQ_RPP * D : src;
          ld_cg_f4(s, x[i][0], x[i][1], x[i][2], x[i][3]);
          ld_cg_f4(s + 4, x[i][4], x[i][5], x[i][6], x[i][7]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          out[i].x = pack2<in_t>(x[i][0] * p.scale, x[i][1] * p.scale);
          out[i].y = pack2<in_t>(x[i][2] * p.scale, x[i][3] * p.scale);
          out[i].z = pack2<in_t>(x[i][4] * p.scale, x[i][5] * p.scale);
          out[i].w = pack2<in_t>(x[i][6] * p.scale, x[i][7] * p.scale);
        }
        if constexpr (DQ_ZERO) {
          // (after the loads: an ld.cg and a later st.cg of the same thread and address keep
          // their order)
#pragma unroll
          for (int i = 0; i < 2; ++i)
            if (i == 0 || two) {
              st_cg_f4(src + i * FQ_RPP * D, 0.0f, 0.0f, 0.0f, 0.0f);
              st_cg_f4(src + i * FQ_RPP * D + 4, 0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
      }
      *reinterpret_cast<u32x4*>(dst) = out[0];
      if (two) *reinterpret_cast<u32x4*>(dst + FQ_RPP * p.q_ss) = out[1];
    }
    __syncwarp();
    if (lane == 0) st_release_cta_shared(q.base + 4 + 4 * w, pos + 1);
  }
}

// Key block 0's writer, before its walk: the 64-row units of each head of its group that no key
// block reaches, queued as zeros.
__device__ __forceinline__ void fused_zero_unreached(const FusedQueue& q, u32& tail, const BwdWalk& k, const AttnBwdArgs& p) {
  const int rq = k.rows_q(p);
  for (int mb = 0; mb * BM < rq; ++mb) {
    if (fused_adders(k, p, mb) > 0) continue;
    for (int g = 0; g < p.group; ++g)
      for (int c = 0; c < FQ_UNITS && mb * BM + 64 * c < rq; ++c)
        q.push(tail, k.q0(p) + mb * BM + 64 * c, k.hk * p.group + g, min(64, rq - mb * BM - 64 * c), true);
  }
}

// The writer warp: per block the two tiles added (each its own bulk group) and handed back once
// read; the previous block's adds, complete by then, counted (FQ_UNITS counters: d64's two row
// halves, d128's one unit that both column halves add to), and the rows whose count is full
// queued for the converters.
__device__ __forceinline__ void fused_writer(const TmaMap* map, const FusedQueue& q, const BwdSmem& sm, const AttnBwdArgs& p, const BwdWalk& k) {
  const bool lead = threadIdx.x % 32 == 0;
  const u32 base = sm.sk + OFF_DQ;  // (sm.sk: the aligned base)
  const DqTile t0{map, base, 0, 0, lead}, t1{map, base + DQ_BYTES, SPLIT_N ? QN : 0, SPLIT_M ? 64 : 0, lead};
  u32 tail = 0;
  if (lead && k.nb == 0) fused_zero_unreached(q, tail, k, p);
  const int rq = k.rows_q(p), slots = fused_slots(p);
  // the previous block's counts: bumped after this block's reduces are issued, checked after the
  // hand-back, so that the atomics' round trip overlaps the tiles' read
  auto bump = [&](int h, int mb, u32 (&old)[FQ_UNITS]) {
    u32* sem = p.dq_sem + (i64)h * slots + (int)blockIdx.z;
#pragma unroll
    for (int c = 0; c < FQ_UNITS; ++c) {
      const int r = mb * BM + 64 * c;
      old[c] = r < rq ? atom_acq_rel_add(sem + (k.q0(p) + r) / 64, 1) : 0u;
    }
  };
  auto check = [&](int h, int mb, const u32 (&old)[FQ_UNITS]) {
    const int need = fused_adders(k, p, mb);
#pragma unroll
    for (int c = 0; c < FQ_UNITS; ++c) {
      const int r = mb * BM + 64 * c;
      if (r < rq && (int)old[c] + 1 == need) q.push(tail, k.q0(p) + r, h, min(64, rq - r), false);
    }
  };
  int h_prev = 0, mb_prev = 0;
  for (int it = 0; it < k.iters; ++it) {
    int h, mb;
    walk_at(k, p, it, h, mb);
    named_barrier_sync(8, 160);
    named_barrier_sync(9, 160);
    u32 old[FQ_UNITS] = {};
    if (lead) {
      t0.reduce(t0.smem, p, k, h, mb * BM, 1);
      t1.reduce(t1.smem, p, k, h, mb * BM, 1);
      if (it > 0) {
        tma_store_wait<2>();  // the previous block's two groups complete (not only read)
        fence_proxy_async_global();
        bump(h_prev, mb_prev, old);
      }
      tma_store_wait_read<0>();
    }
    writer_hand_back(it + 1 < k.iters, 10);
    if (lead && it > 0) check(h_prev, mb_prev, old);
    h_prev = h, mb_prev = mb;
  }
  if (lead) {
    if (k.iters > 0) {
      u32 old[FQ_UNITS];
      tma_store_wait<0>();
      fence_proxy_async_global();
      bump(h_prev, mb_prev, old);
      check(h_prev, mb_prev, old);
    }
    q.push(tail, 0, -1, 0, false);
  }
}

// Warps 1-3 of warpgroup 0 (bwd_kernel's write(): j = warp - 1).
__device__ __forceinline__ void dq_fused_role(const TmaMap* map, const BwdSmem& sm, const AttnBwdArgs& p, const BwdWalk& k, int j) {
  const FusedQueue q = fused_queue(sm.sk);
  if (j == 0) {
    fused_writer(map, q, sm, p, k);
  } else {
    fused_convert(q, p, j - 1);
  }
}

// By every thread of grid block (0, hk, z) before bwd_varlen_start: a sequence with queries but
// no keys has no block with work, and its dQ rows (the heads of key/value head hk) are 0.
__device__ __forceinline__ void fused_zero_keyless(const AttnBwdArgs& p) {
  if (blockIdx.x != 0) return;
  const int z = blockIdx.z;
  const int qs = __ldg(p.cu_q + z), qe = __ldg(p.cu_q + z + 1), ks = __ldg(p.cu_k + z), ke = __ldg(p.cu_k + z + 1);
  if (ks != ke || !(0 <= qs && qs < qe && qe <= p.sq)) return;
  const int n = (qe - qs) * p.group * (D / 8);  // 16-byte chunks
  for (int i = threadIdx.x; i < n; i += THREADS) {
    const int c = i % (D / 8), r = i / (D / 8) % (qe - qs), g = i / (D / 8) / (qe - qs);
    in_t* dq = static_cast<in_t*>(p.dq) + (i64)(blockIdx.y * p.group + g) * p.q_sh + (i64)(qs + r) * p.q_ss + 8 * c;
    *reinterpret_cast<u32x4*>(dq) = u32x4{0u, 0u, 0u, 0u};
  }
}

// KILN_BWD_DQ_FUSED 3 (DQ_LAST): no writer warp, no queue. The consumers add dQ as the default
// kernel does; at its end each block with work (every key block of its sequence: bwd_varlen_start
// passes exactly those, whatever the mask) counts itself once on the (sequence, key/value head)
// counter, p.dq_sem [heads_kv][sequences] (within the host's [heads_q][sequences], zeroed by the
// preprocess), after its reduces have completed. The block that brings it to the sequence's key
// blocks converts the unit: every packed row of the sequence for the group's query heads, all D
// columns, read from L2 (written over the last waves, at most 4 MB a head at d128 and 8192 rows),
// scaled, rounded, stored as dQ, and zeros stored over what it read (the lines dirty in L2 from
// the reduces: no HBM bytes beyond their write-back), so that the accumulator is left zero as
// under 2. Rows no key block reaches hold zero and come out as dQ 0; the zeros a tile adds past
// its sequence's end into the next sequence's rows leave those rows as they are, converted or not.
static_assert(!DQ_LAST || (BWD_VARLEN && !VARLEN_COMPACT && !DET_WRITER && !DQ_LATE && !TAIL),
              "KILN_BWD_DQ_FUSED 3: the packed walk on the grid of sequences along z, dQ by the consumers' own reduces");
constexpr int FL_LPR = D / 8, FL_RPP = 256 / FL_LPR;  // lanes a row (8 fp32 each), rows a pass of 256 threads
constexpr int FL_PASSES = 8;                          // passes' loads in flight: 64 KB a block

// By consumer thread t (0 .. 255) after the block's dK and dV stores; adder: the thread that
// issued its warpgroup's reduces. Named barrier 12.
__device__ __forceinline__ void fused_last_block(const AttnBwdArgs& p, const BwdWalk& k, bool adder, int t) {
  if (adder) {
    tma_store_wait<0>();  // complete, not only read
    fence_proxy_async_global();
  }
  named_barrier_sync(12, 256);
  u32 last = 0;
  if (t == 0) {
    const u32 blocks = (k.rows_k(p) + BN - 1) / BN;
    last = atom_acq_rel_add(p.dq_sem + k.hk * (int)gridDim.z + (int)blockIdx.z, 1) + 1 == blocks;
  }
  // (through a shuffle from lane 0, as split_k.cuh's split_arrive: the barrier's predicate kept
  // feeding the branch otherwise)
  if (__shfl_sync(0xffffffffu, (int)named_barrier_or(12, 256, last != 0), 0) == 0) return;
  const int rq = k.rows_q(p), q0 = k.q0(p), sub = t / FL_LPR, col = 8 * (t % FL_LPR);
#pragma unroll 1
  for (int g = 0; g < p.group; ++g) {
    const int h = k.hk * p.group + g;
    float* src = p.dq_acc + ((i64)h * p.sq + q0 + sub) * D + col;
    in_t* dst = static_cast<in_t*>(p.dq) + h * p.q_sh + (i64)(q0 + sub) * p.q_ss + col;
#pragma unroll 1
    for (int r = sub; r < rq; r += FL_PASSES * FL_RPP, src += FL_PASSES * FL_RPP * D, dst += FL_PASSES * FL_RPP * p.q_ss) {
      float x[FL_PASSES][8];
#pragma unroll
      for (int i = 0; i < FL_PASSES; ++i)
        if (r + i * FL_RPP < rq) {
          ld_cg_f4(src + i * FL_RPP * D, x[i][0], x[i][1], x[i][2], x[i][3]);
          ld_cg_f4(src + i * FL_RPP * D + 4, x[i][4], x[i][5], x[i][6], x[i][7]);
        }
#pragma unroll
      for (int i = 0; i < FL_PASSES; ++i)
        if (r + i * FL_RPP < rq) {
          // (after the loads: an ld.cg and a later st.cg of the same thread and address keep their
          // order)
          st_cg_f4(src + i * FL_RPP * D, 0.0f, 0.0f, 0.0f, 0.0f);
          st_cg_f4(src + i * FL_RPP * D + 4, 0.0f, 0.0f, 0.0f, 0.0f);
          u32x4 out;
          out.x = pack2<in_t>(x[i][0] * p.scale, x[i][1] * p.scale);
          out.y = pack2<in_t>(x[i][2] * p.scale, x[i][3] * p.scale);
          out.z = pack2<in_t>(x[i][4] * p.scale, x[i][5] * p.scale);
          out.w = pack2<in_t>(x[i][6] * p.scale, x[i][7] * p.scale);
          *reinterpret_cast<u32x4*>(dst + i * FL_RPP * p.q_ss) = out;
        }
    }
  }
}
