// MoE routing (sm_90, CUDA cores): from router logits [T, E] (or a precomputed top-k) to what the
// expert GEMMs read, with no host round trip:
//   topk_ids / topk_weights [T, k]   each token's experts and routing weights
//   counts [E], offsets [E + 1]      rows per expert and where each expert's rows start
//   row_token / row_weight [T k]     for each expert-sorted row: its token and weight
//   pair_row [T k]                   for each (token, slot) pair: its sorted row (-1: dropped)
// Sorted rows are ordered by expert, then by pair index t k + j (stable): the same for any
// launch shape, so two runs give the same tables.
//
// Selection, per token (one warp; lanes take experts lane, lane + 32, ...; keys staged in shared
// memory): key = the logit when neither a bias nor groups are given (softmax and sigmoid are
// increasing, so the top-k of the scores is the top-k of the logits, exactly, ties included),
// else the f32 score (softmax over all E, or sigmoid) plus the bias. Grouped (DeepSeek-V3): the E
// experts form n_group groups of E / n_group, a group scores the sum of its two best keys (its
// one key when groups hold one expert), the topk_group best groups are kept and the others'
// experts never chosen. Then k rounds of a warp arg-max: the larger key wins, on equal keys the
// lower expert index (NaN keys count as -inf). A weight is the expert's score without the bias,
// divided by the sum of the k weights when renormalising, times the routed scaling.
// Precomputed: ids (i32 or i64) and weights ([T, k], or [T, E] read at the id) as given; an id
// outside 0..E-1 drops its pair (pair_row -1: the combine marks the token's output NaN).
//
// Launches: moe_route_select (grid of blocks of `tokens_per_block` tokens: selection, each
// block's expert histogram); with one block it also places the rows itself, else
// moe_route_place (same grid) turns every block's histogram into its rows' first positions and
// places them. Shared memory (dynamic): WARPS x E f32 keys, then 2 E ints.
//
// Fused for the MoE layer (each off when its pointer is null): once the offsets are known, warps 1
// and 2 of the block that wrote them build the tile tables of the layer's two grouped GEMMs (what
// moe_tile_prefix does; moe/sched.cuh), and moe_route_select's blocks past the routing's own zero
// the down projection's f32 accumulator. A decode step then launches 4 kernels instead of 7: on
// the H200's host each launch (or memset) costs ~4.3 us of CPU.
#include "common/types.cuh"
#include "moe/sched.cuh"

constexpr int THREADS = 256, WARPS = THREADS / 32;
#define NEG_INF (__int_as_float(0xff800000u))

// Laid out as `RouteArgs` in src/ops/moe/route.rs.
struct RouteArgs {
  const void* logits;      // [T, E] (logits_dtype) or null (precomputed)
  const float* bias;       // [E] selection bias, or null
  const void* ids_in;      // precomputed [T, k] ids (i32, or i64 when ids_i64)
  const void* weights_in;  // precomputed [T, k] weights (or [T, E] when weights_full)
  int* topk_ids;           // [T k]
  float* topk_weights;     // [T k]
  int* hist;               // [blocks, E]: each block's count per expert
  int* counts;             // [E]
  int* offsets;            // [E + 1]
  int* row_token;          // [T k]
  float* row_weight;       // [T k]
  int* pair_row;           // [T k]
  float scaling;
  int tokens, experts, top_k, tokens_per_block;
  int logits_dtype, weights_dtype;  // 0 bf16, 1 f16, 2 f32
  int ids_i64, weights_full;
  int scoring;  // 0 softmax, 1 sigmoid
  int renormalize;
  int n_group, topk_group;  // n_group <= 1: no groups
  int* tables[2];           // the layer's gate/up and down tile tables (4E + 2 ints each), or null
  int table_bm[2], table_fold[2];
  float4* zero;  // the accumulator zeroed by the extra blocks, or null
  i64 zero_vec4s;
  int route_blocks;  // blocks that route; moe_route_select's grid may hold more, which only zero
  int table_sorted[2];  // each table's experts heaviest first (the 4-bit kernels' order)
};

// Warps 1 and 2 of the block that wrote the offsets (visible to it after a block barrier).
__device__ __forceinline__ void build_layer_tables(const RouteArgs& a, int warp, int lane) {
  if (warp < 1 || warp > 2 || a.tables[warp - 1] == nullptr) return;
  moe_build_tables(a.offsets, a.tables[warp - 1], a.experts, a.tokens * a.top_k, 0, 0, a.table_bm[warp - 1],
                   a.table_sorted[warp - 1], a.table_fold[warp - 1], lane);
}

__device__ __forceinline__ float load_float(const void* p, int dtype, i64 i) {
  if (dtype == 0) return to_float(static_cast<const bf16*>(p)[i]);
  if (dtype == 1) return to_float(static_cast<const f16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// (key, index) pairs: the larger key, on equal keys the lower index.
__device__ __forceinline__ bool route_better(float ka, int ia, float kb, int ib) {
  return ka > kb || (ka == kb && ia < ib);
}

// The warp's best (key, index) over every lane's candidate.
__device__ __forceinline__ void warp_best(float& key, int& idx) {
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) {
    const float k2 = __shfl_xor_sync(0xffffffffu, key, d);
    const int i2 = __shfl_xor_sync(0xffffffffu, idx, d);
    if (route_better(k2, i2, key, idx)) {
      key = k2;
      idx = i2;
    }
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

// The score of logit l: softmax (with the token's max m and sum s of exp(l - m)) or sigmoid.
__device__ __forceinline__ float route_score(const RouteArgs& a, float l, float m, float s) {
  return a.scoring == 0 ? expf(l - m) / s : 1.0f / (1.0f + expf(-l));
}

// Token t's top-k from its logits, by one warp; `keys` holds E floats of this warp. Writes
// topk_ids / topk_weights and counts each chosen expert in `hist` (shared).
__device__ void select_logits(const RouteArgs& a, int t, float* keys, int* hist, int lane) {
  const int E = a.experts, k = a.top_k;
  const i64 row = (i64)t * E;
  float m = NEG_INF;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, load_float(a.logits, a.logits_dtype, row + e));
  m = warp_max(m);
  float s = 0.0f;
  if (a.scoring == 0) {
    for (int e = lane; e < E; e += 32) s += expf(load_float(a.logits, a.logits_dtype, row + e) - m);
    s = warp_sum(s);
  }
  const bool by_logit = a.bias == nullptr && a.n_group <= 1;
  for (int e = lane; e < E; e += 32) {
    const float l = load_float(a.logits, a.logits_dtype, row + e);
    float key = by_logit ? l : route_score(a, l, m, s) + (a.bias != nullptr ? a.bias[e] : 0.0f);
    keys[e] = key != key ? NEG_INF : key;  // NaN: never better than a number
  }
  __syncwarp();
  if (a.n_group > 1) {
    // Lane g < n_group scores group g: its two best keys summed (one key for one-expert groups).
    const int per = E / a.n_group;
    float gs = NEG_INF;
    if (lane < a.n_group) {
      float b1 = NEG_INF, b2 = NEG_INF;
      for (int e = lane * per; e < (lane + 1) * per; ++e) {
        const float v = keys[e];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      gs = per > 1 ? b1 + b2 : b1;
    }
    u32 kept = 0;  // bit g: group g kept (the same in every lane)
    for (int r = 0; r < a.topk_group; ++r) {
      float key = (lane < a.n_group && !((kept >> lane) & 1u)) ? gs : NEG_INF;
      int idx = lane < a.n_group && !((kept >> lane) & 1u) ? lane : 0x7fffffff;
      warp_best(key, idx);
      if (idx < 32) kept |= 1u << idx;
    }
    for (int e = lane; e < E; e += 32)
      if (!((kept >> (e / per)) & 1u)) keys[e] = NEG_INF;
    __syncwarp();
  }
  // k rounds of arg-max; `taken` bit i: expert lane + 32 i chosen already.
  u32 taken = 0;
  int* ids = a.topk_ids + (i64)t * k;
  for (int j = 0; j < k; ++j) {
    float key = NEG_INF;
    int idx = 0x7fffffff;
    for (int i = 0, e = lane; e < E; ++i, e += 32) {
      if ((taken >> i) & 1u) continue;
      if (route_better(keys[e], e, key, idx)) {
        key = keys[e];
        idx = e;
      }
    }
    warp_best(key, idx);
    if (lane == idx % 32) taken |= 1u << (idx / 32);
    if (lane == 0) ids[j] = idx;
  }
  __syncwarp();
  // The weights: scores without the bias, renormalised, scaled.
  float sum = 0.0f;
  for (int j = lane; j < k; j += 32)
    sum += route_score(a, load_float(a.logits, a.logits_dtype, row + ids[j]), m, s);
  sum = warp_sum(sum);
  const float norm = a.renormalize ? a.scaling / sum : a.scaling;
  for (int j = lane; j < k; j += 32) {
    const int e = ids[j];
    a.topk_weights[(i64)t * k + j] = route_score(a, load_float(a.logits, a.logits_dtype, row + e), m, s) * norm;
    atomicAdd(&hist[e], 1);
  }
}

// Token t's precomputed top-k: ids out of range drop their pair (id -1).
__device__ void select_given(const RouteArgs& a, int t, int* hist, int lane) {
  const int E = a.experts, k = a.top_k;
  for (int j = lane; j < k; j += 32) {
    const i64 p = (i64)t * k + j;
    const i64 id = a.ids_i64 ? static_cast<const long long*>(a.ids_in)[p] : (i64) static_cast<const int*>(a.ids_in)[p];
    const bool ok = id >= 0 && id < E;
    const i64 wi = a.weights_full ? (i64)t * E + (ok ? id : 0) : p;
    a.topk_ids[p] = ok ? (int)id : -1;
    a.topk_weights[p] = ok ? load_float(a.weights_in, a.weights_dtype, wi) : 0.0f;
    if (ok) atomicAdd(&hist[id], 1);
  }
}

// Exclusive prefix sums of v[0, n) in place (n <= 8 THREADS); returns the total to every thread.
// Needs a block barrier before (v written) and gives one after.
__device__ int block_exclusive_scan(int* v, int n, int* warp_sums) {
  const int per = (n + THREADS - 1) / THREADS, first = threadIdx.x * per;
  int local = 0;
  for (int i = first; i < min(first + per, n); ++i) local += v[i];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = local;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += o;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0, total = 0;
  for (int w = 0; w < WARPS; ++w) {
    if (w < warp) before += warp_sums[w];
    total += warp_sums[w];
  }
  int run = before + incl - local;
  for (int i = first; i < min(first + per, n); ++i) {
    const int c = v[i];
    v[i] = run;
    run += c;
  }
  __syncthreads();
  return total;
}

// Places block b's pairs, in pair order, from each expert's first free row `next[e]` (shared,
// this block's): warp 0 alone, 32 pairs at a time (peers of one expert ranked by lane).
__device__ void place_rows(const RouteArgs& a, int b, int* next, int lane) {
  const int k = a.top_k;
  const i64 p0 = (i64)b * a.tokens_per_block * k;
  const i64 p1 = min((i64)(b + 1) * a.tokens_per_block, (i64)a.tokens) * k;
  const u32 below = (1u << lane) - 1u;
  for (i64 base = p0; base < p1; base += 32) {
    const i64 p = base + lane;
    const int e = p < p1 ? a.topk_ids[p] : -1;
    const bool ok = e >= 0;
    const u32 peers = __match_any_sync(0xffffffffu, ok ? e : a.experts + lane);
    const int leader = __ffs(peers) - 1;
    int pos = 0;
    if (ok && lane == leader) {
      pos = next[e];
      next[e] = pos + __popc(peers);
    }
    pos = __shfl_sync(0xffffffffu, pos, leader);
    if (ok) {
      const int r = pos + __popc(peers & below);
      a.row_token[r] = (int)(p / k);
      a.row_weight[r] = a.topk_weights[p];
      a.pair_row[p] = r;
    } else if (p < p1) {
      a.pair_row[p] = -1;
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) moe_route_select(const RouteArgs a) {
  extern __shared__ float smem_f[];
  const int E = a.experts;
  float* keys = smem_f + (threadIdx.x / 32) * E;
  int* hist = reinterpret_cast<int*>(smem_f + WARPS * E);
  __shared__ int warp_sums[WARPS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, b = blockIdx.x;
  if (b >= a.route_blocks) {  // a zeroing block: its share of the accumulator, 16 bytes a store
    const i64 blocks = gridDim.x - a.route_blocks;
    for (i64 i = (i64)(b - a.route_blocks) * THREADS + threadIdx.x; i < a.zero_vec4s; i += blocks * THREADS)
      a.zero[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    return;
  }
  for (int e = threadIdx.x; e < E; e += THREADS) hist[e] = 0;
  __syncthreads();
  const int t0 = b * a.tokens_per_block, t1 = min(t0 + a.tokens_per_block, a.tokens);
  for (int t = t0 + warp; t < t1; t += WARPS) {
    if (a.logits != nullptr) select_logits(a, t, keys, hist, lane);
    else select_given(a, t, hist, lane);
  }
  __syncthreads();
  if (a.route_blocks > 1) {
    for (int e = threadIdx.x; e < E; e += THREADS) a.hist[(i64)b * E + e] = hist[e];
    return;
  }
  // One block: its histogram is every expert's count.
  for (int e = threadIdx.x; e < E; e += THREADS) a.counts[e] = hist[e];
  const int total = block_exclusive_scan(hist, E, warp_sums);
  for (int e = threadIdx.x; e < E; e += THREADS) a.offsets[e] = hist[e];
  if (threadIdx.x == 0) a.offsets[E] = total;
  __syncthreads();  // every offset read before warp 0 advances them as its rows' next free rows
  if (warp == 0) place_rows(a, 0, hist, lane);
  else build_layer_tables(a, warp, lane);
}

extern "C" __global__ void __launch_bounds__(THREADS) moe_route_place(const RouteArgs a) {
  extern __shared__ float smem_f[];
  const int E = a.experts, b = blockIdx.x;
  int* next = reinterpret_cast<int*>(smem_f + WARPS * E);
  int* totals = next + E;
  __shared__ int warp_sums[WARPS];
  // Expert e's rows from earlier blocks and from all blocks.
  for (int e = threadIdx.x; e < E; e += THREADS) {
    int before = 0, all = 0;
    for (int o = 0; o < a.route_blocks; ++o) {
      const int c = a.hist[(i64)o * E + e];
      before += o < b ? c : 0;
      all += c;
    }
    next[e] = before;
    totals[e] = all;
    if (b == 0) a.counts[e] = all;
  }
  __syncthreads();
  const int total = block_exclusive_scan(totals, E, warp_sums);
  for (int e = threadIdx.x; e < E; e += THREADS) {
    next[e] += totals[e];
    if (b == 0) a.offsets[e] = totals[e];
  }
  if (b == 0 && threadIdx.x == 0) a.offsets[E] = total;
  __syncthreads();
  if (threadIdx.x < 32) place_rows(a, b, next, threadIdx.x);
  else if (b == 0) build_layer_tables(a, threadIdx.x / 32, threadIdx.x % 32);
}
