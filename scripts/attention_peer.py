#!/usr/bin/env python3
"""Peer comparison for `kiln attn bench`: times PyTorch SDPA with the cuDNN backend and the FLASH
(FlashAttention-2) backend on the same shapes, random data, L2 flushed before each repetition,
median of CUDA events; prints one JSON object per shape with TFLOPS (4*B*H*D per unmasked
(query, key) pair, the count kiln uses; causal is aligned top-left here, which equals kiln's
bottom-right alignment when seqlen_q == seqlen_kv, the only case this script runs).

Usage (on the GPU machine): python3 scripts/attention_peer.py [--shapes B,H,S,D[,causal];...]
S may be SQ:SKV (query and key lengths, non-causal only).
"""
import argparse
import json
import math
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

DEFAULT = "2,16,8192,128;2,16,8192,128,causal;4,16,4096,128;1,16,16384,128;4,16,4096,64;4,16,4096,256;2,16,8192,128,,f16"


def pairs(sq, skv, causal):
    return sq * (sq + 1) // 2 if causal else sq * skv


def time_backend(backend, q, k, v, causal, reps, warmup, flush, warmup_ms=0.0):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT, help="B,H,S,D[,causal[,f16]] separated by ';'")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--warmup-ms", type=float, default=0.0,
                    help="also warm up for at least this much GPU time (ms), as kiln's --warmup-ms")
    ap.add_argument("--no-flush", action="store_true",
                    help="do not flush L2 before each timed launch (as kiln's --no-flush)")
    ap.add_argument("--backends", default="cudnn,flash",
                    help="comma list of the SDPA backends to time (cudnn, flash)")
    a = ap.parse_args()
    torch.manual_seed(0)
    flush = None if a.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for spec in a.shapes.split(";"):
        f = spec.split(",")
        b, h, d = int(f[0]), int(f[1]), int(f[3])
        sq, skv = (int(x) for x in (f[2].split(":") + [f[2]])[:2])
        causal = len(f) > 4 and f[4] == "causal"
        if causal and sq != skv:
            sys.exit(f"{spec}: causal needs equal query and key lengths here (SDPA aligns the mask top-left)")
        dtype = torch.float16 if len(f) > 5 and f[5] == "f16" else torch.bfloat16
        # BSHD storage viewed as BHSD, as a fused projection produces it (kiln's default layout).
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype).transpose(1, 2)
        k, v = (torch.randn(b, skv, h, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in range(2))
        flops = 4.0 * b * h * d * pairs(sq, skv, causal)
        out = {"batch": b, "heads": h, "seqlen": sq, "seqlen_kv": skv, "dim": d, "causal": causal, "dtype": str(dtype).split(".")[-1],
               "device": torch.cuda.get_device_name(), "torch": torch.__version__}
        known = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
        for name in a.backends.split(","):
            if name not in known:
                sys.exit(f"unknown backend `{name}` in --backends (use cudnn, flash)")
            backend = known[name]
            try:
                ms, times = time_backend(backend, q, k, v, causal, a.reps, a.warmup, flush, a.warmup_ms)
                out[name + "_ms"] = round(ms, 4)
                out[name + "_times_ms"] = [round(t, 4) for t in times]
                out[name + "_tflops"] = round(flops / (ms * 1e-3) / 1e12, 1)
            except Exception as e:  # a backend that refuses the shape is data, not a crash
                out[name + "_error"] = str(e).splitlines()[0][:200]
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
