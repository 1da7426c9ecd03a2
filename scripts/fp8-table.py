#!/usr/bin/env python3
"""The tables of `scripts/gpu.sh fp8ml` and `fp8wide`: for each `fp8 bench --json` output, per
shape cuBLASLt's median and each kiln launch's (us, TFLOPS, x cuBLASLt), labelled in --tile
order; then each label's geomean over the shapes and the largest difference from cuBLASLt's C
per config.

    fp8-table.py DIR TITLE FILE.json "LABEL LABEL ..." [TITLE FILE.json "LABELS" ...]
"""
import json
import math
import os
import sys


def rows(d, name):
    try:
        return json.load(open(os.path.join(d, name))).get("timings", [])
    except (OSError, ValueError, AttributeError):  # a step that failed or was cut off
        return []


def geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def table(d, name, labels):
    by = {}
    for r in rows(d, name):
        by.setdefault((r["m"], r["n"], r["k"]), []).append(r)
    ratio = {}
    for (m, n, k), rs in by.items():
        kiln = [r for r in rs if r["version"] != "cublaslt"]
        lt = [r for r in rs if r["version"] == "cublaslt"]
        lt_us = lt[0]["median_ms"] * 1e3 if lt else float("nan")
        cells = []
        for label, r in zip(labels, kiln):
            us = r["median_ms"] * 1e3
            ratio.setdefault(label, []).append(lt_us / us)
            cells.append(f"{label}={r['config']} {us:.1f} us {r['tflops']:.0f} TF {lt_us / us:.3f}x")
        print(f"{m}x{n}x{k}: cuBLASLt {lt_us:.1f} us | " + " | ".join(cells))
    for label, v in ratio.items():
        print(f"  {label}: geomean {geomean(v):.3f}x cuBLASLt over {len(v)} shapes, min {min(v):.3f}x")
    worst = {}
    for r in rows(d, name):
        dv = r.get("rel_diff_vs_cublaslt")
        if r["version"] != "cublaslt" and dv is not None:
            c = r["config"].split("/")[0]
            worst[c] = max(worst.get(c, 0.0), dv)
    print("largest difference from cuBLASLt per config: "
          + ", ".join(f"{c} {v:.1e}" for c, v in sorted(worst.items())))


def main():
    d, rest = sys.argv[1], sys.argv[2:]
    for i in range(0, len(rest) - 2, 3):
        print(f"== {rest[i]} ==")
        table(d, rest[i + 1], rest[i + 2].split())


main()
