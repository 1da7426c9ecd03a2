"""The attention host path on a GPU (issue 43, item 1 and the static cache of item 3): each
attention op called straight (no dispatcher), with what a model needs from it. Packed attention
without a host synchronisation: against the fp32 reference with the grid from looser bounds,
inside torch's sync-debug "error" mode, captured in a CUDA graph and replayed over new offsets,
and bad offsets (NaN for those sequences, a ValueError at the next call and from
kiln.check_errors), with check_offsets=True refusing them before the launch. Decode with each
sequence's first key (cache_leftpad) against the reference, captured. transformers' static cache
decoding a left-padded batch through the plug-in: logits against sdpa within eager's error,
kiln's decode counted as called with the compact mask (no sdpa fallback), one step captured in a
CUDA graph and replayed equal to eager (and, with HOST_PATH_COMPILE=1, generate with transformers'
own torch.compile). Accuracy as gpu_check.py: kiln's error against an fp32
reference at most twice torch's own bf16/f16 error. Writes JSON to $OUT (or ./gpu-out) and a
table last; exits 1 if any check fails.

    python3 python/tests/host_path_check.py
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))

import gpu_check as g  # noqa: E402  (its references, recorder and timer)
import kiln  # noqa: E402


def randn(*shape, dt=torch.bfloat16, gen):
    return torch.randn(*shape, device="cuda", dtype=dt, generator=gen)


def packed_ref(q, k, v, cu_q, cu_k, causal, scale):
    """Per sequence (host offsets, known to the check): the fp32 reference and torch's error."""
    worst, worst_torch = 0.0, 0.0
    refs = []
    for s in range(len(cu_q) - 1):
        a, b, c, e = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        if a == b or c == e:
            continue
        one = lambda t, x, y: t[x:y].unsqueeze(0)  # noqa: E731
        ref = g.sdpa_ref(one(q, a, b), one(k, c, e), one(v, c, e), causal, scale)
        refs.append((a, b, ref))
        worst_torch = max(worst_torch, g.rel(g.torch_bf16_attn(one(q, a, b), one(k, c, e), one(v, c, e), causal, scale), ref))
    return refs, worst_torch


def packed_err(out, refs):
    return max(g.rel(out[a:b].unsqueeze(0), ref) for a, b, ref in refs if b > a)


def varlen_no_sync(gen):
    """flash_attn_varlen_func with the offsets on the GPU only."""
    lengths = [1, 63, 64, 65, 127, 700, 33]
    cu = [0] + list(itertools.accumulate(lengths))
    total, hq, hkv, d = cu[-1], 8, 2, 128
    q, k, v = randn(total, hq, d, gen=gen), randn(total, hkv, d, gen=gen), randn(total, hkv, d, gen=gen)
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    for causal in (False, True):
        refs, torch_err = packed_ref(q, k, v, cu, cu, causal, 1 / math.sqrt(d))
        # bounds looser than the longest sequence (flash-attention's callers pass such), inside
        # torch's sync-debug mode: a read back of the offsets would raise
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = kiln.flash_attn_varlen_func(q, k, v, cu_t, cu_t, 1024, 1024, causal=causal)
            synced = None
        except RuntimeError as e:
            out, synced = None, str(e)[:200]
        finally:
            torch.cuda.set_sync_debug_mode(0)
        if out is None:
            g.record("varlen", f"no sync{' causal' if causal else ''}", False, error=synced)
            continue
        err = packed_err(out, refs)
        g.record("varlen", f"7 sequences, max 1024, no host copy{' causal' if causal else ''}",
                 err <= 2 * torch_err + 1e-4 and not math.isnan(err), err=err, torch_err=torch_err)
        checked = kiln.flash_attn_varlen_func(q, k, v, cu_t, cu_t, 700, 700, causal=causal, check_offsets=True)
        g.record("varlen", f"check_offsets=True equal to the GPU-checked call{' causal' if causal else ''}",
                 torch.equal(checked, out))
    # captured in a CUDA graph, replayed over other offsets (same bounds) and new inputs
    try:
        kiln.flash_attn_varlen_func(q, k, v, cu_t, cu_t, 1024, 1024, causal=True)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = kiln.flash_attn_varlen_func(q, k, v, cu_t, cu_t, 1024, 1024, causal=True)
        worst, worst_torch = 0.0, 0.0
        for lens in ([300, 300, 453], [1, 1000, 52], [1024, 29]):
            new = [0] + list(itertools.accumulate(lens))
            cu_t.copy_(torch.tensor(new + [total] * (len(cu) - len(new)), dtype=torch.int32))
            for t in (q, k, v):
                t.copy_(torch.randn(t.shape, device="cuda", generator=gen))
            graph.replay()
            torch.cuda.synchronize()
            full = new + [total] * (len(cu) - len(new))
            refs, te = packed_ref(q, k, v, full, full, True, 1 / math.sqrt(d))
            worst, worst_torch = max(worst, packed_err(out, refs)), max(worst_torch, te)
        kiln.check_errors()
        g.record("varlen", "captured once, replayed over 3 sets of offsets", worst <= 2 * worst_torch + 1e-4,
                 err=worst, torch_err=worst_torch)
    except Exception as e:  # noqa: BLE001
        g.record("varlen", "captured once, replayed over 3 sets of offsets", False, error=str(e)[:300])
    # bad offsets: a sequence longer than max_seqlen_q, then offsets past the packed rows
    cu_t.copy_(torch.tensor(cu, dtype=torch.int32))
    for name, bad, max_q, nan_rows in (("longer than max_seqlen_q", cu, 128, (cu[5], cu[5] + 128)),
                                       ("past the packed rows", cu[:-1] + [total + 9], 1024, (cu[-2], total))):
        cb = torch.tensor(bad, dtype=torch.int32, device="cuda")
        out = kiln.flash_attn_varlen_func(q, k, v, cb, cu_t, max_q, 1024)
        torch.cuda.synchronize()
        a, b = nan_rows
        others_ok = not torch.isnan(out[: cu[5]]).any()
        try:
            kiln.check_errors()
            g.record("varlen", f"bad offsets ({name}) reported", False, error="no error")
        except ValueError as e:
            g.record("varlen", f"bad offsets ({name}) reported",
                     "cu_seqlens" in str(e) and bool(torch.isnan(out[a:b]).all()) and others_ok, error=str(e)[:200])
        try:
            kiln.flash_attn_varlen_func(q, k, v, cb, cu_t, max_q, 1024, check_offsets=True)
            g.record("varlen", f"check_offsets=True refuses {name}", False, error="no error")
        except ValueError as e:
            g.record("varlen", f"check_offsets=True refuses {name}", "max_seqlen_q" in str(e) or "cu_seqlens" in str(e),
                     error=str(e)[:200])


def leftpad_decode(gen):
    """flash_attn_with_kvcache with cache_leftpad over transformers' static-cache layout."""
    for i, (b, sq, hq, hkv, d, smax) in enumerate(((4, 1, 32, 8, 128, 2048), (3, 4, 16, 2, 64, 700),
                                                   (1, 1, 8, 8, 256, 20000), (8, 2, 16, 4, 128, 512))):
        dt = (torch.bfloat16, torch.float16)[i % 2]
        kc = randn(b, hkv, smax, d, dt=dt, gen=gen).transpose(1, 2)
        vc = randn(b, hkv, smax, d, dt=dt, gen=gen).transpose(1, 2)
        q = randn(b, hq, sq, d, dt=dt, gen=gen).transpose(1, 2)
        ends = torch.randint(sq + 8, smax + 1, (b,), generator=gen, device="cuda").to(torch.int32)
        starts = (torch.rand(b, generator=gen, device="cuda") * (ends - sq).float()).to(torch.int32)
        out = kiln.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=ends, cache_leftpad=starts, causal=sq > 1)
        errs, terrs = [], []
        for s in range(b):
            lo, hi = int(starts[s]), int(ends[s])
            ref = g.sdpa_ref(q[s:s + 1], kc[s:s + 1, lo:hi], vc[s:s + 1, lo:hi], sq > 1, 1 / math.sqrt(d))
            errs.append(g.rel(out[s:s + 1], ref))
            terrs.append(g.rel(g.torch_bf16_attn(q[s:s + 1], kc[s:s + 1, lo:hi], vc[s:s + 1, lo:hi], sq > 1,
                                                 1 / math.sqrt(d)), ref))
        g.record("leftpad", f"B{b} Sq{sq} H{hq}/{hkv} d{d} S{smax} {str(dt)[6:]}",
                 max(errs) <= 2 * max(terrs) + 1e-4 and not math.isnan(max(errs)), err=max(errs), torch_err=max(terrs))


def static_cache_model(gen, timings):
    """A Llama-shaped model (GQA) under transformers' StaticCache, a left-padded batch."""
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

    from kiln.integrations import transformers as kiln_tf

    kiln_tf.register()
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                      num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=4096,
                      initializer_range=0.05)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    b, prompt, steps = 4, 200, 8
    ids = torch.randint(0, cfg.vocab_size, (b, prompt), device="cuda", generator=gen)
    pad = torch.ones(b, prompt, dtype=torch.long, device="cuda")
    pad[1, :37] = 0  # left padding
    pad[3, :150] = 0
    calls = {"compact": 0, "plain": 0}
    real = kiln.flash_attn_with_kvcache

    def counted(*a, **kw):
        calls["compact" if kw.get("cache_leftpad") is not None else "plain"] += 1
        return real(*a, **kw)

    kiln.flash_attn_with_kvcache = counted
    try:
        with torch.no_grad():
            logits = {}
            for impl in ("sdpa", "eager", "kiln"):
                model.config._attn_implementation = impl
                # (eager: generate would compile the forward under a static cache on its own)
                out = model.generate(ids, attention_mask=pad, max_new_tokens=steps, min_new_tokens=steps,
                                     do_sample=False, cache_implementation="static", output_logits=True,
                                     return_dict_in_generate=True, disable_compile=True)
                logits[impl] = torch.stack(out.logits).float()
                if impl == "sdpa":
                    seq = out.sequences
            err, eager_err = g.rel(logits["kiln"], logits["sdpa"]), g.rel(logits["eager"], logits["sdpa"])
            g.record("static", "generate, static cache, left-padded batch: logits vs sdpa",
                     err <= max(2 * eager_err, 2e-2), err=err, eager_err=eager_err)
            g.record("static", "kiln's decode ran with the compact mask at every step",
                     calls["compact"] >= 2 * (steps - 1) and calls["plain"] == 0, calls=dict(calls))
            # one decode step captured in a CUDA graph: the mask (made on the GPU from the padding
            # mask and the cache's offset) and kiln's decode inside the capture
            model.config._attn_implementation = "kiln"
            cache = StaticCache(config=cfg, max_cache_len=prompt + steps + 4)
            full = torch.cat([pad, torch.ones(b, steps, dtype=torch.long, device="cuda")], 1)
            model(seq[:, :prompt], attention_mask=pad, past_key_values=cache, use_cache=True)
            tok = seq[:, prompt:prompt + 1].clone()
            mask = full[:, :prompt + 1].clone()
            pos = (mask.cumsum(-1) - 1)[:, -1:].clone()
            step = lambda: model(tok, attention_mask=mask, position_ids=pos, past_key_values=cache,  # noqa: E731
                                 use_cache=True).logits
            # warm-up on a side stream (as torch's graph recipe), rewinding the cache each time
            for layer in cache.layers:
                layer.cumulative_length.fill_(prompt)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                eager = step().float().clone()
                for layer in cache.layers:
                    layer.cumulative_length.fill_(prompt)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = step()
            for layer in cache.layers:
                layer.cumulative_length.fill_(prompt)
            graph.replay()
            torch.cuda.synchronize()
            kiln.check_errors()
            gerr = g.rel(captured.float(), eager)
            g.record("static", "a static-cache decode step captured in a CUDA graph, replayed = eager", gerr < 1e-3,
                     err=gerr)
            # decode step time, graphed, kiln against sdpa (its mask materialised as transformers does)
            for impl in ("kiln", "sdpa"):
                model.config._attn_implementation = impl
                cache = StaticCache(config=cfg, max_cache_len=prompt + steps + 4)
                model(seq[:, :prompt], attention_mask=pad, past_key_values=cache, use_cache=True)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        for layer in cache.layers:
                            layer.cumulative_length.fill_(prompt)
                        step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step()

                def replay():
                    for layer in cache.layers:
                        layer.cumulative_length.fill_(prompt)
                    graph.replay()

                calls[impl + "_ms"] = g.bench_ms(replay)
            timings.append({"what": f"llama-gqa 2 layers, static cache, B{b} decode step, graphed",
                            "kiln_ms": calls["kiln_ms"], "torch_ms": calls["sdpa_ms"],
                            "speedup": calls["sdpa_ms"] / calls["kiln_ms"]})
            # generate as transformers runs it under a static cache: the forward compiled
            # (torch.compile, CUDA graphs), kiln's mask and decode traced as custom ops (opt-in:
            # compiling takes a minute or two)
            model.config._attn_implementation = "kiln"
            if os.environ.get("HOST_PATH_COMPILE") != "1":
                return
            t0 = time.time()
            try:
                out = model.generate(ids, attention_mask=pad, max_new_tokens=steps, min_new_tokens=steps,
                                     do_sample=False, cache_implementation="static", output_logits=True,
                                     return_dict_in_generate=True)
                cerr = g.rel(torch.stack(out.logits).float(), logits["kiln"])
                g.record("static", "generate with transformers' auto-compile (torch.compile) = eager kiln",
                         cerr <= max(2 * eager_err, 2e-2), err=cerr, seconds=round(time.time() - t0, 1))
            except Exception as e:  # noqa: BLE001
                g.record("static", "generate with transformers' auto-compile (torch.compile) = eager kiln", False,
                         error=str(e)[:300], seconds=round(time.time() - t0, 1))
    finally:
        kiln.flash_attn_with_kvcache = real


def main():
    out_dir = os.environ.get("OUT", "gpu-out")
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(4344)
    timings: list[dict] = []
    t0 = time.time()
    for section in (varlen_no_sync, leftpad_decode, lambda gg: static_cache_model(gg, timings)):
        seen = len(g.ROWS)
        try:
            section(gen)
        except Exception as e:  # noqa: BLE001 - a section that breaks is a failed check
            import traceback

            g.record("section", getattr(section, "__name__", "section"), False, error=traceback.format_exc()[-600:])
        for r in g.ROWS[seen:]:  # (as each lands: a run cut short still shows what it checked)
            extra = {k: v for k, v in r.items() if k not in ("kind", "name", "ok")}
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['kind']}: {r['name']} {extra}", flush=True)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seconds": round(time.time() - t0, 1),
           "command": "python3 python/tests/host_path_check.py", "checks": g.ROWS, "timings": timings}
    g.finish(doc, os.path.join(out_dir, "host-path-check.json"), 60)


if __name__ == "__main__":
    main()
