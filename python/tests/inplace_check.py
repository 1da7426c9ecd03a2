"""Attention on tensors where they lie, on a GPU (issue 43, items 2 and 3): flash_attn_func on
q, k, v and out in mixed memory orders (transformers' BSHD queries beside a BHSD cache with spare
rows, slices of a fused projection) and its gradients; flash_attn_with_kvcache over a dense cache
per sequence as transformers keeps it (with lengths, an int, or none; with an append); a decode
step captured in a CUDA graph with no special argument and replayed as lengths grow; bad lengths
and page ids reported from the GPU (NaN, then a ValueError at the next call and from
kiln.check_errors); and a transformers model decoding through the plug-in against sdpa. Accuracy
as gpu_check.py: kiln's error against an fp32 reference at most twice torch's own bf16/f16
error. Writes JSON to $OUT (or ./gpu-out) and a table last; exits 1 if any check fails.

    python3 python/tests/inplace_check.py
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))

import gpu_check as g  # noqa: E402  (its references, recorder and timer)
import kiln  # noqa: E402

DT = (torch.bfloat16, torch.float16)


def randn(*shape, dt, gen):
    return torch.randn(*shape, device="cuda", dtype=dt, generator=gen)


def bhsd_view(t, room=0):
    """`t` [B, S, H, D] copied into [B, H, S + room, D] memory (a cache with spare rows) and
    returned as the [B, S, H, D] view of its first S rows: what transformers' cache hands over."""
    b, s, h, d = t.shape
    store = torch.full((b, h, s + room, d), float("nan"), device=t.device, dtype=t.dtype)
    store[:, :, :s] = t.transpose(1, 2)
    return store[:, :, :s].transpose(1, 2)


def strided_forward(gen):
    """Mixed orders against the fp32 reference, out= included, and no copy of q, k or v."""
    cases = [  # (B, Sq, Sk, Hq, Hkv, D, arrangement)
        (2, 1, 300, 8, 2, 128, "cache"), (3, 200, 700, 16, 4, 128, "cache"), (2, 128, 4097, 4, 2, 64, "cache"),
        (1, 129, 129, 8, 1, 256, "cache"), (2, 129, 129, 8, 2, 64, "fused"), (1, 300, 300, 4, 4, 256, "fused"),
        (2, 1000, 1000, 12, 4, 128, "fused"), (1, 17, 1000, 4, 4, 256, "mixed"), (1, 1000, 1000, 2, 1, 64, "mixed"),
    ]
    for i, (b, sq, sk, hq, hkv, d, how) in enumerate(cases):
        for causal in (False, True):
            dt = DT[i % 2]
            if how == "fused":  # q, k, v slices of one [B, S, Hq + 2 Hkv, D] projection
                qkv = randn(b, sq, hq + 2 * hkv, d, dt=dt, gen=gen)
                q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
            else:
                q = randn(b, sq, hq, d, dt=dt, gen=gen)
                k, v = randn(b, sk, hkv, d, dt=dt, gen=gen), randn(b, sk, hkv, d, dt=dt, gen=gen)
                if how == "cache":  # BSHD queries, BHSD caches with 40 spare rows
                    k, v = bhsd_view(k, 40), bhsd_view(v, 40)
                else:  # q BHSD, k BSHD, v BHSD with spare rows
                    q, v = bhsd_view(q), bhsd_view(v, 24)
            scale = 1 / math.sqrt(d)
            ref = g.sdpa_ref(q, k, v, causal, scale)
            torch_err = g.rel(g.torch_bf16_attn(q, k, v, causal, scale), ref)
            before = torch.cuda.memory_allocated()
            out = kiln.flash_attn_func(q, k, v, causal=causal)
            grew = torch.cuda.memory_allocated() - before  # the output (and no copy of the inputs)
            o_bhsd = torch.empty(b, hq, sq, d, device="cuda", dtype=dt).transpose(1, 2)
            kiln.flash_attn_func(q, k, v, causal=causal, out=o_bhsd)
            err, err_out = g.rel(out, ref), g.rel(o_bhsd, ref)
            name = f"{how} B{b} Sq{sq} Sk{sk} H{hq}/{hkv} d{d}{' causal' if causal else ''} {str(dt)[6:]}"
            ok = max(err, err_out) <= 2 * torch_err + 1e-4 and not math.isnan(err + err_out)
            g.record("strided", name, ok and grew <= out.numel() * out.element_size() + (1 << 20),
                     err=err, err_out=err_out, torch_err=torch_err, allocated=grew)


def strided_backward(gen):
    """Gradients through flash_attn_func with q BSHD and k, v BHSD (the backward reads one order:
    the Python side copies them into q's), each at most twice torch's own error."""
    for i, (b, sq, sk, hq, hkv, d) in enumerate([(2, 65, 130, 8, 2, 128), (1, 300, 300, 4, 1, 64)]):
        for causal in (False, True):
            dt = DT[i % 2]
            q = randn(b, sq, hq, d, dt=dt, gen=gen)
            k, v = bhsd_view(randn(b, sk, hkv, d, dt=dt, gen=gen)), bhsd_view(randn(b, sk, hkv, d, dt=dt, gen=gen))
            dout = randn(b, sq, hq, d, dt=dt, gen=gen)
            scale = 1 / math.sqrt(d)

            def grads(fn, *xs):
                xs = [x.detach().clone().requires_grad_(True) for x in xs]
                fn(*xs).backward(dout.to(xs[0].dtype))
                return [x.grad for x in xs]

            ref = grads(lambda *t: g.sdpa_ref(*t, causal, scale), q.float(), k.float(), v.float())
            # (the clones keep each tensor's order: q BSHD, k and v BHSD memory)
            mine = grads(lambda *t: kiln.flash_attn_func(*t, causal=causal), q, k, v)
            theirs = grads(lambda *t: g.torch_bf16_attn(*t, causal, scale), q, k, v)
            for n, m, t, r in zip("qkv", mine, theirs, ref):
                err, torch_err = g.rel(m, r), g.rel(t, r)
                g.record("strided_bwd", f"d{n} B{b} Sq{sq} Sk{sk} H{hq}/{hkv} d{d}{' causal' if causal else ''}",
                         err <= 2 * torch_err + 1e-4 and not math.isnan(err), err=err, torch_err=torch_err)


def dense_ref(q, kc, vc, lens, causal):
    """Per sequence: the fp32 reference and torch's own error over its first lens[s] cached rows."""
    d = q.shape[-1]
    scale = 1 / math.sqrt(d)
    refs, errs = [], []
    for s in range(q.shape[0]):
        n = int(lens[s])
        kd, vd = kc[s:s + 1, :n], vc[s:s + 1, :n]
        ref = g.sdpa_ref(q[s:s + 1], kd, vd, causal, scale)
        refs.append(ref)
        errs.append(g.rel(g.torch_bf16_attn(q[s:s + 1], kd, vd, causal, scale), ref))
    return refs, max(errs)


def dense_decode(gen):
    """flash_attn_with_kvcache over transformers' [B, Hkv, S, D] caches through their transposed
    views: lengths as a tensor, an int and none; an append; splits (one long sequence)."""
    cases = [  # (B, Sq, Hq, Hkv, D, S, lengths, new)
        (4, 1, 32, 8, 128, 2048, "tensor", 0), (8, 1, 16, 2, 64, 577, "none", 0), (3, 4, 8, 8, 256, 1000, "tensor", 0),
        (2, 16, 16, 4, 128, 5000, "tensor", 16), (1, 1, 8, 1, 128, 20000, "int", 0), (2, 2, 4, 4, 64, 300, "int", 2),
        (64, 1, 32, 8, 128, 2048, "tensor", 1),
    ]
    for i, (b, sq, hq, hkv, d, smax, how, new) in enumerate(cases):
        dt = DT[i % 2]
        causal = sq > 1
        store_k = randn(b, hkv, smax, d, dt=dt, gen=gen)  # transformers' cache layout
        store_v = randn(b, hkv, smax, d, dt=dt, gen=gen)
        kc, vc = store_k.transpose(1, 2), store_v.transpose(1, 2)
        q = randn(b, hq, sq, d, dt=dt, gen=gen).transpose(1, 2)  # transformers' query, transposed
        if how == "none":
            lens = torch.full((b,), smax, dtype=torch.int32, device="cuda")
            arg = None
        elif how == "int":
            lens = torch.full((b,), smax - 7 - new, dtype=torch.int32, device="cuda")
            arg = smax - 7 - new
        else:
            lens = torch.randint(max(sq, new, 1), smax - new + 1, (b,), generator=gen, device="cuda").to(torch.int32)
            arg = lens
        k = v = None
        if new:
            k, v = randn(b, new, hkv, d, dt=dt, gen=gen), randn(b, new, hkv, d, dt=dt, gen=gen)
        out, lse = kiln.flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=arg, causal=causal,
                                                return_softmax_lse=True)
        total = lens + new
        if new:
            for s in range(b):
                at = int(lens[s])
                ok = torch.equal(kc[s, at:at + new], k[s]) and torch.equal(vc[s, at:at + new], v[s])
                g.record("dense", f"append seq {s} of case {i}", ok)
        refs, torch_err = dense_ref(q, kc, vc, total, causal)
        err = max(g.rel(out[s:s + 1], refs[s]) for s in range(b))
        g.record("dense", f"B{b} Sq{sq} H{hq}/{hkv} d{d} S{smax} lengths {how} +{new}{' causal' if causal else ''} "
                 f"{str(dt)[6:]}", err <= 2 * torch_err + 1e-4 and not math.isnan(err) and not torch.isnan(lse).any(),
                 err=err, torch_err=torch_err)


def graph_decode(gen):
    """A decode step (append then attend, dense and paged) captured in a CUDA graph with no
    special argument, replayed over growing lengths with new inputs, against eager references."""
    b, hq, hkv, d, smax, dt = 4, 16, 4, 128, 1024, torch.bfloat16
    store_k, store_v = randn(b, hkv, smax, d, dt=dt, gen=gen), randn(b, hkv, smax, d, dt=dt, gen=gen)
    kc, vc = store_k.transpose(1, 2), store_v.transpose(1, 2)
    q, kn, vn = randn(b, 1, hq, d, dt=dt, gen=gen), randn(b, 1, hkv, d, dt=dt, gen=gen), randn(b, 1, hkv, d, dt=dt, gen=gen)
    lens = torch.tensor([100, 517, 1, 900], dtype=torch.int32, device="cuda")

    def step():
        return kiln.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens)

    try:
        step()  # warm: kernels compiled and loaded, workspaces sized, outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        worst, worst_torch = 0.0, 0.0
        for it in range(4):
            lens += 5 * (it + 1)
            for t in (q, kn, vn):
                t.copy_(torch.randn(t.shape, device="cuda", generator=gen, dtype=torch.float32))
            graph.replay()
            torch.cuda.synchronize()
            refs, torch_err = dense_ref(q, kc, vc, lens + 1, False)
            worst = max(worst, max(g.rel(out[s:s + 1], refs[s]) for s in range(b)))
            worst_torch = max(worst_torch, torch_err)
            appended = all(torch.equal(kc[s, int(lens[s])], kn[s, 0]) for s in range(b))
            g.record("graph", f"dense replay {it} (append landed)", appended)
        g.record("graph", "dense decode step captured and replayed x4", worst <= 2 * worst_torch + 1e-4,
                 err=worst, torch_err=worst_torch)
    except Exception as e:  # noqa: BLE001
        g.record("graph", "dense decode step captured and replayed x4", False, error=str(e)[:300])
    # paged, as gpu_check's kvcache section, captured
    try:
        ps, pages = 16, b * (smax // 16)
        kp, vp = randn(pages, ps, hkv, d, dt=dt, gen=gen), randn(pages, ps, hkv, d, dt=dt, gen=gen)
        table = torch.randperm(pages, generator=gen, device="cuda").to(torch.int32).view(b, -1)
        plens = torch.tensor([33, 700, 16, 1000], dtype=torch.int32, device="cuda")

        def pstep():
            return kiln.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=plens, block_table=table)

        pstep()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            pout = pstep()
        plens.copy_(torch.tensor([40, 1, 1023, 512], dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        errs, terrs = [], []
        for s in range(b):
            n = int(plens[s])
            rows = table[s, : -(-n // ps)].long()
            kd, vd = kp[rows].reshape(-1, hkv, d)[:n][None], vp[rows].reshape(-1, hkv, d)[:n][None]
            ref = g.sdpa_ref(q[s:s + 1], kd, vd, False, 1 / math.sqrt(d))
            errs.append(g.rel(pout[s:s + 1], ref))
            terrs.append(g.rel(g.torch_bf16_attn(q[s:s + 1], kd, vd, False, 1 / math.sqrt(d)), ref))
        g.record("graph", "paged decode step captured (default arguments) and replayed", max(errs) <= 2 * max(terrs) + 1e-4,
                 err=max(errs), torch_err=max(terrs))
    except Exception as e:  # noqa: BLE001
        g.record("graph", "paged decode step captured (default arguments) and replayed", False, error=str(e)[:300])


def bad_tables(gen):
    """Bad entries found on the GPU: the sequence comes out NaN (the others not), the next call
    raises one ValueError naming the argument, kiln.check_errors() raises after a graph replay,
    and a clean call afterwards passes."""
    b, hq, hkv, d, smax, dt = 3, 8, 2, 128, 256, torch.bfloat16
    kc = randn(b, hkv, smax, d, dt=dt, gen=gen).transpose(1, 2)
    vc = randn(b, hkv, smax, d, dt=dt, gen=gen).transpose(1, 2)
    q = randn(b, 1, hq, d, dt=dt, gen=gen)
    lens = torch.tensor([10, smax + 5, 200], dtype=torch.int32, device="cuda")
    out = kiln.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens)
    torch.cuda.synchronize()
    nan = [bool(torch.isnan(out[s]).all()) for s in range(b)]
    g.record("bad_tables", "bad length: its sequence NaN, the others finite", nan == [False, True, False], nan=nan)
    good = torch.tensor([10, 20, 30], dtype=torch.int32, device="cuda")
    try:
        kiln.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=good)
        g.record("bad_tables", "next call raises", False, error="no error")
    except ValueError as e:
        g.record("bad_tables", "next call raises", "cache_seqlens" in str(e), error=str(e)[:300])
    try:
        kiln.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=good)
        kiln.check_errors()
        g.record("bad_tables", "reported once, then clean", True)
    except ValueError as e:
        g.record("bad_tables", "reported once, then clean", False, error=str(e)[:300])
    # paged: a page id past the cache, inside a captured graph, found by check_errors
    pages, ps = 12, 64
    kp, vp = randn(pages, ps, hkv, d, dt=dt, gen=gen), randn(pages, ps, hkv, d, dt=dt, gen=gen)
    table = torch.arange(pages, dtype=torch.int32, device="cuda").view(b, -1)
    plens = torch.tensor([64, 200, 256], dtype=torch.int32, device="cuda")
    try:
        kiln.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=plens, block_table=table)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            pout = kiln.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=plens, block_table=table)
        table[1, 2] = 1000
        graph.replay()
        try:
            kiln.check_errors()
            g.record("bad_tables", "check_errors after a replay with a bad page", False, error="no error")
        except ValueError as e:
            nan = [bool(torch.isnan(pout[s]).all()) for s in range(b)]
            g.record("bad_tables", "check_errors after a replay with a bad page",
                     "block_table" in str(e) and nan == [False, True, False], nan=nan, error=str(e)[:300])
    except Exception as e:  # noqa: BLE001
        g.record("bad_tables", "check_errors after a replay with a bad page", False, error=str(e)[:300])
    # a wrong cache dtype and another device name the argument
    try:
        kiln.flash_attn_with_kvcache(q, kc.float(), vc.float(), cache_seqlens=good)
        g.record("bad_tables", "f32 cache refused", False, error="no error")
    except TypeError as e:
        g.record("bad_tables", "f32 cache refused", "k_cache" in str(e), error=str(e)[:200])
    if torch.cuda.device_count() > 1:
        try:
            kiln.flash_attn_with_kvcache(q, kc.to("cuda:1"), vc, cache_seqlens=good)
            g.record("bad_tables", "cache on another GPU refused", False, error="no error")
        except ValueError as e:
            g.record("bad_tables", "cache on another GPU refused", "k_cache" in str(e), error=str(e)[:200])


def model_decode(gen, timings):
    """A Llama-shaped model (GQA) decoding through the plug-in: the dense-cache decode runs (the
    plug-in's calls are counted), teacher-forced logits match sdpa's within eager's error, and
    model.generate is timed against sdpa (no graphs, dynamic cache)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from kiln.integrations import transformers as kiln_tf

    kiln_tf.register()
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                      num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=4096,
                      initializer_range=0.05)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    calls = {"decode": 0, "forward": 0}
    real_decode, real_fwd = kiln.flash_attn_with_kvcache, kiln.flash_attn_func

    def counted(name, fn):
        def wrapper(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapper

    kiln.flash_attn_with_kvcache, kiln.flash_attn_func = counted("decode", real_decode), counted("forward", real_fwd)
    try:
        ids = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda", generator=gen)
        with torch.no_grad():
            model.config._attn_implementation = "sdpa"
            seq = model.generate(ids, max_new_tokens=16, do_sample=False, min_new_tokens=16)
            steps = {}
            for impl in ("sdpa", "eager", "kiln"):
                model.config._attn_implementation = impl
                # the decode path: prefill the prompt, then one token at a time through the cache
                out = model(seq[:, :512], use_cache=True)
                cache, logits = out.past_key_values, [out.logits[:, -1].float()]
                for t in range(512, 512 + 15):
                    out = model(seq[:, t:t + 1], past_key_values=cache, use_cache=True)
                    cache = out.past_key_values
                    logits.append(out.logits[:, -1].float())
                steps[impl] = torch.cat(logits)
            err, eager_err = g.rel(steps["kiln"], steps["sdpa"]), g.rel(steps["eager"], steps["sdpa"])
            g.record("model", "llama-gqa decode steps through the cache vs sdpa", err <= max(2 * eager_err, 2e-2),
                     err=err, eager_err=eager_err, kiln_decode_calls=calls["decode"], kiln_forward_calls=calls["forward"])
            g.record("model", "plug-in ran kiln's dense decode", calls["decode"] >= 2 * 15, calls=dict(calls))
            for batch in (1, 8):
                prompt = torch.randint(0, cfg.vocab_size, (batch, 512), device="cuda", generator=gen)
                for impl in ("sdpa", "kiln"):
                    model.config._attn_implementation = impl
                    model.generate(prompt, max_new_tokens=8, do_sample=False, min_new_tokens=8)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    model.generate(prompt, max_new_tokens=64, do_sample=False, min_new_tokens=64)
                    torch.cuda.synchronize()
                    steps[f"{impl}{batch}"] = (time.perf_counter() - t0) * 1e3
                timings.append({"what": f"llama-gqa 2 layers generate B{batch} 512+64 (dynamic cache, no graphs)",
                                "kiln_ms": steps[f"kiln{batch}"], "torch_ms": steps[f"sdpa{batch}"],
                                "speedup": steps[f"sdpa{batch}"] / steps[f"kiln{batch}"]})
    finally:
        kiln.flash_attn_with_kvcache, kiln.flash_attn_func = real_decode, real_fwd


def decode_timings(gen, timings):
    """One decode step over transformers' dense cache: kiln against SDPA (cuDNN/flash/efficient,
    the fastest of them, enable_gqa) on the same [B, H, S, D] tensors."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for b, hq, hkv, s in ((1, 32, 8, 2048), (8, 32, 8, 2048), (64, 32, 8, 2048)):
        kc, vc = randn(b, hkv, s, 128, dt=torch.bfloat16, gen=gen), randn(b, hkv, s, 128, dt=torch.bfloat16, gen=gen)
        q = randn(b, hq, 1, 128, dt=torch.bfloat16, gen=gen)
        tk = g.bench_ms(lambda: kiln.flash_attn_with_kvcache(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)))
        best = math.inf
        for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                with sdpa_kernel(be):
                    best = min(best, g.bench_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, kc, vc, enable_gqa=True)))
            except RuntimeError:
                pass
        timings.append({"what": f"decode step B{b} H{hq}/{hkv} S{s} d128 dense cache (torch: best SDPA backend)",
                        "kiln_ms": tk, "torch_ms": best, "speedup": best / tk})


def main():
    out_dir = os.environ.get("OUT", "gpu-out")
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(4343)
    timings: list[dict] = []
    t0 = time.time()
    for section in (strided_forward, strided_backward, dense_decode, graph_decode, bad_tables,
                    lambda gg: model_decode(gg, timings), lambda gg: decode_timings(gg, timings)):
        try:
            section(gen)
        except Exception as e:  # noqa: BLE001 - a section that breaks is a failed check
            import traceback

            g.record("section", getattr(section, "__name__", "section"), False, error=traceback.format_exc()[-600:])
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seconds": round(time.time() - t0, 1),
           "command": "python3 python/tests/inplace_check.py", "checks": g.ROWS, "timings": timings}
    g.finish(doc, os.path.join(out_dir, "inplace-check.json"), 80)


if __name__ == "__main__":
    main()
