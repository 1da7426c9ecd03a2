// The TMA-store epilogue's staging writes: one chunk of a consumer's 64-row accumulator tile
// (wgmma m64nN f32 fragment: register i of lane l in warp w holds row 16w + l/4 + 8((i>>1)&1),
// column 8(i>>2) + 2(l%4) + (i&1)) into a 1024-aligned 8 KB buffer of 64 rows x 128 bytes in the
// 128B swizzle a TMA store map with CU_TENSOR_MAP_SWIZZLE_128B reads. A chunk is 64 columns of
// 16-bit C or 32 of f32 C; `ch` is its index in the tile. store_staged_chunk is the sequence
// around the staging that sends a chunk to C by TMA.
#pragma once
#include "common/mbarrier.cuh"
#include "common/mem_ops.cuh"
#include "common/stmatrix.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"

// One chunk out through staging buffer `buf`, by one warpgroup (128 threads on named barrier
// `bar`, `leader` its first thread). The warpgroup alternates two buffers, so the bulk group
// two chunks back is the last one reading `buf` (PENDING = 1; with one buffer, PENDING = 0: the
// chunk before): the leader waits for it, the warpgroup writes
// the chunk (`stage()`), makes the writes visible to the async proxy, and the leader sends it
// to (c0, c1) of `map` in a group of its own. `accumulate` (beta == 1) adds it to C there
// instead of overwriting C (TMA's reduce-add: C is not read by the kernel).
template <int PENDING = 1, class Stage>
__device__ __forceinline__ void store_staged_chunk(const TmaMap* map, u32 buf, u32 bar, bool leader, int c0, int c1,
                                                   bool accumulate, Stage stage) {
  if (leader) tma_store_wait_read<PENDING>();
  named_barrier_sync(bar, 128);
  stage();
  fence_proxy_async_shared();
  named_barrier_sync(bar, 128);
  if (leader) {
    if (accumulate) tma_reduce_add_2d(map, buf, c0, c1);
    else tma_store_2d(map, buf, c0, c1);
    tma_store_commit();
  }
}

// 16-bit C: pair(J, x) is the x-th 16-bit pair of 16-column block J (accumulators 8J + 2x,
// 8J + 2x + 1). Block jj of the chunk is one stmatrix.x4 per warp: matrices (rows 0-7 | 8-15) x
// (cols 0-7 | 8-15) of the warp's 16 rows are pairs 0..3; lane l addresses row
// srow = 16w + (l & 15), 16-byte chunk 2jj + (l >> 4), stored at chunk ^ (row & 7): each 8x8
// matrix hits 8 distinct bank quads.
template <class Pair>
__device__ __forceinline__ void stage_chunk_16(u32 buf, int ch, int srow, int lane, Pair pair) {
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    const int J = 4 * ch + jj;
    const u32 chunk = 2 * jj + (lane >> 4);
    stmatrix_x4(buf + swizzle128_offset(srow, chunk), pair(J, 0), pair(J, 1), pair(J, 2), pair(J, 3));
  }
}

// f32 C: val(i) is accumulator i, scaled. 8-column group J = 4 ch + jj: the lane's two columns
// 2 (l % 4) of rows 16w + l/4 (accumulators 4J, 4J + 1) and 8 below (4J + 2, 4J + 3), 8 bytes
// each, in 16-byte chunk 2jj + (l % 4) / 2 of the 128-byte row, swizzled. A warp's 8 rows share
// bank groups in pairs: two wavefronts for its 256 bytes, the least there can be.
template <class Val>
__device__ __forceinline__ void stage_chunk_f32(u32 buf, int ch, int w, int lane, Val val) {
  const int frow = 16 * w + lane / 4;
  const u32 half = 8u * (lane & 1);
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    const int J = 4 * ch + jj, chunk = 2 * jj + ((lane & 3) >> 1);
    st_shared_f2(buf + swizzle128_offset(frow, chunk) + half, val(4 * J), val(4 * J + 1));
    st_shared_f2(buf + swizzle128_offset(frow + 8, chunk) + half, val(4 * J + 2), val(4 * J + 3));
  }
}

// The C-load epilogue (KILN_EPI = 2: beta other than 0 and 1, where C is read): a chunk's old C
// is loaded by TMA into the staging buffer it will be staged in, completing on `bar` (one
// arrival, the issuing thread's, plus the box's bytes, zero-filled ones included).
__device__ __forceinline__ void load_c_chunk(const TmaMap* map, u32 buf, u32 bar, int c0, int c1) {
  mbar_arrive_expect_tx(bar, 64 * 128);
  tma_load_2d(buf, map, bar, c0, c1);
}

// The old C of a tile's first two chunks (of nch, at columns n0.., rows m0..) into consumer c's
// two staging buffers (2c and 2c + 1 of the 8 KB buffers at `stage`, with their barriers at
// `bars`, 8 bytes each), starting with the one its chunk count `epi_chunks` stages next. Both
// buffers must be free: the last tile's stores have read them.
__device__ __forceinline__ void load_first_c_chunks(const TmaMap* map, u32 stage, u32 bars, int c, u32 epi_chunks,
                                                    int nch, int m0, int n0, int c_cols) {
  for (int j = 0; j < 2 && j < nch; ++j) {
    const u32 b = 2 * c + ((epi_chunks + j) & 1);
    load_c_chunk(map, stage + b * (64 * 128), bars + 8u * b, n0 + c_cols * j, m0);
  }
}

// stage_chunk_16 over a buffer that holds the chunk's old C: each pair is
// val(i) + beta * old, rounded once, where old is read from the place the pair is written
// (pair x of block J: row 16w + l/4 + 8(x & 1), column 16 jj + 8(x >> 1) + 2(l % 4)). A warp
// reads and writes only its own 16 rows, and its four reads of a block precede the block's
// stmatrix (its operands).
template <class T, class Val>
__device__ __forceinline__ void stage_chunk_16_blend(u32 buf, int ch, int srow, int w, int lane, float beta, Val val) {
  const int frow = 16 * w + lane / 4;
  stage_chunk_16(buf, ch, srow, lane, [&](int J, int x) {
    const int byte = 32 * (J - 4 * ch) + 16 * (x >> 1) + 4 * (lane & 3);
    const u32 old = ld_shared_u32(buf + swizzle128_offset(frow + 8 * (x & 1), byte >> 4) + (byte & 15));
    return pack2<T>(val(8 * J + 2 * x) + beta * half_to_float<T>(old, 0),
                    val(8 * J + 2 * x + 1) + beta * half_to_float<T>(old, 1));
  });
}

// stage_chunk_f32 over a buffer that holds the chunk's old C: val(i) + beta * old, old read
// from where accumulator i is written (each thread its own elements).
template <class Val>
__device__ __forceinline__ void stage_chunk_f32_blend(u32 buf, int ch, int w, int lane, float beta, Val val) {
  const int frow = 16 * w + lane / 4;
  stage_chunk_f32(buf, ch, w, lane, [&](int i) {
    const int jj = i / 4 - 4 * ch;
    const u32 a = buf + swizzle128_offset(frow + 8 * ((i >> 1) & 1), 2 * jj + ((lane & 3) >> 1)) + 8u * (lane & 1) +
                  4u * (i & 1);
    return val(i) + beta * ld_shared_f32(a);
  });
}

// A consumer warpgroup's TMA-store epilogue (gemm/wgmma_tma_ws.cu and its ping-pong kernel):
// chunks of its 64-row accumulator tile, C_COLS columns each (64 16-bit, 32 f32), go to C
// through two 8 KB staging buffers of its own, alternately, so that one is written while the
// other's bulk store still reads it. The buffers of consumer c are 2c and 2c + 1 of `stage`.
//   EPI = 1 (beta 0 or 1, the host's choice): the chunk is stored, or added to C by TMA's
//   reduce-add where beta == 1 (C is not read by the kernel).
//   EPI = 2 (any other beta): chunk ch's old C was loaded by TMA into its buffer
//   (load_first_chunks, or two chunks back), the staging blends alpha * acc + beta * C, and
//   chunk ch + 2 (of nch) is loaded into the buffer once its store has read it. Buffer b's k-th
//   load completes phase k of its barrier (bars + 8b), and every chunk staged had one load: the
//   e-th chunk waits on parity (e >> 1) & 1.
// NBUF = 1 (EPI 1 only): one buffer per consumer (buffer c), each chunk's staging waiting for
// the previous chunk's store to have read it: half the shared memory, for a deeper ring.
template <int EPI, class OutT, int NBUF = 2>
struct TmaStoreEpilogue {
  static_assert(NBUF == 2 || (NBUF == 1 && EPI == 1), "one staging buffer only without the C load");
  static constexpr bool C_LOAD = EPI == 2;
  static constexpr int C_COLS = sizeof(OutT) == 4 ? 32 : 64;
  static constexpr u32 CHUNK_BYTES = 64 * 128;
  u32 stage, bars;  // the staging buffers; C_LOAD: one mbarrier per buffer
  int c, w, lane;   // the consumer, its warp and lane
  bool leader;      // the consumer's first thread, which issues the bulk copies
  u32 chunks;       // chunks staged so far: picks the buffer
  int srow;         // the 16-bit staging row this lane addresses

  __device__ __forceinline__ TmaStoreEpilogue(u32 stage_, u32 bars_, int c_, int w_, int lane_)
      : stage(stage_), bars(bars_), c(c_), w(w_), lane(lane_), leader((threadIdx.x % 128) == 0), chunks(0),
        srow(16 * w_ + (lane_ & 15)) {}

  // Chunk ch of nch of the consumer's 64 x N tile to C at (m0, n0 + C_COLS ch). 16-bit C (EPI 1):
  // get(J, x) is the x-th 16-bit pair of 16-column block J (accumulators 8J + 2x, 8J + 2x + 1);
  // otherwise get(i) is accumulator i, scaled.
  template <class Get>
  __device__ __forceinline__ void store_chunk(const TmaMap* map, int ch, int nch, int m0, int n0, float beta, Get get) {
    const u32 buf = stage + (NBUF * c + (chunks % NBUF)) * CHUNK_BYTES;
    const u32 cbar = bars + 8u * (2 * c + (chunks & 1));
    if (C_LOAD) mbar_wait(cbar, (chunks >> 1) & 1);
    store_staged_chunk<NBUF - 1>(map, buf, 1 + c, leader, n0 + C_COLS * ch, m0, !C_LOAD && beta != 0.0f, [&] {
      if constexpr (EPI == 2 && sizeof(OutT) == 4) stage_chunk_f32_blend(buf, ch, w, lane, beta, get);
      else if constexpr (EPI == 2) stage_chunk_16_blend<OutT>(buf, ch, srow, w, lane, beta, get);
      else if constexpr (sizeof(OutT) == 4) stage_chunk_f32(buf, ch, w, lane, get);
      else stage_chunk_16(buf, ch, srow, lane, get);
    });
    // After the last chunk the wait frees both buffers for the next tile's first loads; not
    // after the one before it, whose buffer nothing reloads in this tile.
    if (C_LOAD && leader && ch + 2 != nch) {
      tma_store_wait_read<0>();
      if (ch + 2 < nch) load_c_chunk(map, buf, cbar, n0 + C_COLS * (ch + 2), m0);
    }
    ++chunks;
  }

  // store_chunk of accumulators acc (the wgmma m64nN fragment), scaled by alpha.
  template <int N>
  __device__ __forceinline__ void store_acc_chunk(const TmaMap* map, int ch, int nch, int m0, int n0, float alpha,
                                                  float beta, const float (&acc)[N]) {
    if constexpr (sizeof(OutT) == 4 || EPI == 2)
      store_chunk(map, ch, nch, m0, n0, beta, [&](int i) { return alpha * acc[i]; });
    else
      store_chunk(map, ch, nch, m0, n0, beta, [&](int J, int x) {
        return pack2<OutT>(alpha * acc[8 * J + 2 * x], alpha * acc[8 * J + 2 * x + 1]);
      });
  }

  // C_LOAD: the old C of a tile's first two chunks (of nch, at rows m0.., columns n0..) into the
  // two buffers. Both must be free: the last tile's last store_chunk waited for that.
  __device__ __forceinline__ void load_first_chunks(const TmaMap* map, int nch, int m0, int n0) {
    if (C_LOAD && leader) load_first_c_chunks(map, stage, bars, c, chunks, nch, m0, n0, C_COLS);
  }
};
