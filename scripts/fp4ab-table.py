#!/usr/bin/env python3
"""The table of `scripts/gpu.sh fp4ab`: each verify step's checks (failures named), then each
bench step's kernels (median us, ratio to kiln's bf16 kernel in the same process, fraction of the
copy rate), then per A/B pair the median of each side over its rounds and their ratio."""
import collections
import glob
import json
import os
import statistics as st
import sys

d = sys.argv[1]


def load(p):
    try:
        return json.load(open(p))
    except Exception as e:  # a step that failed or was cut off leaves no JSON
        return {"error": f"no result ({e})"}


for p in sorted(glob.glob(os.path.join(d, "verify-*.json"))):
    r, name = load(p), os.path.basename(p)[:-5]
    if not isinstance(r, list):
        print(f"{name:24} {r.get('error')}")
        continue
    bad = [x for x in r if not x["passed"]]
    skipped = sum(1 for x in r if x.get("skipped"))
    errs = [x["rel_error"] for x in r if isinstance(x.get("rel_error"), float) and x["rel_error"] == x["rel_error"]]
    print(f"{name:24} {len(r)} checks, {len(bad)} failed, {skipped} skipped, worst {max(errs, default=float('nan')):.2e}")
    for x in bad[:5]:
        print(f"   FAIL {x['problem']}: {x['message']}")

print()
print(f"{'bench':22} {'kernel':34} {'us':>9} {'x bf16':>7} {'of copy':>8}  tile")
fourbit = collections.defaultdict(list)  # (shape, side) -> 4-bit medians
for p in sorted(glob.glob(os.path.join(d, "*.json"))):
    name = os.path.basename(p)[:-5]
    if name.startswith("verify"):
        continue
    r = load(p)
    rows = r.get("rows") if isinstance(r, dict) else None
    if not rows:
        print(f"{name:22} missing: {r.get('error', 'no rows') if isinstance(r, dict) else 'no rows'}")
        continue
    for x in rows:
        print(f"{name:22} {x['kernel'][:34]:34} {x['median_us']:9.1f} {x['speedup']:7.2f} "
              f"{100 * x['copy_fraction']:7.1f}%  {x['tile'][:60]}")
    parts = name.split("-")  # shape-side[-round]
    if len(parts) >= 2 and len(rows) >= 2:
        fourbit[(parts[0], parts[1])].append(rows[1]["median_us"])

print()
shapes = sorted({s for s, _ in fourbit})
for s in shapes:
    sides = sorted(side for sh, side in fourbit if sh == s)
    if len(sides) != 2:
        continue
    a, b = (st.median(fourbit[(s, side)]) for side in sides)
    print(f"{s:12} {sides[0]} {a:9.1f} us   {sides[1]} {b:9.1f} us   {sides[1]} / {sides[0]} = {b / a:.3f}")
