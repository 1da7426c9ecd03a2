#!/usr/bin/env python3
"""nvctx.py MODE N SOURCE [opts...]: compile kernels/SOURCE with NVRTC N times in one process,
after MODE: none (no CUDA), init (cuInit only) or ctx (cuInit and the primary context made
current), printing each compile's wall and thread-CPU ms. Is NVRTC slower in a process that has
the CUDA driver up?"""
import ctypes, os, sys, time
mode, n, src, opts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
nvrtc = ctypes.CDLL(os.environ["NVRTC_LIB"])
KD = os.environ.get("KD", "kernels")
if mode != "none":
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    if mode == "ctx":
        dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
        ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
text = open(os.path.join(KD, src)).read().encode()
o = [f"-I{KD}".encode()] + [x.encode() for x in opts]
arr = (ctypes.c_char_p * len(o))(*o)
for i in range(n):
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), text, src.encode(), 0, None, None) == 0
    t0, c0 = time.perf_counter(), time.thread_time()
    st = nvrtc.nvrtcCompileProgram(prog, len(o), arr)
    t1, c1 = time.perf_counter(), time.thread_time()
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    print(f"{mode} {i} status {st} wall {(t1-t0)*1e3:.0f} ms cpu {(c1-c0)*1e3:.0f} ms", flush=True)
