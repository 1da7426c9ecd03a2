// MoE tile prefix sums: one warp turns the per-expert rows on the GPU (offsets [E + 1] of the
// contiguous layout, or counts [E] of the masked layout) into the tables the grouped kernels
// read: m-tile prefix sums, each expert's first X row and its row count. No host round trip, so
// a forward pass (and a CUDA graph) can launch it and the GEMM back to back. Rows are clamped to
// X, so even offsets the host never validated cannot send a later kernel out of bounds.
// Mirrors `Schedule::build` in src/ops/moe/schedule.rs.
//
// sorted = 1 (the dynamically scheduled swap-AB kernel): the tables list the experts heaviest
// first (rows descending, ties by index), so the tiles taken first from the counter are the
// longest and the short ones fill the tail (longest-processing-time-first). Table position i then
// holds expert ids[i], written after the tile counter. Ranking is all-pairs (E / 32 x E reads per
// lane), so only up to SORT_MAX experts are sorted; beyond that the order is the experts' own.
//
// It lets the GEMM after it launch at once (programmatic dependent launch): the GEMM's CTAs set up
// their barriers while this runs and wait for its tables in grid_dependency_wait.
#include "common/grid_dep.cuh"
#include "moe/sched.cuh"

constexpr int SORT_MAX = 64;

// rows_in: offsets (masked == 0) or counts (masked == 1). x_rows: rows of X (E * max_rows when
// masked). bm: the GEMM's tile height; fold: rows a last tile may take past bm (moe_expert_tiles).
// sched: 4E + 2 ints (see moe/sched.cuh).
extern "C" __global__ void __launch_bounds__(32)
    moe_tile_prefix(const int* rows_in, int* sched, int experts, int x_rows, int max_rows, int masked, int bm,
                    int sorted, int fold) {
  launch_dependents();
  const int lane = threadIdx.x;
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
  if (sorted && experts <= SORT_MAX) {
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
  // The tile counter of the dynamically scheduled kernels (grouped_swapab, swiglu_dual): this kernel runs
  // just before them on the same stream, so every launch (and graph replay) starts it at 0.
  if (lane == 0) sched[3 * experts + 1] = 0;
}
