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
// lane), so only up to MOE_SORT_MAX experts are sorted; beyond that the order is the experts' own.
//
// It lets the GEMM after it launch at once (programmatic dependent launch): the GEMM's CTAs set up
// their barriers while this runs and wait for its tables in grid_dependency_wait.
//
// KILN_MOE_TRACE = 1 (`kiln moe bench --weights F --timeline`, never dispatched): lane 0 stamps
// its entry and the tables written into `trace` (moe/trace.cuh), a last parameter.
#include "common/grid_dep.cuh"
#include "moe/sched.cuh"
#include "moe/trace.cuh"

#if KILN_MOE_TRACE
#define MOE_PREFIX_TRACE_PARAM , u64* trace
#else
#define MOE_PREFIX_TRACE_PARAM
#endif

// rows_in: offsets (masked == 0) or counts (masked == 1). x_rows: rows of X (E * max_rows when
// masked). bm: the GEMM's tile height; fold: rows a last tile may take past bm (moe_expert_tiles).
// sched: 4E + 2 ints (see moe/sched.cuh).
extern "C" __global__ void __launch_bounds__(32)
    moe_tile_prefix(const int* rows_in, int* sched, int experts, int x_rows, int max_rows, int masked, int bm,
                    int sorted, int fold MOE_PREFIX_TRACE_PARAM) {
#if KILN_MOE_TRACE
  if (threadIdx.x == 0) moe_stamp(trace, 0, MT_ENTRY);
#endif
  launch_dependents();
  moe_build_tables(rows_in, sched, experts, x_rows, max_rows, masked, bm, sorted, fold, threadIdx.x);
#if KILN_MOE_TRACE
  __syncwarp();
  if (threadIdx.x == 0) moe_stamp(trace, 0, MT_PREFIX_DONE);
#endif
}
