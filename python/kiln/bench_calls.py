"""What one warm call of each kiln op costs on the host and on the GPU, beside the torch call it
replaces: `python -m kiln.bench_calls [--ops gemm,attention,...] [--json FILE]`.

CPU µs: a loop of warm calls on a small problem, wall time over calls (the GPU keeps up, so the
host is what is timed), the best of three rounds. GPU µs: CUDA events around one call, the median
of many. Problems are small on purpose: the question is what a call costs besides its kernel."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time


# The host cost a warm call may take (kiln's model issue: torch's own ops cost 15-30 µs).
TARGET_US = 20.0


def cpu_us(fn, calls: int, rounds: int = 3) -> float:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def gpu_us(fn, reps: int = 50) -> float:
    from .bench_model import median_ms

    return median_ms(fn, reps=reps, warm=0) * 1e3


def cases():
    """(op, what, kiln call, peer name, peer call) on small problems, built on the GPU."""
    import torch
    import torch.nn.functional as F

    import kiln
    import kiln.moe

    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=bf):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g)

    out = []
    a, w = rnd(64, 256), rnd(512, 256)
    out.append(("gemm", "64x512x256 x @ w.t()", lambda: kiln.gemm(a, w.t()), "a @ b", lambda: a @ w.t()))

    q, k, v = rnd(1, 128, 8, 128), rnd(1, 128, 2, 128), rnd(1, 128, 2, 128)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out.append(("flash_attn_func", "B1 S128 Hq8 Hkv2 d128 causal",
                lambda: kiln.flash_attn_func(q, k, v, causal=True), "sdpa",
                lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)))

    lens = torch.tensor([0, 100, 228, 356], dtype=torch.int32, device=dev)
    qp, kp, vp = rnd(356, 8, 128), rnd(356, 2, 128), rnd(356, 2, 128)
    out.append(("flash_attn_varlen_func", "3 sequences, 356 tokens, offsets on the GPU only",
                lambda: kiln.flash_attn_varlen_func(qp, kp, vp, lens, lens, 128, 128, causal=True), None, None))

    pages, page = 64, 16
    kc, vc = rnd(pages, page, 2, 128), rnd(pages, page, 2, 128)
    table = torch.arange(pages, dtype=torch.int32, device=dev).reshape(4, 16)
    seqlens = torch.full((4,), 200, dtype=torch.int32, device=dev)
    qd = rnd(4, 1, 8, 128)
    out.append(("flash_attn_with_kvcache", "B4 decode, 200 cached, pages of 16",
                lambda: kiln.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens, block_table=table), None, None))

    # transformers' static cache: [B, Hkv, S, D] memory read through its [B, S, Hkv, D] view,
    # each sequence's length and first key (left padding); the query [B, Hq, 1, D] transposed.
    b, smax = 8, 2048
    sk, sv = rnd(b, 8, smax, 128), rnd(b, 8, smax, 128)
    sq = rnd(b, 32, 1, 128)
    ends = torch.randint(1024, smax + 1, (b,), device=dev, generator=g).to(torch.int32)
    firsts = torch.where(torch.arange(b, device=dev) % 2 == 1, ends // 4, 0).to(torch.int32)
    sqt, skt, svt = (t.transpose(1, 2) for t in (sq, sk, sv))  # (the views made once, as a model's are)
    out.append(("flash_attn_with_kvcache", "B8 Hq32 Hkv8 static cache S2048 (BHSD), left-padded",
                lambda: kiln.flash_attn_with_kvcache(sqt, skt, svt, cache_seqlens=ends, cache_leftpad=firsts),
                "sdpa (whole cache, enable_gqa)",
                lambda: F.scaled_dot_product_attention(sq, sk, sv, enable_gqa=True)))

    x, wg, w13 = rnd(256, 256), rnd(4, 256, 256), rnd(4, 512, 256)
    offs = torch.tensor([0, 64, 128, 192, 256], dtype=torch.int32, device=dev)
    group_ends = offs[1:].contiguous()  # (a new name: the static-cache case's lambda reads `ends`)
    out.append(("moe.grouped_gemm", "E4 256 rows N256 K256", lambda: kiln.moe.grouped_gemm(x, wg, offs),
                "torch._grouped_mm", lambda: torch._grouped_mm(x, wg.transpose(1, 2), offs=group_ends)))

    def torch_swiglu():
        gu = torch._grouped_mm(x, w13.transpose(1, 2), offs=group_ends)
        return F.silu(gu[:, :256]) * gu[:, 256:]

    out.append(("moe.swiglu", "E4 256 rows N256 K256", lambda: kiln.moe.swiglu(x, w13, offs),
                "grouped_mm + silu*mul", torch_swiglu))

    t, e, top = 32, 8, 2
    hs, gate_up, down = rnd(t, 256), rnd(e, 512, 256), rnd(e, 256, 256)
    idx = torch.randint(0, e, (t, top), device=dev, generator=g)
    wts = torch.rand(t, top, device=dev, generator=g)

    def torch_experts():
        # transformers' grouped_mm experts: pairs sorted by expert, the rows gathered, two
        # grouped GEMMs around silu * mul, the routing weight, index_add_ into the tokens.
        flat = idx.reshape(-1)
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=e)
        cum = counts.cumsum(0).to(torch.int32)
        tok = order // top
        gu = torch._grouped_mm(hs[tok], gate_up.transpose(1, 2), offs=cum)
        h = F.silu(gu[:, :256]) * gu[:, 256:]
        y = torch._grouped_mm(h, down.transpose(1, 2), offs=cum) * wts.reshape(-1)[order, None].to(bf)
        return torch.zeros_like(hs).index_add_(0, tok, y)

    out.append(("moe.experts", f"{t} tokens E{e} top-{top} H256 I256",
                lambda: kiln.moe.experts(hs, gate_up, down, idx, wts), "grouped_mm experts", torch_experts))

    logits = rnd(t, e)
    out.append(("moe.layer", f"{t} tokens E{e} top-{top} H256 I256, routed from logits",
                lambda: kiln.moe.layer(hs, logits, gate_up, down, top_k=top, renormalize=True),
                "softmax + topk + grouped_mm experts",
                lambda: (torch.topk(logits.float().softmax(-1), top, dim=-1), torch_experts())))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kiln.bench_calls", description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated ops (default: all)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed round (default 2000)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    import torch

    import kiln

    if not torch.cuda.is_available():
        print("kiln.bench_calls: no CUDA GPU; this benchmark times calls on one", file=sys.stderr)
        return 4
    want = set(args.ops.split(",")) if args.ops else None
    rows = []
    with torch.inference_mode():
        for op, what, fn, peer, peer_fn in cases():
            if want and op not in want:
                continue
            row = {"op": op, "problem": what, "cpu_us": cpu_us(fn, args.calls), "gpu_us": gpu_us(fn)}
            if peer_fn is not None:
                row.update(peer=peer, peer_cpu_us=cpu_us(peer_fn, args.calls), peer_gpu_us=gpu_us(peer_fn))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    meta = {
        "device": torch.cuda.get_device_name(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "kiln": kiln.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(f"{meta['device']}, torch {meta['torch']}, kiln {meta['kiln']}, {meta['date']}")
    print("| op | problem | kiln CPU µs | kiln GPU µs | peer | peer CPU µs | peer GPU µs |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        peer = (f"{r['peer']} | {r['peer_cpu_us']:.1f} | {r['peer_gpu_us']:.1f}" if "peer" in r else "– | – | –")
        print(f"| {r['op']} | {r['problem']} | {r['cpu_us']:.1f} | {r['gpu_us']:.1f} | {peer} |")
    over = [f"{r['op']} {r['cpu_us']:.1f}" for r in rows if r["cpu_us"] > TARGET_US]
    print(f"host cost target ≤ {TARGET_US:.0f} µs per warm call: " + (f"over it: {', '.join(over)}" if over else "every op within it"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
