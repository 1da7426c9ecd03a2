// The argument block of the paged-decode kernels (decode_paged, decode_combine, kv_append);
// mirrored by `DecodeArgs` in src/ops/attention/decode_paged.rs (a unit test pins the offsets).
#pragma once
#include "common/types.cuh"

struct DecodeArgs {
  const void* q;           // [batch, sq, heads_q, D]
  const void* k_cache;     // [num_pages, page_size, heads_kv, D]
  const void* v_cache;
  void* o;                 // like q
  float* lse;              // [batch, heads_q, sq], natural log
  const int* block_table;  // [batch, max_pages]
  const int* context_lens; // [batch]: cached tokens each sequence attends to, new ones included
  float* part_o;           // splits > 1: [splits][batch * heads_q * sq][D], each split's O / l
  float* part_lse;         // splits > 1: [splits][batch * heads_q * sq], each split's LSE
  const void* k_new;       // kv_append: [batch, n_new, heads_kv, D]
  const void* v_new;
  int batch, heads_q, heads_kv, group, sq;
  int num_pages, page_shift, max_pages; // page_size = 1 << page_shift
  int splits, n_new, causal, m_groups;  // m_groups: CTAs over one KV head's query rows
  float scale_log2;                     // softmax scale * log2(e)
  int head_dim;                         // kv_append (the decode kernels take KILN_D)
};

// A context length the block table cannot hold, or a page id outside the cache: the sequence's
// outputs are written as NaN (never a plausible result) and nothing outside the cache is read.
__device__ __forceinline__ bool context_ok(const DecodeArgs& p, int ctx) {
  return ctx >= 0 && ctx <= (p.max_pages << p.page_shift);
}
__device__ __forceinline__ bool page_ok(const DecodeArgs& p, int page) { return (unsigned)page < (unsigned)p.num_pages; }
