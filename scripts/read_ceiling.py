# Usage (GPU host with torch; NVRTC from the CUDA toolkit or torch's nvidia wheels, or NVRTC_DIR):
# python3 scripts/read_ceiling.py [SIZE ...] (SIZE a label of `sizes` below, e.g. 1x8192x8192:
# those sizes and kiln's grid-stride read only). docs/fp4.md G13 holds what it measured on an H200.
# The read ceiling at the NVFP4 GEMV's sizes: plain read-only kernels (grid-stride as kiln's
# l2_read_flush, contiguous per-CTA chunks with 8 loads in flight, a TMA bulk ring), timed
# (a) as single launches with L2 flushed before each (events around the launch, as kiln's bench)
# (b) as a CUDA graph of 16 back-to-back launches over 16 rotating buffers (per launch).
import sys, statistics
import torch
from cuda_graph_timer import ev, graph_us
from cuda_ctypes import COMMON, L2Flush, Module, Slice, u32, u64
import cuda_ctypes

# COMMON holds fill and rd_grid (kiln's l2_read_flush: grid-stride, 4 x 16 B a thread in flight)
SRC = COMMON + r'''
// contiguous chunk a CTA, U loads of 16 B a thread in flight (no-allocate streaming loads)
#define RD_CHUNK(NAME, U)                                                                      \
extern "C" __global__ void __launch_bounds__(512) NAME(const u4* __restrict__ buf, u64 n16, u32* sink) { \
  u64 per = (n16 + gridDim.x - 1) / gridDim.x;                                                  \
  u64 beg = blockIdx.x * per, end = beg + per < n16 ? beg + per : n16;                          \
  u32 acc = 0;                                                                                   \
  u64 i = beg + threadIdx.x;                                                                     \
  for (; i + (U - 1) * 512 < end; i += U * 512) {                                                \
    u4 v[U];                                                                                     \
    _Pragma("unroll") for (int u = 0; u < U; ++u) v[u] = ld_stream(buf + i + u * 512);           \
    _Pragma("unroll") for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;      \
  }                                                                                              \
  for (; i < end; i += 512) { u4 v = ld_stream(buf + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }          \
  if (acc == 0x9e3779b9u) sink[0] = acc;                                                         \
}
RD_CHUNK(rd_chunk4, 4)
RD_CHUNK(rd_chunk8, 8)

__device__ __forceinline__ u32 smem_u32(const void* p) {
  u32 r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// a TMA bulk ring: thread 0 keeps `stages` copies of `stage` bytes in flight into shared memory;
// every thread reads one word of each landed stage
extern "C" __global__ void __launch_bounds__(128) rd_bulk(const char* __restrict__ buf, u64 bytes, u32* sink,
                                                         u32 stage, u32 stages) {
  extern __shared__ __align__(1024) char smem[];
  char* ring = smem + 1024;
  u32 bar0 = smem_u32(smem);
  u64 per = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~15ull;
  u64 beg = blockIdx.x * per;
  u64 end = beg + per < bytes ? beg + per : bytes;
  u32 chunks = beg < end ? (u32)((end - beg + stage - 1) / stage) : 0;
  if (threadIdx.x == 0) {
    for (u32 s = 0; s < stages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar0 + 8 * s));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](u32 c) {
    u32 s = c % stages;
    u64 off = beg + (u64)c * stage;
    u32 n = (u32)((end - off) < stage ? (end - off) : stage);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar0 + 8 * s), "r"(n) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_u32(ring + (u64)s * stage)), "l"(buf + off), "r"(n), "r"(bar0 + 8 * s) : "memory");
  };
  if (threadIdx.x == 0)
    for (u32 c = 0; c < stages && c < chunks; ++c) issue(c);
  u32 acc = 0;
  for (u32 c = 0; c < chunks; ++c) {
    u32 s = c % stages, parity = (c / stages) & 1;
    asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }"
                 :: "r"(bar0 + 8 * s), "r"(parity) : "memory");
    acc ^= ((const u32*)(ring + (u64)s * stage))[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0 && c + stages < chunks) issue(c + stages);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
'''


mod = Module(SRC, "read.cu", verbose=True)
props = torch.cuda.get_device_properties(0)
SMS = props.multi_processor_count
L2 = props.L2_cache_size
print(f"device {props.name} SMs {SMS} L2 {L2 >> 20} MB, torch {torch.__version__}")
rd_grid, rd_chunk4, rd_chunk8 = (mod.kernel(n) for n in ['rd_grid', 'rd_chunk4', 'rd_chunk8'])
rd_bulk = mod.kernel('rd_bulk', max_dynamic_shared=227 * 1024)
sink = torch.zeros(4, dtype=torch.int32, device="cuda")

def filled(nbytes, seed):
    return cuda_ctypes.filled(mod, nbytes, seed)

flush = L2Flush(mod)

def launcher(kind, arr, nbytes):
    n16 = u64(nbytes // 16)
    if kind == 'grid':
        return lambda: rd_grid((SMS * 4,), (512,), (arr, n16, sink))
    if kind == 'chunk4':
        return lambda: rd_chunk4((SMS * 4,), (512,), (arr, n16, sink))
    if kind == 'chunk8x2':
        return lambda: rd_chunk8((SMS * 2,), (512,), (arr, n16, sink))
    if kind == 'chunk8x4':
        return lambda: rd_chunk8((SMS * 4,), (512,), (arr, n16, sink))
    if kind.startswith('bulk'):
        # bulk<ctas an SM>x<stages>x<KB>
        c, s, kb = (int(t) for t in kind[4:].split('x'))
        st = kb * 1024
        sm = 1024 + s * st
        return lambda: rd_bulk((SMS * c,), (128,), (arr, u64(nbytes), sink, u32(st), u32(s)), smem=sm)
    raise ValueError(kind)

def single_us(go, reps=25):
    ts = []
    for i in range(reps + 3):
        flush()
        s, e = ev(), ev()
        s.record(); go(); e.record(); e.synchronize()
        if i >= 3:
            ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    return statistics.median(ts), ts[0]

# the copy ceiling as kiln measures it: a 1 GiB device-to-device copy, bytes read plus written
src, dst = filled(1 << 30, 2), torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
cts = []
for i in range(13):
    s, e = ev(), ev()
    s.record(); dst.copy_(src); e.record(); e.synchronize()
    if i >= 3:
        cts.append(s.elapsed_time(e) * 1e-3)
copy_tbps = 2 * (1 << 30) / statistics.median(cts) / 1e12
print(f"copy ceiling {copy_tbps:.3f} TB/s (1 GiB device-to-device, read + written)")
del dst, src

def gemv_bytes(n, k):
    return n * k // 2 + n * k // 16

sizes = [("1x4096x4096", gemv_bytes(4096, 4096)), ("1x14336x4096", gemv_bytes(14336, 4096)),
         ("1x8192x8192", gemv_bytes(8192, 8192)), ("28672x8192", gemv_bytes(28672, 8192)),
         ("16384x16384", gemv_bytes(16384, 16384)), ("1GiB", 1 << 30)]
kinds = ['grid', 'chunk4', 'chunk8x2', 'chunk8x4', 'bulk1x12x16', 'bulk2x6x16', 'bulk1x6x32']
if sys.argv[1:]:
    unknown = [a for a in sys.argv[1:] if a not in dict(sizes)]
    if unknown:
        raise SystemExit(f"unknown size {unknown[0]}: give labels among {', '.join(l for l, _ in sizes)}")
    sizes = [(l, b) for l, b in sizes if l in sys.argv[1:]]
    kinds = ['grid']
G = 16
print("| size | MB | kernel | single us (min) | single TB/s | of copy | graph us/launch (min) | graph TB/s | of copy |")
print("|---|---|---|---|---|---|---|---|---|")
for label, nbytes in sizes:
    nbytes -= nbytes % 16
    rot = min(G, max(2, (3 << 30) // nbytes))
    arena = filled(rot * nbytes, 3)
    for kind in kinds:
        go = launcher(kind, arena, nbytes)
        go(); torch.cuda.synchronize()
        sm, smin = single_us(go)
        gos = [launcher(kind, Slice(arena, i * nbytes), nbytes) for i in range(rot)]
        gm, gmin = graph_us(gos, 7)
        r = lambda us: nbytes / (us * 1e-6) / 1e12
        print(f"| {label} | {nbytes / 1e6:.1f} | {kind} | {sm:.2f} ({smin:.2f}) | {r(sm):.2f} | {100 * r(sm) / copy_tbps:.0f} % "
              f"| {gm:.2f} ({gmin:.2f}) | {r(gm):.2f} | {100 * r(gm) / copy_tbps:.0f} % |", flush=True)
    del arena
print(f"single: L2 flushed (a {flush.buf.numel() >> 20} MB read) before each launch, events around the launch, "
      f"median of 25; graph: {G} back-to-back launches over rotating buffers (fewer over 192 MB), median of 7 replays")
