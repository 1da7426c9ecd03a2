"""The Python package on a GPU, against torch: per-op accuracy at 20+ shapes each (the
flash-attention rule for attention: kiln's error against an fp32 reference at most twice torch's
own bf16 error; GEMM and MoE by a relative bound), opcheck, torch.compile and CUDA-graph capture,
two small models (Llama-style with GQA, Mixtral-style MoE) built from configs with seeded random
weights run with attn_implementation="kiln" against "sdpa", and timings of each op and of one
forward pass against the torch path it replaces. Writes JSON to $OUT (or ./gpu-out) and prints a
table last; exits 1 if any check fails.

    python3 python/tests/gpu_check.py [--quick] [--moe]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import kiln
import kiln.fp4
import kiln.fp8
import kiln.moe
from kiln.integrations import transformers as kiln_tf

FAILS: list[str] = []
ROWS: list[dict] = []


def rel(x, ref):
    x, ref = x.float(), ref.float()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def record(kind, name, ok, **fields):
    ROWS.append({"kind": kind, "name": name, "ok": bool(ok), **fields})
    if not ok:
        FAILS.append(f"{kind} {name}: {fields}")


def bench_ms(fn, reps=50, warm=10):
    from kiln.bench_model import median_ms  # (one timing loop for the package and its checks)

    return median_ms(fn, reps=reps, warm=warm)


# ---------------------------------------------------------------------------------------- GEMM
def gemm_checks(gen, quick):
    shapes = [(1, 64, 64), (40, 3001, 515), (64, 64, 64), (127, 129, 255), (128, 128, 128), (129, 127, 4095),
              (256, 512, 1024), (77, 3001, 515), (1000, 1000, 1000), (2048, 2048, 2048), (4096, 4096, 4096),
              (8, 8192, 8192), (4095, 4095, 4095), (3, 5, 7), (512, 128256, 64), (333, 777, 96),
              (1024, 4096, 14336 if not quick else 4096), (17, 31, 63), (2000, 64, 2000), (64, 2000, 2000)]
    i = 0
    for (m, n, k) in shapes:
        for layout in ("RR", "RC", "CR", "CC"):
            i += 1
            if quick and i % 4:
                continue
            dt = (torch.bfloat16, torch.float16)[i % 2]
            out_dt = (dt, torch.float32)[i % 3 == 0]
            a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
            b = torch.randn(k, n, device="cuda", dtype=dt, generator=gen)
            if layout[0] == "C":
                a = a.t().contiguous().t()
            if layout[1] == "C":
                b = b.t().contiguous().t()
            ref = a.float() @ b.float()
            out = kiln.gemm(a, b, out_dtype=out_dt)
            err, torch_err = rel(out, ref), rel((a @ b).to(out_dt), ref)
            bound = max(2 * torch_err, 1e-2 if out_dt != torch.float32 else 1e-3)
            record("gemm", f"{m}x{n}x{k} {layout} {str(dt)[6:]}->{str(out_dt)[6:]}", err <= bound and not math.isnan(err),
                   err=err, torch_err=torch_err)
    # alpha, beta and c
    a = torch.randn(300, 200, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(200, 100, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.randn(300, 100, device="cuda", dtype=torch.float32, generator=gen)
    ref = 0.5 * (a.float() @ b.float()) + 2.0 * c
    out = kiln.gemm(a, b, alpha=0.5, beta=2.0, c=c, out_dtype=torch.float32)
    record("gemm", "alpha 0.5 beta 2 c f32", rel(out, ref) < 1e-3, err=rel(out, ref))


# ----------------------------------------------------------------------------------------- FP8
def fp8_deq(codes, scales, block_rows):
    """codes (e4m3) times their scales, in f64: 1x128 (block_rows 1, scales [rows, kb]) or 128x128."""
    x = codes.double()
    s = scales.double().repeat_interleave(block_rows, 0)[: x.shape[0]].repeat_interleave(128, 1)[:, : x.shape[1]]
    return x * s


def fp8_checks(gen, quick):
    """kiln.fp8 on DeepGEMM-style calls: the casts against torch's own e4m3 rounding of x / scale,
    the dense and grouped GEMMs against the f64 product of the dequantised operands (1e-2 relative
    for bf16 output: its rounding and the 1e-3 accumulation bound), the masked layout replayed from
    a CUDA graph after its counts changed."""
    for (m, n, k) in [(1, 256, 128), (64, 2112, 7168), (300, 500, 1040), (4096, 7168, 2048 if quick else 16384)]:
        a = torch.randn(m, k, device="cuda", generator=gen)
        b = torch.randn(n, k, device="cuda", generator=gen)
        (qa, sa), (qb, sb) = kiln.fp8.per_token_cast_to_fp8(a), kiln.fp8.per_block_cast_to_fp8(b)
        want_qa = (a / sa.repeat_interleave(128, 1)[:, :k]).to(torch.float8_e4m3fn)
        record("fp8", f"per_token_cast {m}x{k}", torch.equal(qa.view(torch.uint8), want_qa.view(torch.uint8)))
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        kiln.fp8.gemm_fp8_fp8_bf16_nt((qa, sa), (qb, sb), out)
        ref = fp8_deq(qa, sa, 1) @ fp8_deq(qb, sb, 128).t()
        err = rel(out, ref)
        record("fp8", f"gemm_nt {m}x{n}x{k}", err < 1e-2, err=err)
    e, n, k = 4, 512, 1024
    counts = [0, 300, 1, 129]
    offs = torch.tensor([sum(counts[:i]) for i in range(e + 1)], dtype=torch.int32, device="cuda")
    x = torch.randn(sum(counts), k, device="cuda", generator=gen)
    w = torch.randn(e, n, k, device="cuda", generator=gen)
    qx, sx = kiln.fp8.per_token_cast_to_fp8(x)
    qw, sw = kiln.fp8.per_block_cast_to_fp8(w.view(e * n, k))
    qw, sw = qw.view(e, n, k), sw.view(e, n // 128, -1)
    out = torch.empty(sum(counts), n, device="cuda", dtype=torch.bfloat16)
    kiln.fp8.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((qx, sx), (qw, sw), out, offs)
    xd, worst = fp8_deq(qx, sx, 1), 0.0
    for i in range(e):
        lo, hi = int(offs[i]), int(offs[i + 1])
        if hi > lo:
            worst = max(worst, rel(out[lo:hi], xd[lo:hi] @ fp8_deq(qw[i], sw[i], 128).t()))
    record("fp8", f"grouped contiguous {counts}", worst < 1e-2, err=worst)
    max_m = 256
    xm = torch.randn(e * max_m, k, device="cuda", generator=gen)
    qxm, sxm = kiln.fp8.per_token_cast_to_fp8(xm)
    masked = torch.zeros(e, dtype=torch.int32, device="cuda")
    outm = torch.zeros(e, max_m, n, device="cuda", dtype=torch.bfloat16)
    call = lambda: kiln.fp8.m_grouped_gemm_fp8_fp8_bf16_nt_masked(  # noqa: E731
        (qxm.view(e, max_m, k), sxm), (qw, sw), outm, masked, expected_m=128)
    call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    new = [3, 256, 0, 100]
    masked.copy_(torch.tensor(new, dtype=torch.int32))
    g.replay()
    torch.cuda.synchronize()
    xmd, worst = fp8_deq(qxm, sxm, 1).view(e, max_m, k), 0.0
    for i, c in enumerate(new):
        if c:
            worst = max(worst, rel(outm[i, :c], xmd[i, :c] @ fp8_deq(qw[i], sw[i], 128).t()))
    record("fp8", f"grouped masked {new} (graph replay)", worst < 1e-2, err=worst)


# ----------------------------------------------------------------------------------- attention
def fp4_values(codes, scales, block, tensor_scale, e8m0):
    """Packed codes (uint8 [rows, K/2]) times their block scales (e4m3 or E8M0 codes) in f32, as
    torch computes them: e2m1 x scale is exact in f32, and one f32 product applies the tensor scale."""
    lut = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], device=codes.device)
    nib = torch.stack([codes & 0xF, codes >> 4], dim=-1).reshape(codes.shape[0], -1).long()
    if e8m0:
        s = torch.exp2(scales.float() - 127)
    else:
        s = scales.view(torch.float8_e4m3fn).float()
    v = lut[nib] * s.repeat_interleave(block, dim=1)
    return v if tensor_scale == 1.0 else v * tensor_scale


def fp4_checks(gen, quick):
    """kiln.fp4: quantise then dequantise, equal bit for bit to torch's decoding of the same codes
    (and near x), MXFP4 likewise, and the NVFP4 GEMV against x @ the dequantised weights."""
    for rows, k in [(256, 4096)] if quick else [(256, 4096), (37, 544), (1, 16384)]:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = kiln.fp4.quantize_nvfp4(x)
        got = w.dequantize("f32")
        want = fp4_values(w.codes, w.scales, 16, w.tensor_scale, e8m0=False)
        record("fp4", f"nvfp4 round trip {rows}x{k}", torch.equal(got, want) and rel(got, x) < 0.2, err=rel(got, x))
        # bf16 is the exact product rounded once: within half a bf16 step of the f32 values
        got16 = kiln.fp4.dequantize(w.codes, w.scales, tensor_scale=w.tensor_scale).float()
        close = torch.allclose(got16, want, rtol=2.0**-8, atol=0.0)
        record("fp4", f"nvfp4 dequantize bf16 {rows}x{k}", close)
        codes, scales = kiln.fp4.quantize_mxfp4(x)
        got = kiln.fp4.dequantize(codes, scales, format="mxfp4", dtype="f32")
        want = fp4_values(codes, scales, 32, 1.0, e8m0=True)
        record("fp4", f"mxfp4 round trip {rows}x{k}", torch.equal(got, want) and rel(got, x) < 0.25, err=rel(got, x))
    bad = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    bad[1, 5] = float("nan")
    try:
        kiln.fp4.quantize_nvfp4(bad)
        record("fp4", "NaN refused", False, error="no error")
    except ValueError as e:
        record("fp4", "NaN refused", "element (1, 5)" in str(e), error=str(e))
    n, k = 4096, 4096
    wt = kiln.fp4.quantize_nvfp4(torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen))
    wd = wt.dequantize("f32")
    for m in (1, 16):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = kiln.fp4.nvfp4_gemv(x, wt)
        err = rel(out, x.float() @ wd.t())
        record("fp4", f"nvfp4_gemv {m}x{n}x{k}", err < 1e-2, err=err)
    # the GEMV layout (whole 16-row tiles, and 1000 rows: a ragged last tile), M 1, 4 and 16
    w2 = kiln.fp4.quantize_nvfp4(torch.randn(1000, k, device="cuda", dtype=torch.bfloat16, generator=gen))
    for w in (wt, w2):
        wg, wdq = kiln.fp4.to_gemv_layout(w), w.dequantize("f32")
        for m in (1, 4, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            err = rel(kiln.fp4.nvfp4_gemv(x, wg), x.float() @ wdq.t())
            record("fp4", f"nvfp4_gemv {m}x{w.rows}x{k} GEMV layout", err < 1e-2, err=err)


def sdpa_ref(q, k, v, causal, scale):
    """fp32 reference in BSHD, causal aligned bottom-right, GQA by repeating heads."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    rep = qf.shape[1] // kf.shape[1]
    kf, vf = kf.repeat_interleave(rep, 1), vf.repeat_interleave(rep, 1)
    mask = None
    if causal:
        sq, sk = qf.shape[2], kf.shape[2]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    return o.transpose(1, 2)


def torch_bf16_attn(q, k, v, causal, scale):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    rep = qt.shape[1] // kt.shape[1]
    kt, vt = kt.repeat_interleave(rep, 1), vt.repeat_interleave(rep, 1)
    mask = None
    if causal:
        sq, sk = qt.shape[2], kt.shape[2]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale).transpose(1, 2)


def attention_checks(gen, quick):
    cases = [(1, 1, 1, 4, 4, 64), (2, 63, 63, 8, 8, 64), (2, 64, 64, 8, 2, 128), (1, 65, 129, 4, 4, 128),
             (1, 127, 127, 16, 4, 128), (2, 128, 4097, 8, 1, 128), (1, 1000, 4097, 8, 2, 128), (4, 512, 512, 8, 8, 64),
             (1, 2048, 2048, 16, 16, 128), (1, 1024, 1024, 8, 8, 256), (2, 300, 300, 12, 4, 64), (1, 1, 4096, 32, 8, 128),
             (3, 77, 500, 6, 3, 128), (1, 4096, 4096, 8, 8, 64), (2, 256, 1024, 4, 4, 256), (1, 8, 2048, 16, 2, 128),
             (1, 513, 513, 2, 1, 64), (2, 1500, 1500, 4, 4, 128), (1, 200, 100, 4, 4, 64), (1, 2049, 2049, 8, 8, 256)]
    for i, (b, sq, sk, hq, hkv, d) in enumerate(cases):
        for causal in (False, True):
            if quick and (i + causal) % 3:
                continue
            dt = (torch.bfloat16, torch.float16)[i % 2]
            q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
            k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt, generator=gen)
            v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt, generator=gen)
            if i % 3 == 1:  # BHSD storage seen through a BSHD view
                q = q.transpose(1, 2).contiguous().transpose(1, 2)
                k = k.transpose(1, 2).contiguous().transpose(1, 2)
                v = v.transpose(1, 2).contiguous().transpose(1, 2)
            scale = 1 / math.sqrt(d)
            ref = sdpa_ref(q, k, v, causal, scale)
            out, lse = kiln.flash_attn_func(q, k, v, causal=causal, return_lse=True)
            err, torch_err = rel(out, ref), rel(torch_bf16_attn(q, k, v, causal, scale), ref)
            record("attention", f"B{b} Sq{sq} Sk{sk} H{hq}/{hkv} d{d}{' causal' if causal else ''} {str(dt)[6:]}",
                   err <= 2 * torch_err + 1e-4 and not math.isnan(err), err=err, torch_err=torch_err)


# ----------------------------------------------------------------- packed attention, windows
def window_ref(q, k, v, causal, scale, window, fp32=True):
    """sdpa_ref with flash-attention's window (left, right; -1 unbounded), causal as right = 0;
    `fp32=False`: in the inputs' dtype (torch's own error, the bound kiln's is held to)."""
    qf, kf, vf = (t.float().transpose(1, 2) if fp32 else t.transpose(1, 2) for t in (q, k, v))
    rep = qf.shape[1] // kf.shape[1]
    kf, vf = kf.repeat_interleave(rep, 1), vf.repeat_interleave(rep, 1)
    sq, sk = qf.shape[2], kf.shape[2]
    diag = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    left, right = window
    right = 0 if causal and right < 0 else (min(right, 0) if causal else right)
    mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        mask &= j >= diag - left
    if right >= 0:
        mask &= j <= diag + right
    o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    # Rows that see no key are 0 in kiln (flash-attention's convention); SDPA gives NaN there.
    return torch.nan_to_num(o, nan=0.0).transpose(1, 2)


def packed_problems(cases, quick, gen):
    """Each case (query lengths, key lengths or None for the same, Hq, Hkv, d, window), causal or
    not (half of them with `quick`), bf16 and f16 by turns, drawn: (name, query lengths, key
    lengths, causal, window, cu_seqlens_q, cu_seqlens_k, q, k, v)."""
    for i, (lq, lk, hq, hkv, d, window) in enumerate(cases):
        lk = lk or lq
        for causal in (False, True):
            if quick and (i + causal) % 2:
                continue
            dt = (torch.bfloat16, torch.float16)[i % 2]
            cu_q = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32, device="cuda")
            cu_k = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32, device="cuda")
            q = torch.randn(sum(lq), hq, d, device="cuda", dtype=dt, generator=gen)
            k = torch.randn(sum(lk), hkv, d, device="cuda", dtype=dt, generator=gen)
            v = torch.randn(sum(lk), hkv, d, device="cuda", dtype=dt, generator=gen)
            name = f"{len(lq)} seqs {lq[:4]}{'..' if len(lq) > 4 else ''} H{hq}/{hkv} d{d} window {window}"
            yield name + (" causal" if causal else "") + f" {str(dt)[6:]}", lq, lk, causal, window, cu_q, cu_k, q, k, v


def varlen_checks(gen, quick):
    cases = [  # (query lengths, key lengths or None, Hq, Hkv, d, window)
        ([1, 63, 64, 65, 127, 4097], None, 4, 2, 128, (-1, -1)),
        ([300, 7, 1000], [500, 7, 1000], 8, 8, 64, (-1, -1)),
        ([128, 2000, 513], None, 4, 1, 256, (-1, -1)),
        ([700, 33, 1500], None, 8, 2, 128, (256, 0)),
        ([1000, 257], [1200, 300], 4, 4, 64, (100, 37)),
    ]
    for name, lq, lk, causal, window, cu_q, cu_k, q, k, v in packed_problems(cases, quick, gen):
        scale = 1 / math.sqrt(q.shape[-1])
        out = kiln.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, window_size=window)
        worst, worst_torch = 0.0, 0.0
        for s in range(len(lq)):
            a, b = cu_q[s].item(), cu_q[s + 1].item()
            c, e = cu_k[s].item(), cu_k[s + 1].item()
            one = lambda t, x, y: t[x:y].unsqueeze(0)  # noqa: E731
            ref = window_ref(one(q, a, b), one(k, c, e), one(v, c, e), causal, scale, window)
            if ref.norm() == 0:
                worst = max(worst, float(out[a:b].float().abs().max()) if b > a else 0.0)
                continue
            worst = max(worst, rel(out[a:b].unsqueeze(0), ref))
            low = window_ref(one(q, a, b), one(k, c, e), one(v, c, e), causal, scale, window, fp32=False)
            worst_torch = max(worst_torch, rel(low, ref))
        record("varlen", name, worst <= 2 * worst_torch + 1e-2 and not math.isnan(worst), err=worst,
               torch_err=worst_torch)
    # window_size on flash_attn_func, against the same masked reference
    q = torch.randn(2, 900, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(2, 1300, 2, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    for causal, window in ((False, (128, 16)), (True, (300, -1))):
        out = kiln.flash_attn_func(q, k, k, causal=causal, window_size=window)
        err = rel(out, window_ref(q, k, k, causal, 1 / math.sqrt(128), window))
        record("varlen", f"flash_attn_func window {window}{' causal' if causal else ''}", err < 2e-2, err=err)
    varlen_backward_checks(gen, quick)


def varlen_backward_checks(gen, quick):
    """Packed gradients by autograd through `flash_attn_varlen_func` against per-sequence dense
    autograd of the fp32 reference (window_ref) put back in the packed rows: dq, dk and dv each
    at most twice torch's own bf16/f16 error (its per-sequence gradients packed likewise; the
    dense backward's rule), NaN-free; a sequence with no keys has zero dq, one with no queries
    zero dk and dv; deterministic refused; opcheck of both ops."""
    cases = [  # (query lengths, key lengths or None, Hq, Hkv, d, window), no row without keys
        ([1, 63, 64, 65, 127, 700], None, 4, 2, 128, (-1, -1)),
        ([300, 7, 1000], [500, 7, 1000], 8, 8, 64, (-1, -1)),
        ([700, 33, 1500], None, 8, 2, 128, (256, 0)),
        ([1000, 257], [1200, 300], 4, 4, 64, (100, 37)),
        ([40, 0, 130], [0, 50, 130], 4, 1, 128, (-1, -1)),
    ]
    for name, lq, lk, causal, window, cu_q, cu_k, q, k, v in packed_problems(cases, quick, gen):
        dout = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen)
        scale = 1 / math.sqrt(q.shape[-1])
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
        out = kiln.flash_attn_varlen_func(*leaves, cu_q, cu_k, max(lq), max(lk), causal=causal, window_size=window)
        out.backward(dout)
        mine = [x.grad for x in leaves]
        # each sequence's reference and torch's own gradients put back in their packed rows
        ref = [torch.zeros(t.shape, dtype=torch.float32, device="cuda") for t in (q, k, v)]
        theirs = [torch.zeros_like(t) for t in (q, k, v)]
        zeros_ok = True
        for s in range(len(lq)):
            a, b, c, e = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
            if b == a or e == c:  # no queries: zero dk, dv; no keys: zero dq
                zeros_ok &= all(bool((t == 0).all()) for t in (mine[0][a:b], mine[1][c:e], mine[2][c:e]))
                continue
            for fp32, into in ((True, ref), (False, theirs)):
                xs = [(t.float() if fp32 else t)[x:y].unsqueeze(0).detach().requires_grad_(True)
                      for t, x, y in ((q, a, b), (k, c, e), (v, c, e))]
                window_ref(*xs, causal, scale, window, fp32=fp32).backward(dout[a:b].unsqueeze(0).to(xs[0].dtype))
                into[0][a:b], into[1][c:e], into[2][c:e] = (x.grad[0] for x in xs)
        for g, m, t, r in zip("qkv", mine, theirs, ref):
            err, torch_err = rel(m, r), rel(t, r)
            record("varlen_bwd", f"d{g} {name}", err <= 2 * torch_err + 1e-4 and not math.isnan(err),
                   err=err, torch_err=torch_err)
        record("varlen_bwd", f"empty sequences' gradients zero {name}", zeros_ok)
    q = torch.randn(64, 4, 64, device="cuda", dtype=torch.bfloat16, generator=gen, requires_grad=True)
    cu = torch.tensor([0, 20, 64], dtype=torch.int32, device="cuda")
    try:
        kiln.flash_attn_varlen_func(q, q, q, cu, cu, 44, 44, deterministic=True)
        record("varlen_bwd", "deterministic refused", False, error="no error")
    except ValueError as e:
        record("varlen_bwd", "deterministic refused", "`deterministic=True`" in str(e))
    try:
        x = q.detach()
        out, lse = kiln.flash_attn_varlen_func(x, x, x, cu, cu, 44, 44, causal=True, return_lse=True)
        torch.library.opcheck(
            torch.ops.kiln.flash_attn_varlen.default,
            (q, q, q, cu, cu, 44, 44, 0.125, True, -1, -1, None, None),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
        )
        torch.library.opcheck(
            torch.ops.kiln.flash_attn_varlen_backward.default,
            (torch.ones_like(x), x, x, x, out, lse, cu, cu, 44, 44, 0.125, True, -1, -1, None, None),
            test_utils=("test_schema", "test_faketensor"),
        )
        record("varlen_bwd", "opcheck kiln::flash_attn_varlen and its backward", True)
    except Exception as e:  # noqa: BLE001
        record("varlen_bwd", "opcheck kiln::flash_attn_varlen and its backward", False, error=str(e)[:300])


# ------------------------------------------------------------------------------ paged KV cache
def kvcache_checks(gen, quick):
    """flash_attn_with_kvcache against the fp32 reference on the same cache unpaged: pages in a
    shuffled order, lengths per sequence, GQA, several query tokens (causal), new K/V appended."""
    cases = [(4, 1, 32, 8, 128, 16, 1000, 0), (3, 1, 8, 8, 64, 64, 300, 1), (2, 4, 16, 4, 128, 16, 777, 4),
             (1, 16, 16, 2, 256, 256, 2000, 16), (8, 1, 32, 8, 128, 16, 8192, 0), (1, 1, 8, 1, 128, 64, 20000, 1)]
    for i, (b, sq, hq, hkv, d, ps, ctx, new) in enumerate(cases):
        if quick and i % 2:
            continue
        dt = (torch.bfloat16, torch.float16)[i % 2]
        causal = sq > 1
        lens = torch.randint(max(sq, new, 1), ctx + 1, (b,), generator=gen, device="cuda").to(torch.int32)
        max_pages = -(-ctx // ps)
        pages = torch.randperm(b * max_pages, generator=gen, device="cuda").to(torch.int32)
        table = pages.view(b, max_pages)
        k_cache = torch.randn(b * max_pages, ps, hkv, d, device="cuda", dtype=dt, generator=gen)
        v_cache = torch.randn(b * max_pages, ps, hkv, d, device="cuda", dtype=dt, generator=gen)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
        k = v = None
        if new:
            k = torch.randn(b, new, hkv, d, device="cuda", dtype=dt, generator=gen)
            v = torch.randn(b, new, hkv, d, device="cuda", dtype=dt, generator=gen)
        # The reference reads the caches after the append, as dense [1, L, Hkv, D] per sequence.
        before = (lens - new).to(torch.int32)
        out, lse = kiln.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=before,
                                                block_table=table, causal=causal, return_softmax_lse=True)
        scale = 1 / math.sqrt(d)
        errs, torch_errs = [], []
        for s in range(b):
            n = int(lens[s])
            rows = table[s, : -(-n // ps)].long()
            kd = k_cache[rows].reshape(-1, hkv, d)[:n][None]
            vd = v_cache[rows].reshape(-1, hkv, d)[:n][None]
            if new:
                ok_new = torch.equal(kd[0, n - new:], k[s]) and torch.equal(vd[0, n - new:], v[s])
                record("kvcache", f"append seq {s} of case {i}", ok_new)
            ref = sdpa_ref(q[s:s + 1], kd, vd, causal, scale)
            errs.append(rel(out[s:s + 1], ref))
            torch_errs.append(rel(torch_bf16_attn(q[s:s + 1], kd, vd, causal, scale), ref))
        err, torch_err = max(errs), max(torch_errs)
        record("kvcache", f"B{b} Sq{sq} H{hq}/{hkv} d{d} page{ps} ctx{ctx} +{new}{' causal' if causal else ''} {str(dt)[6:]}",
               err <= 2 * torch_err + 1e-4 and not math.isnan(err) and not torch.isnan(lse).any(),
               err=err, torch_err=torch_err)


# ------------------------------------------------------------------------------------------ MoE
def moe_ref(x, w13, w2, idx, wts):
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    n = w13.shape[1] // 2
    for e in range(w13.shape[0]):
        tok, slot = torch.where(idx == e)
        if tok.numel() == 0:
            continue
        h = x[tok].float() @ w13[e].float().t()
        h = F.silu(h[:, :n]) * h[:, n:]
        out.index_add_(0, tok, (h @ w2[e].float().t()) * wts[tok, slot, None].float())
    return out


def moe_checks(gen, quick):
    cases = [(8, 2, 1, 256, 128), (8, 2, 64, 512, 256), (16, 4, 100, 512, 384), (64, 8, 512, 1024, 512),
             (4, 1, 7, 256, 256), (32, 2, 2048, 1024, 768), (256, 8, 64, 1024, 256), (8, 8, 33, 256, 128),
             (1, 1, 500, 512, 512), (128, 6, 999, 768, 384), (12, 3, 129, 640, 256), (8, 2, 4096, 2048, 1024),
             (64, 4, 1, 512, 256), (8, 2, 1000, 4096, 1408), (24, 2, 70, 256, 512), (2, 2, 300, 1024, 128),
             (40, 5, 257, 384, 256), (16, 1, 16, 256, 128), (8, 4, 2500, 512, 512), (160, 6, 200, 512, 256)]
    for i, (e, topk, t, hdim, inter) in enumerate(cases):
        if quick and i % 3:
            continue
        x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
        w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(hdim)
        w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(inter)
        logits = torch.randn(t, e, device="cuda", generator=gen)
        if i % 4 == 3:
            logits[:, 0] += 100  # one heavy expert
        wts, idx = torch.topk(torch.softmax(logits, -1), topk, -1)
        ref = moe_ref(x, w13, w2, idx, wts)
        out = kiln.moe.experts(x, w13, w2, idx, wts)
        err = rel(out, ref)
        record("moe", f"E{e} top{topk} T{t} H{hdim} I{inter}", err < 2e-2 and not math.isnan(err), err=err)
    # grouped GEMM alone, with empty experts
    counts = torch.tensor([0, 5, 0, 130, 1, 0, 64, 0], dtype=torch.int32, device="cuda")
    off = kiln.moe.offsets_from_counts(counts)
    x = torch.randn(200, 256, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(8, 384, 256, device="cuda", dtype=torch.bfloat16, generator=gen)
    y = kiln.moe.grouped_gemm(x, w, off)
    ref = torch.cat([x[a:b].float() @ w[g].float().t() for g, (a, b) in enumerate(zip(off[:-1].tolist(), off[1:].tolist()))])
    record("moe", "grouped_gemm empty experts", rel(y, ref) < 1e-2, err=rel(y, ref))


def fp4_dequant_experts(w, fmt):
    """[E, R, K] bf16 weights quantised row block by row block as kiln.moe.quantize_experts does
    (each expert's gate, up or down matrix alone) and dequantised in f32."""
    out = []
    for m in w:
        if fmt == "nvfp4":
            out.append(kiln.fp4.quantize_nvfp4(m.contiguous()).dequantize("f32"))
        else:
            codes, scales = kiln.fp4.quantize_mxfp4(m.contiguous())
            out.append(kiln.fp4.dequantize(codes, scales, format="mxfp4", dtype="f32"))
    return torch.stack(out)


def moe_fp4_checks(gen, quick):
    """kiln.moe.quantize_experts + experts(..., weights=fmt) against the float64-free reference of
    moe_ref on the dequantised weights (gate and up quantised apart, as the prepack does): the
    products e2m1 x scale are exact in bf16, so the bound is the bf16 MoE's (h rounded to bf16
    between the projections); then 4-bit against kiln's bf16 experts at a decode shape."""
    cases = [(8, 2, 5, 256, 128), (16, 4, 70, 512, 256), (64, 8, 3, 1024, 512)]
    for i, (e, topk, t, hdim, inter) in enumerate(cases[:2] if quick else cases):
        x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
        w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(hdim)
        w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(inter)
        wts, idx = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
        for fmt in ("nvfp4", "mxfp4"):
            q13, q2 = kiln.moe.quantize_experts(w13, w2, format=fmt)
            d13 = torch.cat([fp4_dequant_experts(w13[:, :inter], fmt), fp4_dequant_experts(w13[:, inter:], fmt)], dim=1)
            ref = moe_ref(x, d13, fp4_dequant_experts(w2, fmt), idx, wts)
            out = kiln.moe.experts(x, q13, q2, idx, wts, weights=fmt)
            err = rel(out, ref)
            record("moe_fp4", f"{fmt} E{e} top{topk} T{t} H{hdim} I{inter}", err < 2e-2 and not math.isnan(err), err=err)
    e, topk, hdim, inter = 64, 8, 2048, 1408
    w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    q13, q2 = kiln.moe.quantize_experts(w13, w2, format="nvfp4")
    for t in (1, 8):
        x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
        wts, idx = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
        f4 = bench_ms(lambda: kiln.moe.experts(x, q13, q2, idx, wts, weights="nvfp4"), reps=50)
        b16 = bench_ms(lambda: kiln.moe.experts(x, w13, w2, idx, wts), reps=50)
        record("moe_fp4", f"nvfp4 experts ran E{e} T{t}: {f4:.3f} ms (bf16 {b16:.3f} ms)", True)


def e4m3_rows(v):
    """v [R, C] as kiln's per-token cast leaves it: 1x128 blocks scaled by amax / 448 in f32,
    rounded to e4m3 (nearest even, saturating), dequantised (f64 out)."""
    r, c = v.shape
    cb = -(-c // 128)
    p = torch.zeros((r, cb * 128), dtype=torch.float32, device=v.device)
    p[:, :c] = v.float()
    blocks = p.view(r, cb, 128)
    scale = blocks.abs().amax(-1, keepdim=True) / 448.0
    codes = (blocks / scale.clamp_min(1.17549435e-38)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return (codes.double() * scale.double()).view(r, cb * 128)[:, :c]


def fp8_dequant(w):
    """An Fp8Experts tensor pair (codes [E, N, K], scales [E, N/128, K/128]) in f64."""
    codes, scale = w
    e, n, k = codes.shape
    s = scale.double().repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :n, :k]
    return codes.double() * s


def moe_fp8_ref(x, q13, q2, idx, wts, round_h):
    """The FP8 layer in f64 on what kiln's kernels read: x cast per token as kiln casts it (the
    same f32 arithmetic), the dequantised weights exact; H cast per row and 128 columns too if
    `round_h` (which way an H value rounds is not reproducible: the tensor cores sum a K block's
    FP8 products in less than f32, so values near a rounding boundary may go either way)."""
    g, u, d = fp8_dequant((q13.weight, q13.scale)), fp8_dequant((q13.up_weight, q13.up_scale)), fp8_dequant((q2.weight, q2.scale))
    xq = e4m3_rows(x)
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(g.shape[0]):
        tok, slot = torch.where(idx == e)
        if tok.numel() == 0:
            continue
        h = F.silu(xq[tok] @ g[e].t()) * (xq[tok] @ u[e].t())
        out.index_add_(0, tok, ((e4m3_rows(h) if round_h else h) @ d[e].t()) * wts[tok, slot, None].double())
    return out


def moe_fp8_checks(gen, quick):
    """kiln.moe.quantize_experts(format="fp8") + experts(..., weights="fp8") against moe_fp8_ref
    with H exact: kiln rounds each H value to e4m3 (relative error at most 2^-4, e4m3's unit
    roundoff) and its rows to bf16 (2^-8), so the bound is 2^-4 + 2^-8; the distance to the
    reference that rounds H too is recorded beside it. Ragged K blocks (H 640), a width not a
    multiple of 128 (I 208), new values at the same addresses (the replayed graph), timings."""
    cases = [(8, 2, 5, 256, 128), (16, 4, 70, 512, 256), (12, 3, 129, 640, 208), (64, 8, 3, 1024, 512),
             (8, 2, 1000, 2048, 1408)]
    for i, (e, topk, t, hdim, inter) in enumerate(cases[:3] if quick else cases):
        x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
        w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(hdim)
        w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(inter)
        wts, idx = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
        q13, q2 = kiln.moe.quantize_experts(w13, w2, format="fp8")
        for rnd in range(2):
            out = kiln.moe.experts(x, q13, q2, idx, wts, weights="fp8")
            err = rel(out, moe_fp8_ref(x, q13, q2, idx, wts, round_h=False))
            err_rounded = rel(out, moe_fp8_ref(x, q13, q2, idx, wts, round_h=True))
            record("moe_fp8", f"E{e} top{topk} T{t} H{hdim} I{inter} call {rnd + 1}", err < 2.0**-4 + 2.0**-8 and not math.isnan(err),
                   err=err, err_h_rounded=err_rounded)
            x.copy_(torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen))
    e, topk, hdim, inter = 64, 8, 2048, 1408
    w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    q13, q2 = kiln.moe.quantize_experts(w13, w2, format="fp8")
    f13, f2 = kiln.moe.quantize_experts(w13, w2, format="nvfp4")
    for t in (1, 8, 64) if quick else (1, 8, 64, 4096):
        x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
        wts, idx = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
        f8 = bench_ms(lambda: kiln.moe.experts(x, q13, q2, idx, wts, weights="fp8"), reps=30)
        f4 = bench_ms(lambda: kiln.moe.experts(x, f13, f2, idx, wts, weights="nvfp4"), reps=30)
        b16 = bench_ms(lambda: kiln.moe.experts(x, w13, w2, idx, wts), reps=30)
        record("moe_fp8", f"fp8 experts ran E{e} T{t}: {f8:.3f} ms (nvfp4 {f4:.3f}, bf16 {b16:.3f})", True)


# ------------------------------------------------------------------------------- MoE layer
def route_ref(logits, top_k, scoring, renormalize, n_group=None, topk_group=None, bias=None, scaling=1.0):
    """torch's routing in float64 (vLLM/DeepSeek-V3 semantics: experts outside the kept groups
    never chosen); ties are not drawn here."""
    lg = logits.double()
    scores = torch.softmax(lg, -1) if scoring == "softmax" else torch.sigmoid(lg)
    keys = scores + (bias.double() if bias is not None else 0.0)
    if n_group:
        t, e = keys.shape
        g = keys.view(t, n_group, e // n_group)
        gs = g.topk(min(2, e // n_group), -1).values.sum(-1)
        kept = torch.zeros_like(gs).scatter_(1, gs.topk(topk_group, -1).indices, 1.0)
        keys = keys.masked_fill(kept.repeat_interleave(e // n_group, 1) == 0, float("-inf"))
    idx = keys.topk(top_k, -1).indices
    w = scores.gather(1, idx)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return idx, (w * scaling).float()


def moe_layer_checks(gen, quick):
    # kiln.moe.layer against torch's routing + the float reference of the experts
    cases = [(8, 2, 1, 256, 128, "softmax", True, None), (64, 8, 100, 512, 256, "softmax", True, None),
             (16, 4, 333, 1024, 384, "sigmoid", False, None), (256, 8, 64, 512, 256, "sigmoid", True, (8, 4)),
             (128, 8, 2048, 1024, 768, "softmax", False, None), (64, 6, 50, 256, 128, "sigmoid", True, (8, 3))]
    for i, (e, topk, t, hdim, inter, scoring, renorm, groups) in enumerate(cases):
        if quick and i % 2:
            continue
        x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
        w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(hdim)
        w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(inter)
        logits = torch.randn(t, e, device="cuda", generator=gen)
        bias = (torch.rand(e, device="cuda", generator=gen) - 0.5) * 0.1 if groups else None
        kw = dict(top_k=topk, scoring=scoring, renormalize=renorm, bias=bias, routed_scaling=2.5 if groups else 1.0)
        if groups:
            kw.update(n_group=groups[0], topk_group=groups[1])
        idx, wts = route_ref(logits, topk, scoring, renorm, *(groups or (None, None)), bias=bias, scaling=kw["routed_scaling"])
        ref = moe_ref(x, w13, w2, idx, wts)
        for combine in ("atomic", "ordered"):
            out = kiln.moe.layer(x, logits, w13, w2, combine=combine, **kw)
            err = rel(out, ref)
            record("moe_layer", f"layer {scoring}{' groups' if groups else ''} E{e} top{topk} T{t} {combine}",
                   err < 2e-2 and not math.isnan(err), err=err)
    # experts: both combines, the ordered one the same bits twice, f16, int32 ids, [T, E] weights
    e, topk, t, hdim, inter = 64, 8, 777, 1024, 512
    x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
    w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(hdim)
    w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(inter)
    probs = torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1)
    wts, idx = torch.topk(probs, topk, -1)
    ref = moe_ref(x, w13, w2, idx, wts)
    a = kiln.moe.experts(x, w13, w2, idx, wts, combine="ordered")
    b = kiln.moe.experts(x, w13, w2, idx, wts, combine="ordered")
    record("moe_layer", "experts ordered: error, same bits twice", rel(a, ref) < 2e-2 and bool(torch.equal(a, b)), err=rel(a, ref))
    out = kiln.moe.experts(x, w13, w2, idx.int(), probs)
    record("moe_layer", "experts int32 ids, [T, E] weights", rel(out, ref) < 2e-2, err=rel(out, ref))
    h = kiln.moe.experts(x.half(), w13.half(), w2.half(), idx, wts)
    record("moe_layer", "experts f16", rel(h, ref) < 2e-2, err=rel(h, ref))
    # an index out of range on the GPU: that token's row NaN, every other right
    bad = idx.clone()
    bad[5, 0] = e
    out = kiln.moe.experts(x, w13, w2, bad, wts)
    others = torch.ones(t, dtype=torch.bool, device="cuda")
    others[5] = False
    record("moe_layer", "experts: an index out of range makes its token NaN, the others right",
           bool(out[5].isnan().all()) and not bool(out[others].isnan().any()) and rel(out[others], ref[others]) < 2e-2,
           err=rel(out[others], ref[others]))
    try:
        kiln.moe.experts(x, w13, w2, bad, wts, check_indices=True)
        record("moe_layer", "check_indices raises", False)
    except ValueError as err_:
        record("moe_layer", "check_indices raises", "`top_k_index` holds expert 64" in str(err_))
    # CUDA graph: captured with one routing, replayed with another
    for t_g in (1, 64):
        xg = x[:t_g].clone()
        idx_g, wts_g = idx[:t_g].clone(), wts[:t_g].clone()
        kiln.moe.experts(xg, w13, w2, idx_g, wts_g)  # warm: compiles, sizes the workspace
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out_g = kiln.moe.experts(xg, w13, w2, idx_g, wts_g)
        new = torch.topk(torch.rand(t_g, e, device="cuda", generator=gen), topk, -1)
        idx_g.copy_(new.indices)
        wts_g.copy_(new.values)
        g.replay()
        torch.cuda.synchronize()
        ref_g = moe_ref(xg, w13, w2, idx_g, wts_g)
        record("moe_layer", f"experts replayed from a CUDA graph T{t_g}", rel(out_g, ref_g) < 2e-2, err=rel(out_g, ref_g))


    # kiln's own graph of the layer: a warm call at addresses seen before replays the graph
    # captured from it (the third call on), so new values at the same addresses must come out
    for t_g in (4, 64):
        xg = x[:t_g].clone()
        idx_g, wts_g = idx[:t_g].clone(), wts[:t_g].clone()
        worst = 0.0
        for _ in range(6):
            xg.copy_(torch.randn(t_g, hdim, device="cuda", dtype=torch.bfloat16, generator=gen))
            new = torch.topk(torch.softmax(torch.randn(t_g, e, device="cuda", generator=gen), -1), topk, -1)
            idx_g.copy_(new.indices)
            wts_g.copy_(new.values)
            out_g = kiln.moe.experts(xg, w13, w2, idx_g, wts_g)
            err = rel(out_g, moe_ref(xg, w13, w2, idx_g, wts_g))
            worst = err if math.isnan(err) else max(worst, err)
            del out_g  # (torch hands the next call the same block: the same addresses)
        record("moe_layer", f"experts six calls at the same addresses, new values each T{t_g}", worst < 2e-2, err=worst)


def replay_checks(gen, quick):
    """A warm call at addresses seen before replays the graph kiln captured from it (the third
    call on): new values at the same addresses must come out, a new scalar or new addresses must
    not replay the old graph, and a bad block table found by a replayed decode is still reported
    at the next call."""
    def same_addresses(name, fill, call, ref, bound, calls=6):
        worst = 0.0
        for _ in range(calls):
            fill()
            err = rel(call(), ref())
            worst = err if math.isnan(err) else max(worst, err)
        record("replay", f"{name}: {calls} calls at the same addresses, new values each", worst <= bound, err=worst)

    def randn_(*ts):
        for t in ts:
            t.copy_(torch.randn(t.shape, device="cuda", dtype=t.dtype, generator=gen))

    a = torch.empty(300, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(512, 256, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(300, 256, device="cuda", dtype=torch.float32)
    same_addresses("gemm", lambda: randn_(a, b), lambda: kiln.gemm(a, b, out=out), lambda: a.float() @ b.float(), 1e-3)
    worst = 0.0
    for alpha in (1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 2.0, 1.0):  # a new scalar is a new graph
        kiln.gemm(a, b, out=out, alpha=alpha)
        worst = max(worst, rel(out, alpha * (a.float() @ b.float())))
    record("replay", "gemm: alpha changed between warm calls at the same addresses", worst <= 1e-3, err=worst)
    a2 = torch.randn(300, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
    worst = 0.0
    for x in (a, a2, a, a2, a, a2):  # two address sets, each replayed in turn
        kiln.gemm(x, b, out=out)
        worst = max(worst, rel(out, x.float() @ b.float()))
    record("replay", "gemm: two operands alternating at one output", worst <= 1e-3, err=worst)

    q = torch.empty(2, 128, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(2, 512, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.empty_like(k)
    o = torch.empty_like(q)
    same_addresses("attention", lambda: randn_(q, k, v),
                   lambda: kiln.flash_attn_func(q, k, v, causal=True, out=o),
                   lambda: sdpa_ref(q, k, v, True, 1 / math.sqrt(128)), 2e-2)

    # a static cache as transformers keeps it: [B, S, Hkv, D], lengths moving every step
    bsz, cap, hq, hkv, d = 4, 1024, 16, 4, 128
    kc = torch.randn(bsz, cap, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    vc = torch.randn_like(kc)
    qd = torch.empty(bsz, 1, hq, d, device="cuda", dtype=torch.bfloat16)
    lens = torch.empty(bsz, device="cuda", dtype=torch.int32)

    def dense_ref():
        outs = []
        for s in range(bsz):
            n = int(lens[s])
            outs.append(sdpa_ref(qd[s:s + 1], kc[s:s + 1, :n], vc[s:s + 1, :n], False, 1 / math.sqrt(d)))
        return torch.cat(outs)

    def fill_dense():
        randn_(qd)
        lens.copy_(torch.randint(1, cap + 1, (bsz,), generator=gen, device="cuda").to(torch.int32))

    same_addresses("kvcache, static cache", fill_dense,
                   lambda: kiln.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=lens), dense_ref, 2e-2, calls=8)

    # a paged cache: the table's entries move between calls, and then one goes bad
    ps, max_pages = 64, 16
    kp = torch.randn(bsz * max_pages, ps, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    vp = torch.randn_like(kp)
    table = torch.empty(bsz, max_pages, device="cuda", dtype=torch.int32)

    def paged_ref():
        outs = []
        for s in range(bsz):
            n = int(lens[s])
            rows = table[s, : -(-n // ps)].long()
            kd = kp[rows].reshape(-1, hkv, d)[:n][None]
            vd = vp[rows].reshape(-1, hkv, d)[:n][None]
            outs.append(sdpa_ref(qd[s:s + 1], kd, vd, False, 1 / math.sqrt(d)))
        return torch.cat(outs)

    def fill_paged():
        fill_dense()
        table.copy_(torch.randperm(bsz * max_pages, generator=gen, device="cuda").to(torch.int32).view(bsz, max_pages))

    def paged():
        return kiln.flash_attn_with_kvcache(qd, kp, vp, cache_seqlens=lens, block_table=table)

    same_addresses("kvcache, paged", fill_paged, paged, paged_ref, 2e-2, calls=8)
    table[0, 0] = 10**6
    lens[0] = 10
    bad = paged()  # replayed: the GPU finds the entry, writes NaN for sequence 0, records it
    record("replay", "kvcache, paged: a replayed step with a bad entry writes NaN for its sequence",
           bool(torch.isnan(bad[0]).all()) and not bool(torch.isnan(bad[1:]).any()))
    torch.cuda.synchronize()
    try:
        paged()
        record("replay", "kvcache, paged: a bad entry found by a replayed step is reported at the next call", False,
               error="no exception")
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        record("replay", "kvcache, paged: a bad entry found by a replayed step is reported at the next call",
               "table" in str(e), error=str(e)[:160])
    fill_paged()
    err = rel(paged(), paged_ref())
    record("replay", "kvcache, paged: the step after the report is right again", err <= 2e-2, err=err)

    # packed attention and the grouped GEMM: the offsets are read on the GPU, so new offsets at
    # the same address replay the same graph and must still be followed
    total, hv = 356, 8
    qv = torch.empty(total, hv, 128, device="cuda", dtype=torch.bfloat16)
    kv, vv = torch.empty(total, 2, 128, device="cuda", dtype=torch.bfloat16), torch.empty(total, 2, 128, device="cuda", dtype=torch.bfloat16)
    cu = torch.empty(4, device="cuda", dtype=torch.int32)

    def fill_varlen():
        randn_(qv, kv, vv)
        cuts = sorted(torch.randint(1, total, (2,), generator=gen, device="cuda").tolist())
        cu.copy_(torch.tensor([0, *cuts, total], dtype=torch.int32))

    def varlen_ref():
        outs = []
        bounds = cu.tolist()
        for s0, s1 in zip(bounds, bounds[1:]):
            if s1 > s0:
                outs.append(sdpa_ref(qv[None, s0:s1], kv[None, s0:s1], vv[None, s0:s1], True, 1 / math.sqrt(128))[0])
        return torch.cat(outs)

    same_addresses("varlen", fill_varlen,
                   lambda: kiln.flash_attn_varlen_func(qv, kv, vv, cu, cu, total, total, causal=True), varlen_ref, 2e-2)

    xg = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    wg = torch.randn(4, 256, 256, device="cuda", dtype=torch.bfloat16, generator=gen)
    offs = torch.empty(5, device="cuda", dtype=torch.int32)

    def fill_grouped():
        randn_(xg)
        cuts = sorted(torch.randint(0, 257, (3,), generator=gen, device="cuda").tolist())
        offs.copy_(torch.tensor([0, *cuts, 256], dtype=torch.int32))

    def grouped_ref():
        o = offs.tolist()
        y = torch.zeros(256, 256, device="cuda")
        for e in range(4):
            y[o[e]:o[e + 1]] = xg[o[e]:o[e + 1]].float() @ wg[e].float().t()
        return y

    same_addresses("moe.grouped_gemm", fill_grouped, lambda: kiln.moe.grouped_gemm(xg, wg, offs), grouped_ref, 1e-2)

    # the 4-bit experts: both projections replay, the routing's tables change every call
    e, topk, t, hdim, inter = 8, 2, 24, 256, 128
    w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(hdim)
    w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(inter)
    q13, q2 = kiln.moe.quantize_experts(w13, w2, format="nvfp4")
    d13 = torch.cat([fp4_dequant_experts(w13[:, :inter], "nvfp4"), fp4_dequant_experts(w13[:, inter:], "nvfp4")], dim=1)
    d2 = fp4_dequant_experts(w2, "nvfp4")
    x4 = torch.empty(t, hdim, device="cuda", dtype=torch.bfloat16)
    idx4 = torch.empty(t, topk, device="cuda", dtype=torch.int64)
    wts4 = torch.empty(t, topk, device="cuda", dtype=torch.float32)

    def fill_fp4():
        randn_(x4)
        new = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
        idx4.copy_(new.indices)
        wts4.copy_(new.values)

    same_addresses("4-bit experts (nvfp4)", fill_fp4, lambda: kiln.moe.experts(x4, q13, q2, idx4, wts4, weights="nvfp4"),
                   lambda: moe_ref(x4, d13, d2, idx4, wts4), 2e-2)


def graph_ms(fn, reps=50):
    """Milliseconds per replay of `fn` captured in a CUDA graph (after a warm call)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return bench_ms(g.replay, reps=reps)


def moe_layer_timings(gen, timings):
    """The issue's targets: kiln.moe.experts against transformers' grouped_mm experts, E64 top-8
    H2048 I1408 and E128 top-8 H2048 I768, at 1, 8, 64 and 4,096 tokens (eager on both sides,
    and CUDA graphs on both sides up to 64 tokens)."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    for e, inter in ((64, 1408), (128, 768)):
        hdim, topk = 2048, 8
        cfg = MixtralConfig(hidden_size=hdim, intermediate_size=inter, num_local_experts=e, num_experts_per_tok=topk)
        cfg._experts_implementation = "grouped_mm"
        mod = MixtralExperts(cfg).to("cuda", torch.bfloat16)
        with torch.no_grad():
            mod.gate_up_proj.copy_(torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02)
            mod.down_proj.copy_(torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02)
            w13, w2 = mod.gate_up_proj, mod.down_proj
            for t in (1, 8, 64, 4096):
                x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
                wts, idx = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
                wts = (wts / wts.sum(-1, keepdim=True)).to(torch.bfloat16)
                kfn = lambda: kiln.moe.experts(x, w13, w2, idx, wts)  # noqa: E731
                tfn = lambda: mod(x, idx, wts)  # noqa: E731
                err = rel(kfn(), tfn())
                record("moe_layer", f"experts vs transformers grouped_mm E{e} T{t}", err < 2e-2, err=err)
                tk, tt = bench_ms(kfn, reps=50), bench_ms(tfn, reps=50)
                what = f"experts E{e} top{topk} T{t} H{hdim} I{inter}"
                timings.append({"what": f"{what} eager (torch: transformers grouped_mm)", "kiln_ms": tk, "torch_ms": tt, "speedup": tt / tk})
                if t <= 64:
                    gk = graph_ms(kfn)
                    try:
                        gt = graph_ms(tfn)
                    except Exception as ex:  # noqa: BLE001 - torch's path may not capture: said, not failed
                        record("moe_layer", f"transformers' experts do not capture in a graph ({what})", True, note=str(ex)[-200:])
                        gt = float("nan")
                    timings.append({"what": f"{what} CUDA graphs", "kiln_ms": gk, "torch_ms": gt, "speedup": gt / gk})


# ------------------------------------------------------------------- torch integration checks
def integration_checks(gen):
    a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(128, 32, device="cuda", dtype=torch.bfloat16, generator=gen)
    q = torch.randn(1, 64, 4, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    for name, op, args in [
        ("opcheck kiln::gemm", torch.ops.kiln.gemm.default, (a, b, None, 1.0, 0.0, torch.bfloat16)),
        ("opcheck kiln::flash_attn", torch.ops.kiln.flash_attn.default, (q, q, q, 0.125, True, False)),
    ]:
        try:
            torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))
            record("torch", name, True)
        except Exception as e:  # noqa: BLE001
            record("torch", name, False, error=str(e)[:300])
    try:
        f = torch.compile(lambda x, y: kiln.gemm(x, y) * 2, fullgraph=True)
        record("torch", "torch.compile fullgraph", rel(f(a, b), (a.float() @ b.float()) * 2) < 1e-2)
    except Exception as e:  # noqa: BLE001
        record("torch", "torch.compile fullgraph", False, error=str(e)[:300])
    try:
        out = kiln.gemm(a, b)  # warm: compiled and loaded before capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out2 = kiln.gemm(a, b)
        g.replay()
        torch.cuda.synchronize()
        record("torch", "CUDA graph capture and replay", rel(out2, out) == 0.0)
    except Exception as e:  # noqa: BLE001
        record("torch", "CUDA graph capture and replay", False, error=str(e)[:300])
    try:
        out, lse = kiln.flash_attn_func(q, q, q, causal=True, return_lse=True)
        dq, dk, dv = kiln.flash_attn_backward(torch.ones_like(q), q, q, q, out, lse, causal=True)
        torch.library.opcheck(
            torch.ops.kiln.flash_attn_backward.default,
            (torch.ones_like(q), q, q, q, out, lse, 0.125, True, False),
            test_utils=("test_schema", "test_faketensor"),
        )
        record("torch", "opcheck kiln::flash_attn_backward", True)
    except Exception as e:  # noqa: BLE001
        record("torch", "opcheck kiln::flash_attn_backward", False, error=str(e)[:300])


def attention_backward_checks(gen, quick):
    """Gradients by autograd through `flash_attn_func` against the fp32 reference's, each at most
    twice torch's own bf16/f16 error (flash-attention's rule); deterministic runs bitwise equal."""
    cases = [(1, 1, 1, 2, 2, 64), (2, 63, 63, 4, 2, 64), (1, 64, 64, 4, 4, 128), (2, 65, 130, 8, 2, 128),
             (1, 127, 127, 3, 1, 256), (1, 200, 63, 4, 4, 64), (1, 1024, 1024, 8, 2, 128), (2, 4097, 4097, 4, 2, 64)]
    for i, (b, sq, sk, hq, hkv, d) in enumerate(cases):
        for causal in (False, True):
            if quick and (i + causal) % 2:
                continue
            dt = (torch.bfloat16, torch.float16)[i % 2]
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt, generator=gen)
                       for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
            if i % 3 == 1:  # BHSD storage seen through a BSHD view
                q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
            dout = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
            scale = 1 / math.sqrt(d)

            def grads(fn, *xs):
                xs = [x.detach().clone().requires_grad_(True) for x in xs]
                fn(*xs).backward(dout.to(xs[0].dtype))
                return [x.grad for x in xs]

            ref = grads(lambda *t: sdpa_ref(*t, causal, scale), q.float(), k.float(), v.float())
            mine = grads(lambda *t: kiln.flash_attn_func(*t, causal=causal), q, k, v)
            theirs = grads(lambda *t: torch_bf16_attn(*t, causal, scale), q, k, v)
            name = f"B{b} Sq{sq} Sk{sk} H{hq}/{hkv} d{d}{' causal' if causal else ''} {str(dt)[6:]}"
            for g, m, t, r in zip("qkv", mine, theirs, ref):
                err, torch_err = rel(m, r), rel(t, r)
                record("attention_bwd", f"d{g} {name}", err <= 2 * torch_err + 1e-4 and not math.isnan(err),
                       err=err, torch_err=torch_err)
            if i % 2 == 0:
                det = [grads(lambda *t: kiln.flash_attn_func(*t, causal=causal, deterministic=True), q, k, v)
                       for _ in range(2)]
                same = all(torch.equal(x, y) for x, y in zip(*det))
                record("attention_bwd", f"deterministic {name}", same)
    # the sliding window's gradients (window_ref's mask), GQA, Sq != Sk; one deterministic pair
    for i, (causal, window, d) in enumerate(((False, (128, 16), 128), (True, (300, -1), 64), (False, (0, 0), 128))):
        dt = (torch.bfloat16, torch.float16)[i % 2]
        q = torch.randn(2, 700, 8, d, device="cuda", dtype=dt, generator=gen)
        k, v = (torch.randn(2, 900, 2, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
        dout = torch.randn(2, 700, 8, d, device="cuda", dtype=dt, generator=gen)
        scale = 1 / math.sqrt(d)

        def wgrads(fn, *xs):
            xs = [x.detach().clone().requires_grad_(True) for x in xs]
            fn(*xs).backward(dout.to(xs[0].dtype))
            return [x.grad for x in xs]

        ref = wgrads(lambda *t: window_ref(*t, causal, scale, window), q.float(), k.float(), v.float())
        theirs = wgrads(lambda *t: window_ref(*t, causal, scale, window, fp32=False), q, k, v)
        mine = wgrads(lambda *t: kiln.flash_attn_func(*t, causal=causal, window_size=window), q, k, v)
        name = f"window {window}{' causal' if causal else ''} d{d} {str(dt)[6:]}"
        for g, m, t, r in zip("qkv", mine, theirs, ref):
            err, torch_err = rel(m, r), rel(t, r)
            record("attention_bwd", f"d{g} {name}", err <= 2 * torch_err + 1e-4 and not math.isnan(err),
                   err=err, torch_err=torch_err)
        if i == 0:
            det = [wgrads(lambda *t: kiln.flash_attn_func(*t, causal=causal, window_size=window, deterministic=True),
                          q, k, v) for _ in range(2)]
            record("attention_bwd", f"deterministic {name}", all(torch.equal(x, y) for x, y in zip(*det)))


# ------------------------------------------------------------------------------------- models
def models(gen, timings):
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    kiln_tf.register()
    configs = {
        "llama-gqa": (LlamaForCausalLM, LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                                   num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                                                   max_position_embeddings=4096, initializer_range=0.05)),
        "mixtral-moe": (MixtralForCausalLM, MixtralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=1536,
                                                        num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                                                        num_local_experts=8, num_experts_per_tok=2,
                                                        max_position_embeddings=4096, initializer_range=0.05)),
    }
    for name, (cls, cfg) in configs.items():
        torch.manual_seed(0)
        model = cls(cfg).to("cuda", torch.bfloat16).eval()
        # Random weights give near-uniform logits and routers whose second and third experts
        # nearly tie: any change in bf16 rounding (eager against sdpa too) then flips a token
        # or an expert. Sharper lm_head and router weights make the greedy tokens and the
        # routing a test of the kernels rather than of ties (the eager run is the yardstick).
        with torch.no_grad():
            model.lm_head.weight.mul_(8.0)
            for mod_name, m in model.named_modules():
                if mod_name.endswith("mlp.gate") or type(m).__name__.endswith("TopKRouter"):
                    m.weight.mul_(8.0)
        ids = torch.randint(0, cfg.vocab_size, (2, 512), device="cuda", generator=gen)

        def use(impl):
            model.config._attn_implementation = impl
            experts = {"kiln": "kiln", "sdpa": "grouped_mm", "eager": "eager"}[impl]
            for m in model.modules():
                if hasattr(m, "config") and hasattr(m.config, "_experts_implementation"):
                    m.config._experts_implementation = experts

        results = {}
        with torch.no_grad():
            use("sdpa")
            # sdpa's greedy continuation (decode through the KV cache) is the sequence every
            # implementation then reads teacher-forced, so one flip does not derail the rest.
            seq = model.generate(ids[:1, :64], max_new_tokens=32, do_sample=False, min_new_tokens=32)
            for impl in ("sdpa", "eager", "kiln"):
                use(impl)
                logits = model(ids).logits.float()
                step_logits = model(seq[:, :-1]).logits.float()[0, 63:]
                greedy = model.generate(ids[:1, :64], max_new_tokens=32, do_sample=False, min_new_tokens=32)
                ms = bench_ms(lambda: model(ids), reps=10, warm=3)
                results[impl] = (logits, step_logits, greedy[0, 64:].tolist(), ms)
        (l0, s0, t0, ms0), (le, se, te, _), (l1, s1, t1, ms1) = results["sdpa"], results["eager"], results["kiln"]
        err, err_eager = rel(l1, l0), rel(le, l0)
        record("model", f"{name} logits vs sdpa", err <= max(2 * err_eager, 2e-2), err=err, eager_err=err_eager,
               transformers=transformers.__version__)
        # Teacher-forced greedy steps: kiln's argmax must be sdpa's wherever sdpa's top-2 margin
        # is above the noise between torch's own backends (twice eager's largest logit change at
        # that step); closer margins are ties that any rounding flips.
        target = seq[0, 64:]
        top2 = s0.topk(2, dim=-1).values
        margin = top2[:, 0] - top2[:, 1]
        noise = 2 * (se - s0).abs().amax(dim=-1)
        decided = margin > noise
        kiln_ok = (s1.argmax(-1) == target) | ~decided
        eager_ok = (se.argmax(-1) == target) | ~decided
        first = next((i for i, (a, b) in enumerate(zip(t0, t1)) if a != b), 32)
        record("model", f"{name} greedy tokens (32 steps)", bool(kiln_ok.all()),
               steps_decided=int(decided.sum()), kiln_matches=int((s1.argmax(-1) == target).sum()),
               eager_matches=int((se.argmax(-1) == target).sum()), eager_ok=bool(eager_ok.all()),
               decode_same_until=first, decode_same_of_32=sum(int(a == b) for a, b in zip(t0, t1)),
               eager_decode_same_of_32=sum(int(a == b) for a, b in zip(t0, te)))
        timings.append({"what": f"{name} forward B2 S512", "kiln_ms": ms1, "torch_ms": ms0, "speedup": ms0 / ms1})


def op_timings(gen, timings):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)
    tk, tt = bench_ms(lambda: kiln.gemm(a, b)), bench_ms(lambda: a @ b)
    timings.append({"what": "gemm 8192^3 bf16", "kiln_ms": tk, "torch_ms": tt, "speedup": tt / tk})
    q = torch.randn(2, 8192, 16, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(2, 8192, 16, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    for causal in (False, True):
        tk = bench_ms(lambda: kiln.flash_attn_func(q, k, k, causal=causal), reps=20)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            tt = bench_ms(lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), is_causal=causal), reps=20)
        timings.append({"what": f"attention B2 H16 S8192 d128{' causal' if causal else ''} (torch: cuDNN)", "kiln_ms": tk, "torch_ms": tt, "speedup": tt / tk})
    e, t, topk, hdim, inter = 64, 4096, 8, 2048, 1408
    x = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
    w13 = torch.randn(e, 2 * inter, hdim, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    w2 = torch.randn(e, hdim, inter, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    wts, idx = torch.topk(torch.softmax(torch.randn(t, e, device="cuda", generator=gen), -1), topk, -1)
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    # The torch path it replaces: transformers' own experts module, on its grouped_mm forward.
    cfg = MixtralConfig(hidden_size=hdim, intermediate_size=inter, num_local_experts=e, num_experts_per_tok=topk)
    cfg._experts_implementation = "grouped_mm"
    mod = MixtralExperts(cfg).to("cuda", torch.bfloat16)
    with torch.no_grad():
        mod.gate_up_proj.copy_(w13)
        mod.down_proj.copy_(w2)
        tk = bench_ms(lambda: kiln.moe.experts(x, w13, w2, idx, wts), reps=20)
        tt = bench_ms(lambda: mod(x, idx, wts), reps=20)
        err = rel(kiln.moe.experts(x, w13, w2, idx, wts), mod(x, idx, wts))
    record("moe", f"experts vs transformers grouped_mm E{e} T{t}", err < 2e-2, err=err)
    timings.append({"what": f"experts E{e} top{topk} T{t} H{hdim} I{inter} (torch: transformers grouped_mm)", "kiln_ms": tk, "torch_ms": tt, "speedup": tt / tk})


# ------------------------------------------------------------------- RMSNorm and rotary embedding
def eager_rms_norm(x, w, eps):
    """transformers' LlamaRMSNorm.forward."""
    xf = x.to(torch.float32)
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def eager_rope(q, k, cos, sin):
    """transformers' apply_rotary_pos_emb (rotate_half), cos/sin [B, S, D]."""
    def rh(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + rh(q) * s, k * c + rh(k) * s


def rope_table(b, s, d, dtype, gen):
    pos = torch.randint(0, 8192, (b, s), device="cuda", generator=gen).float()
    inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device="cuda").float() / d))
    ang = pos[..., None] * inv
    emb = torch.cat((ang, ang), -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def pointwise_checks(gen, quick, timings):
    """kiln.rms_norm (plain and with the residual) and kiln.apply_rotary against fp32
    references: kiln's error at most twice torch's eager bf16 error (and a floor); the residual
    and q, k changed in place; capture in a CUDA graph; and the times against torch's eager ops
    (the model path's) at the Llama-3-8B and Qwen2 prefill shapes."""
    norm_shapes = [(4096, 4096), (8192, 2048), (1, 4096), (4099, 128), (3, 16392), (9, 4100), (7, 1000)]
    for rows, h in norm_shapes[: 3 if quick else None]:
        for dtype in (torch.bfloat16, torch.float16):
            x = torch.randn(rows, h, device="cuda", dtype=dtype, generator=gen)
            w = (1 + 0.1 * torch.randn(h, device="cuda", generator=gen)).to(dtype)
            res = torch.randn(rows, h, device="cuda", dtype=dtype, generator=gen)
            ref = eager_rms_norm(x.double(), w.double(), 1e-6)
            got, eager = kiln.rms_norm(x, w, 1e-6), eager_rms_norm(x, w, 1e-6)
            err, err_eager = rel(got, ref), rel(eager, ref)
            record("pointwise", f"rms_norm {rows}x{h} {dtype}", err <= max(2 * err_eager, 1e-3), err=err,
                   eager_err=err_eager)
            r2 = res.clone()
            got = kiln.rms_norm(x, w, 1e-6, residual=r2)
            summed = (res + x)  # torch's bf16 add: what the layer's residual holds
            ok_res = rel(r2, res.double() + x.double()) <= max(2 * rel(summed, res.double() + x.double()), 1e-3)
            err = rel(got, eager_rms_norm(summed.double(), w.double(), 1e-6))
            record("pointwise", f"rms_norm +residual {rows}x{h} {dtype}", ok_res and err <= max(2 * err_eager, 1e-3),
                   err=err, residual_in_place=bool(ok_res))
    rope_shapes = [(1, 4096, 32, 8, 128), (4, 2048, 16, 2, 128), (8, 1, 32, 8, 128), (2, 37, 4, 2, 64)]
    for b, s, hq, hk, d in rope_shapes[: 2 if quick else None]:
        q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
        k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
        cos, sin = rope_table(b, s, d, torch.bfloat16, gen)
        rq, rk = eager_rope(q.double(), k.double(), cos.double(), sin.double())
        eq, ek = eager_rope(q, k, cos, sin)
        q2, k2 = q.clone(), k.clone()
        gq, gk = kiln.apply_rotary(q2, k2, cos, sin)
        err = max(rel(q2, rq), rel(k2, rk))
        err_eager = max(rel(eq, rq), rel(ek, rk))
        record("pointwise", f"apply_rotary B{b} S{s} H{hq}/{hk} D{d}", err <= max(2 * err_eager, 1e-3)
               and gq is q2 and gk is k2, err=err, eager_err=err_eager)
    # CUDA graphs: both ops capture once warm
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(1, 64, 32, 128, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
    k = torch.randn(1, 64, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
    cos, sin = rope_table(1, 64, 128, torch.bfloat16, gen)
    try:
        out = kiln.rms_norm(x, w)
        kiln.apply_rotary(q, k, cos, sin)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = kiln.rms_norm(x, w)
            kiln.apply_rotary(q, k, cos, sin)
        g.replay()
        torch.cuda.synchronize()
        record("pointwise", "rms_norm and apply_rotary captured in a CUDA graph",
               rel(out, eager_rms_norm(x, w, 1e-6)) < 1e-2)
    except Exception as e:  # noqa: BLE001
        record("pointwise", "rms_norm and apply_rotary captured in a CUDA graph", False, error=str(e)[:300])
    # times against torch's eager ops (what the model path ran before)
    for rows, h in ((4096, 4096), (8192, 2048)):
        x = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.ones(h, device="cuda", dtype=torch.bfloat16)
        res = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16, generator=gen)
        tk, tt = bench_ms(lambda: kiln.rms_norm(x, w)), bench_ms(lambda: eager_rms_norm(x, w, 1e-6))
        timings.append({"what": f"rms_norm {rows}x{h} bf16 (torch: eager LlamaRMSNorm)", "kiln_ms": tk,
                        "torch_ms": tt, "speedup": tt / tk})
        tk = bench_ms(lambda: kiln.rms_norm(x, w, residual=res))
        tt = bench_ms(lambda: eager_rms_norm(res + x, w, 1e-6))
        timings.append({"what": f"residual add + rms_norm {rows}x{h} bf16 (torch: add, eager norm)", "kiln_ms": tk,
                        "torch_ms": tt, "speedup": tt / tk})
    for b, s, hq, hk, d in rope_shapes[:2]:
        q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
        k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
        cos, sin = rope_table(b, s, d, torch.bfloat16, gen)
        tk = bench_ms(lambda: kiln.apply_rotary(q, k, cos, sin))
        tt = bench_ms(lambda: eager_rope(q, k, cos, sin))
        timings.append({"what": f"rotary B{b} S{s} H{hq}/{hk} D{d} bf16 (torch: eager apply_rotary_pos_emb)",
                        "kiln_ms": tk, "torch_ms": tt, "speedup": tt / tk})



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a quarter of the shapes, no models")
    ap.add_argument("--only", help="comma-separated sections to run (gemm, attention, backward, varlen, kvcache, replay, "
                    "moe, moe_layer, fp8, fp4, moe_fp4, integration, pointwise, models, timings, moe_timings); default all")
    ap.add_argument("--moe", action="store_true", help="only the MoE checks and the MoE layer's timings "
                    "(--only moe,moe_layer,moe_timings)")
    args = ap.parse_args()
    out_dir = os.environ.get("OUT", "gpu-out")
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    timings: list[dict] = []
    t0 = time.time()
    sections = {"gemm": gemm_checks, "attention": attention_checks, "backward": attention_backward_checks,
                "varlen": varlen_checks, "kvcache": kvcache_checks, "replay": replay_checks, "moe": moe_checks, "moe_layer": moe_layer_checks,
                "fp8": fp8_checks, "fp4": fp4_checks, "moe_fp4": moe_fp4_checks, "moe_fp8": moe_fp8_checks, "integration": lambda g, q: integration_checks(g),
                "pointwise": lambda g, q: pointwise_checks(g, q, timings)}
    if not args.quick or args.moe:
        sections.update(models=lambda g, q: models(g, timings), timings=lambda g, q: op_timings(g, timings),
                        moe_timings=lambda g, q: moe_layer_timings(g, timings))
    only = args.only or ("moe,moe_layer,moe_timings" if args.moe else None)
    if only:
        unknown = set(only.split(",")) - set(sections)
        if unknown:
            ap.error(f"--only names {sorted(unknown)}; the sections are {', '.join(sections)}")
        sections = {k: v for k, v in sections.items() if k in only.split(",")}
    for section in sections.values():
        try:
            section(gen, args.quick)
        except Exception as e:  # noqa: BLE001 - a section that breaks is a failed check, not the end
            import traceback

            record("section", getattr(section, "__name__", "section"), False, error=traceback.format_exc()[-600:])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {
        "device": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "commit": commit or os.environ.get("KILN_COMMIT", ""),
        "command": "python3 python/tests/gpu_check.py" + (" --quick" if args.quick else "") + (" --moe" if args.moe else ""),
        "torch": torch.__version__,
        "seconds": round(time.time() - t0, 1),
        "checks": ROWS,
        "timings": timings,
    }
    finish(doc, os.path.join(out_dir, "python-gpu-check.json"), 72)


def finish(doc, path, width):
    """Writes `doc` (with ROWS as its checks) to `path`, prints the table of checks, then the
    timings (`width` wide names) and the first failures; exits 1 if any check failed."""
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    by_kind: dict = {}
    for r in ROWS:
        k = by_kind.setdefault(r["kind"], [0, 0, 0.0])
        k[0] += 1
        k[1] += r["ok"]
        k[2] = max(k[2], r.get("err", 0.0) or 0.0)
    print(f"\n{doc['device']}  torch {torch.__version__}  {doc['seconds']} s")
    print(f"{'checks':<12}{'passed':>10}{'max err':>12}")
    for k, (n, ok, mx) in by_kind.items():
        print(f"{k:<12}{ok:>5}/{n:<4}{mx:>12.2e}")
    for t in doc["timings"]:
        print(f"{t['what']:<{width}} kiln {t['kiln_ms']:8.3f} ms  torch {t['torch_ms']:8.3f} ms  {t['speedup']:5.2f}x")
    for f in FAILS[:20]:
        print("FAIL", f)
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
