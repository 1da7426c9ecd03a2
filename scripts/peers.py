#!/usr/bin/env python3
"""The torch / cuDNN peers that kiln's benches are compared with, timed the way kiln times
(CUDA events around each launch, warm-up excluded, L2 flushed before every timed repetition,
median). Runs on the GPU machine; `scripts/gpu.sh` calls it for the attention and MoE tables.

  python3 scripts/peers.py attention [--shapes B,H,S,D[,causal[,f16]];...]   SDPA cuDNN and FLASH
  python3 scripts/peers.py backward [--shapes B,H,S,D[,causal[,f16]];...]   their backwards
  python3 scripts/peers.py moe --counts 1512,1091,... --n 3072 --k 4096 [--swiglu]   grouped_mm
  python3 scripts/peers.py gemm [--shapes MxNxK;...] [--dtype bf16|f16|fp8]   matmul, _scaled_mm
  python3 scripts/peers.py fp8 [--shapes ...|--set deepseek] [--scales tensor,row,block]   scaled
  python3 scripts/peers.py fp8moe --counts 8192,8192,8192,8192 --n 4096 --k 7168 [--masked]
  python3 scripts/peers.py decode [--shapes B,HQ,HKV,L,D[,SQ];...]   SDPA enable_gqa, unpaged cache

Each subcommand prints JSON (attention and gemm: one object per shape and line; moe: one object).
A shape a backend refuses is reported in the JSON (an `*_error` or `error` field), not raised.
torch is imported only when a subcommand runs, so `--help` works without it.
"""
import argparse
import json
import math
import sys

# ---------------------------------------------------------------------------------------------
# attention: PyTorch SDPA with the cuDNN backend and the FLASH (FlashAttention-2) backend.
# TFLOPS count 4*B*H*D per unmasked (query, key) pair, the count kiln uses; causal is aligned
# top-left here, which equals kiln's bottom-right alignment when seqlen_q == seqlen_kv, the only
# causal case this runs.

ATTN_DEFAULT = ("2,16,8192,128;2,16,8192,128,causal;4,16,4096,128;1,16,16384,128;4,16,4096,64;"
                "4,16,4096,256;2,16,8192,128,,f16")


def attn_pairs(sq, skv, causal):
    return sq * (sq + 1) // 2 if causal else sq * skv


def attn_time(torch, F, sdpa_kernel, backend, q, k, v, causal, reps, warmup, flush, warmup_ms=0.0):
    def call():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    # As kiln's --warmup-ms: after `warmup` calls, chunks of about 50 ms between events until
    # their measured GPU time reaches warmup_ms. Sized from each chunk's time, not the first
    # call's: that one builds cuDNN's plan and would cut a second of warm-up to a few calls.
    for _ in range(max(warmup, 1)):
        call()
    done, per = 0.0, None
    while done < warmup_ms:
        n = 1 if per is None else max(1, math.ceil(min(warmup_ms - done, 50.0) / max(per, 1e-4)))
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            call()
        e.record()
        e.synchronize()
        ms = s.elapsed_time(e)
        done += ms
        per = ms / n
    torch.cuda.synchronize()
    # As kiln times: every launch between its own events, the flush before it, and no host
    # synchronisation until the last (a wait per launch leaves the GPU idle between launches,
    # which under a power cap raises the clock for the launches that follow).
    events = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in events]
    return sorted(times)[len(times) // 2], times


def attention(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, F = mods
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    flush = None if a.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    known = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    for name in a.backends.split(","):
        if name not in known:
            sys.exit(f"unknown backend `{name}` in --backends (use cudnn, flash)")
    for spec in a.shapes.split(";"):
        f = spec.split(",")
        b, h, d = int(f[0]), int(f[1]), int(f[3])
        sq, skv = (int(x) for x in (f[2].split(":") + [f[2]])[:2])
        causal = len(f) > 4 and f[4] == "causal"
        if causal and sq != skv:
            sys.exit(f"{spec}: causal needs equal query and key lengths here (SDPA aligns the mask top-left)")
        dtype = torch.float16 if len(f) > 5 and f[5] == "f16" else torch.bfloat16
        if a.layout == "bhsd":  # contiguous [B, H, S, D], SDPA's own layout
            q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype)
            k, v = (torch.randn(b, h, skv, d, device="cuda", dtype=dtype) for _ in range(2))
        else:  # BSHD storage viewed as BHSD, as a fused projection produces it (kiln's default)
            q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype).transpose(1, 2)
            k, v = (torch.randn(b, skv, h, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in range(2))
        flops = 4.0 * b * h * d * attn_pairs(sq, skv, causal)
        out = {"batch": b, "heads": h, "seqlen": sq, "seqlen_kv": skv, "dim": d, "causal": causal,
               "layout": a.layout.upper(),
               "dtype": str(dtype).split(".")[-1], "device": torch.cuda.get_device_name(),
               "torch": torch.__version__}
        for name in a.backends.split(","):
            try:
                ms, times = attn_time(torch, F, sdpa_kernel, known[name], q, k, v, causal, a.reps,
                                      a.warmup, flush, a.warmup_ms)
                out[name + "_ms"] = round(ms, 4)
                out[name + "_times_ms"] = [round(t, 4) for t in times]
                out[name + "_tflops"] = round(flops / (ms * 1e-3) / 1e12, 1)
            except Exception as e:  # a backend that refuses the shape is data, not a crash
                out[name + "_error"] = str(e).splitlines()[0][:200]
        print(json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# backward: the SDPA backward of the cuDNN and FLASH backends on the same shapes. The forward runs
# once under the backend (autograd records that backend's backward), then each timed repetition
# is torch.autograd.grad of the output (the graph retained): the backend's backward kernels and
# autograd's few launches around them. TFLOPS count 2.5 times the forward's FLOPs, as
# FlashAttention's benchmarks and `kiln attn bench --backward` do.

BWD_DEFAULT = ("2,16,8192,128;2,16,8192,128,causal;4,16,4096,64;4,16,4096,64,causal;1,16,16384,64;"
               "1,16,16384,64,causal;4,16,4096,256;4,16,4096,256,causal;1,16,16384,256;1,16,16384,256,causal")


def backward(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, F = mods
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    flush = None if a.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    known = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    for name in a.backends.split(","):
        if name not in known:
            sys.exit(f"unknown backend `{name}` in --backends (use cudnn, flash)")
    kiln = None
    if a.kiln:
        knobs = knobs_in_environment()
        if knobs:
            sys.exit(f"--kiln: {', '.join(knobs)} set, but the kiln Python package reads no KILN_* knob "
                     "from the environment (only the CLI does): kiln's figures would be its defaults; "
                     "unset it, or time the knob with `kiln attn bench --backward`")
        try:
            import kiln
        except ImportError as e:
            sys.exit(f"--kiln needs the kiln Python package on PYTHONPATH ({e})")
    for spec in a.shapes.split(";"):
        f = spec.split(",")
        b, h, sq, d = (int(x) for x in f[:4])
        causal = len(f) > 4 and f[4] == "causal"
        dtype = torch.float16 if len(f) > 5 and f[5] == "f16" else torch.bfloat16

        def bshd():  # BSHD storage viewed as BHSD, as kiln's default layout
            return torch.randn(b, sq, h, d, device="cuda", dtype=dtype).transpose(1, 2)

        q, k, v, dout = bshd(), bshd(), bshd(), bshd()
        for t in (q, k, v):
            t.requires_grad_(True)
        flops = 2.5 * 4.0 * b * h * d * attn_pairs(sq, sq, causal)
        out = {"batch": b, "heads": h, "seqlen": sq, "dim": d, "causal": causal,
               "dtype": str(dtype).split(".")[-1], "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "flops": "2.5x forward"}
        # name -> the timed call: each backend's backward through autograd (its forward run once
        # under the backend), and with --kiln kiln's backward (and --kiln-det its deterministic
        # mode) on the same tensors (BSHD views) from kiln's own forward
        fns = {}
        for name in a.backends.split(","):
            try:
                with sdpa_kernel([known[name]]):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def fn(o=o):
                    return torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)

                fn()
                fns[name] = fn
            except Exception as e:  # a backend that refuses the shape is data, not a crash
                out[name + "_error"] = str(e).splitlines()[0][:200]
        if kiln is not None:
            qs, ks, vs, ds = (t.detach().transpose(1, 2) for t in (q, k, v, dout))
            try:
                ko, lse = kiln.flash_attn_func(qs, ks, vs, causal=causal, return_lse=True)
                for name, det in [("kiln", False)] + ([("kiln_det", True)] if a.kiln_det else []):
                    def kfn(det=det):
                        return kiln.flash_attn_backward(ds, qs, ks, vs, ko, lse, causal=causal, deterministic=det)

                    kfn()
                    fns[name] = kfn
            except Exception as e:
                out["kiln_error"] = str(e).splitlines()[0][:200]
        if a.interleave:
            times = timed_interleaved(torch, fns, a.reps, a.warmup, a.warmup_ms, flush)
        else:
            times = {}
            for name, fn in fns.items():
                warm_for(torch, fn, a.warmup_ms)
                times[name] = timed(torch, fn, a.reps, a.warmup, flush)
        for name, t in times.items():
            out[name + "_ms"] = round(t["median_ms"], 4)
            out[name + "_tflops"] = round(flops / (t["median_ms"] * 1e-3) / 1e12, 1)
        if "kiln_ms" in out and "cudnn_ms" in out:
            out["kiln_x_cudnn"] = round(out["cudnn_ms"] / out["kiln_ms"], 3)
        if "kiln_det_ms" in out and "kiln_ms" in out:
            out["det_x_kiln"] = round(out["kiln_ms"] / out["kiln_det_ms"], 3)
        print(json.dumps(out), flush=True)
        del q, k, v, dout, fns
        torch.cuda.empty_cache()
    return 0


# ---------------------------------------------------------------------------------------------
# moe: torch._grouped_mm, and torch._grouped_mm + silu(g) * u, on the same rows per expert.
# Plain: Y = X . W_e^T per expert, W [E, N, K] (K-major, passed to torch as W.transpose(-2, -1)).
# --swiglu: the unfused gate/up path two ways (one grouped_mm over W13 [E, 2N, K] then
# silu(g) * u; two grouped_mms then silu(g) * u), the faster counted as torch's, then the down
# projection grouped_mm(H, W2 [E, K, N]) and the whole FFN.


def timed(torch, fn, reps, warmup, flush):
    for _ in range(max(warmup, 1)):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, t in ev:
        if flush is not None:
            flush.zero_()
        s.record()
        fn()
        t.record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(t) for s, t in ev)
    m = len(ts)
    med = ts[m // 2] if m % 2 else 0.5 * (ts[m // 2 - 1] + ts[m // 2])
    return {"median_ms": med, "min_ms": ts[0], "max_ms": ts[-1], "reps": m}


def timed_interleaved(torch, fns, reps, warmup, warmup_ms, flush):
    """The calls of `fns` (name -> call) timed in turn, one launch each a round: warm-up rounds
    until `warmup_ms` of GPU time has passed (at least `warmup`), then `reps` rounds, every
    launch between its own events with L2 flushed before it. Under a power cap the clock drifts
    with the load (an H200 at 700 W: 1.47-1.98 GHz); taken in turn, every call sees the same
    clock, so their ratio holds where separate timings drift apart by up to 11 %."""
    names = list(fns)
    for _ in range(max(warmup, 1)):
        for n in names:
            fns[n]()
    torch.cuda.synchronize()
    done = 0.0
    while done < warmup_ms:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for n in names:
            fns[n]()
        e.record()
        e.synchronize()
        done += s.elapsed_time(e)
    ev = {n: [] for n in names}
    for _ in range(reps):
        for n in names:
            if flush is not None:
                flush.zero_()
            s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[n]()
            t.record()
            ev[n].append((s, t))
    torch.cuda.synchronize()
    out = {}
    for n in names:
        ts = sorted(s.elapsed_time(t) for s, t in ev[n])
        m = len(ts)
        med = ts[m // 2] if m % 2 else 0.5 * (ts[m // 2 - 1] + ts[m // 2])
        out[n] = {"median_ms": med, "min_ms": ts[0], "max_ms": ts[-1], "reps": m}
    return out


def warm_for(torch, fn, warmup_ms):
    """As kiln's --warmup-ms: fn in chunks of about 50 ms between events until their GPU time
    reaches warmup_ms, so that what follows is timed at the power-capped steady clock (a short
    warm-up times the first moments of load, up to 11 % faster on an H200: 2026-11-30)."""
    done, per = 0.0, None
    while done < warmup_ms:
        n = 1 if per is None else max(1, math.ceil(min(warmup_ms - done, 50.0) / max(per, 1e-4)))
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        ms = s.elapsed_time(e)
        done += ms
        per = ms / n


def with_tflops(t, flops):
    t["tflops"] = flops / (t["median_ms"] * 1e-3) / 1e12
    return t


def torch_or_error():
    """torch and its functional module, or (None, exit code) after printing why not."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(json.dumps({"error": f"torch is not installed: {e}"}))
        return None, 3
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no GPU"}))
        return None, 4
    return (torch, F), 0


def moe(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, F = mods
    if not hasattr(torch, "_grouped_mm"):
        print(json.dumps({"error": f"torch {torch.__version__} has no _grouped_mm"}))
        return 3
    dev = torch.device("cuda")
    counts = [int(c) for c in a.counts.split(",")]
    rows, e, n, k = sum(counts), len(counts), a.n, a.k
    dt = torch.bfloat16
    offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    g = torch.Generator(device=dev).manual_seed(1)

    def rnd(*s):
        return (torch.rand(*s, device=dev, generator=g, dtype=torch.float32) * 2 - 1).to(dt)

    x = rnd(rows, k)
    flush = None if a.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def time(fn):
        return timed(torch, fn, a.reps, a.warmup, flush)

    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "counts": counts,
           "n": n, "k": k, "dtype": a.dtype, "flush_l2": not a.no_flush}
    gemm_flops = 2.0 * rows * n * k
    try:
        if not a.swiglu:
            w = rnd(e, n, k)
            out["grouped_mm"] = with_tflops(time(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)), gemm_flops)
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

            one = with_tflops(time(fused_weights), 2 * gemm_flops)
            two = with_tflops(time(two_mms), 2 * gemm_flops)
            best, name = (one, "w13") if one["median_ms"] <= two["median_ms"] else (two, "w1_w3")
            out["swiglu_w13"], out["swiglu_w1_w3"] = one, two
            out["swiglu"] = dict(best, variant=name)
            gate_up = fused_weights if name == "w13" else two_mms
            h = gate_up()
            out["down_proj"] = with_tflops(time(lambda: torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)), gemm_flops)
            out["ffn"] = with_tflops(time(lambda: torch._grouped_mm(gate_up(), w2.transpose(-2, -1), offs=offs)), 3 * gemm_flops)
    except Exception as ex:  # a refusal is data: report it, do not hide it
        out["error"] = f"{type(ex).__name__}: {ex}"
        print(json.dumps(out, indent=2))
        return 1
    print(json.dumps(out, indent=2))
    return 0


# ---------------------------------------------------------------------------------------------
# gemm: torch.matmul (cuBLAS) in bf16 / f16, and torch._scaled_mm in fp8 e4m3 (per-tensor scales,
# bf16 out). C = A . B with A [M, K] row-major and B [K, N] column-major (layout RC, kiln's
# default); 2*M*N*K FLOPs. kiln's own bench times cuBLAS in the same process already: this peer
# is for what kiln does not call (fp8) and for a cross-check through torch.

GEMM_DEFAULT = "4096x4096x4096;8192x8192x8192;512x4096x4096"


def gemm(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, _ = mods
    dev = torch.device("cuda")
    flush = None if a.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    torch.manual_seed(0)
    for spec in a.shapes.split(";"):
        m, n, k = (int(x) for x in spec.lower().split("x"))
        out = {"m": m, "n": n, "k": k, "layout": "RC", "dtype": a.dtype,
               "device": torch.cuda.get_device_name(), "torch": torch.__version__}
        try:
            if a.dtype == "fp8":
                if not hasattr(torch, "_scaled_mm"):
                    raise RuntimeError(f"torch {torch.__version__} has no _scaled_mm")
                f8 = torch.float8_e4m3fn
                x = torch.randn(m, k, device=dev).to(f8)
                w = torch.randn(n, k, device=dev).to(f8).t()  # column-major [K, N]
                one = torch.ones((), device=dev)

                def fn():
                    return torch._scaled_mm(x, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            else:
                dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
                x = torch.randn(m, k, device=dev, dtype=dt)
                w = torch.randn(n, k, device=dev, dtype=dt).t()

                def fn():
                    return torch.matmul(x, w)
            t = with_tflops(timed(torch, fn, a.reps, a.warmup, flush), 2.0 * m * n * k)
            out.update(t)
        except Exception as ex:  # a refusal is data
            out["error"] = f"{type(ex).__name__}: {ex}".splitlines()[0][:200]
        print(json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# fp8: torch._scaled_mm in e4m3 with per-tensor, row-wise or DeepSeek block-wise scales (1x128
# activations, 128x128 weights), with and without fast accumulation: the peer of `kiln fp8 bench`.
# Block scales go in as torch takes them on sm_90 (through cuBLASLt): scale_a (M, K/128) with
# stride (1, M), scale_b (K/128, N/128) with stride (1, K/128), the layouts
# `kiln::ops::fp8::quantize` writes.

DEEPSEEK = [(m, n, k) for m in (64, 128, 4096)
            for (n, k) in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]


def fp8_scales(torch, mode, m, n, k, dev):
    f32 = torch.float32
    if mode == "tensor":
        return torch.rand((), device=dev) + 0.5, torch.rand((), device=dev) + 0.5
    if mode == "row":
        return torch.rand(m, 1, device=dev, dtype=f32) + 0.5, torch.rand(1, n, device=dev, dtype=f32) + 0.5
    kb, nb = (k + 127) // 128, (n + 127) // 128
    sa = (torch.rand(kb, m, device=dev, dtype=f32) + 0.5).t()   # (M, K/128), stride (1, M)
    sb = (torch.rand(nb, kb, device=dev, dtype=f32) + 0.5).t()  # (K/128, N/128), stride (1, K/128)
    return sa, sb


def fp8(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, _ = mods
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
                    sa, sb = fp8_scales(torch, mode, m, n, k, dev)

                    def fn():
                        return torch._scaled_mm(x, w, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                use_fast_accum=fa)
                    out.update(with_tflops(timed(torch, fn, a.reps, a.warmup, flush), 2.0 * m * n * k))
                except Exception as ex:  # a refusal is data
                    out["error"] = f"{type(ex).__name__}: {ex}".splitlines()[0][:200]
                print(json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# fp8moe: the FP8 grouped GEMM peers for `kiln fp8 bench --grouped`, e4m3 x e4m3 -> bf16. Each
# path is one JSON line naming what ran ("path"); a path torch refuses is reported with its error.
#   grouped-block   torch._scaled_grouped_mm with DeepSeek block scales (kiln's work; torch 2.11
#                   takes only row-wise scales on sm_90, so this is expected to be refused)
#   grouped-rowwise torch._scaled_grouped_mm with row-wise scales: less work than block scales
#                   (no promotion per 128 of K), reported for reference, not as the same work
#   loop-block      one torch._scaled_mm per expert with block scales (cuBLASLt): the same work
# "same_work" marks the block-scaled paths; the best of those is the peer kiln's target is against.


def fp8moe(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, _ = mods
    dev = torch.device("cuda")
    f32, e4 = torch.float32, torch.float8_e4m3fn
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    counts = [int(c) for c in a.counts.split(",")]
    e, n, k = len(counts), a.n, a.k
    kb, nb = (k + 127) // 128, (n + 127) // 128
    max_rows = max(counts)
    torch.manual_seed(0)
    rows = e * max_rows if a.masked else sum(counts)
    x = torch.randn(rows, k, device=dev).to(e4)
    w = torch.randn(e, n, k, device=dev).to(e4)
    sx = (torch.rand(kb, rows, device=dev, dtype=f32) + 0.5).t()     # (rows, K/128), M-major
    sw = torch.rand(e, nb, kb, device=dev, dtype=f32) + 0.5           # per expert (N/128, K/128)
    starts = [i * max_rows for i in range(e)] if a.masked else [sum(counts[:i]) for i in range(e)]
    flops = 2.0 * sum(counts) * n * k
    base = {"counts": a.counts, "n": n, "k": k, "masked": a.masked, "device": torch.cuda.get_device_name(),
            "torch": torch.__version__}

    def report(path, same, fn):
        out = dict(base, path=path, same_work=same)
        try:
            out.update(with_tflops(timed(torch, fn, a.reps, a.warmup, flush), flops))
        except Exception as ex:  # a refusal is data
            out["error"] = f"{type(ex).__name__}: {ex}".splitlines()[0][:200]
        print(json.dumps(out), flush=True)

    offs = torch.tensor([sum(counts[:i + 1]) for i in range(e)], device=dev, dtype=torch.int32)
    wt = w.transpose(1, 2)  # [E, K, N], N-major: the column-major B each expert's GEMM takes
    xg = x.view(e, max_rows, k) if a.masked else x

    def grouped(scale_a, scale_b):
        def fn():
            if a.masked:
                return torch._scaled_grouped_mm(xg, wt, scale_a, scale_b, out_dtype=torch.bfloat16)
            return torch._scaled_grouped_mm(xg, wt, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16)
        return fn

    sa_block = sx.reshape(e, max_rows, kb) if a.masked else sx
    report("grouped-block", True, grouped(sa_block, sw.transpose(1, 2)))
    ra = torch.rand(e, max_rows, device=dev, dtype=f32) + 0.5 if a.masked else torch.rand(rows, device=dev, dtype=f32) + 0.5
    rb = torch.rand(e, n, device=dev, dtype=f32) + 0.5
    report("grouped-rowwise", False, grouped(ra, rb))

    # Per expert: its rows of X, its W (column-major view) and its scales, cuBLASLt's layouts.
    parts = []
    for i, c in enumerate(counts):
        if c == 0:
            continue
        s0 = starts[i]
        xa = x[s0:s0 + c]
        sa = sx[s0:s0 + c].t().contiguous().t()  # (c, K/128) with stride (1, c)
        sb = sw[i].t()                          # (K/128, N/128) with stride (1, K/128)
        parts.append((xa, w[i].t(), sa, sb))

    def loop():
        return [torch._scaled_mm(xa, wb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16) for (xa, wb, sa, sb) in parts]
    report("loop-block", True, loop)
# decode: PyTorch SDPA (enable_gqa) over the same cache unpaged, K and V [B, Hkv, L, D], with
# queries [B, Hq, SQ, D] (SQ > 1 causal, aligned bottom-right as kiln's: an explicit mask).
# GB/s count the K and V bytes read once, as `kiln attn bench --decode` does. Every backend
# SDPA has is timed (one that refuses is reported), and the default dispatch besides.

DECODE_DEFAULT = "64,32,8,8192,128"


def decode(a):
    mods, rc = torch_or_error()
    if mods is None:
        return rc
    torch, F = mods
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    flush = None if a.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    backends = {"default": None, "cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    for spec in a.shapes.split(";"):
        f = [int(x) for x in spec.split(",")]
        b, hq, hkv, length, d = f[:5]
        sq = f[5] if len(f) > 5 else 1
        dtype = torch.float16 if a.dtype == "f16" else torch.bfloat16
        q = torch.randn(b, hq, sq, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, hkv, length, d, device="cuda", dtype=dtype) for _ in range(2))
        mask = None
        if sq > 1:  # bottom-right: query i sees keys j <= i + L - SQ
            i = torch.arange(sq, device="cuda")[:, None]
            mask = torch.arange(length, device="cuda")[None, :] <= i + length - sq
        cache_bytes = 2 * b * hkv * length * d * q.element_size()
        out = {"batch": b, "heads": hq, "kv_heads": hkv, "context": length, "dim": d, "seqlen_q": sq,
               "dtype": str(dtype).split(".")[-1], "cache_bytes": cache_bytes,
               "device": torch.cuda.get_device_name(), "torch": torch.__version__}
        best = None
        for name in a.backends.split(","):
            if name not in backends:
                sys.exit(f"unknown backend `{name}` in --backends (use {', '.join(backends)})")
            be = backends[name]

            def call(be=be):
                if be is None:
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

            try:
                t = timed(torch, call, a.reps, a.warmup, flush)
                us = t["median_ms"] * 1e3
                out[name + "_us"] = round(us, 2)
                out[name + "_gbps"] = round(cache_bytes / (us * 1e-6) / 1e9, 1)
                if best is None or us < best[1]:
                    best = (name, us)
            except Exception as e:  # a backend that refuses the shape is data, not a crash
                out[name + "_error"] = str(e).splitlines()[0][:200]
        if best is not None:
            out["best"], out["best_us"] = best[0], round(best[1], 2)
        print(json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="peer", required=True, metavar="{attention,backward,moe,gemm,fp8,fp8moe,decode}")

    p = sub.add_parser("attention", help="PyTorch SDPA, cuDNN and FLASH backends (for `kiln attn bench`)")
    p.add_argument("--shapes", default=ATTN_DEFAULT,
                   help="B,H,S,D[,causal[,f16]] separated by ';'; S may be SQ:SKV (non-causal only)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--warmup-ms", type=float, default=0.0,
                   help="also warm up for at least this much GPU time (ms), as kiln's --warmup-ms")
    p.add_argument("--no-flush", action="store_true",
                   help="do not flush L2 before each timed launch (as kiln's --no-flush)")
    p.add_argument("--backends", default="cudnn,flash",
                   help="comma list of the SDPA backends to time (cudnn, flash)")
    p.add_argument("--layout", choices=["bshd", "bhsd"], default="bshd",
                   help="storage of Q, K, V: [B, S, H, D] viewed as BHSD (default) or contiguous [B, H, S, D]")
    p.set_defaults(run=attention)

    p = sub.add_parser("backward", help="the SDPA backward, cuDNN and FLASH (for `kiln attn bench --backward`)")
    p.add_argument("--shapes", default=BWD_DEFAULT, help="B,H,S,D[,causal[,f16]] separated by ';'")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 before each timed launch")
    p.add_argument("--backends", default="cudnn,flash", help="comma list of the SDPA backends (cudnn, flash)")
    p.add_argument("--warmup-ms", type=float, default=0.0,
                   help="also warm up for at least this much GPU time (ms) before each timing, as kiln's --warmup-ms")
    p.add_argument("--kiln", action="store_true",
                   help="also time kiln's backward (the kiln Python package: flash_attn_backward on the same tensors)")
    p.add_argument("--kiln-det", action="store_true", help="with --kiln: also kiln's deterministic mode")
    p.add_argument("--interleave", action="store_true",
                   help="time the calls in turn, one launch each a round (the same clock for all under a power cap)")
    p.set_defaults(run=backward)

    p = sub.add_parser("moe", help="torch._grouped_mm and the unfused SwiGLU FFN (for `kiln moe bench`)")
    p.add_argument("--counts", required=True, help="rows per expert, comma-separated")
    p.add_argument("--n", type=int, required=True, help="output columns (with --swiglu: the FFN width)")
    p.add_argument("--k", type=int, required=True, help="reduction depth (with --swiglu: the hidden size)")
    p.add_argument("--dtype", default="bf16", choices=["bf16"], help="torch._grouped_mm takes bf16")
    p.add_argument("--swiglu", action="store_true",
                   help="time the expert FFN: gate/up + silu(g) * u, the down projection, the whole")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 before each timed launch")
    p.set_defaults(run=moe)

    p = sub.add_parser("gemm", help="torch.matmul (bf16, f16) and torch._scaled_mm (fp8), layout RC")
    p.add_argument("--shapes", default=GEMM_DEFAULT, help="MxNxK separated by ';'")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "fp8"])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 before each timed launch")
    p.set_defaults(run=gemm)

    p = sub.add_parser("fp8", help="torch._scaled_mm e4m3: tensor, row, DeepSeek block scales (for `kiln fp8 bench`)")
    p.add_argument("--shapes", default="4096x7168x16384", help="MxNxK separated by ';'")
    p.add_argument("--set", choices=["deepseek"], help="DeepSeek-V3's shape set instead of --shapes")
    p.add_argument("--scales", default="tensor,row,block")
    p.add_argument("--fast-accum", default="both", choices=["both", "on", "off"])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.set_defaults(run=fp8)

    p = sub.add_parser("fp8moe", help="FP8 grouped GEMM peers, block scales (for `kiln fp8 bench --grouped`)")
    p.add_argument("--counts", required=True, help="rows per expert, comma-separated")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--masked", action="store_true", help="X is [E, max(counts), K]")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.set_defaults(run=fp8moe)
    p = sub.add_parser("decode", help="PyTorch SDPA with enable_gqa on the unpaged cache (for `kiln attn bench --decode`)")
    p.add_argument("--shapes", default=DECODE_DEFAULT, help="B,HQ,HKV,L,D[,SQ] separated by ';'")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    p.add_argument("--backends", default="default,flash,efficient,cudnn",
                   help="comma list: default (SDPA's own choice), cudnn, flash, efficient, math")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 before each timed launch")
    p.set_defaults(run=decode)
    return ap


# The KILN_* names the scripts and the host set for themselves (where things live, which binary):
# not knobs, so they may be set beside --kiln.
NOT_KNOBS = {"KILN_BIN", "KILN_CACHE_DIR", "KILN_STORE", "KILN_NVRTC", "KILN_PYTHON_DEPS", "KILN_WHEEL",
             "KILN_REQUIRE_NATIVE", "KILN_COMMIT", "KILN_GIT_COMMIT"}


def knobs_in_environment():
    """The KILN_* knobs set (non-empty) here: the Python package ignores them, so a knob's A/B
    through this script would time kiln's default on both sides (2026-11-30, ledger D10/D11)."""
    import os
    return sorted(k for k, v in os.environ.items() if k.startswith("KILN_") and v and k not in NOT_KNOBS)


def main():
    a = parser().parse_args()
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
