"""kiln.distributed's layers on W GPUs against the one-GPU layer: a tensor-parallel SwiGLU MLP
(Llama-3-8B's: hidden 4096, ffn 14336, 4096 tokens) and an expert-parallel MoE layer (Mixtral's:
8 experts, top-2, hidden 4096, ffn 14336, 4096 tokens split over the ranks). Each output is
compared on rank 0 with the same layer in plain torch (bf16, and fp32 as the truth): the parallel
layer's error against fp32 must be at most twice the bf16 torch layer's own, or kiln's bf16 bound.
Times (CUDA events, warm-up, medians per rank) of the parallel forward and of its collectives
alone, with their share. Ranks that disagree are checked to fail on every rank. Writes
DIR/distributed-w<W>.json from rank 0, prints a table; exits 1 if a check fails.

    torchrun --nproc_per_node=W python/tests/distributed_check.py --out DIR [--quick]
"""

from __future__ import annotations

import os

# NVLink multicast off before NCCL starts, here and in anything this process starts.
os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kiln import distributed as kd  # noqa: E402

BF16_BOUND = 4e-3  # kiln's relative bound for bf16 outputs (harness::verify::bound)
HIDDEN, FFN, TOKENS = 4096, 14336, 4096
EXPERTS, TOP_K = 8, 2


def rel(x, ref) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def randn(shape, seed: int, scale: float = 1.0):
    """The same values on every rank (a seeded generator on the rank's GPU), in bf16."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * scale).to(torch.bfloat16)


def median(v):
    return statistics.median(v) if v else float("nan")


def timed(layer, fn, warmup: int, reps: int) -> dict:
    """Medians of the forward and of the collectives inside it (ms), and the comm share."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    fwd, comm = [], []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        layer.comm.start()
        s.record()
        fn()
        e.record()
        e.synchronize()
        comm.append(layer.comm.stop_ms())
        fwd.append(s.elapsed_time(e))
    return {
        "forward_ms": median(fwd),
        "comm_ms": median(comm),
        "comm_share": median([c / f for c, f in zip(comm, fwd) if f > 0]),
    }


def bench(fn, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return median(times)


def gathered(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def verdict(out, ref_bf16, ref_f32) -> dict:
    torch_err = rel(ref_bf16, ref_f32)
    err = rel(out, ref_f32)
    bound = max(2 * torch_err, BF16_BOUND)
    return {
        "error_vs_fp32": err,
        "error_vs_torch_bf16": rel(out, ref_bf16),
        "torch_bf16_error": torch_err,
        "max_abs_error_vs_fp32": float((out.double() - ref_f32.double()).abs().max()),
        "bound": bound,
        "ok": err <= bound and err == err,
    }


# ---------------------------------------------------------------------- tensor-parallel SwiGLU
def swiglu_mlp(x, w1, w3, w2):
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


def tensor_parallel(args, rank) -> dict:
    w1 = randn((FFN, HIDDEN), 11, HIDDEN**-0.5)
    w3 = randn((FFN, HIDDEN), 12, HIDDEN**-0.5)
    w2 = randn((HIDDEN, FFN), 13, FFN**-0.5)
    x = randn((TOKENS, HIDDEN), 14)
    layer = kd.TensorParallelSwiGLU(HIDDEN, FFN).load_from_full(w1, w3, w2)
    with torch.no_grad():
        y = layer(x)  # checks every rank's input first
        row = {"layer": "tensor-parallel SwiGLU", "shape": {"tokens": TOKENS, "hidden": HIDDEN, "ffn": FFN,
                                                           "ffn_per_rank": layer.ffn_local}}
        if rank == 0:
            ref = swiglu_mlp(x, w1, w3, w2)
            ref32 = swiglu_mlp(x.float(), w1.float(), w3.float(), w2.float())
            row.update(verdict(y, ref, ref32))
            del ref, ref32
        layer.check_inputs = False
        t = timed(layer, lambda: layer(x), args.warmup, args.reps)
        t["comm_alone_ms"] = bench(lambda: dist.all_reduce(y), args.warmup, args.reps)
        ref_ms = bench(lambda: swiglu_mlp(x, w1, w3, w2), args.warmup, args.reps)
    row["per_rank"] = gathered(t)
    if rank == 0:
        row["torch_one_gpu_ms"] = ref_ms
    del w1, w3, w2
    return row


# ------------------------------------------------------------------------ expert-parallel MoE
def moe_reference(x, index, weights, w13, w2, dtype):
    """The one-GPU layer in plain torch (transformers' Mixtral loop), in `dtype`."""
    out = torch.zeros(x.shape, dtype=dtype, device=x.device)
    xd = x.to(dtype)
    for e in range(w13.shape[0]):
        tok, slot = torch.nonzero(index == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        w = w13[e].to(dtype)
        h = F.silu(F.linear(xd[tok], w[:FFN])) * F.linear(xd[tok], w[FFN:])
        y = F.linear(h, w2[e].to(dtype)) * weights[tok, slot, None].to(dtype)
        out.index_add_(0, tok, y)
    return out


def expert_parallel(args, rank, world) -> dict:
    router = randn((EXPERTS, HIDDEN), 21, HIDDEN**-0.5)
    w13 = randn((EXPERTS, 2 * FFN, HIDDEN), 22, HIDDEN**-0.5)
    w2 = randn((EXPERTS, HIDDEN, FFN), 23, FFN**-0.5)
    x = randn((TOKENS, HIDDEN), 24)
    layer = kd.ExpertParallelMoE(EXPERTS, HIDDEN, FFN, TOP_K).load_from_full(router, w13, w2)
    if rank != 0:
        del w13, w2
    # One routing for all tokens, from rank 0: near-ties cannot route a token differently here.
    index = torch.empty((TOKENS, TOP_K), dtype=torch.int64, device="cuda")
    weights = torch.empty((TOKENS, TOP_K), dtype=torch.float32, device="cuda")
    if rank == 0:
        index, weights = (t.contiguous() for t in layer.route(x))
    dist.broadcast(index, 0)
    dist.broadcast(weights, 0)
    share = TOKENS // world
    a, b = rank * share, (rank + 1) * share
    xl, il, wl = x[a:b].contiguous(), index[a:b].contiguous(), weights[a:b].contiguous()
    with torch.no_grad():
        yl = layer.experts(xl, il, wl)
        y = torch.empty((TOKENS, HIDDEN), dtype=yl.dtype, device="cuda")
        dist.all_gather_into_tensor(y, yl)
        row = {"layer": "expert-parallel MoE", "shape": {"tokens": TOKENS, "tokens_per_rank": share, "hidden": HIDDEN,
                                                        "ffn": FFN, "experts": EXPERTS, "experts_per_rank": layer.local_experts,
                                                        "top_k": TOP_K}}
        if rank == 0:
            ref = moe_reference(x, index, weights, w13, w2, torch.bfloat16)
            ref32 = moe_reference(x, index, weights, w13, w2, torch.float32)
            row.update(verdict(y, ref, ref32))
            del ref, ref32
        layer.check_inputs = False
        t = timed(layer, lambda: layer.experts(xl, il, wl), args.warmup, args.reps)
        ref_ms = None
        if rank == 0:
            ref_ms = bench_local(lambda: moe_reference(x, index, weights, w13, w2, torch.bfloat16), args.warmup, args.reps)
    row["per_rank"] = gathered(t)
    row["torch_one_gpu_ms"] = ref_ms
    return row


def bench_local(fn, warmup: int, reps: int) -> float:
    """Like `bench`, on this rank alone (no barrier)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return median(times)


# ------------------------------------------------------------------------------------ bad input
def disagreeing_ranks(rank, world) -> list:
    """Ranks built with different configs: the same ValueError on every rank, none hangs."""
    if world < 2:
        return []
    rows = []
    for name, build in (
        ("TensorParallelSwiGLU hidden differs", lambda: kd.TensorParallelSwiGLU(256 * (1 + (rank == 1)), 1024)),
        ("ExpertParallelMoE top_k differs", lambda: kd.ExpertParallelMoE(world, 256, 256, 1 + (rank == 1))),
    ):
        try:
            build()
            rows.append({"check": name, "ok": False, "error": "no error"})
        except ValueError as e:
            rows.append({"check": name, "ok": "ranks disagree" in str(e), "error": str(e)})
    for r in rows:
        r["ok"] = all(gathered(r["ok"]))
    return rows


def nccl_version() -> str:
    v = torch.cuda.nccl.version()  # a tuple in recent torch, an int before
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    # A rank that fails makes torchrun stop the others; a collective that waits longer is a hang.
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = [tensor_parallel(args, rank)]
    torch.cuda.empty_cache()
    rows.append(expert_parallel(args, rank, world))
    bad = disagreeing_ranks(rank, world)
    if rank == 0:
        doc = {
            "device": torch.cuda.get_device_name(0),
            "world_size": world,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "nccl": nccl_version(),
            "env": {k: os.environ.get(k) for k in kd.MULTICAST_OFF},
            "warmup": args.warmup,
            "reps": args.reps,
            "layers": rows,
            "bad_input": bad,
        }
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"distributed-w{world}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"{'layer':24} {'W':>2} {'err/fp32':>9} {'bound':>8} {'fwd ms':>8} {'comm ms':>8} {'comm %':>7} {'torch 1-GPU ms':>15}  ok")
        for r in rows:
            fwd = max(p["forward_ms"] for p in r["per_rank"])
            comm = max(p["comm_ms"] for p in r["per_rank"])
            share = max(p["comm_share"] for p in r["per_rank"])
            print(f"{r['layer']:24} {world:>2} {r['error_vs_fp32']:9.2e} {r['bound']:8.1e} {fwd:8.3f} {comm:8.3f} "
                  f"{100 * share:6.1f}% {r['torch_one_gpu_ms']:15.3f}  {'ok' if r['ok'] else 'FAILED'}")
        for b in bad:
            print(f"bad input: {b['check']}: {'ok' if b['ok'] else 'FAILED'}")
        print(f"wrote {path}")
    ok = all(r.get("ok", True) for r in rows) and all(b["ok"] for b in bad)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
