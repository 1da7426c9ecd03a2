import json,statistics as st,collections,sys
rows=[json.loads(l) for l in open('paired.jsonl')]
by=collections.OrderedDict()
for r in rows: by.setdefault(r['kernel'].split('[')[0],[]).append(r)
order=['simt_naive','simt_tiled','mma_sync','wgmma_cp_async','wgmma_tma','wgmma_tma_ws','softmax','fa2_mma_sync','fa3_wgmma','tile_prefix','grouped_gemm','grouped_swapab','swiglu_dual']
print('| version | variants | before: median CPU ms | max | after: median CPU ms | max | median after/before (per variant) |')
print('|---|---:|---:|---:|---:|---:|---:|')
for v in order:
    if v not in by: continue
    a=[r['before']['cpu_ms'] for r in by[v]]; b=[r['after']['cpu_ms'] for r in by[v]]
    rat=[r['after']['cpu_ms']/r['before']['cpu_ms'] for r in by[v]]
    print(f"| {v} | {len(a)} | {st.median(a):.0f} | {max(a):.0f} | {st.median(b):.0f} | {max(b):.0f} | {st.median(rat):.3f} |")
a=[r['before']['cpu_ms'] for r in rows]; b=[r['after']['cpu_ms'] for r in rows]
aw=[r['before']['wall_ms'] for r in rows]; bw=[r['after']['wall_ms'] for r in rows]
rat=[r['after']['cpu_ms']/r['before']['cpu_ms'] for r in rows]
print(f"| **all** | {len(a)} | **{st.median(a):.0f}** | {max(a):.0f} | **{st.median(b):.0f}** | {max(b):.0f} | {st.median(rat):.3f} |")
print(f"sum CPU before {sum(a)/1e3:.0f} s after {sum(b)/1e3:.0f} s; wall medians {st.median(aw):.0f} / {st.median(bw):.0f}; fails {sum(1 for r in rows if r['before']['status'] or r['after']['status'])}")
