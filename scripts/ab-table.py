#!/usr/bin/env python3
"""The table of an A/B run: a JSONL of `{"cfg": X, "shape": S}` tags, each followed by the
`kiln --json bench` output of one process. Prints per shape the median kiln time of each cfg,
the median cuBLAS time over all processes, and the paired ratio of each cfg: the median over its
processes of cuBLAS / kiln measured in the same process (steadier where the clock moves)."""
import collections
import json
import statistics as st
import sys

txt = open(sys.argv[1]).read()
dec = json.JSONDecoder()
i, tag, labels = 0, None, []
kiln, vendor, paired = (collections.defaultdict(list) for _ in range(3))
while i < len(txt):
    while i < len(txt) and txt[i].isspace():
        i += 1
    if i >= len(txt):
        break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'cfg' in o:
        tag = (o['shape'], o['cfg'])
        if o['cfg'] not in labels:
            labels.append(o['cfg'])
        continue
    for r in (o if isinstance(o, list) else [o]):
        k = r['versions'][0][0]['median_ms'] * 1e3
        v = r['vendor']['median_ms'] * 1e3
        kiln[tag].append(k)
        vendor[tag[0]].append(v)
        paired[tag].append(v / k)
head = f"{'shape':26s} " + " ".join(f"{l:>9s}" for l in labels) + f" {'cublas':>9s} "
print(head + " ".join(f"{'p ' + l:>9s}" for l in labels))
for s in dict.fromkeys(t[0] for t in kiln):
    us = [st.median(kiln[(s, l)]) if kiln[(s, l)] else float('nan') for l in labels]
    ps = [st.median(paired[(s, l)]) if paired[(s, l)] else float('nan') for l in labels]
    print(f"{s:26s} " + " ".join(f"{u:9.2f}" for u in us) + f" {st.median(vendor[s]):9.2f} "
          + " ".join(f"{p:9.3f}" for p in ps))
