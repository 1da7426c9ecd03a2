#!/usr/bin/env python3
"""Issue 3's target table from `kiln --json bench --set targets [--passes N]` output: per shape
and layout the ratio to cuBLAS (with several passes, its median over them), then per layout and
overall the geometric mean, the lowest and how many are under 0.95. With several passes the
lowest single pass is named too, with its place in that pass's order."""
import collections
import json
import math
import statistics
import sys

rows = json.load(open(sys.argv[1]))
ratios = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for r in rows:
    p = r['problem']
    shape = f"{p['m']}x{p['n']}x{p['k']}"
    if shape not in order:
        order.append(shape)
    if r['versions'] and r['versions'][0][1] is not None:
        ratios[p['layout']][shape].append((r['versions'][0][1], r.get('pass', 0), r.get('position', 0)))
layouts = [l for l in ('RC', 'CR', 'RR', 'CC') if l in ratios]
passes = max((x[1] for l in ratios.values() for v in l.values() for x in v), default=0) + 1
med = {l: {s: statistics.median(x[0] for x in v) for s, v in ratios[l].items()} for l in layouts}
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in layouts)
      + (f"   (median of {passes} passes)" if passes > 1 else ""))
for s in order:
    print(f"{s:18s} " + " ".join(f"{med[l].get(s, float('nan')):6.3f}" for l in layouts))


def line(name, g):
    return (f"{name}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, "
            f"under 0.95: {sum(1 for x in g if x < 0.95)}")


for l in layouts:
    print(line(l, list(med[l].values())))
print(line('all', [x for l in layouts for x in med[l].values()]))
if passes > 1:
    low = min((x[0], l, s, x[1], x[2]) for l in layouts for s, v in ratios[l].items() for x in v)
    n = len(order) * len(layouts)
    print(f"lowest single pass: {low[0]:.3f} ({low[2]} {low[1]}, pass {low[3] + 1}, place {low[4] + 1} of {n})")
    for p in range(passes):
        g = [x[0] for l in layouts for v in ratios[l].values() for x in v if x[1] == p]
        print(line(f"pass {p + 1} alone", g))
