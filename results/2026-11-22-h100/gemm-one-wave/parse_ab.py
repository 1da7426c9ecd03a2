import sys, json, collections, statistics as st, re
txt = open(sys.argv[1]).read()
t = collections.defaultdict(list)
for rec in re.split(r'\n(?=\{"shape")', txt):
    try: d = json.loads(rec)
    except Exception as e: print("bad record:", rec[:80].replace("\n"," ")); continue
    r = d["r"]; r = r[0] if isinstance(r, list) else r
    k = r["versions"][0][0]["median_ms"]; c = r["vendor"]["median_ms"]
    t[(d["shape"], d["v"])].append((k * 1e3, c * 1e3))
for (s, v), x in sorted(t.items()):
    print(f"{s:16s} {v:6s} kiln us {st.median(a for a,_ in x):7.2f} cublas us {st.median(b for _,b in x):7.2f} ratio {st.median(b/a for a,b in x):.3f}  {[round(b/a,3) for a,b in x]}")
