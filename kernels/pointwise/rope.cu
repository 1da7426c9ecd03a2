// The rotary position embedding applied in place to q and k in one launch (sm_90, CUDA cores):
// for each token (b, s), each head of q [B, Hq, S, D] and of k [B, Hk, S, D] (any strides, the
// last 1), its first R dims (R = cos's last dim, even; the rest are left alone) become
//   x * cos + rot(x) * sin          (in f32, rounded once)
// with cos and sin [B, S, R] (or [S, R]: batch stride 0) in q's dtype or f32, and rot either
// transformers' rotate_half (rot(x)[i] = -x[i + R/2], rot(x)[i + R/2] = x[i], i < R/2) or the
// interleaved one (rot(x)[2i] = -x[2i + 1], rot(x)[2i + 1] = x[2i]). So each output element
// pairs element a with element b: (a, b) = (i, i + R/2) or (2i, 2i + 1), and
//   a' = a cos[a] - b sin[a],   b' = b cos[b] + a sin[b].
//   KILN_IN  0 bf16, 1 f16 (q and k)
//   KILN_VEC 8: 16-byte accesses (R a multiple of 16, every stride and base 16-byte aligned);
//            1: one pair per item, any layout.
// One thread per item: a token's head's R / (2 VEC) items, heads of q then k, tokens in order.
#include "common/types.cuh"

constexpr int THREADS = 256;

struct RopeArgs {
  void* q;
  void* k;
  const void* cos;
  const void* sin;
  i64 q_sb, q_sh, q_ss;  // element strides of q [B, Hq, S, D]
  i64 k_sb, k_sh, k_ss;
  i64 c_sb, c_ss;  // cos [B, S, R]
  i64 s_sb, s_ss;  // sin [B, S, R]
  int batch, seq, hq, hk;
  int rot;          // R
  int interleaved;  // 0: rotate_half, 1: interleaved pairs
  int cs_f32;       // cos and sin are f32 (else q's dtype)
  int pad;
};

constexpr int VEC = KILN_VEC;

__device__ __forceinline__ void load_x(const in_t* p, float (&v)[VEC]) {
  if constexpr (VEC == 8) {
    const u32x4 w = *reinterpret_cast<const u32x4*>(p);
    const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = half_to_float<in_t>(words[j / 2], j % 2);
  } else {
    v[0] = to_float(p[0]);
  }
}

__device__ __forceinline__ void store_x(in_t* p, const float (&v)[VEC]) {
  if constexpr (VEC == 8) {
    u32x4 w;
    w.x = pack2<in_t>(v[0], v[1]);
    w.y = pack2<in_t>(v[2], v[3]);
    w.z = pack2<in_t>(v[4], v[5]);
    w.w = pack2<in_t>(v[6], v[7]);
    *reinterpret_cast<u32x4*>(p) = w;
  } else {
    p[0] = from_float<in_t>(v[0]);
  }
}

// VEC values of cos or sin from element i of a row (f32 or q's dtype).
__device__ __forceinline__ void load_cs(const void* row, int f32, int i, float (&v)[VEC]) {
  if (f32) {
    const float* f = static_cast<const float*>(row) + i;
    if constexpr (VEC == 8) {
      const float4 a = reinterpret_cast<const float4*>(f)[0], b = reinterpret_cast<const float4*>(f)[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
      v[0] = f[0];
    }
  } else {
    load_x(static_cast<const in_t*>(row) + i, v);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) rope(RopeArgs p) {
  const int per_head = p.rot / (2 * VEC);
  const int heads = p.hq + p.hk;
  const i64 total = (i64)p.batch * p.seq * heads * per_head;
  const int esz = p.cs_f32 ? 4 : 2;
  for (i64 x = (i64)blockIdx.x * THREADS + threadIdx.x; x < total; x += (i64)gridDim.x * THREADS) {
    const int c = (int)(x % per_head);
    const i64 rest = x / per_head;
    const int h = (int)(rest % heads);
    const i64 tok = rest / heads;
    const int b = (int)(tok / p.seq), s = (int)(tok % p.seq);
    in_t* head = h < p.hq ? static_cast<in_t*>(p.q) + b * p.q_sb + (i64)h * p.q_sh + s * p.q_ss
                          : static_cast<in_t*>(p.k) + b * p.k_sb + (i64)(h - p.hq) * p.k_sh + s * p.k_ss;
    const char* crow = static_cast<const char*>(p.cos) + (b * p.c_sb + s * p.c_ss) * esz;
    const char* srow = static_cast<const char*>(p.sin) + (b * p.s_sb + s * p.s_ss) * esz;
    // The two runs of VEC elements this item reads: a (first of each pair) and b.
    int ia, ib;
    if (VEC == 8 && p.interleaved) {
      ia = c * 16;
      ib = ia + 8;
    } else if (p.interleaved) {
      ia = 2 * c;
      ib = ia + 1;
    } else {
      ia = c * VEC;
      ib = ia + p.rot / 2;
    }
    float a[VEC], bv[VEC], ca[VEC], sa[VEC], cb[VEC], sb[VEC];
    load_x(head + ia, a);
    load_x(head + ib, bv);
    load_cs(crow, p.cs_f32, ia, ca);
    load_cs(srow, p.cs_f32, ia, sa);
    load_cs(crow, p.cs_f32, ib, cb);
    load_cs(srow, p.cs_f32, ib, sb);
    float na[VEC], nb[VEC];
    bool inside = false;  // the pairs lie inside each run: interleaved, 16-byte runs
    if constexpr (VEC == 8) inside = p.interleaved != 0;
    if (inside) {
#pragma unroll
      for (int i = 0; i + 1 < VEC; i += 2) {
        na[i] = a[i] * ca[i] - a[i + 1] * sa[i];
        na[i + 1] = a[i + 1] * ca[i + 1] + a[i] * sa[i + 1];
        nb[i] = bv[i] * cb[i] - bv[i + 1] * sb[i];
        nb[i + 1] = bv[i + 1] * cb[i + 1] + bv[i] * sb[i + 1];
      }
    } else {
      // pairs (a[i], b[i]) across the runs
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        na[i] = a[i] * ca[i] - bv[i] * sa[i];
        nb[i] = bv[i] * cb[i] + a[i] * sb[i];
      }
    }
    store_x(head + ia, na);
    store_x(head + ib, nb);
  }
}
