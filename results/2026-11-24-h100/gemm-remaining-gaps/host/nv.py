#!/usr/bin/env python3
"""nv.py SOURCE [opts...] : compile kernels/SOURCE with NVRTC (headers via -I), print wall/CPU ms, cubin size, and log (-v)."""
import ctypes, sys, time, os, json
lib = ctypes.CDLL(os.environ.get("NVRTC_LIB", "/work/main/.deps/py/nvidia/cu13/lib/libnvrtc.so.13"))
KD = os.environ.get("KD", "/work/wt-compile/kernels")
def compile(src, opts, out=None):
    text = open(os.path.join(KD, src)).read().encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), text, src.encode(), 0, None, None) == 0
    o = [f"-I{KD}".encode()] + [x.encode() for x in opts]
    arr = (ctypes.c_char_p * len(o))(*o)
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    st = lib.nvrtcCompileProgram(prog, len(o), arr)
    t1, c1, p1 = time.perf_counter(), time.thread_time(), time.process_time(); print(f"process cpu {(p1-p0)*1e3:.0f} ms", file=sys.stderr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf); log = buf.value.decode(errors="replace")
    size = ctypes.c_size_t(); lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    if out and size.value:
        b = ctypes.create_string_buffer(size.value); lib.nvrtcGetCUBIN(prog, b); open(out, "wb").write(b.raw)
    ps = ctypes.c_size_t(); lib.nvrtcGetPTXSize(prog, ctypes.byref(ps))
    if out and ps.value and os.environ.get("PTXOUT"):
        b = ctypes.create_string_buffer(ps.value); lib.nvrtcGetPTX(prog, b); open(os.environ["PTXOUT"], "wb").write(b.raw)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return st, (t1-t0)*1e3, (c1-c0)*1e3, size.value, ps.value, log
if __name__ == "__main__":
    src = sys.argv[1]; opts = [a for a in sys.argv[2:] if a != "-v"]
    st, w, c, sz, ps, log = compile(src, opts, os.environ.get("CUBIN"))
    print(f"status {st} wall {w:.0f} ms cpu {c:.0f} ms cubin {sz} ptx {ps}")
    if "-v" in sys.argv[2:] or st: print(log)
