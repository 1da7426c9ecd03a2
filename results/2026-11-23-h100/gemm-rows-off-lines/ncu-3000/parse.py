#!/usr/bin/env python3
# parse.py NCU_CSV: one line per kernel name (median by duration) of each "== tag" section.
import csv, sys, io, re
txt = open(sys.argv[1]).read()
parts = re.split(r"^== (\S+)$", txt, flags=re.M)
for shape, body in zip(parts[1::2], parts[2::2]):
    lines = [l for l in body.splitlines() if l.startswith('"')]
    if not lines: print(shape, "no data"); continue
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    h = rows[0]; data = [r for r in rows[2:] if len(r) == len(h)]
    ix = {k: i for i, k in enumerate(h)}
    def g(r, k): return r[ix[k]] if k in ix else "?"
    def f(r, k):
        try: return float(g(r, k).replace(",", ""))
        except ValueError: return 0.0
    print(f"== {shape}")
    seen = {}
    for r in data:
        name = g(r, "Kernel Name")[:64]
        if "flush" in name: continue
        seen.setdefault(name, []).append(r)
    for name, v in seen.items():
        v.sort(key=lambda r: f(r, "gpu__time_duration.sum")); r = v[len(v)//2]
        req, sec = f(r, "lts__t_requests_srcunit_tex.sum"), f(r, "lts__t_sectors_srcunit_tex.sum")
        print(f"{name:64s} n={len(v):2d} {f(r,'gpu__time_duration.sum')/1000:7.1f} us tc {f(r,'sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}% "
              f"req {req/1e6:5.2f}M sec {sec/1e6:6.2f}M s/r {sec/max(req,1):4.2f} dram {f(r,'dram__bytes_read.sum')/1e6:6.1f}MB "
              f"{f(r,'sm__cycles_elapsed.avg.per_second')/1e9:4.2f}GHz grid {g(r,'launch__grid_size')} cl {g(r,'launch__cluster_dim_x')}x{g(r,'launch__cluster_dim_y')} blk {g(r,'launch__block_size')}")
