# Usage (GPU host with torch; NVRTC from the CUDA toolkit or torch's nvidia wheels, or NVRTC_DIR):
# python3 scripts/little_law.py
# What the NVFP4 GEMV's bytes in flight must be (docs/fp4.md G40): (a) the DRAM latency of a lone
# load (one thread chasing pointers over random 128-byte lines of a 256 MB / 1 GB / 4 GB region;
# an 8 MB region, L2-resident after a warm pass, for the L2's), and (b) the read rate a plain
# stream reaches against the bytes it keeps in flight an SM (warps an SM x 32 lanes x U 16-byte
# loads each, all issued before any is used), over 1 GB (the steady state) and 37.7 MB (the
# 1x8192x8192 GEMV's bytes; L2 flushed before each launch): Little's law, latency = bytes in
# flight / rate, gives the loaded latency at each point of the curve. The L2 is flushed by
# reading (cuda_ctypes.L2Flush; before 2026-11-30 night by rewriting a buffer, which left dirty
# lines for the timed kernel to write back).
import statistics

import torch

from cuda_ctypes import COMMON, L2Flush, Module, filled, u32, u64

SRC = COMMON + r'''
// one thread: `hops` dependent loads (L2 only: .cg), each the index of the next
extern "C" __global__ void chase(const u64* p, u64 start, u32 hops, u64* out) {
  u64 i = start;
  long long t0 = clock64();
  for (u32 h = 0; h < hops; ++h) {
    u64 v;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p + i));
    i = v;
  }
  long long t1 = clock64();
  out[0] = i;
  out[1] = (u64)(t1 - t0);
}

// a contiguous chunk a CTA; each thread asks for U 16-byte pieces by cp.async (no registers
// held, as the GEMV's rings copy), each into a slot of its own, then waits for all of them: U x
// 16 B a thread in flight at most. Copy u of the CTA's threads lands in row u of the slots, a
// lane's 16 bytes beside its neighbours' (conflict-free). (The probe of the early call put every
// copy of a thread in one slot: 8-16 TB/s over 1 GB, over the HBM's peak, so copies in flight to
// one shared address are not all served from DRAM; round 1's put a thread's U slots side by side:
// U-way bank conflicts on the copies' writes held every U >= 2 at ~2.2 TB/s.)
template <int U>
__device__ __forceinline__ void rd(const u4* __restrict__ buf, u64 n16, u32* sink) {
  extern __shared__ u4 scratch[];  // U 16-byte slots a thread
  u32 dst;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(dst) : "l"(scratch + threadIdx.x));
  const u64 per = (n16 + gridDim.x - 1) / gridDim.x;
  const u64 beg = blockIdx.x * per, end = beg + per < n16 ? beg + per : n16;
  const u32 t = blockDim.x;
  u64 i = beg + threadIdx.x;
  for (; i + (U - 1) * (u64)t < end; i += U * (u64)t) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + 16 * u * t), "l"(buf + i + u * (u64)t) : "memory");
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  }
  for (; i < end; i += t) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(buf + i) : "memory");
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  if (scratch[threadIdx.x].x == 0x9e3779b9u && scratch[threadIdx.x].y == 0x12345u) sink[0] = 1;
}
#define RD(U) extern "C" __global__ void __launch_bounds__(1024) rd##U(const u4* b, u64 n, u32* s) { rd<U>(b, n, s); }
RD(1) RD(2) RD(4) RD(8) RD(16)
'''

mod = Module(SRC, "little.cu")
props = torch.cuda.get_device_properties(0)
SMS, L2 = props.multi_processor_count, props.L2_cache_size
print(f"device {props.name} SMs {SMS} L2 {L2 >> 20} MB, torch {torch.__version__}")
chase = mod.kernel("chase")
rds = {u: mod.kernel(f"rd{u}", max_dynamic_shared=227 * 1024) for u in (1, 2, 4, 8, 16)}
sink = torch.zeros(4, dtype=torch.int32, device="cuda")
flush = L2Flush(mod)


def ev():
    return torch.cuda.Event(enable_timing=True)


def timed(go, reps, flush=None):
    ts = []
    for _ in range(reps):
        if flush:
            flush()
        s, e = ev(), ev()
        s.record()
        go()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)


# (a) pointer chase: one random cycle over up to 2 M random 128-byte lines of the region (256 MB
# of lines, over the L2), timed over its first 8,192 hops, each a line not touched before (a
# cycle of 8,192 lines, 1 MB, warmed first, measured the L2: 150 ns everywhere)
print("\n(a) a lone load's latency: one thread chasing pointers over random 128-byte lines")
print("| region | ns a hop | cycles a hop (clock64) |")
print("|---|---|---|")
out = torch.zeros(2, dtype=torch.int64, device="cuda")
for label, nbytes, hops in (("8 MB (L2, warm)", 8 << 20, 4096), ("256 MB", 256 << 20, 8192),
                            ("1 GB", 1 << 30, 8192), ("4 GB", 4 << 30, 8192)):
    words = nbytes // 8
    p = torch.zeros(words, dtype=torch.int64, device="cuda")
    lines = nbytes // 128
    nodes = min(1 << 21, lines)
    pos = torch.randperm(lines, device="cuda")[:nodes] * 16
    p[pos] = torch.roll(pos, -1)
    if nodes * 128 <= L2:  # the L2's latency: the whole cycle warmed first
        chase(1, 1, (p, u64(int(pos[0])), u32(nodes), out))
    else:  # DRAM's: flush, then hops over lines not touched since
        flush()
    torch.cuda.synchronize()
    us = timed(lambda: chase(1, 1, (p, u64(int(pos[nodes // 2])), u32(hops), out)), 1)
    torch.cuda.synchronize()
    print(f"| {label} | {us * 1e3 / hops:.0f} | {int(out[1]) / hops:.0f} |")
    del p, pos
    torch.cuda.empty_cache()

# (b) the read rate against the bytes in flight an SM
big = filled(mod, 1 << 30, 7)
COPY = 4.22e12
for label, nbytes, reps, fl in (("1 GB, back to back", 1 << 30, 7, None),
                                ("37.7 MB, L2 flushed before each", 37748736, 15, flush)):
    print(f"\n(b) {label}: rate against bytes in flight an SM (warps an SM x 32 x U x 16 B)")
    print("| warps an SM | U | KB in flight an SM | us | TB/s | of copy 4.22 | latency = in flight / rate, ns |")
    print("|---|---|---|---|---|---|---|")
    n16 = u64(nbytes // 16)
    for warps in (4, 8, 16, 24, 32, 48, 64):
        # CTAs of up to 16 warps; an SM holds them all at once (<= 64 warps, 2,048 threads)
        ctas = max(1, warps // 16)
        threads = warps * 32 // ctas
        for U in (1, 2, 4, 8, 16):
            kb = warps * 32 * U * 16 / 1024
            if kb > 200:  # the slots must fit an SM's shared memory
                continue
            go = lambda: rds[U](SMS * ctas, threads, (big, n16, sink), threads * U * 16)
            go()
            us = timed(go, reps, fl)
            rate = nbytes / (us * 1e-6)
            lat = kb * 1024 * SMS / rate * 1e9
            print(f"| {warps} | {U} | {kb:.0f} | {us:.1f} | {rate / 1e12:.2f} | {rate / COPY * 100:.0f} % | {lat:.0f} |")
