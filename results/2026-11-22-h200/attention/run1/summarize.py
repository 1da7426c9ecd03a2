#!/usr/bin/env python3
"""Table of fa3_wgmma TFLOPS per configuration set and shape, beside SDPA cuDNN and FA2."""
import json, sys
bench = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = {}
for l in open(sys.argv[2]):
    if l.strip():
        r = json.loads(l)
        peer[(r["dim"], r["batch"], r["seqlen"], r["causal"])] = r
sets = []
for r in bench:
    if r["set"] not in sets:
        sets.append(r["set"])
keys = sorted({(r["d"], r["b"], r["s"], r["causal"]) for r in bench} | set(peer), key=lambda k: (k[0], k[3], k[2]))
val = {(r["set"], r["d"], r["b"], r["s"], r["causal"]): r["tf"] for r in bench}
print("| d | shape | " + " | ".join(sets) + " | cuDNN | FA2 | best/cuDNN |")
print("|---" * (len(sets) + 5) + "|")
for k in keys:
    d, b, s, c = k
    row = [val.get((n,) + k) for n in sets]
    p = peer.get(k, {})
    cu = p.get("cudnn_tflops")
    best = max([x for x in row if x is not None], default=None)
    ratio = f"{best / cu:.3f}" if best and cu else ""
    cells = [f"{x:.1f}" if x is not None else "" for x in row]
    print(f"| {d} | B{b} S{s}{' causal' if c else ''} | " + " | ".join(cells) + f" | {cu or ''} | {p.get('flash_tflops', '')} | {ratio} |")
