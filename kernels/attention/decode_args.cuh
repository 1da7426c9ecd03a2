// The argument block of the paged-decode kernels (decode_paged, decode_combine, kv_append);
// mirrored by `DecodeArgs` in src/ops/attention/decode_paged.rs (a unit test pins the offsets).
#pragma once
#include "common/types.cuh"

struct DecodeArgs {
  const void* q;           // [batch, sq, heads_q, D] (strides q_s*)
  const void* k_cache;     // [num_pages, page_size, heads_kv, D] (strides k_s*), or dense
  const void* v_cache;     //   [batch, S, heads_kv, D] when block_table is null
  void* o;                 // like q (strides o_s*)
  float* lse;              // [batch, heads_q, sq], natural log
  const int* block_table;  // [batch, max_pages]; null: a dense cache (page b is sequence b)
  const int* context_lens; // [batch]: cached tokens each sequence attends to, new ones included;
                           //   null: every sequence attends to max_ctx
  float* part_o;           // splits > 1: [splits][batch * heads_q * sq][D], each split's O / l
  float* part_lse;         // splits > 1: [splits][batch * heads_q * sq], each split's LSE
  const void* k_new;       // kv_append: [batch, n_new, heads_kv, D]
  const void* v_new;
  int batch, heads_q, heads_kv, group, sq;
  int num_pages, page_shift, max_pages; // page_size = 1 << page_shift
  int splits, n_new, causal, m_groups;  // m_groups: CTAs over one KV head's query rows
  float scale_log2;                     // softmax scale * log2(e)
  int head_dim;                         // kv_append (the decode kernels take KILN_D)
  i64 q_sb, q_ss, q_sh;                 // element strides: batch, token, head
  i64 o_sb, o_ss, o_sh;
  i64 k_sp, k_ss, k_sh;                 // page (dense: sequence), slot (position), head
  i64 v_sp, v_ss, v_sh;
  int max_ctx;                          // the most tokens a sequence holds (pages x page size)
  int pad_;
  u32* errors;                          // [3] host-mapped words set to 1 on bad input (a length
                                        //   out of range; a page id outside the cache; a key
                                        //   start outside 0 ..= its length); or null
  const int* context_starts;            // [batch]: each sequence's first key (left padding, as
                                        //   flash-attention's cache_leftpad); null: 0
};

// A context length the block table cannot hold, or a page id outside the cache: the sequence's
// outputs are written as NaN (never a plausible result), nothing outside the cache is read, and
// the kind is recorded in p.errors for the host to report.
__device__ __forceinline__ bool context_ok(const DecodeArgs& p, int ctx) { return ctx >= 0 && ctx <= p.max_ctx; }
__device__ __forceinline__ bool page_ok(const DecodeArgs& p, int page) { return (unsigned)page < (unsigned)p.num_pages; }
// The context length of sequence b: its entry, or the whole cache without lengths.
__device__ __forceinline__ int context_of(const DecodeArgs& p, int b) { return p.context_lens ? p.context_lens[b] : p.max_ctx; }
// The first key of sequence b: its entry, or 0 without starts.
__device__ __forceinline__ int start_of(const DecodeArgs& p, int b) { return p.context_starts ? p.context_starts[b] : 0; }
// Records bad input (word 0: a length out of range, word 1: a page id outside the cache, word 2:
// a key start outside 0 ..= its length): plain stores of 1 to host-mapped memory, so no atomics
// and no order are needed.
__device__ __forceinline__ void report_bad(const DecodeArgs& p, bool bad_len, bool bad_page, bool bad_start = false) {
  if (p.errors == nullptr) return;
  if (bad_len) *reinterpret_cast<volatile u32*>(p.errors) = 1u;
  if (bad_page) *reinterpret_cast<volatile u32*>(p.errors + 1) = 1u;
  if (bad_start) *reinterpret_cast<volatile u32*>(p.errors + 2) = 1u;
}
