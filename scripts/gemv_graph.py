# Usage (GPU host, the kiln wheel on PYTHONPATH): python3 scripts/gemv_graph.py; run it again with
# KILN_FP4_GEMV_PDL=0 for the GEMV launched as an ordinary kernel (the default launches it as a
# programmatic dependent: docs/fp4.md G14-G16).
# kiln's NVFP4 GEMV through Python on the standard codes and on kiln.fp4.to_gemv_layout's, and
# torch's bf16 x @ W.T (under the default only), each as 16 launches back to back in a CUDA graph
# over 16 copies of the weights (per-launch time of the replay, scripts/cuda_graph_timer.py).
import os
import torch
import kiln
import kiln.fp4
from cuda_graph_timer import graph_us

G = 16
pdl = os.environ.get("KILN_FP4_GEMV_PDL", "1")  # kiln's default: on (docs/fp4.md G16)
# A dependent chain (each GEMV's X the previous one's Y, 1x8192x8192 in the GEMV layout) replayed
# from a graph against torch's chain on the dequantised weights: a launch that read X before the
# one before it wrote it (a PDL ordering bug) would be off by O(1), not by bf16 roundings.
torch.manual_seed(1)
n = k = 8192
q = kiln.fp4.quantize_nvfp4(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)
qg = kiln.fp4.to_gemv_layout(q)
ws = [kiln.fp4.Nvfp4Tensor(qg.codes.clone(), qg.scales.clone(), qg.tensor_scale, layout="gemv") for _ in range(G)]
ys = [torch.empty(1, n, device="cuda", dtype=torch.bfloat16) for _ in range(G + 1)]
ys[0].copy_(torch.randn(1, k, device="cuda", dtype=torch.bfloat16))
gos = [lambda i=i: kiln.fp4.nvfp4_gemv(ys[i], ws[i], out=ys[i + 1]) for i in range(G)]
graph_us(gos, 1)
wdq = q.dequantize("f32")
ref = ys[0].float()
for _ in range(G):
    ref = (ref @ wdq.T).bfloat16().float()
rel = ((ys[G].float() - ref).norm() / ref.norm()).item()
print(f"dependent chain of {G} (PDL {pdl}): relative error {rel:.2e} against torch's chain ({'ok' if rel < 5e-2 else 'FAILED'})", flush=True)
shapes = [(1, 8192, 8192), (4, 14336, 4096)]
for m, n, k in shapes:
    torch.manual_seed(0)
    wb = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    q = kiln.fp4.quantize_nvfp4(wb)
    qg = kiln.fp4.to_gemv_layout(q)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ q.dequantize("f32").T
    a = kiln.fp4.nvfp4_gemv(x, q)
    b = kiln.fp4.nvfp4_gemv(x, qg)
    torch.cuda.synchronize()
    rel = ((b.float() - ref).norm() / ref.norm()).item()
    same = torch.equal(a, b)
    qd = kiln.fp4.quantize_nvfp4(wb, layout="gemv")
    direct = torch.equal(qd.codes, qg.codes) and torch.equal(qd.scales, qg.scales)
    print(f"{m}x{n}x{k}: GEMV layout relative error {rel:.2e} against the f32 product of the dequantised weights; "
          f"bitwise equal to the standard codes' output: {same}; quantize_nvfp4(layout='gemv') the same codes and scales: {direct}", flush=True)
    for name, w0 in [("standard", q), ("gemv layout", qg)]:
        ws = [kiln.fp4.Nvfp4Tensor(w0.codes.clone(), w0.scales.clone(), w0.tensor_scale, layout=w0.layout) for _ in range(G)]
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(G)]
        gos = [lambda w=w, o=o: kiln.fp4.nvfp4_gemv(x, w, out=o) for w, o in zip(ws, outs)]
        med, lo = graph_us(gos, 9)
        print(f"| {m}x{n}x{k} | kiln {name} PDL {pdl} | {med:.2f} ({lo:.2f}) | {n * k * 0.5625 / 1e6 / med:.2f} TB/s |", flush=True)
        del ws
    if pdl == "1":
        wbs = [wb.clone() for _ in range(G)]
        outs2 = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(G)]
        gos = [lambda w=w, o=o: torch.matmul(x, w.T, out=o) for w, o in zip(wbs, outs2)]
        med, lo = graph_us(gos, 9)
        print(f"| {m}x{n}x{k} | torch bf16 | {med:.2f} ({lo:.2f}) | {n * k * 2 / 1e6 / med:.2f} TB/s |", flush=True)
        del wbs
print(f"graph: {G} back-to-back launches over {G} copies of the weights, median of 9 replays")
