"""Whole models on kiln against torch's best path, as a user runs them:
`python -m kiln.bench_model [--models llama,qwen2,mixtral,qwen3-moe,qwen3-30b] [--layers 2,4]`.

Builds transformers models of known shapes with seeded random weights (nothing is downloaded),
checks that kiln's logits are within eager's own error of sdpa's, then times prefill (forward
passes at each --prefill shape, CUDA events, medians) and decode (tokens/s over a context of
--context tokens in a static cache, one step captured in a CUDA graph and replayed, at each
--decode batch) for sdpa, eager and kiln in one table. sdpa's decode is the fastest of its
backends, math included (its default alone can be far slower); MoE models run torch's grouped_mm experts under
sdpa and kiln's experts under kiln. Prints the device and versions; --json writes every figure."""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

# Model shapes: (transformers config class name, config kwargs). Layers and vocabulary come from
# the command line; each is the layer shape of a known model.
MODELS = {
    "llama": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                  num_key_value_heads=8, rope_theta=500000.0), "Llama-3-8B layers"),
    "qwen2": ("Qwen2Config", dict(hidden_size=2048, intermediate_size=11008, num_attention_heads=16,
                                  num_key_value_heads=2), "Qwen2 dense, 16/2 heads, hidden 2048"),
    "mixtral": ("MixtralConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                      num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2),
                "Mixtral-8x7B layers, 8 experts top-2"),
    "qwen3-moe": ("Qwen3MoeConfig", dict(hidden_size=1024, intermediate_size=3072, moe_intermediate_size=768,
                                         num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                                         num_experts=16, num_experts_per_tok=4, decoder_sparse_step=1,
                                         mlp_only_layers=[]), "Qwen3-MoE, 16 experts top-4, hidden 1024"),
    "qwen3-30b": ("Qwen3MoeConfig", dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                                         num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                                         num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1,
                                         mlp_only_layers=[]), "Qwen3-30B-A3B layers, 128 experts top-8"),
}


def shapes(text: str) -> list[tuple[int, int]]:
    """"1x4096,4x2048" -> [(1, 4096), (4, 2048)]; "" -> [] (no prefill, as --decode '')."""
    out = []
    for part in filter(None, text.split(",")):
        b, _, s = part.partition("x")
        try:
            out.append((int(b), int(s)))
        except ValueError:
            raise SystemExit(f"kiln.bench_model: the shape {part!r} is not BxS (e.g. 1x4096)") from None
    return out


def build(name: str, layers: int, vocab: int, device):
    import torch
    import transformers

    cls_name, kw, _ = MODELS[name]
    cfg = getattr(transformers, cls_name)(vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=16384,
                                         initializer_range=0.02, **kw)
    arch = cls_name.replace("Config", "ForCausalLM")
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, arch)(cfg)
    model = model.to(torch.bfloat16).eval()
    # Random weights give near-uniform logits and routers whose experts nearly tie: any change
    # of rounding then flips an expert (eager against sdpa too). Sharper lm_head and routers
    # make the comparison one of the kernels, not of ties.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        for mod_name, m in model.named_modules():
            if mod_name.endswith("mlp.gate") or type(m).__name__.endswith("TopKRouter"):
                m.weight.mul_(8.0)
    return model


def use(model, impl: str) -> None:
    """Runs `model`'s attention (and experts, for MoE models; and, for kiln, its gated MLPs fused,
    its RMSNorms, residual adds and rotary embedding on kiln's kernels) on `impl`."""
    model.set_attn_implementation(impl)
    if impl == "kiln" or hasattr(model, "_kiln_mlps"):
        from kiln.integrations import transformers as kiln_tf

        model._kiln_mlps = kiln_tf.fuse_mlp(model, enable=impl == "kiln")
        model._kiln_norms = kiln_tf.fuse_norms(model, enable=impl == "kiln")
    if getattr(model.config, "_experts_implementation", None) is not None or hasattr(model, "set_experts_implementation"):
        experts = {"kiln": "kiln", "sdpa": "grouped_mm", "eager": "eager"}[impl]
        try:
            model.set_experts_implementation(experts)
        except (ValueError, AttributeError):  # a dense model
            pass


def median_ms(fn, reps: int, warm: int) -> float:
    import torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def rel(x, ref) -> float:
    x, ref = x.float(), ref.float()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def sdpa_backends():
    """(name, context manager) for each SDPA backend to try at decode. The math backend too: with
    a static cache's mask and GQA the fused backends often refuse, and at decode its two matmuls
    can beat cuDNN's one kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return [(b.name.lower(), lambda b=b: sdpa_kernel(b)) for b in
            (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
             SDPBackend.MATH)]


def decode_tps(model, batch: int, context: int, steps: int, vocab: int, graphs: bool) -> tuple[float, bool]:
    """Tokens/s of `steps` greedy-shaped decode steps after a `context`-token prefill in a static
    cache; one step captured in a CUDA graph and replayed (when `graphs` and capture works)."""
    import torch
    from transformers import StaticCache

    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, vocab, (batch, context), device="cuda", generator=g)
    cache = StaticCache(config=model.config, max_cache_len=context + steps + 8)
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        pos = torch.tensor([context], device="cuda")

        def step():
            return model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits

        graph = None
        if graphs:
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step()
            except Exception as e:  # noqa: BLE001 - an impl that cannot be captured is timed eagerly
                print(f"  (decode not captured: {type(e).__name__}: {str(e)[:160]})", file=sys.stderr)
                graph = None
                torch.cuda.synchronize()
        run = graph.replay if graph is not None else step
        for _ in range(3):
            run()
            pos.add_(1)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            run()
            pos.add_(1)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
    return batch * steps / dt, graph is not None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kiln.bench_model", description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,qwen2,mixtral,qwen3-moe,qwen3-30b",
                    help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--layers", default="2", help="layer counts to build, e.g. 2,4 (default 2)")
    ap.add_argument("--vocab", type=int, default=32000, help="vocabulary size (default 32000)")
    ap.add_argument("--prefill", default="1x4096,4x2048", help="BxS shapes to time prefill at ('' for none)")
    ap.add_argument("--decode", default="1,8,64", help="batch sizes to time decode at ('' for none)")
    ap.add_argument("--context", type=int, default=2048, help="decode context tokens (default 2048)")
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps (default 64)")
    ap.add_argument("--check", default="2x512", help="BxS of the logits check (default 2x512)")
    ap.add_argument("--impls", default="sdpa,eager,kiln", help="implementations (default sdpa,eager,kiln)")
    ap.add_argument("--reps", type=int, default=10, help="timed forward passes per prefill shape")
    ap.add_argument("--no-graphs", action="store_true", help="decode without CUDA graphs")
    ap.add_argument("--json", help="also write every figure to this file")
    args = ap.parse_args(argv)

    import torch
    import transformers

    if not torch.cuda.is_available():
        print("kiln.bench_model: no CUDA GPU; this benchmark runs models on one", file=sys.stderr)
        return 4
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        ap.error(f"--models names {sorted(unknown)}; the models are {', '.join(MODELS)}")
    impls = args.impls.split(",")
    if "kiln" in impls:
        import kiln
        from kiln.integrations import transformers as kiln_tf

        kiln_tf.register()
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "kiln": __import__("kiln").__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python -m kiln.bench_model " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    print(f"{meta['device']}, torch {meta['torch']}, transformers {meta['transformers']}, kiln {meta['kiln']}, "
          f"{meta['date']}", file=sys.stderr)
    rows, fails = [], []
    for name in args.models.split(","):
        for layers in (int(x) for x in args.layers.split(",")):
            model = build(name, layers, args.vocab, "cuda")
            label = f"{name} ({MODELS[name][2]}), {layers} layers"
            print(f"== {label}", file=sys.stderr)
            g = torch.Generator(device="cuda").manual_seed(0)
            # Logits: kiln within twice eager's distance from sdpa (and a floor for bf16 noise).
            cb, cs = shapes(args.check)[0]
            ids = torch.randint(0, args.vocab, (cb, cs), device="cuda", generator=g)
            logits = {}
            with torch.no_grad():
                # (eager's own distance from sdpa is the bound: its logits are taken even when
                # eager is not timed)
                for impl in dict.fromkeys([*impls, "eager"] if "sdpa" in impls else impls):
                    use(model, impl)
                    logits[impl] = model(ids).logits.float()
            if "sdpa" in logits:
                ref = logits["sdpa"]
                eager_err = rel(logits["eager"], ref) if "eager" in logits else None
                for impl, lg in logits.items():
                    if impl == "sdpa":
                        continue
                    err = rel(lg, ref)
                    ok = math.isfinite(err) and (impl == "eager" or err <= max(2 * (eager_err or 0.0), 2e-2))
                    rows.append({"model": name, "layers": layers, "what": "logits vs sdpa", "impl": impl,
                                 "shape": args.check, "rel_err": err, "eager_rel_err": eager_err, "ok": ok})
                    if not ok:
                        fails.append(f"{label}: {impl} logits {err:.3e} from sdpa's (eager {eager_err})")
            del logits
            for b, s in shapes(args.prefill):
                ids = torch.randint(0, args.vocab, (b, s), device="cuda", generator=g)
                for impl in impls:
                    use(model, impl)
                    with torch.no_grad():
                        ms = median_ms(lambda: model(ids, use_cache=False), reps=args.reps, warm=3)
                    rows.append({"model": name, "layers": layers, "what": "prefill", "shape": f"{b}x{s}",
                                 "impl": impl, "ms": ms, "tokens_per_s": b * s / ms * 1e3})
                    print(f"  prefill {b}x{s} {impl}: {ms:.3f} ms", file=sys.stderr)
                torch.cuda.empty_cache()
            for batch in (int(x) for x in args.decode.split(",") if x):
                for impl in impls:
                    use(model, impl)
                    tries = sdpa_backends() if impl == "sdpa" else [("", None)]
                    best = None
                    for backend, ctx in tries:
                        try:
                            if ctx is None:
                                tps, graphed = decode_tps(model, batch, args.context, args.steps, args.vocab,
                                                          not args.no_graphs)
                            else:
                                with ctx():
                                    tps, graphed = decode_tps(model, batch, args.context, args.steps, args.vocab,
                                                              not args.no_graphs)
                        except Exception as e:  # noqa: BLE001 - a backend that cannot run this is skipped
                            print(f"  decode {impl} {backend}: {type(e).__name__}: {str(e)[:160]}", file=sys.stderr)
                            continue
                        if best is None or tps > best[0]:
                            best = (tps, graphed, backend)
                        torch.cuda.empty_cache()
                    if best is None:
                        fails.append(f"{label}: {impl} decode at batch {batch} did not run")
                        continue
                    rows.append({"model": name, "layers": layers, "what": "decode", "shape": f"{batch}x1 ctx {args.context}",
                                 "impl": impl, "tokens_per_s": best[0], "graphed": best[1], "backend": best[2]})
                    print(f"  decode batch {batch} {impl}{' ' + best[2] if best[2] else ''}: {best[0]:.0f} tok/s"
                          f"{'' if best[1] else ' (no graph)'}", file=sys.stderr)
            del model
            torch.cuda.empty_cache()
    print_table(rows, impls, meta)
    for f in fails:
        print("FAIL", f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "fails": fails}, f, indent=1)
    return 1 if fails else 0


def print_table(rows, impls, meta) -> None:
    """One line per (model, layers, measure, shape): each impl's figure and kiln's ratio to sdpa."""
    print(f"{meta['device']}, torch {meta['torch']}, transformers {meta['transformers']}, kiln {meta['kiln']}, "
          f"{meta['date']}")
    head = " | ".join(impls)
    print(f"| model | layers | measure | shape | {head} | kiln / sdpa |")
    print("|---|---|---|---|" + "---|" * len(impls) + "---|")
    keys = []
    for r in rows:
        k = (r["model"], r["layers"], r["what"], r["shape"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        by = {r["impl"]: r for r in rows if (r["model"], r["layers"], r["what"], r["shape"]) == k}
        cells, ratio = [], "–"
        for impl in impls:
            r = by.get(impl)
            if r is None:
                cells.append("ref" if k[2] == "logits vs sdpa" and impl == "sdpa" else "–")
            elif k[2] == "prefill":
                cells.append(f"{r['ms']:.3f} ms")
            elif k[2] == "decode":
                cells.append(f"{r['tokens_per_s']:.0f} tok/s" + ("" if r["graphed"] else "*"))
            else:
                cells.append(f"{r['rel_err']:.2e}" + ("" if r["ok"] else " FAIL") if impl != "sdpa" else "ref")
        if "kiln" in by and "sdpa" in by:
            if k[2] == "prefill":
                ratio = f"{by['sdpa']['ms'] / by['kiln']['ms']:.2f}x"
            elif k[2] == "decode":
                ratio = f"{by['kiln']['tokens_per_s'] / by['sdpa']['tokens_per_s']:.2f}x"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {' | '.join(cells)} | {ratio} |")
    print("(* decode not captured in a CUDA graph; sdpa decode: the fastest of its flash, efficient and cuDNN backends)")


if __name__ == "__main__":
    sys.exit(main())
