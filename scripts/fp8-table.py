#!/usr/bin/env python3
"""The tables of `scripts/gpu.sh fp8ml` and `fp8wide`: for each `fp8 bench --json` output, per
shape cuBLASLt's median and each kiln launch's (us, TFLOPS, x cuBLASLt; at M <= 256 with block
scales also the bytes moved as % of the 4.2 TB/s copy), labelled in --tile order; then each
label's geomean over the shapes and the largest difference from cuBLASLt's C per config.

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


# The H200's measured copy bandwidth (issue 45's small-M target: the problem's bytes at >= 50 % of it).
COPY_TBPS = 4.2


def block_bytes(m, n, k, out_bytes=2):
    """A, B, their 1x128 and 128x128 fp32 scales and C (16-bit): what a block-scaled GEMM moves."""
    kb = (k + 127) // 128
    return m * k + n * k + 4 * (m * kb + (n + 127) // 128 * kb) + out_bytes * m * n


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
            cell = f"{label}={r['config']} {us:.1f} us {r['tflops']:.0f} TF {lt_us / us:.3f}x"
            if m <= 256 and r.get("scale") == "block":  # the small M: the bytes' rate against the copy's
                cell += f" {100 * block_bytes(m, n, k) / (us * 1e-6) / (COPY_TBPS * 1e12):.0f}% copy"
            cells.append(cell)
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
    # `fp8 bench --chain`: outputs left NaN (poisoned C unwritten, or a read across a wait)
    nan = [f"{r['problem']} {r['config']}: {r['nan_outputs']}" for r in rows(d, name) if r.get("nan_outputs")]
    if nan:
        print("outputs with NaN: " + "; ".join(nan))


def main():
    d, rest = sys.argv[1], sys.argv[2:]
    for i in range(0, len(rest) - 2, 3):
        print(f"== {rest[i]} ==")
        table(d, rest[i + 1], rest[i + 2].split())


main()
