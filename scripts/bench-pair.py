#!/usr/bin/env python3
"""Compares two `kiln ... bench --json` outputs of the same command (two binaries, or before and
after a change): the rows each timed, named by what ran and on which problem, the keys of every
row (the JSON its readers take), and the medians side by side.

    python3 scripts/bench-pair.py BEFORE.json AFTER.json

Timings are not compared (two runs differ by their noise); the rows and their keys must be the
same. Exits 1 if they differ."""
import json
import sys

NAMES = ("version", "kernel", "piece", "problem")
MEDIANS = ("median_ms", "median_us")


def rows(path):
    with open(path) as f:
        v = json.load(f)
    if isinstance(v, dict):
        v = v.get("timings", v.get("rows", []))
    return v


def name(r):
    return " ".join(str(r[k]) for k in NAMES if k in r)


def median(r):
    for k in MEDIANS:
        if k in r:
            return f"{r[k]:.4g} {k.split('_')[1]}"
    return "-"


a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = len(a) == len(b)
print(f"before: {len(a)} rows, after: {len(b)} rows")
for x, y in zip(a, b):
    keys_same = list(x) == list(y)
    names_same = name(x) == name(y)
    same = same and keys_same and names_same
    note = "" if keys_same and names_same else "  DIFFERENT " + (
        f"keys {list(x)} -> {list(y)}" if not keys_same else f"row {name(y)}")
    print(f"{name(x)[:70]:70} {median(x):>14} {median(y):>14}{note}")
print("same rows and keys" if same else "DIFFERENT")
sys.exit(0 if same else 1)
