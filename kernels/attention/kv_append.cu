// Appends new K and V tokens ([batch, n_new, heads_kv, head_dim]) into a paged cache: token n of
// sequence b is context position context_lens[b] - n_new + n, so page block_table[b][pos >>
// page_shift], slot pos & (page_size - 1). One thread per 16 bytes; the dtype does not matter.
// A context too short or too long for the table, or a page id outside the cache, writes nothing
// (the decode that reads it reports NaN).
#include "attention/decode_args.cuh"

extern "C" __global__ void __launch_bounds__(256) kv_append(DecodeArgs p) {
  const i64 row_chunks = (i64)p.heads_kv * p.head_dim / 8;
  const i64 total = (i64)p.batch * p.n_new * row_chunks;
  const u32x4* kn = static_cast<const u32x4*>(p.k_new);
  const u32x4* vn = static_cast<const u32x4*>(p.v_new);
  u32x4* kc = static_cast<u32x4*>(const_cast<void*>(p.k_cache));
  u32x4* vc = static_cast<u32x4*>(const_cast<void*>(p.v_cache));
  for (i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (i64)gridDim.x * blockDim.x) {
    const i64 tok = x / row_chunks;
    const i64 c = x % row_chunks;
    const int b = (int)(tok / p.n_new), n = (int)(tok % p.n_new);
    const int ctx = p.context_lens[b];
    if (!context_ok(p, ctx) || ctx < p.n_new) continue;
    const int pos = ctx - p.n_new + n;
    const int page = p.block_table[(i64)b * p.max_pages + (pos >> p.page_shift)];
    if (!page_ok(p, page)) continue;
    const i64 dst = (((i64)page << p.page_shift) + (pos & ((1 << p.page_shift) - 1))) * row_chunks + c;
    kc[dst] = kn[x];
    vc[dst] = vn[x];
  }
}
