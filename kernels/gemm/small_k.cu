// GEMM with a short K (a few k16 steps per output element) for a C that TMA cannot store, where
// the whole cost is C's write: one 64x128 tile of C per block of 512 threads, A and B read in
// place whatever their layout and alignment (2-byte loads, coalesced along the operand's
// contiguous dimension, K in chunks of 32 into shared memory as K-major rows), mma.sync m16n8k16
// (16 warps in a 4 x 4 grid, a 16 x 32 warp tile each), then the tile staged as f32 in shared
// memory (over the operand chunks) and stored by rows. Two stores (`SmallKArgs::vec`):
//  - 0: lane l stores element l, l + 32, .. of a row (one 64- or 128-byte run an instruction,
//    whatever C's alignment), alpha * acc + beta * C rounded once (C read only where beta != 0);
//  - 1 (beta = 0): row r is staged s_r elements to the right, s_r its start's distance past a
//    16-byte boundary, so each 16-byte chunk of C's row is one aligned 16-byte chunk of the
//    staging row: lane l stores chunk l (and l + 32) with one st.global.v4 of whole sectors; the
//    row's first and last chunks, partly outside the tile, as 2-, 4- and 8-byte pieces.
// Two blocks an SM (64 registers, 34 KB; no persistent loop): while one loads, one stores.
// Any M, N, K (K past a few chunks is slow: the chunks are not pipelined; the dispatch takes
// this kernel only at a short K, `small_k.rs`).
#include "common/types.cuh"
#include "common/mma_sync.cuh"

constexpr int BM = 64, BN = 128, KC = 32, THREADS = 512;
constexpr int WM = BM / 4, MT = WM / 16;  // 16 warps, 4 along M and 4 along N: 16 x 32 each
constexpr int OP_PITCH = KC + 8;  // elements: 80-byte rows, so ldmatrix's 8 rows hit 8 bank groups
constexpr int C_PITCH = BN + 8;   // floats: 544-byte rows (a multiple of 32), room for the shift
constexpr int SMEM_BYTES = BM * C_PITCH * 4;  // 34,816; the operand chunks (15,360) alias it
static_assert((BM + BN) * OP_PITCH * 2 <= SMEM_BYTES, "the operand chunks fit under the staging");

// Laid out as `SmallKArgs` in src/ops/gemm/small_k.rs.
struct SmallKArgs {
  const void* a;
  const void* b;
  void* c;
  i64 a_m, a_k;  // element strides of A along M and K (one of them 1)
  i64 b_n, b_k;  // of B along N and K
  i64 ldc;
  int m, n, k, tiles_n;
  float alpha, beta;
  int vec;
  int io;  // input (0 bf16, 1 f16) x 3 + output (0 bf16, 1 f16, 2 f32): one variant runs all six
};

// This thread's share of a chunk of one operand: rows [r0, r0 + ROWS) x K [k0, k0 + 32)
// (element (r, k) at src[r * s_r + k * s_k]; `rows` and `k` its extents), copied into K-major
// shared rows of OP_PITCH, zeros outside. Consecutive threads read consecutive elements of the
// contiguous dimension: with K contiguous thread t reads (t / 32 + 16 i, t % 32), else
// (t % ROWS, t / ROWS + (512 / ROWS) i), so its elements are one pointer and one stride apart.
// The strides come from the kernel's parameters each time (no registers held across the K loop).
template <class InT, int ROWS> struct Chunk {
  static constexpr int PER = ROWS * KC / THREADS;
  static __device__ __forceinline__ int r(bool k_inner) { return k_inner ? (int)threadIdx.x / KC : (int)threadIdx.x % ROWS; }
  static __device__ __forceinline__ int kk(bool k_inner) { return k_inner ? (int)threadIdx.x % KC : (int)threadIdx.x / ROWS; }
  static __device__ __forceinline__ int dr(bool k_inner) { return k_inner ? THREADS / KC : 0; }
  static __device__ __forceinline__ int dk(bool k_inner) { return k_inner ? 0 : THREADS / ROWS; }

  static __device__ __forceinline__ void fetch(u16 (&v)[PER], const InT* src, i64 s_r, i64 s_k, int r0, int rows, int k0, int k) {
    const bool ki = s_k == 1;
    const InT* ptr = src + (i64)(r0 + r(ki)) * s_r + (i64)(k0 + kk(ki)) * s_k;
    const i64 step = (i64)dr(ki) * s_r + (i64)dk(ki) * s_k;
    const int rows_left = rows - r0 - r(ki), k_left = k - k0 - kk(ki);
#pragma unroll
    for (int i = 0; i < PER; ++i) v[i] = (i * dr(ki) < rows_left && i * dk(ki) < k_left) ? ptr[i * step].bits : (u16)0;
  }

  static __device__ __forceinline__ void put(u16* dst, const u16 (&v)[PER], bool ki) {
#pragma unroll
    for (int i = 0; i < PER; ++i) dst[(r(ki) + i * dr(ki)) * OP_PITCH + kk(ki) + i * dk(ki)] = v[i];
  }
};

// How far (in elements) C's element (row, col) lies past a 16-byte boundary.
template <class OutT> __device__ __forceinline__ int shift_of(const OutT* c, i64 idx) {
  return (int)(((u64)(c + idx) & 15) / sizeof(OutT));
}

// alpha * v0..v(E-1) rounded and packed: bytes 0-7 of the chunk in lo, 8-15 in hi.
template <class OutT> __device__ __forceinline__ void pack_chunk(const float* v, float alpha, u64& lo, u64& hi) {
  u32 w[4];
  if constexpr (sizeof(OutT) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __float_as_uint(alpha * v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const OutT l = from_float<OutT>(alpha * v[2 * i]), h = from_float<OutT>(alpha * v[2 * i + 1]);
      w[i] = (u32)l.bits | ((u32)h.bits << 16);
    }
  }
  lo = (u64)w[0] | ((u64)w[1] << 32);
  hi = (u64)w[2] | ((u64)w[3] << 32);
}

// One 16-byte chunk of C at `dst` (16-byte aligned) from its staged values `v`.
template <class OutT> __device__ __forceinline__ void store_chunk(OutT* dst, const float* v, float alpha) {
  u64 lo, hi;
  pack_chunk<OutT>(v, alpha, lo, hi);
  asm volatile("st.global.v2.b64 [%0], {%1, %2};\n" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

// Bytes [b, e) of a 16-byte chunk of C at `dst` (a row's first or last, partly outside the tile),
// as aligned pieces: 2 and 4 bytes up to an 8-byte boundary, 8, then 4 and 2 down to e.
template <class OutT> __device__ __forceinline__ void store_part(OutT* dst, const float* v, float alpha, int b, int e) {
  u64 lo, hi;
  pack_chunk<OutT>(v, alpha, lo, hi);
  // the chunk's bytes from b on (b < 16, even)
  auto from = [&](int b) -> u64 { return b >= 8 ? hi >> (8 * (b - 8)) : (lo >> (8 * b)) | (b ? hi << (64 - 8 * b) : 0); };
  char* d = reinterpret_cast<char*>(dst);
  if ((b & 2) && b + 2 <= e) {
    *reinterpret_cast<u16*>(d + b) = (u16)from(b);
    b += 2;
  }
  if ((b & 4) && b + 4 <= e) {
    *reinterpret_cast<u32*>(d + b) = (u32)from(b);
    b += 4;
  }
  if ((b & 7) == 0 && b + 8 <= e) {
    *reinterpret_cast<u64*>(d + b) = from(b);
    b += 8;
  }
  if ((b & 3) == 0 && b + 4 <= e) {
    *reinterpret_cast<u32*>(d + b) = (u32)from(b);
    b += 4;
  }
  if (b + 2 <= e) *reinterpret_cast<u16*>(d + b) = (u16)from(b);
}

// d += a * b for one 16x8x16 tile of f16 (`f16`, uniform) or bf16 inputs: both forms in one
// instruction stream under a predicate, so that one compiled loop serves both input types (two
// loops, one per type, spilled the accumulators).
__device__ __forceinline__ void mma_16816_either(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], bool f16) {
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
      " @p mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      " @!p mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"((u32)f16));
}

// K in chunks of KC through shared memory (`sa`, `sb`), accumulated into this warp's 16 x 32;
// the inputs are f16 where `f16`, else bf16 (loaded alike, as 16-bit patterns).
__device__ __forceinline__ void mainloop(const SmallKArgs p, float (&acc)[MT][4][4], u16* sa, u16* sb, int m0, int n0, int wm, int wn,
                                         int lane, bool f16) {
  typedef bf16 InT;  // (the loads move 16-bit patterns, whichever the type)
  const InT* a = static_cast<const InT*>(p.a);
  const InT* b = static_cast<const InT*>(p.b);
  // ldmatrix lane addresses (see kernels/gemm/mma_sync.cu): A rows wm * 16 + (lane & 15) at
  // k chunk lane >> 4; B rows wn * 32 + 8 (lane >> 4) + (lane & 7) at k chunk (lane >> 3) & 1.
  const u32 a_lane = smem_u32(sa + (wm * WM + (lane & 15)) * OP_PITCH + (lane >> 4) * 8);
  const u32 b_lane = smem_u32(sb + (wn * 32 + ((lane >> 4) << 3) + (lane & 7)) * OP_PITCH + ((lane >> 3) & 1) * 8);
#pragma unroll 1
  for (int k0 = 0; k0 < p.k; k0 += KC) {
    u16 va[Chunk<InT, BM>::PER], vb[Chunk<InT, BN>::PER];
    Chunk<InT, BM>::fetch(va, a, p.a_m, p.a_k, m0, p.m, k0, p.k);
    Chunk<InT, BN>::fetch(vb, b, p.b_n, p.b_k, n0, p.n, k0, p.k);
    if (k0 > 0) __syncthreads();  // every warp is done with the chunk before
    Chunk<InT, BM>::put(sa, va, p.a_k == 1);
    Chunk<InT, BN>::put(sb, vb, p.b_k == 1);
    __syncthreads();
    const int steps = min(KC, p.k - k0 + 15) / 16;  // k16 steps with data (1 or 2)
#pragma unroll
    for (int ks = 0; ks < KC / 16; ++ks) {
      if (ks >= steps) break;
      u32 af[MT][4], bf[4][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(af[mt], a_lane + (mt * 16 * OP_PITCH + ks * 16) * 2);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        u32 r[4];
        ldmatrix_x4(r, b_lane + (np * 16 * OP_PITCH + ks * 16) * 2);
        bf[2 * np][0] = r[0];
        bf[2 * np][1] = r[1];
        bf[2 * np + 1][0] = r[2];
        bf[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_16816_either(acc[mt][nt], af[mt], bf[nt], f16);
    }
  }
}

// The staged tile (row r at stage + r C_PITCH, shifted by its row's shift where `vec`) into C.
template <class OutT>
__device__ __forceinline__ void store_tile(const SmallKArgs p, const float* stage, int m0, int n0, bool vec, int warp, int lane) {
  OutT* c = static_cast<OutT*>(p.c);
  const int rows = min(BM, p.m - m0), cols = min(BN, p.n - n0);
  if (!vec) {
    // warp w: rows w, w + 16, ..; lane l: columns l, l + 32, ..
    for (int r = warp; r < rows; r += THREADS / 32) {
      OutT* dst = c + (i64)(m0 + r) * p.ldc + n0;
      const float* src = stage + r * C_PITCH;
#pragma unroll
      for (int j = 0; j < BN / 32; ++j) {
        const int col = lane + 32 * j;
        if (col < cols) {
          float v = p.alpha * src[col];
          if (p.beta != 0.0f) v += p.beta * to_float(dst[col]);
          dst[col] = from_float<OutT>(v);
        }
      }
    }
    return;
  }
  constexpr int E = 16 / sizeof(OutT);  // elements a 16-byte chunk
#pragma unroll 1
  for (int r = warp; r < rows; r += THREADS / 32) {
    OutT* first = c + (i64)(m0 + r) * p.ldc + n0;
    const int s = shift_of(c, (i64)(m0 + r) * p.ldc + n0);
    OutT* base = first - s;  // 16-byte aligned: chunk q of the row starts at base + q E
    const float* src = stage + r * C_PITCH;
    const int end = s + cols, chunks = (end + E - 1) / E;
#pragma unroll 1
    for (int q = lane; q < chunks; q += 32) {
      float v[E];
#pragma unroll
      for (int i = 0; i < E; i += 4) {
        const float4 f = *reinterpret_cast<const float4*>(src + q * E + i);
        v[i] = f.x;
        v[i + 1] = f.y;
        v[i + 2] = f.z;
        v[i + 3] = f.w;
      }
      const int from = max(s - q * E, 0), to = min(end - q * E, E);
      if (from == 0 && to == E) store_chunk(base + q * E, v, p.alpha);
      else store_part(base + q * E, v, p.alpha, from * (int)sizeof(OutT), to * (int)sizeof(OutT));
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 2) gemm_small_k(SmallKArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* stage = reinterpret_cast<float*>(smem);
  u16* sa = reinterpret_cast<u16*>(smem);
  u16* sb = sa + BM * OP_PITCH;
  const int tm = blockIdx.x / p.tiles_n, tn = blockIdx.x % p.tiles_n;
  const int m0 = tm * BM, n0 = tn * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;
  const int out = p.io % 3;  // 0 bf16, 1 f16, 2 f32

  float acc[MT][4][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  mainloop(p, acc, sa, sb, m0, n0, wm, wn, lane, p.io / 3 == 1);
  __syncthreads();  // the staging overwrites the operand chunks

  // Row r staged from its shift on (where `vec`): C(m0 + r, n0)'s distance past a 16-byte boundary.
  const bool vec = p.vec != 0 && p.beta == 0.0f;
  const u64 es = out == 2 ? 4 : 2;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wm * WM + mt * 16 + g + 8 * h;
      const u64 addr = (u64)p.c + ((u64)(m0 + row) * (u64)p.ldc + (u64)n0) * es;
      const int s = vec ? (int)((addr & 15) / es) : 0;
      float* dst = stage + row * C_PITCH + s + wn * 32 + 2 * t;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        dst[nt * 8] = acc[mt][nt][2 * h];
        dst[nt * 8 + 1] = acc[mt][nt][2 * h + 1];
      }
    }
  __syncthreads();
  if (out == 0) store_tile<bf16>(p, stage, m0, n0, vec, warp, lane);
  else if (out == 1) store_tile<f16>(p, stage, m0, n0, vec, warp, lane);
  else store_tile<float>(p, stage, m0, n0, vec, warp, lane);
}
