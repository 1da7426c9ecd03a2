// MoE layer (sm_90, CUDA cores): X's rows copied into the expert-sorted order, xs[r] =
// x[row_token[r]], for the gate/up GEMM when one copy costs less than gathering in its loads
// (a gathering GEMM re-reads each row once per column tile, and its producer's row-by-row loads
// cap it far below the plain kernel at prefill; docs/moe.md). A row whose token is out of range
// (a dropped pair, or a row past the routed ones) is written as zeros. 16-byte units, one a
// thread, grid-stride over rows x units; H is a multiple of 8.
#include "common/types.cuh"

extern "C" __global__ void __launch_bounds__(256)
    moe_gather_rows(const u32x4* __restrict__ x, u32x4* __restrict__ xs, const int* __restrict__ row_token,
                    int tokens, int rows, int units) {
  const i64 total = (i64)rows * units;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    const int r = (int)(i / units), c = (int)(i - (i64)r * units);
    const int t = row_token[r];
    u32x4 v = {0u, 0u, 0u, 0u};
    if (t >= 0 && t < tokens) v = x[(i64)t * units + c];
    xs[i] = v;
  }
}
