#!/usr/bin/env python3
"""The peer for `kiln moe bench`: torch._grouped_mm, and torch._grouped_mm + silu(g) * u, timed the
way kiln times (CUDA events, warm-up excluded, L2 flushed before every timed repetition, median),
on the same rows per expert. Prints one JSON object.

  python3 scripts/moe_peer.py --counts 1512,1091,539,772,779,979,880,964 --n 3072 --k 4096 [--swiglu]

Plain: Y = X . W_e^T per expert, W [E, N, K] (K-major, passed to torch as W.transpose(-2, -1)).
--swiglu: the unfused gate/up path two ways (one grouped_mm over W13 [E, 2N, K] then silu(g) * u;
two grouped_mms then silu(g) * u), the faster counted as torch's, then the down projection
grouped_mm(H, W2 [E, K, N]) and the whole FFN.
"""
import argparse
import json
import sys


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", required=True, help="rows per expert, comma-separated")
    ap.add_argument("--n", type=int, required=True, help="output columns (with --swiglu: the FFN width)")
    ap.add_argument("--k", type=int, required=True, help="reduction depth (with --swiglu: the hidden size)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16"], help="torch._grouped_mm takes bf16")
    ap.add_argument("--swiglu", action="store_true")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-flush", action="store_true")
    return ap.parse_args()


def main():
    a = parse()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(json.dumps({"error": f"torch is not installed: {e}"}))
        return 3
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no GPU"}))
        return 4
    if not hasattr(torch, "_grouped_mm"):
        print(json.dumps({"error": f"torch {torch.__version__} has no _grouped_mm"}))
        return 3
    dev = torch.device("cuda")
    counts = [int(c) for c in a.counts.split(",")]
    rows, e, n, k = sum(counts), len(counts), a.n, a.k
    dt = torch.bfloat16
    offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    g = torch.Generator(device=dev).manual_seed(1)
    rnd = lambda *s: (torch.rand(*s, device=dev, generator=g, dtype=torch.float32) * 2 - 1).to(dt)
    x = rnd(rows, k)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def time(fn):
        for _ in range(max(a.warmup, 1)):
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
        for s, t in ev:
            if not a.no_flush:
                flush.zero_()
            s.record()
            fn()
            t.record()
        torch.cuda.synchronize()
        ts = sorted(s.elapsed_time(t) for s, t in ev)
        m = len(ts)
        med = ts[m // 2] if m % 2 else 0.5 * (ts[m // 2 - 1] + ts[m // 2])
        return {"median_ms": med, "min_ms": ts[0], "max_ms": ts[-1], "reps": m}

    def tflops(t, flops):
        t["tflops"] = flops / (t["median_ms"] * 1e-3) / 1e12
        return t

    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "counts": counts,
        "n": n,
        "k": k,
        "dtype": a.dtype,
        "flush_l2": not a.no_flush,
    }
    gemm_flops = 2.0 * rows * n * k
    try:
        if not a.swiglu:
            w = rnd(e, n, k)
            out["grouped_mm"] = tflops(time(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)), gemm_flops)
        else:
            w13 = rnd(e, 2 * n, k)
            w1, w3 = rnd(e, n, k), rnd(e, n, k)
            w2 = rnd(e, k, n)

            def fused_weights():
                gu = torch._grouped_mm(x, w13.transpose(-2, -1), offs=offs)
                gate, up = gu.chunk(2, dim=-1)
                return F.silu(gate) * up

            def two_mms():
                gate = torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs)
                up = torch._grouped_mm(x, w3.transpose(-2, -1), offs=offs)
                return F.silu(gate) * up

            one = tflops(time(fused_weights), 2 * gemm_flops)
            two = tflops(time(two_mms), 2 * gemm_flops)
            best, name = (one, "w13") if one["median_ms"] <= two["median_ms"] else (two, "w1_w3")
            out["swiglu_w13"], out["swiglu_w1_w3"] = one, two
            out["swiglu"] = dict(best, variant=name)
            gate_up = fused_weights if name == "w13" else two_mms
            h = gate_up()
            out["down_proj"] = tflops(time(lambda: torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)), gemm_flops)
            out["ffn"] = tflops(time(lambda: torch._grouped_mm(gate_up(), w2.transpose(-2, -1), offs=offs)), 3 * gemm_flops)
    except Exception as ex:  # a refusal is data: report it, do not hide it
        out["error"] = f"{type(ex).__name__}: {ex}"
        print(json.dumps(out, indent=2))
        return 1
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
