#!/usr/bin/env python3
"""The torch peer of `kiln fp8 bench`: torch._scaled_mm in e4m3 with per-tensor, row-wise or
DeepSeek block-wise (1x128 activations, 128x128 weights) scales, with and without fast
accumulation, timed as kiln times (CUDA events around each launch, warm-up excluded, L2 flushed
by zeroing 256 MiB before every timed launch, median). Runs on the GPU machine; prints one JSON
object per shape and mode. A mode torch refuses is reported (`error`), not raised.

  python3 scripts/fp8_peer.py [--shapes MxNxK;...] [--set deepseek] [--scales tensor,row,block]
                              [--fast-accum both|on|off] [--reps 30] [--warmup 5]

Block scales are handed over as torch takes them on sm_90 (torch >= 2.9, through cuBLASLt):
scale_a (M, K/128) with stride (1, M), scale_b (K/128, N/128) with stride (1, K/128), the
memory layouts `kiln::ops::fp8::quantize` writes.
"""
import argparse
import json

DEEPSEEK = [(m, n, k) for m in (64, 128, 4096)
            for (n, k) in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]


def timed(torch, fn, reps, warmup, flush):
    for _ in range(max(warmup, 1)):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in events)
    return {"median_ms": t[len(t) // 2], "min_ms": t[0], "max_ms": t[-1], "reps": reps}


def scales(torch, mode, m, n, k, dev):
    f32 = torch.float32
    if mode == "tensor":
        return torch.rand((), device=dev) + 0.5, torch.rand((), device=dev) + 0.5
    if mode == "row":
        return torch.rand(m, 1, device=dev, dtype=f32) + 0.5, torch.rand(1, n, device=dev, dtype=f32) + 0.5
    kb, nb = (k + 127) // 128, (n + 127) // 128
    sa = (torch.rand(kb, m, device=dev, dtype=f32) + 0.5).t()   # (M, K/128), stride (1, M)
    sb = (torch.rand(nb, kb, device=dev, dtype=f32) + 0.5).t()  # (K/128, N/128), stride (1, K/128)
    return sa, sb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x7168x16384")
    ap.add_argument("--set", choices=["deepseek"])
    ap.add_argument("--scales", default="tensor,row,block")
    ap.add_argument("--fast-accum", default="both", choices=["both", "on", "off"])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    shapes = DEEPSEEK if a.set == "deepseek" else [tuple(int(x) for x in s.lower().split("x")) for s in a.shapes.split(";")]
    fast = {"both": [False, True], "on": [True], "off": [False]}[a.fast_accum]
    torch.manual_seed(0)
    for (m, n, k) in shapes:
        x = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major [K, N]
        for mode in a.scales.split(","):
            for fa in fast:
                out = {"m": m, "n": n, "k": k, "scale": mode, "fast_accum": fa, "peer": "torch._scaled_mm",
                       "device": torch.cuda.get_device_name(), "torch": torch.__version__}
                try:
                    if mode == "block" and fa:
                        raise RuntimeError("block scales have no fast-accumulation path")
                    sa, sb = scales(torch, mode, m, n, k, dev)

                    def fn():
                        return torch._scaled_mm(x, w, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                use_fast_accum=fa)
                    t = timed(torch, fn, a.reps, a.warmup, flush)
                    t["tflops"] = 2.0 * m * n * k / (t["median_ms"] * 1e-3) / 1e12
                    out.update(t)
                except Exception as ex:  # a refusal is data
                    out["error"] = f"{type(ex).__name__}: {ex}".splitlines()[0][:200]
                print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
