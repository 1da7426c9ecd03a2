// Transposes a rows x cols matrix of 16-bit elements (row pitch src_ld) into a cols x rows one
// (row pitch dst_ld). wgmma_tma_ws reads a column-major A with few rows from such a row-major
// copy: TMA then loads K-contiguous A boxes trimmed to M, where the column-major boxes are 64
// elements of M wide, mostly zero fill (8x4096x4096 CC ran 27 us against 17 for RC).
// A 32 x 32 tile goes through shared memory so that both the reads and the writes are coalesced.
#include "common/grid_dep.cuh"
#include "common/types.cuh"

constexpr int TILE = 32, ROWS = 8;

// Block (x, y) transposes the tiles at column x * 32 of rows y * 32, (y + gridDim.y) * 32, ...
extern "C" __global__ void __launch_bounds__(TILE * ROWS)
    transpose_rows(const u16* __restrict__ src, long long src_ld, u16* __restrict__ dst, long long dst_ld, int rows,
                   int cols) {
  __shared__ u16 tile[TILE][TILE + 1];  // +1: the column reads hit 32 different banks
  // The GEMM after this may launch now (its CTAs wait for this grid's completion in
  // grid_dependency_wait); a kernel launched without the attribute is unaffected.
  launch_dependents();
  const int c0 = blockIdx.x * TILE;
  for (long long r0 = (long long)blockIdx.y * TILE; r0 < rows; r0 += (long long)gridDim.y * TILE) {
    for (int i = threadIdx.y; i < TILE; i += ROWS) {
      const long long r = r0 + i;
      const int c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * src_ld + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += ROWS) {
      const int c = c0 + i;  // the output's row
      const long long r = r0 + threadIdx.x;
      if (c < cols && r < rows) dst[c * dst_ld + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}
