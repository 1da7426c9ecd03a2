"""The table of `bash scripts/gpu.sh multi`: the three tuning runs (candidates, wall time per
candidate, best config) and the torch.distributed layers per GPU count (error against fp32, its
bound, forward and communication times, communication share), also as multi-summary.json.

    python3 scripts/multi-table.py DIR GPUS
"""

import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": str(e)}


def tune_rows(d, ngpu):
    rows = {}
    print(f"{'tune run':16} {'GPUs':>4} {'cands':>5} {'wall s':>7} {'s/cand':>7}  best (median ms)")
    for name, gpus in (("tune-gpu0-cold", 1), ("tune-all", ngpu), ("tune-gpu0", 1)):
        j = load(os.path.join(d, f"{name}.json"))
        r = j.get("report") or {}
        n, wall, best = len(r.get("outcomes", [])), r.get("wall_s"), r.get("best") or {}
        per = wall / n if n and wall else None
        rows[name] = {"gpus": gpus, "candidates": n, "wall_s": wall, "per_candidate_s": per,
                      "best_config": best.get("config"), "best_ms": best.get("median_ms")}
        if not r:
            print(f"{name:16} no result ({j.get('error', 'see its .err file')})")
            continue
        print(f"{name:16} {gpus:>4} {n:5d} {wall:7.1f} {per or float('nan'):7.3f}  "
              f"{json.dumps(best.get('config'))} ({best.get('median_ms') or float('nan'):.4f})")
    one, one_cold, every = rows["tune-gpu0"], rows["tune-gpu0-cold"], rows["tune-all"]
    if one["best_config"] and every["best_config"]:
        same = every["best_config"] in (one["best_config"], one_cold["best_config"])
        noise = "" if one["best_config"] == one_cold["best_config"] else " (the two one-GPU runs differ too)"
        print(f"best config on {ngpu} GPUs {'matches' if same else 'differs from'} a one-GPU run's{noise}")
    if one["per_candidate_s"] and every["per_candidate_s"]:
        print(f"wall per candidate (warm JIT cache), 1 GPU / {ngpu} GPUs: "
              f"{one['per_candidate_s'] / every['per_candidate_s']:.2f}x")
    return rows


def layer_rows(d):
    rows = []
    print(f"{'layer':24} {'W':>2} {'err/fp32':>9} {'bound':>8} {'fwd ms':>8} {'comm ms':>8} {'comm %':>7} {'torch 1-GPU ms':>14}  ok")
    paths = glob.glob(os.path.join(d, "distributed-w*.json"))
    for p in sorted(paths, key=lambda p: int(p.rsplit("-w", 1)[1][:-5])):
        j = load(p)
        for r in j.get("layers", []):
            per_rank = r["per_rank"]
            # the slowest rank sets the layer's time
            fwd, comm, share = (max(x[k] for x in per_rank) for k in ("forward_ms", "comm_ms", "comm_share"))
            rows.append({"world": j["world_size"], "layer": r["layer"], "error_vs_fp32": r.get("error_vs_fp32"),
                         "bound": r.get("bound"), "ok": r.get("ok"), "forward_ms": fwd, "comm_ms": comm,
                         "comm_share": share, "torch_one_gpu_ms": r.get("torch_one_gpu_ms")})
            print(f"{r['layer']:24} {j['world_size']:>2} {r['error_vs_fp32']:9.2e} {r['bound']:8.1e} {fwd:8.3f} "
                  f"{comm:8.3f} {100 * share:6.1f}% {r['torch_one_gpu_ms']:14.3f}  {'ok' if r['ok'] else 'FAILED'}")
        for b in j.get("bad_input", []):
            print(f"  W={j['world_size']} ranks that disagree: {b['check']}: {'ok' if b['ok'] else 'FAILED'}")
    return rows


def main():
    d, ngpu = sys.argv[1], int(sys.argv[2])
    summary = {"tune": tune_rows(d, ngpu)}
    print()
    summary["distributed"] = layer_rows(d)
    with open(os.path.join(d, "multi-summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
