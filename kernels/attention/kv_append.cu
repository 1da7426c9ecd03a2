// Appends new K and V tokens ([batch, n_new, heads_kv, head_dim], packed) into a paged cache:
// token n of sequence b is context position context_lens[b] - n_new + n, so page
// block_table[b][pos >> page_shift], slot pos & (page_size - 1); without a block table, into a
// dense cache at position pos of sequence b. The caches take their own strides (page or sequence,
// slot or position, head). One thread per 16 bytes; the dtype does not matter. A context too
// short or too long for the cache, or a page id outside it, writes nothing and is recorded in
// p.errors (the decode that reads it reports NaN).
#include "attention/decode_args.cuh"

extern "C" __global__ void __launch_bounds__(256) kv_append(DecodeArgs p) {
  const int head_chunks = p.head_dim / 8;
  const i64 row_chunks = (i64)p.heads_kv * head_chunks;
  const i64 total = (i64)p.batch * p.n_new * row_chunks;
  const u32x4* kn = static_cast<const u32x4*>(p.k_new);
  const u32x4* vn = static_cast<const u32x4*>(p.v_new);
  u16* kc = static_cast<u16*>(const_cast<void*>(p.k_cache));
  u16* vc = static_cast<u16*>(const_cast<void*>(p.v_cache));
  bool bad_len = false, bad_page = false;
  for (i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (i64)gridDim.x * blockDim.x) {
    const i64 tok = x / row_chunks;
    const int c = (int)(x % row_chunks);
    const int hk = c / head_chunks, e = (c % head_chunks) * 8;
    const int b = (int)(tok / p.n_new), n = (int)(tok % p.n_new);
    const int ctx = p.context_lens[b];
    if (!context_ok(p, ctx) || ctx < p.n_new) {
      bad_len = true;
      continue;
    }
    const int pos = ctx - p.n_new + n;
    int page = b, slot = pos;
    if (p.block_table) {
      page = p.block_table[(i64)b * p.max_pages + (pos >> p.page_shift)];
      slot = pos & ((1 << p.page_shift) - 1);
    }
    if (!page_ok(p, page)) {
      bad_page = true;
      continue;
    }
    *reinterpret_cast<u32x4*>(kc + page * p.k_sp + slot * p.k_ss + hk * p.k_sh + e) = kn[x];
    *reinterpret_cast<u32x4*>(vc + page * p.v_sp + slot * p.v_ss + hk * p.v_sh + e) = vn[x];
  }
  report_bad(p, bad_len, bad_page);
}
