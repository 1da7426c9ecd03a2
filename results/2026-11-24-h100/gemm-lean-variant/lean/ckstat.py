import json, re, statistics as st, sys, collections
rows = json.load(open(sys.argv[1]))
g = collections.defaultdict(list); bad = []
for r in rows:
    v = r['variant']
    res = r.get("resources", r)
    if res['spill_loads'] or res['spill_stores'] or res['stack_frame']: bad.append(v)
    if r.get('cached'): continue
    if 'pingpong' in v: k = 'pingpong'
    elif 'KILN_SPLITK=0' in v and 'KILN_BM=64' in v: k = 'bm64 (no split code)'
    elif 'KILN_SPLITK=0' in v: k = 'lean (SPLITK=0)'
    elif 'KILN_SPLITK=1' in v: k = 'split (SPLITK=1)'
    else: k = 'other'
    epi = re.search(r'KILN_EPI=(\d)', v)
    g[k].append(r['compile_cpu_ms']); g['all'].append(r['compile_cpu_ms'])
    if epi and k.startswith(('lean','split')): g[f"{k[:5]} EPI={epi.group(1)}"].append(r['compile_cpu_ms'])
for k, v in sorted(g.items()):
    print(f"{k:24s} n={len(v):4d} median {st.median(v):6.0f} ms CPU  p25 {st.quantiles(v, n=4)[0]:6.0f}  p75 {st.quantiles(v, n=4)[2]:6.0f}")
print("with spills/stack:", len(bad), bad[:3])
