# The CUDA driver API and NVRTC through ctypes, for the probe scripts that run their own kernels
# beside torch (scripts/little_law.py, scripts/read_ceiling.py): torch holds the memory, the
# stream and the events; this module finds NVRTC, compiles a source for sm_90a, loads it and
# launches its kernels, and flushes the L2 by reading, as kiln's l2_read_flush does.
# A probe's source starts with COMMON (the types, a streaming load, `fill`, `rd_grid`).
import ctypes, glob, os

COMMON = r'''
typedef unsigned long long u64; typedef unsigned int u32;
struct __align__(16) u4 { u32 x, y, z, w; };

__device__ __forceinline__ u4 ld_stream(const u4* p) {
  u4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// random words (a hash of the index): data that no cache or compression makes cheap
extern "C" __global__ void fill(u32* p, u64 n, u32 seed) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    u32 h = (u32)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = h;
  }
}

// kiln's l2_read_flush: grid-stride, 4 x 16 B a thread in flight; a read, so that the L2 is left
// holding clean lines (a write would leave dirty ones for the next kernel to write back)
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
'''

u64, u32 = ctypes.c_uint64, ctypes.c_uint32
# CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
MAX_DYNAMIC_SHARED = 8


def ck(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: {r}")


def nvrtc_lib(verbose=False):
    """NVRTC 13 or later from the CUDA toolkit, torch's nvidia wheels or NVRTC_DIR, with its
    builtins library loaded first from the same folder (NVRTC opens it by name when it compiles)."""
    dirs = sorted(glob.glob("/usr/local/cuda*/lib64"))
    try:
        import torch
        dirs += sorted(glob.glob(os.path.dirname(torch.__path__[0]) + "/nvidia/*/lib"))
    except ImportError:
        pass
    dirs.append(os.environ.get("NVRTC_DIR", "/"))
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
            lib = ctypes.CDLL(libs[0])
        except OSError:
            continue
        if verbose:
            print("nvrtc:", libs[0])
        return lib
    raise SystemExit("no libnvrtc found: install the CUDA toolkit or nvidia-cuda-nvrtc, or set NVRTC_DIR")


def compile_cubin(src, name, arch="sm_90a", verbose=False):
    """The CUBIN of `src` (a probe's source, COMMON first) for `arch`; the log on failure."""
    nvrtc = nvrtc_lib(verbose)
    prog = ctypes.c_void_p()
    ck(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-default-device"]
    if nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
        n = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise SystemExit(f"{name}: compile failed:\n" + log.value.decode())
    n = ctypes.c_size_t()
    ck(nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "cubin size")
    cubin = ctypes.create_string_buffer(n.value)
    ck(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin


class Module:
    """`src` compiled and loaded into torch's current context (torch makes it first)."""

    def __init__(self, src, name, verbose=False):
        import torch
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        self.cuda = ctypes.CDLL("libcuda.so.1")
        cubin = compile_cubin(src, name, verbose=verbose)
        self.mod = ctypes.c_void_p()
        ck(self.cuda.cuModuleLoadData(ctypes.byref(self.mod), cubin), "cuModuleLoadData")

    def kernel(self, name, max_dynamic_shared=0):
        return Kernel(self, name, max_dynamic_shared)


class Kernel:
    """One kernel of a Module, launched on torch's current stream: grid and block are counts (x
    only) or 1-tuples; args are torch tensors (their pointers), Slice, u64 or u32."""

    def __init__(self, module, name, max_dynamic_shared=0):
        self.cuda = module.cuda
        self.f = ctypes.c_void_p()
        ck(self.cuda.cuModuleGetFunction(ctypes.byref(self.f), module.mod, name.encode()), name)
        if max_dynamic_shared:
            ck(self.cuda.cuFuncSetAttribute(self.f, MAX_DYNAMIC_SHARED, max_dynamic_shared), f"{name}: shared memory")

    def __call__(self, grid, block, args, smem=0):
        import torch
        grid = grid[0] if isinstance(grid, tuple) else grid
        block = block[0] if isinstance(block, tuple) else block
        vals = [a if isinstance(a, (u64, u32)) else u64(a.data_ptr()) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        ck(self.cuda.cuLaunchKernel(self.f, grid, 1, 1, block, 1, 1, smem, stream, ptrs, None), "launch")


class Slice:
    """A byte offset into a torch tensor, passed where a kernel takes a pointer."""

    def __init__(self, a, off):
        self.p = a.data_ptr() + off

    def data_ptr(self):
        return self.p


def filled(module, nbytes, seed):
    """A device buffer of `nbytes` random bytes (COMMON's `fill`)."""
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    module.kernel("fill")(sms * 8, 512, (a, u64(nbytes // 4), u32(seed)))
    return a


class L2Flush:
    """Reads a buffer of four times the L2 (at least 256 MB) with COMMON's `rd_grid`: what the
    L2 held before is gone, and it holds clean lines only."""

    def __init__(self, module):
        import torch
        props = torch.cuda.get_device_properties(0)
        self.sms = props.multi_processor_count
        self.buf = filled(module, max(4 * props.L2_cache_size, 256 << 20), 1)
        self.sink = torch.zeros(4, dtype=torch.int32, device="cuda")
        self.rd = module.kernel("rd_grid")

    def __call__(self):
        self.rd(self.sms * 4, 512, (self.buf, u64(self.buf.numel() // 16), self.sink))
