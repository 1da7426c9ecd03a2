// MoE scheduling shared by the grouped kernels: the argument block, the per-expert tables the
// moe_tile_prefix kernel writes (copied to shared memory at kernel start), the binary search from
// a global m-tile to its expert, and the grouped tile order. Mirrors src/ops/moe/schedule.rs.
#pragma once
#include "common/ring.cuh"
#include "common/types.cuh"

// The argument block of the MoE GEMM kernels, laid out as `MoeArgs` in src/ops/moe/mod.rs.
struct MoeArgs {
  const int* sched;    // moe_tile_prefix's tables: prefix[E + 1], start[E], rows[E]
  void* y;             // output rows, in the row space of X, ldy elements apart
  const float* route;  // SwiGLU: per-row routing weight, or null
  i64 ldy;
  int experts, n, k;
  int tiles_n;
  int interleaved;  // SwiGLU: W1 and W3 interleaved in blocks of 128 rows of one tensor
  int group_m;      // m-tiles swept together in the grouped tile order (any value >= 1 is correct)
  int by_expert;    // 1: the order goes expert by expert, group_m the most m-tiles of a group
  // The MoE layer's row map (row space: the expert-sorted pairs): with KILN_GATHER the X row each
  // row reads (its token); with KILN_COMBINE 1 the output row each row is added into. Else null.
  const int* row_map;
  const void* x;  // X itself (the cp.async gather reads it by address)
};

// An expert's m-tiles: ceil(rows / bm), or with `fold` (rows an expert's last tile may take past
// bm, so a short remainder rides on the tile before it) ceil((rows - fold) / bm), at least one.
__device__ __forceinline__ int moe_expert_tiles(int rows, int bm, int fold) {
  return rows <= 0 ? 0 : max(1, (rows - fold + bm - 1) / bm);
}

// Table layout (ints): m-tile prefix sums [0, E], then each expert's first row [E + 1, 2E + 1),
// then its row count [2E + 1, 3E + 1). Int 3E + 1 of the workspace (not copied to shared memory)
// is the tile counter of the dynamically scheduled kernels, zeroed by moe_tile_prefix; ints
// [3E + 2, 4E + 2) the expert at each table position (the identity unless moe_tile_prefix sorted
// the experts heaviest first; only the swap-AB kernel asks for that and reads them).
__device__ __forceinline__ int moe_table_ints(int experts) { return 3 * experts + 1; }

// The experts heaviest first only up to this many (all-pairs ranking: E / 32 x E reads a lane).
constexpr int MOE_SORT_MAX = 64;

// One warp (every lane calls it, `lane` its index) writes the tables of one grouped GEMM into
// `sched` (4E + 2 ints) from the per-expert rows: offsets [E + 1] (masked == 0) or counts [E]
// (masked == 1), clamped to X's `x_rows` (E * max_rows when masked), so that even offsets the host
// never validated cannot send a GEMM out of bounds. bm: the GEMM's tile height; fold: rows a last
// tile may take past bm; sorted: list the experts heaviest first (moe_tile_prefix.cu says why).
// Mirrors `Schedule::build` in src/ops/moe/schedule/. The moe_tile_prefix kernel runs it alone;
// the MoE layer's routing runs it for both of its GEMMs once the offsets are known.
__device__ __forceinline__ void moe_build_tables(const int* rows_in, int* sched, int experts, int x_rows,
                                                 int max_rows, int masked, int bm, int sorted, int fold,
                                                 int lane) {
  const int per = (experts + 31) / 32;
  const int first = min(lane * per, experts), last = min(first + per, experts);
  auto span = [&](int e, int& start, int& rows) {
    if (masked) {
      start = e * max_rows;
      rows = min(max(rows_in[e], 0), max_rows);
    } else {
      const int lo = min(max(rows_in[e], 0), x_rows);
      const int hi = min(max(rows_in[e + 1], lo), x_rows);
      start = lo;
      rows = hi - lo;
    }
  };
  int* ids = sched + moe_table_ints(experts) + 1;
  if (sorted && experts <= MOE_SORT_MAX) {
    for (int e = first; e < last; ++e) {
      int s, r;
      span(e, s, r);
      int rank = 0;
      for (int o = 0; o < experts; ++o) {
        int so, ro;
        span(o, so, ro);
        rank += (ro > r || (ro == r && o < e)) ? 1 : 0;
      }
      ids[rank] = e;
    }
  } else {
    for (int e = first; e < last; ++e) ids[e] = e;
  }
  __syncwarp();  // every lane's ids are visible to the warp
  int local = 0;
  for (int i = first; i < last; ++i) {
    int s, r;
    span(ids[i], s, r);
    local += moe_expert_tiles(r, bm, fold);
  }
  int inclusive = local;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += v;
  }
  int run = inclusive - local;
  for (int i = first; i < last; ++i) {
    int s, r;
    span(ids[i], s, r);
    sched[i] = run;
    sched[experts + 1 + i] = s;
    sched[2 * experts + 1 + i] = r;
    run += moe_expert_tiles(r, bm, fold);
  }
  if (lane == 31) sched[experts] = inclusive;
  // The tile counter of the dynamically scheduled kernels (grouped_swapab, swiglu_dual): the tables are
  // built before each of their launches on the same stream, so every launch (and replay) starts at 0.
  if (lane == 0) sched[3 * experts + 1] = 0;
}

// Every thread of the block copies part of the tables; follow with a block barrier.
__device__ __forceinline__ void moe_load_tables(int* dst, const int* src, int experts) {
  const int n = moe_table_ints(experts);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// The expert owning global m-tile g: prefix[e] <= g < prefix[e + 1] (so never an empty expert).
// Needs 0 <= g < prefix[experts]. log2(E) steps in shared memory.
__device__ __forceinline__ int moe_find_expert(const int* prefix, int experts, int g) {
  int lo = 0, hi = experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= g) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Tile t of the grouped order over (global m-tiles, n-tiles): `group` m-tiles are swept column
// by column, then the next group, so concurrent CTAs share W tiles (and X rows) through L2.
__device__ __forceinline__ void moe_tile_coords(int t, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
  const int per_group = group * tiles_n;
  const int first = (t / per_group) * group;
  const int rows = min(tiles_m - first, group);
  const int r = t - (first / group) * per_group;
  tm = first + r % rows;
  tn = r / rows;
}

// Tile `local` of one expert's m_e m-tiles x tiles_n n-tiles in the expert-aligned order: the
// expert's m-tiles are cut into ceil(m_e / cap) groups as equal as possible (sizes differ by at
// most one), each swept column by column. No group straddles two experts, so each of an expert's
// W tiles is read by all the m-tiles of its group at once and, when the expert has one group,
// leaves HBM once; with the fixed-width order a group spanning an expert's end re-reads that
// expert's W later, from HBM.
__device__ __forceinline__ void moe_expert_coords(int local, int m_e, int tiles_n, int cap, int& lm, int& tn) {
  const int groups = (m_e + cap - 1) / cap, small = m_e / groups, extra = m_e % groups;
  const int big_tiles = (small + 1) * tiles_n;  // tiles of each of the first `extra` groups
  int first, r, rows;
  if (local < extra * big_tiles) {
    first = (local / big_tiles) * (small + 1);
    r = local % big_tiles;
    rows = small + 1;
  } else {
    const int l = local - extra * big_tiles, per = small * tiles_n;
    first = extra * (small + 1) + (l / per) * small;
    r = l % per;
    rows = small;
  }
  lm = first + r % rows;
  tn = r / rows;
}

// One tile's place: its expert, the X row of its first row, and the rows of it that are real.
struct MoeTile {
  int expert, row0, valid_rows, n0;
};

// Tile t: `by_expert` picks the expert-aligned order (moe_expert_coords, groups of at most
// `group` m-tiles), else the fixed-width grouped order over all m-tiles (moe_tile_coords).
// `fold` > 0 (tables built with the same fold by moe_tile_prefix): an expert's last m-tile takes
// all its remaining rows, up to bm + fold.
__device__ __forceinline__ MoeTile moe_tile(const int* table, int experts, int t, int tiles_m, int tiles_n, int group,
                                            bool by_expert, int bm, int bn, int fold = 0) {
  int g, tn, e;
  if (by_expert) {
    // An expert's tiles are [prefix[e] * tiles_n, prefix[e + 1] * tiles_n).
    e = moe_find_expert(table, experts, t / tiles_n);
    int lm;
    moe_expert_coords(t - table[e] * tiles_n, table[e + 1] - table[e], tiles_n, group, lm, tn);
    g = table[e] + lm;
  } else {
    moe_tile_coords(t, tiles_m, tiles_n, group, g, tn);
    e = moe_find_expert(table, experts, g);
  }
  const int local = (g - table[e]) * bm;
  MoeTile r;
  r.expert = e;
  r.row0 = table[experts + 1 + e] + local;
  const int rest = table[2 * experts + 1 + e] - local;
  r.valid_rows = (fold > 0 && g == table[e + 1] - 1) ? rest : min(rest, bm);
  r.n0 = tn * bn;
  return r;
}

// A two-slot ring in shared memory through which a dynamically scheduled kernel's producer thread
// hands each work index (a tile, a unit) to the consumer warps: full[2] and empty[2] mbarriers at
// `bars` (common/ring.cuh), then the two ints at `bars + 32` (MOE_RING_BYTES in all). The j-th
// index goes through slot j % 2.
constexpr u32 MOE_RING_BYTES = 40;
struct MoeIndexRing {
  MbarRing<2> ring;
  int* slot;

  __device__ __forceinline__ MoeIndexRing(unsigned char* smem_raw, u32 raw, u32 bars_addr)
      : ring{bars_addr}, slot(reinterpret_cast<int*>(smem_raw + (bars_addr - raw) + 32)) {}
  // One thread, before the block barrier that follows barrier set-up: the producer publishes an
  // index (full), every consumer warp has read it (empty).
  __device__ __forceinline__ void init(int consumer_warps) const { ring.init(consumer_warps); }
  // The producer thread: index v as the j-th.
  __device__ __forceinline__ void publish(int j, int v) const {
    const int s = ring.acquire((u32)j);
    slot[s] = v;
    mbar_arrive(ring.full(s));
  }
  // Every consumer thread: the j-th index (lane 0 of each warp frees the slot).
  __device__ __forceinline__ int take(int j, int lane) const {
    const int s = ring.wait_full((u32)j);
    const int v = slot[s];
    __syncwarp();
    ring.release(s, lane);
    return v;
  }
};

// The set-up that the persistent MoE kernels with a stage ring and a tile-index ring share
// (moe/fp4_experts_dq.cu, moe/fp4_experts_w4a8.cu, moe/fp4_experts_w4a8_wide.cu): the stages' full
// and empty barriers at `bars`, the index ring after them, moe_tile_prefix's tables after its
// slots. Thread 0 initialises the stage ring for `readers` warps (lane 0 of each frees the
// stages) and the index ring for `takers` (lane 0 of each takes the tile indices), runs `first()`
// (the kernel's own barriers) and fences the inits; every
// thread runs `every()` (the kernel's own shared tables), the schedule's tables are loaded and
// the block meets.
template <int STAGES>
struct MoeRings {
  MbarRing<STAGES> stages;
  MoeIndexRing ring;
  int* table;

  template <class First, class Every>
  __device__ __forceinline__ MoeRings(unsigned char* smem_raw, u32 raw, u32 bars, const int* sched, int experts,
                                      int readers, int takers, const First& first, const Every& every)
      : stages{bars}, ring(smem_raw, raw, bars + 16u * STAGES), table(ring.slot + 2) {
    if (threadIdx.x == 0) {
      stages.init(readers);
      ring.init(takers);
      first();
      mbar_fence_init();
    }
    every();
    moe_load_tables(table, sched, experts);
    __syncthreads();
  }
};

// A persistent kernel's tile space, from the tables in shared memory (`table`, MoeRings') and the
// workspace `sched`: its m-tiles, its tiles (a row of tiles_n for each m-tile), the tile counter
// after the tables and the expert at each table position after it. The two are addressed from
// `sched` when asked for (a kernel argument, which the compiler reloads rather than keep or spill).
struct MoeTiles {
  int tiles_m, tiles;
  const int* sched;
  int experts;

  __device__ __forceinline__ MoeTiles(const int* table, const int* sched_, int experts_, int tiles_n)
      : tiles_m(table[experts_]), tiles(table[experts_] * tiles_n), sched(sched_), experts(experts_) {}
  __device__ __forceinline__ int* counter() const { return const_cast<int*>(sched) + moe_table_ints(experts); }
  __device__ __forceinline__ int id(int e) const { return sched[moe_table_ints(experts) + 1 + e]; }
};
