#!/usr/bin/env python3
"""nvab.py N OPTS_FILE EXTRA_A EXTRA_B: compile kernels/gemm/wgmma_tma_ws.cu with NVRTC
(NVRTC_LIB; --no-cache, as kiln compiles), alternating the options file's options plus EXTRA_A
and plus EXTRA_B, N times each (A B B A ...), printing each compile's wall and thread-CPU ms."""
import ctypes, os, sys, time
n, optfile, xa, xb = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
nv = ctypes.CDLL(os.environ["NVRTC_LIB"])
KD = os.environ.get("KD", "kernels")
text = open(os.path.join(KD, "gemm/wgmma_tma_ws.cu")).read().encode()
base = [f"-I{KD}"] + open(optfile).read().split() + ["--no-cache", "--minimal"]
def once(extra):
    o = [x.encode() for x in base + extra.split()]
    arr = (ctypes.c_char_p * len(o))(*o)
    prog = ctypes.c_void_p()
    assert nv.nvrtcCreateProgram(ctypes.byref(prog), text, b"gemm/wgmma_tma_ws.cu", 0, None, None) == 0
    t0, c0 = time.perf_counter(), time.thread_time()
    st = nv.nvrtcCompileProgram(prog, len(o), arr)
    t1, c1 = time.perf_counter(), time.thread_time()
    nv.nvrtcDestroyProgram(ctypes.byref(prog))
    return st, (t1 - t0) * 1e3, (c1 - c0) * 1e3
for i in range(n):
    for tag, x in ((("A", xa), ("B", xb)) if i % 2 == 0 else (("B", xb), ("A", xa))):
        st, w, c = once(x)
        print(f"{tag} {x} status {st} wall {w:.0f} ms cpu {c:.0f} ms", flush=True)
