# Usage (GPU host with torch; NVRTC from the CUDA toolkit or torch's nvidia wheels, or NVRTC_DIR):
# python3 scripts/read_ceiling.py [SIZE ...] (SIZE a label of `sizes` below, e.g. 1x8192x8192:
# those sizes and kiln's grid-stride read only). docs/fp4.md G13 holds what it measured on an H200.
# The read ceiling at the NVFP4 GEMV's sizes: plain read-only kernels (grid-stride as kiln's
# l2_read_flush, contiguous per-CTA chunks with 8 loads in flight, a TMA bulk ring), timed
# (a) as single launches with L2 flushed before each (events around the launch, as kiln's bench)
# (b) as a CUDA graph of 16 back-to-back launches over 16 rotating buffers (per launch).
import sys, statistics, ctypes, glob
import torch
from cuda_graph_timer import ev, graph_us

SRC = r'''
typedef unsigned long long u64; typedef unsigned int u32;
struct __align__(16) u4 { u32 x, y, z, w; };

__device__ __forceinline__ u4 ld_stream(const u4* p) {
  u4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

extern "C" __global__ void fill(u32* p, u64 n, u32 seed) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    u32 h = (u32)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = h;
  }
}

// kiln's l2_read_flush: grid-stride, 4 x 16 B a thread in flight
extern "C" __global__ void __launch_bounds__(512) rd_grid(const u4* __restrict__ buf, u64 n16, u32* sink) {
  u32 acc = 0;
  const u64 stride = (u64)gridDim.x * 512;
  for (u64 i = (u64)blockIdx.x * 512 + threadIdx.x; i < n16; i += stride * 4) {
    u4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * stride < n16) v[u] = buf[i + u * stride]; else v[u] = u4{0, 0, 0, 0};
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

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


# The driver API and NVRTC through ctypes, torch for memory, events and graphs (no cupy needed).
cuda = ctypes.CDLL("libcuda.so.1")
def nvrtc_lib():
    # load libnvrtc-builtins from the same folder first: NVRTC opens it by name at compile time
    import os
    dirs = sorted(glob.glob("/usr/local/cuda*/lib64")) + \
        sorted(glob.glob(os.path.dirname(torch.__path__[0]) + "/nvidia/*/lib")) + [os.environ.get("NVRTC_DIR", "/")]
    for d in dirs:
        libs = sorted(glob.glob(d + "/libnvrtc.so.1[3-9]*")) or sorted(glob.glob(d + "/libnvrtc.so*"))
        if not libs:
            continue
        for b in sorted(glob.glob(d + "/libnvrtc-builtins.so*")):
            try:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
        try:
            print("nvrtc:", libs[0])
            return ctypes.CDLL(libs[0])
        except OSError:
            pass
    raise SystemExit("no libnvrtc found")
nvrtc = nvrtc_lib()
torch.cuda.init(); torch.zeros(1, device="cuda")
def ck(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: {r}")
prog = ctypes.c_void_p()
ck(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), SRC.encode(), b"read.cu", 0, None, None), "nvrtcCreateProgram")
opts = [b"--gpu-architecture=sm_90a", b"--std=c++17", b"-default-device"]
r = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
if r != 0:
    n = ctypes.c_size_t(); nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value); nvrtc.nvrtcGetProgramLog(prog, log)
    raise SystemExit("compile failed:\n" + log.value.decode())
n = ctypes.c_size_t(); ck(nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "cubin size")
cubin = ctypes.create_string_buffer(n.value); ck(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
mod = ctypes.c_void_p(); ck(cuda.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
def func(name):
    f = ctypes.c_void_p(); ck(cuda.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), name)
    return f
class Kernel:
    def __init__(self, name):
        self.f = func(name)
    def __call__(self, grid, block, args, shared_mem=0):
        vals = [a if isinstance(a, (ctypes.c_uint64, ctypes.c_uint32)) else ctypes.c_uint64(a.data_ptr())
                for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        ck(cuda.cuLaunchKernel(self.f, grid[0], 1, 1, block[0], 1, 1, shared_mem, stream, ptrs, None), "launch")
u64, u32 = ctypes.c_uint64, ctypes.c_uint32
props = torch.cuda.get_device_properties(0)
SMS = props.multi_processor_count
L2 = props.L2_cache_size
print(f"device {props.name} SMs {SMS} L2 {L2 >> 20} MB, torch {torch.__version__}")
fill, rd_grid, rd_chunk4, rd_chunk8, rd_bulk = (Kernel(n) for n in
                                                ['fill', 'rd_grid', 'rd_chunk4', 'rd_chunk8', 'rd_bulk'])
# CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
ck(cuda.cuFuncSetAttribute(rd_bulk.f, 8, 227 * 1024), "smem attribute")
sink = torch.zeros(4, dtype=torch.int32, device="cuda")

def filled(nbytes, seed):
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    fill((SMS * 8,), (512,), (a, u64(nbytes // 4), u32(seed)))
    return a

flush_buf = filled(max(4 * L2, 256 << 20), 1)

class Slice:
    def __init__(self, a, off):
        self.p = a.data_ptr() + off
    def data_ptr(self):
        return self.p

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
        return lambda: rd_bulk((SMS * c,), (128,), (arr, u64(nbytes), sink, u32(st), u32(s)), shared_mem=sm)
    raise ValueError(kind)

def flush():
    rd_grid((SMS * 4,), (512,), (flush_buf, u64(flush_buf.numel() // 16), sink))

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
print(f"single: L2 flushed (a {flush_buf.numel() >> 20} MB read) before each launch, events around the launch, "
      f"median of 25; graph: {G} back-to-back launches over rotating buffers (fewer over 192 MB), median of 7 replays")
