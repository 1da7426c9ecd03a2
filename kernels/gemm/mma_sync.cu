// GEMM on tensor cores through mma.sync (the sm_80/sm_89 path, and Hopper's rung below wgmma):
// a KILN_BM x KILN_BN block tile, K in steps of KILN_BK through a KILN_STAGES-deep cp.async pipeline
// into XOR-swizzled shared memory, fragments by ldmatrix (.trans for an MN-contiguous operand),
// 8 warps in a 2 x 4 grid, each accumulating a (BM/2) x (BN/4) fp32 sub-tile with m16n8k16.
// Boundary tiles are zero-filled by cp.async (src-size < 16), so any M, N, K works as long as the
// host keeps every row start 16-byte aligned; blocks wholly inside M and N copy their full K
// tiles without predicates. KILN_ELEM_LOADS=1 is the variant for rows that are not: each 16-byte
// chunk is read as 2-byte elements through registers and stored to shared memory (synchronous,
// slower, but still on the tensor cores instead of the SIMT fallback). Blocks walk the tiles in groups of KILN_GROUP_M tile rows, so blocks
// running together share A and B panels in L2.
#include "common/gemm_args.cuh"
#include "common/epilogue.cuh"
#include "common/cp_async.cuh"
#include "common/mma_sync.cuh"

#define BM KILN_BM
#define BN KILN_BN
#define BK KILN_BK
#define STAGES KILN_STAGES
#define THREADS 256
#define WM (BM / 2)  // warp tile: 2 warps along M ...
#define WN (BN / 4)  // ... and 4 along N
#define MT (WM / 16) // m16 tiles per warp
#define NT (WN / 8)  // n8 tiles per warp
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)

static_assert(BK == 32 || BK == 64, "BK is 32 or 64");
static_assert(STAGES >= 2, "the pipeline needs at least two stages");
static_assert(STAGES * STAGE_BYTES <= KILN_SMEM, "KILN_SMEM must cover the pipeline");
// BM in {64, 128, 256} and BN in {64, 128, 256}: the ldmatrix steps between m16 / n16 sub-tiles
// XOR chunk bits 1-3 (MN-major) that the lane offsets leave clear for these warp tiles, and every
// loader keeps rows a multiple of 8 apart (src/ops/gemm/mma_sync.rs declares this as the space).
static_assert(MT == 2 || MT == 4 || MT == 8, "the ldmatrix addressing needs MT in {2, 4, 8}");
static_assert(NT == 2 || NT == 4 || NT == 8, "the ldmatrix addressing needs NT in {2, 4, 8}");
static_assert(sizeof(in_t) == 2, "inputs are 16-bit");

#ifndef KILN_ELEM_LOADS
#define KILN_ELEM_LOADS 0
#endif

// Byte offset of 16-byte chunk c of row r in a tile of CPR chunks per row. Rows of 4 chunks
// (64 B, K-major with BK = 32) XOR the chunk with bits 1-2 of the row; wider rows XOR with the
// row's low 3 bits. Either way the 8 rows one ldmatrix matrix reads, and the 8 chunks 8 threads
// copy, land in 8 different 16-byte bank groups.
template <int CPR> __device__ __forceinline__ u32 swz(int r, int c) {
  const int phys = CPR == 4 ? c ^ ((r >> 1) & 3) : c ^ (r & 7);
  return (u32)(r * CPR * 16 + phys * 16);
}

// One operand's share of the tile copies. The tile is ROWS x CPR 16-byte chunks; its rows run
// along the operand's strided dimension and its chunks along the contiguous one. MN = false: a
// K-major tile (rows along M or N, chunks along K); MN = true: rows along K, chunks along M or N.
// This thread copies chunks (r + i * RS, c), all at the same swizzled column, so one pointer, one
// stride and two counters describe them; each issue() copies the current K tile and steps on.
// Out-of-range parts are zero-filled and never read.
template <int ROWS, int CPR, bool MN> struct TileLoader {
  static constexpr int PER = ROWS * CPR / THREADS, RS = THREADS / CPR;
  static_assert(ROWS * CPR % THREADS == 0 && RS % 8 == 0, "chunks i > 0 share chunk 0's swizzle");
  const in_t* ptr; // chunk 0 of the current K tile
  i64 step;        // elements from chunk i to chunk i + 1
  i64 advance;     // elements from one K tile to the next
  u32 dst;         // shared offset of chunk 0 within the tile
  int fixed;       // K-major: M/N rows left from chunk 0's row; MN-major: its valid elements (0..8)
  int moving;      // K-major: K left from chunk 0's column; MN-major: K rows left from its row

  __device__ __forceinline__ void init(const in_t* src, i64 ld, int row0, int row_lim, int col0, int col_lim) {
    const int r = threadIdx.x / CPR, c = threadIdx.x % CPR;
    dst = swz<CPR>(r, c);
    step = (i64)RS * ld;
    ptr = src + (i64)(row0 + r) * ld + col0 + c * 8;
    if (MN) {
      fixed = min(max(col_lim - (col0 + c * 8), 0), 8);
      moving = row_lim - (row0 + r);
      advance = (i64)BK * ld;
    } else {
      fixed = row_lim - (row0 + r);
      moving = col_lim - (col0 + c * 8);
      advance = BK;
    }
  }

  // `base` is any valid address of the operand, given for fully zero-filled chunks.
  __device__ __forceinline__ void issue(u32 tile, const void* base) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int n = MN ? (i * RS < moving ? fixed : 0) : (i * RS < fixed ? min(max(moving, 0), 8) : 0);
      if (KILN_ELEM_LOADS) copy_elems16(tile + dst + i * RS * CPR * 16, ptr + i * step, n);
      else cp_async16_zfill(tile + dst + i * RS * CPR * 16, n > 0 ? (const void*)(ptr + i * step) : base, n * 2);
    }
    ptr += advance;
    moving -= BK;
  }

  // issue() for a tile the caller knows lies wholly inside the operand: no predicates.
  __device__ __forceinline__ void issue_full(u32 tile) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      if (KILN_ELEM_LOADS) copy_elems16(tile + dst + i * RS * CPR * 16, ptr + i * step, 8);
      else cp_async16_full(tile + dst + i * RS * CPR * 16, ptr + i * step);
    }
    ptr += advance;
    moving -= BK;
  }
};

typedef TileLoader<KILN_A_ROW ? BM : BK, KILN_A_ROW ? BK / 8 : BM / 8, !KILN_A_ROW> ALoader;
typedef TileLoader<KILN_B_ROW ? BK : BN, KILN_B_ROW ? BN / 8 : BK / 8, (bool)KILN_B_ROW> BLoader;

// This lane's ldmatrix offsets (for m/n sub-tile 0 at k step 0) within a stage's A and B tiles.
// K-major: lanes 0-15 address rows 0-15 at k 0-7 and lanes 16-31 the same rows at k 8-15 (A);
// for B, lanes 8j.. address rows (j/2)*8.. at k-chunk j%2. MN-major (.trans): A's lane addresses
// k row (j/2)*8 + l%8 at m-chunk j%2, B's k row (j%2)*8 + l%8 at n-chunk j/2. Both give matrix j
// = fragment register j of A, and registers {b0, b1} of n8 tiles 2i and 2i+1 for B.
__device__ __forceinline__ u32 a_lane_offset(int wm, int lane) {
  if (KILN_A_ROW) return swz<BK / 8>(wm * WM + (lane & 15), lane >> 4);
  return swz<BM / 8>(((lane >> 4) << 3) | (lane & 7), wm * (WM / 8) + ((lane >> 3) & 1));
}
__device__ __forceinline__ u32 b_lane_offset(int wn, int lane) {
  if (KILN_B_ROW) return swz<BN / 8>((((lane >> 3) & 1) << 3) | (lane & 7), wn * (WN / 8) + (lane >> 4));
  return swz<BK / 8>(wn * WN + ((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);
}

// Loads the A and B fragments of k step kk (16 deep) from the stage at `stage`. Stepping to
// another sub-tile or k step flips chunk bits (XOR) where the swizzle mixes them, else adds.
__device__ __forceinline__ void load_frags(u32 (&af)[MT][4], u32 (&bf)[NT][2], u32 stage, u32 a_lane, u32 b_lane, int kk) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if (KILN_A_ROW) ldmatrix_x4(af[mt], stage + ((a_lane + mt * 16 * BK * 2) ^ (kk << 5)));
    else ldmatrix_x4_trans(af[mt], stage + ((a_lane ^ (mt << 5)) + kk * 16 * BM * 2));
  }
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    u32 r[4];
    if (KILN_B_ROW) ldmatrix_x4_trans(r, stage + A_BYTES + ((b_lane ^ (np << 5)) + kk * 16 * BN * 2));
    else ldmatrix_x4(r, stage + A_BYTES + ((b_lane + np * 16 * BK * 2) ^ (kk << 5)));
    bf[2 * np][0] = r[0];
    bf[2 * np][1] = r[1];
    bf[2 * np + 1][0] = r[2];
    bf[2 * np + 1][1] = r[3];
  }
}

// Tile (tm, tn) of block `pid`: column-major within groups of KILN_GROUP_M tile rows.
// Mirrored by `block_tile` in src/ops/gemm/mma_sync.rs.
__device__ __forceinline__ void block_tile(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = KILN_GROUP_M * tiles_n;
  const int group = pid / per_group;
  const int first = group * KILN_GROUP_M;
  const int rows = min(tiles_m - first, KILN_GROUP_M);
  const int in_group = pid - group * per_group;
  tm = first + in_group % rows;
  tn = in_group / rows;
}

// alpha-scaled v0, v1 (+ beta * old) into two adjacent outputs with one aligned store.
template <class T> __device__ __forceinline__ void store_pair(T* dst, float v0, float v1, float beta) {
  u32* d = reinterpret_cast<u32*>(dst);
  if (beta != 0.0f) {
    const u32 old = *d;
    T lo, hi;
    lo.bits = (u16)(old & 0xffff);
    hi.bits = (u16)(old >> 16);
    v0 += beta * to_float(lo);
    v1 += beta * to_float(hi);
  }
  *d = pack2<T>(v0, v1);
}
__device__ __forceinline__ void store_pair(float* dst, float v0, float v1, float beta) {
  float2* d = reinterpret_cast<float2*>(dst);
  if (beta != 0.0f) {
    const float2 old = *d;
    v0 += beta * old.x;
    v1 += beta * old.y;
  }
  *d = make_float2(v0, v1);
}

// Outputs (row, col) and (row, col + 1): one store when both exist and `pair` says C's rows and
// base keep them aligned, else one at a time. Never reads C when beta == 0.
__device__ __forceinline__ void store2(const GemmArgs& p, int row, int col, float v0, float v1, bool pair) {
  if (row >= p.m || col >= p.n) return;
  out_t* c = static_cast<out_t*>(p.c);
  const i64 idx = (i64)row * p.ldc + col;
  if (pair && col + 1 < p.n) {
    store_pair(c + idx, p.alpha * v0, p.alpha * v1, p.beta);
    return;
  }
  store_scaled(c, idx, v0, p.alpha, p.beta);
  if (col + 1 < p.n) store_scaled(c, idx + 1, v1, p.alpha, p.beta);
}

// One K tile of the main loop: mma over the tile in `read` while refilling the stage in `write`
// with tile kt + STAGES - 1 (FULL: known to lie wholly inside A and B).
template <bool FULL>
__device__ __forceinline__ void k_tile(float (&acc)[MT][NT][4], u32 (&af)[2][MT][4], u32 (&bf)[2][NT][2], ALoader& la, BLoader& lb,
                                       const GemmArgs& p, u32 sbase, u32 a_lane, u32 b_lane, int kt, int ktiles, int& read, int& write) {
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    if (kk == BK / 16 - 1) {
      // Tile kt + 1 has landed and every warp is done reading tile kt - 1's stage.
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      read = read + 1 == STAGES ? 0 : read + 1;
    }
    // Fragments of the next k step (the next tile's first after the last step of this one).
    load_frags(af[(kk + 1) % 2], bf[(kk + 1) % 2], sbase + read * STAGE_BYTES, a_lane, b_lane, (kk + 1) % (BK / 16));
    if (kk == 0) {
      // Refill the stage tile kt - 1 used (all reads of it finished before the last barrier).
      // The predicate-free copies interleave well with the mma below; the predicated ones are
      // faster kept apart, behind a branch (measured on H100).
      if (FULL) {
        la.issue_full(sbase + write * STAGE_BYTES);
        lb.issue_full(sbase + write * STAGE_BYTES + A_BYTES);
      } else if (kt + STAGES - 1 < ktiles) {
        la.issue(sbase + write * STAGE_BYTES, p.a);
        lb.issue(sbase + write * STAGE_BYTES + A_BYTES, p.b);
      }
      cp_async_commit();
      write = write + 1 == STAGES ? 0 : write + 1;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_16816<in_t>(acc[mt][nt], af[kk % 2][mt], bf[kk % 2][nt]);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) gemm_mma_sync(GemmArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 sbase = smem_u32(smem);
  // (x - 1) / T + 1 rounds up without overflowing for extents near INT_MAX.
  const int tiles_m = (p.m - 1) / BM + 1, tiles_n = (p.n - 1) / BN + 1;
  int tm, tn;
  block_tile(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;
  const u32 a_lane = a_lane_offset(wm, lane), b_lane = b_lane_offset(wn, lane);

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // Prologue: tiles 0..STAGES-2 in flight, one commit group each (empty past the end of K, so
  // the group count stays uniform and wait_group<STAGES-2> always means "the next tile landed").
  ALoader la;
  BLoader lb;
  if (KILN_A_ROW) la.init(static_cast<const in_t*>(p.a), p.lda, m0, p.m, 0, p.k);
  else la.init(static_cast<const in_t*>(p.a), p.lda, 0, p.k, m0, p.m);
  if (KILN_B_ROW) lb.init(static_cast<const in_t*>(p.b), p.ldb, 0, p.k, n0, p.n);
  else lb.init(static_cast<const in_t*>(p.b), p.ldb, n0, p.n, 0, p.k);
  const int ktiles = (p.k - 1) / BK + 1;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) {
      la.issue(sbase + s * STAGE_BYTES, p.a);
      lb.issue(sbase + s * STAGE_BYTES + A_BYTES, p.b);
    }
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();

  u32 af[2][MT][4], bf[2][NT][2];
  int read = 0, write = STAGES - 1;
  load_frags(af[0], bf[0], sbase, a_lane, b_lane, 0);
  // Interior blocks copy whole tiles without predicates until the refills reach the K tail.
  const bool interior = p.m - m0 >= BM && p.n - n0 >= BN;
  const int split = interior ? max(0, min(ktiles, p.k / BK - (STAGES - 1))) : 0;
  int kt = 0;
  for (; kt < split; ++kt) k_tile<true>(acc, af, bf, la, lb, p, sbase, a_lane, b_lane, kt, ktiles, read, write);
  for (; kt < ktiles; ++kt) k_tile<false>(acc, af, bf, la, lb, p, sbase, a_lane, b_lane, kt, ktiles, read, write);
  cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
  const bool pair = (p.ldc % 2 == 0) && ((u64)p.c % (2 * sizeof(out_t)) == 0);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int row = m0 + wm * WM + mt * 16 + g;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = n0 + wn * WN + nt * 8 + 2 * t;
      store2(p, row, col, acc[mt][nt][0], acc[mt][nt][1], pair);
      store2(p, row + 8, col, acc[mt][nt][2], acc[mt][nt][3], pair);
    }
  }
}
