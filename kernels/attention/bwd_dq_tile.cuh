// dQ through one TMA tensor reduce per warpgroup and query block, for the backwards that stage it
// so (bwd_fa3_tma_dq.cu, bwd_fa3_lookahead.cu): their shared-memory layout past the ring and the
// tile's three steps. Include after attention/bwd_fa3_block.cuh.
//   The warpgroup's fp32 partial (64 query rows x QN columns) is staged in a tile that a rank-5
//   map over the accumulator describes ([B, H, Sq, D/32, 32]: each row cut into 128-byte pieces,
//   one swizzle row each; box [64 rows][QN/32][32], 128B swizzle, so the 64-bit stores of 8 rows x
//   4 lanes spread over the banks without padding). Each warp stores its 16 rows and fences them
//   for the async proxy; warps 1-3 arrive at the warpgroup's named barrier and go on, warp 0
//   waits there and one thread adds the whole tile with `cp.reduce.async.bulk.tensor` (rows past
//   Sq dropped by the map). That thread waits for the tile to have been read before the next
//   block's dSᵀ barrier, which every writer passes before it rewrites the tile: one staging tile
//   a warpgroup. The deterministic mode keeps the ordered red.global adds on the counters.
#pragma once
#include "attention/bwd_dq_stage.cuh"

// dSᵀ buffers: two, or one split by keys at d128 or BM 128 (two would pass 227 KB; bwd_grads).
constexpr int DS_BUFS = !MEET && (D == 128 || BM == 128) ? 1 : 2;
// One consumer's dQ staging tile [64·DQ_MH][DQ_PIECES][32] fp32, swizzled: DQ_MH tiles of 64 rows,
// one map box each.
constexpr u32 DQ_BYTES = DQ_MH * 64 * QN * 4;
// KILN_BWD_DQ_LATE 1 (the host's bwd_fa3_dq_late): two staging tiles a consumer, a block's tile
// stored with no fence or barrier of its own and added after the next block's dSᵀ barrier
// (DqTile::store, before_meet, reduce; bwd_fa3_lookahead.cu's walk).
#if defined(KILN_BWD_DQ_LATE)
constexpr bool DQ_LATE = KILN_BWD_DQ_LATE != 0;
#else
constexpr bool DQ_LATE = false;
#endif
constexpr int DQ_BUFS = DQ_LATE ? 2 : 1;
constexpr u32 OFF_DS = 2 * KV_BYTES + STAGES * STAGE_BYTES;
constexpr u32 OFF_DQ = OFF_DS + DS_BUFS * DS_BYTES;  // 1024-aligned: the tiles' swizzle follows address bits
constexpr u32 OFF_VEC = OFF_DQ + 2 * DQ_BUFS * DQ_BYTES;  // per stage: LSE·log2e [BM], then D [BM]
// DET_WRITER: after the vectors, the walk table, just below the barriers (bwd_fa3_block.cuh:
// walk_put).
constexpr u32 OFF_WALK = OFF_VEC + STAGES * 2 * BM * 4;
constexpr u32 OFF_BARS = OFF_WALK + (DET_WRITER ? WALK_DEPTH * 8 : 0);
static_assert(QN % 32 == 0 && OFF_DQ % 1024 == 0 && DQ_BYTES % 1024 == 0, "staging tiles of 128-byte pieces on the swizzle repeat");
static_assert(KILN_SMEM >= 1024 + OFF_BARS + 8 * (1 + 2 * STAGES), "KILN_SMEM too small");

// Consumer c's staging tile and the map it is added through.
struct DqTile {
  const TmaMap* map;
  u32 smem;    // the tile (1024-aligned; DQ_LATE: the first of two, DQ_BYTES apart)
  int col0;    // the consumer's first dQ column
  int row0;    // its first dQ row in the step (the row split: 64c)
  bool adder;  // warp 0, lane 0 of the warpgroup: issues the reduce and waits for it

  // Before the dSᵀ barrier: the previous block's reduce has read the tile (every writer passes
  // that barrier before it stores its rows again). DQ_LATE: the reduce issued in the previous
  // block (of the block before it) has read its buffer, which the writers rewrite after the
  // barrier; their stores of the previous block are fenced for the async proxy by the dSᵀ fence
  // just before (fence.proxy.async orders every earlier generic write of the thread), so that the
  // reduce issued after the barrier reads them.
  __device__ __forceinline__ void before_meet() const {
    if (adder && !DQ_FUSED) tma_store_wait_read<0>();  // (DQ_FUSED: the writer adds)
  }

  // This block's partial dq of head h, rows m0 .. into the accumulator: dq[hh] the m64 partial of
  // rows m0 + 64hh .. (MH halves); sem: the deterministic mode's counter (bwd_fa3_wgmma's ordered
  // atomics), else null.
  template <int H>
  __device__ __forceinline__ void add(const float (&dq)[H][QN / 2], const AttnBwdArgs& p, const BwdWalk& k, const BwdThread& th, int h,
                                      int m0, u32* sem) const {
    if (sem != nullptr) {
      add_dq_atomics(dq, p, k, th, h, m0, sem);
      return;
    }
    store(dq, th, smem);
    fence_proxy_async_shared();
    // Warps 1-3 signal and go on; warp 0 waits for them, and one thread adds the tile.
    if (th.w != 0) {
      named_barrier_arrive(4 + th.c, 128);
    } else {
      named_barrier_sync(4 + th.c, 128);
      reduce(smem, p, k, h, m0, H);
    }
  }

  // The warp's rows 64hh + 16w .. + 15 of dq into the tile at `tile` (stage_dq_rows).
  template <int H> __device__ __forceinline__ void store(const float (&dq)[H][QN / 2], const BwdThread& th, u32 tile) const {
    stage_dq_rows<H>(dq, th.krow, th.t, tile);
  }

  // By the adder, once every writer has fenced its rows: the tile at `tile` (rows m0 + row0 .. of
  // head h, `halves` of 64 rows) added into the accumulator, a reduce per 64 rows (the map's box; a
  // half that starts past Sq is not issued), as one bulk group.
  __device__ __forceinline__ void reduce(u32 tile, const AttnBwdArgs& p, const BwdWalk& k, int h, int m0, int halves) const {
    // (a packed sequence: its rows from k.q0(p), bounded by its own length)
    if (adder) reduce_dq_tile<DQ_PIECES, DQ_MH>(map, tile, k.q0(p) + k.rows_q(p), k.bi(), h, k.q0(p) + m0 + row0, col0, halves);
  }

  // DET_WRITER, deterministic mode: this block's partial handed to writer w = it % writers
  // (det_writers) through the tile, once writer (it - 1) % writers has handed back the previous
  // block's (named barrier 10 + 4w + c; full: 8 + 4w + c, each the warpgroup's 128 threads and
  // the writer's 32).
  template <int H>
  __device__ __forceinline__ void hand_over(const float (&dq)[H][QN / 2], const BwdThread& th, int it, int writers) const {
    if (it > 0) named_barrier_sync(10 + 4 * ((it - 1) & (writers - 1)) + th.c, 160);
    store(dq, th, smem);
    fence_proxy_async_shared();
    named_barrier_arrive(8 + 4 * (it & (writers - 1)) + th.c, 160);
  }

  // DQ_LATE, buffer b's tile.
  __device__ __forceinline__ u32 buf(int b) const { return smem + b * DQ_BYTES; }

  // The same for a 64-row query block's partial in one m64 accumulator.
  __device__ __forceinline__ void add(const float (&dq)[QN / 2], const AttnBwdArgs& p, const BwdWalk& k, const BwdThread& th, int h, int m0,
                                      u32* sem) const {
    add<1>(reinterpret_cast<const float (&)[1][QN / 2]>(dq), p, k, th, h, m0, sem);
  }

  // The last add done before the block's memory goes.
  __device__ __forceinline__ void before_exit() const {
    if (adder) tma_store_wait<0>();
  }
};

// Consumer c's tile: staging tiles from OFF_DQ past the aligned base of the shared memory, DQ_BUFS
// per consumer.
__device__ __forceinline__ DqTile dq_tile(const TmaMap* map, unsigned char* smem_raw, int c) {
  return DqTile{map, smem_align1024(smem_raw) + OFF_DQ + c * DQ_BUFS * DQ_BYTES, SPLIT_N ? c * QN : 0, SPLIT_M ? 64 * c : 0,
                threadIdx.x % 128 == 0};
}

// (red_release_add, fence_proxy_async_global: bwd_dq.cuh)
// The writer's adds of one block (lane 0: tiles t0 and t1 into head h, query block mb), the tiles
// read when it returns; between(): once consumer 0's adds are complete, before consumer 1's are
// issued, which split by keys (both add to every element) is their order. Then (the whole warp)
// the tiles handed back to the consumers unless it was the walk's last block.
template <class Between>
__device__ __forceinline__ void writer_add(const DqTile& t0, const DqTile& t1, const AttnBwdArgs& p, const BwdWalk& k, int h, int mb,
                                           const Between& between) {
  t0.reduce(t0.smem, p, k, h, mb * BM, DQ_MH);
  if (!MEET) {
    tma_store_wait<0>();
    between();
  }
  t1.reduce(t1.smem, p, k, h, mb * BM, DQ_MH);
  tma_store_wait_read<0>();
}
__device__ __forceinline__ void writer_hand_back(bool more, u32 bar) {
  __syncwarp();
  if (more) {
    named_barrier_arrive(bar, 160);
    named_barrier_arrive(bar + 1, 160);
  }
}

// The deterministic mode's writer warps: 2 with KILN_BWD_DET_WRITERS=2 (p.det_writers), else 1.
__device__ __forceinline__ int det_writers(const AttnBwdArgs& p) { return p.det_writers == 2 ? 2 : 1; }

// KILN_BWD_DET_WRITER 2, the writer's loop (dq_writer's tiles t0, t1 and group g): a block's counter
// is bumped as soon as its adds are complete, and the next block's turn is waited for before its
// tiles arrive. The late bump (bwd_fa3_ordered_dq's, removed 2026-11-30) put a step between a
// block's add and the next adder's turn:
// where the order has the adders of a query block one step apart (d64's 128-row steps, S4096:
// 32 key blocks of a head over 32 query blocks) every hop then waited for the previous block's
// next tiles, and the consumers for the writer (H200 ncu, d64 B4 H16 S4096, 2026-11-29: 29.7 % of
// all stall samples at the hand-back barrier, 68 % of the counter reads not yet due). Here the
// consumers wait only for the tiles' issue and read: the counter's wait, the adds' completion and
// the bump run while they compute the next block. The next block's counter is read before this
// block's adds are waited for, so that a writer's step is the issue, the longer of that read's
// round trip and the completion, and the bump (in one thread they would add up to more than
// d128's step). The next block's (head, query block) is in the walk table once this block's tiles
// are handed over: the consumers waited for its stage (the lookahead's next Sᵀ) before they
// stored them.
//   Writer j of `writers` (det_writers) takes blocks j, j + writers, ..: with two (KILN_BWD_DET_WRITERS
// =2), each has two consumer steps for a block's issue, read, counter read, completion and bump.
// The H200 profile of one writer (ncu, d128 B2 H16 S8192, 7102da0) put 18.1 % of all stall samples
// on the consumers' first dQ store after the hand-back barrier while the writer never waited at
// its tiles' barrier (under 0.3 %): it was busy every step with the reduces' read (2.5 %), the
// counter's acquire (1.6 %) and the release (1.3 %), d128's step of ~2.3 us being about its own.
// Its next block's entry is not yet in the walk table when it reads that block's counter (two
// stages on), so it computes it (det_walk_at).
__device__ __forceinline__ void dq_writer_eager(const DqTile& t0, const DqTile& t1, const BwdSmem& sm, const AttnBwdArgs& p,
                                                const BwdWalk& k, const DetGroup& g, int j, int writers) {
  const bool det = p.dq_sem != nullptr;
  // lane 0: the counter of iteration `it` (its walk entry from the table, or computed) and this
  // block's rank there
  auto counter = [&](int it, bool table, u32& rank) -> u32* {
    int h, mb;
    if (table) {
      walk_get(sm, it, h, mb);
    } else {
      det_walk_at(k, p, it, h, mb);
    }
    rank = det_rank(k, p, g, mb);
    return p.dq_sem + ((i64)k.b * p.heads_q + h) * p.m_blocks + mb;
  };
  const u32 full = 8 + 4 * j;  // (full, full + 1; the hand-back: full + 2, full + 3)
  u32* sem = nullptr;
  for (int it = j; it < k.iters; it += writers) {
    named_barrier_sync(full, 160);
    named_barrier_sync(full + 1, 160);
    int h, mb;
    walk_get(sm, it, h, mb);
    if (t0.adder) {
      if (det && it == j) {  // (the later blocks' turns: waited for ahead, below)
        u32 rank;
        sem = counter(it, true, rank);
        while (ld_acquire(sem) < rank) {
        }
      }
      if (det) fence_proxy_async_global();  // (the counter's acquire before the bulk adds)
      writer_add(t0, t1, p, k, h, mb, [] {});
    }
    writer_hand_back(it + 1 < k.iters, full + 2);
    if (t0.adder && det) {
      // the next block's counter read first, so that its round trip overlaps these adds'
      // completion (an acquire: no later access moves above it; this block's bump is later)
      u32 rank = 0, at = 0;
      u32* next = nullptr;
      if (it + writers < k.iters) {
        next = counter(it + writers, writers == 1, rank);
        at = ld_acquire(next);
      }
      tma_store_wait<0>();
      fence_proxy_async_global();
      red_release_add(sem, 1);
      if (next != nullptr) {
        while (at < rank) at = ld_acquire(next);  // (bumped first: a waiting writer holds nothing)
        sem = next;
      }
    }
    __syncwarp();
  }
  if (t0.adder) tma_store_wait<0>();
}

// KILN_BWD_DET_WRITER: the writer warp (warp 1 of warpgroup 0, at the producer's registers; with
// p.det_writers 2 warps 1 and 2 in turn, writer j = warp - 1 on barriers 8 + 4j ..), over the
// walk table. Per query block: both consumers' tiles handed over (named barriers 8 + c), then
// lane 0 waits until the counter of (head, query block) reads this key block's rank in the fixed
// order (det_rank: every block before it has added), adds the tiles by TMA reduce and hands them
// back once read (named barriers 10 + c; not after the last block). Split by keys both tiles add
// to every element, so consumer 0's completes before consumer 1's is issued. A block's counter is
// bumped as soon as its adds are complete (dq_writer_eager). A writer that waited holding its
// bump (as it did until 2026-11-29) made block i's bump wait on block i + 1's, and where the
// rotated order has blocks one step apart (query blocks per group member gs = 1: Sq 65 Skv 200 at
// d128, S4096 at d64) the group's waits closed a ring and hung (det_schedule.rs models the order
// and the rules). Without counters the same adds in no order.
__device__ __forceinline__ void dq_writer(const TmaMap* map, const BwdSmem& sm, const AttnBwdArgs& p, const BwdWalk& k, int j) {
  const int writers = det_writers(p);
  if (!DET_WRITER || j >= writers) return;
  const bool lead = threadIdx.x % 32 == 0, det = p.dq_sem != nullptr;
  const u32 base = sm.sk + OFF_DQ;  // (sm.sk: the aligned base)
  const DqTile t0{map, base, 0, 0, lead}, t1{map, base + DQ_BUFS * DQ_BYTES, SPLIT_N ? QN : 0, SPLIT_M ? 64 : 0, lead};
  const DetGroup g = det ? det_group(k, p) : DetGroup{0, 1, 0};
  dq_writer_eager(t0, t1, sm, p, k, g, j, writers);
}
