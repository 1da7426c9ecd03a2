#!/usr/bin/env python3
"""phase.py META.json [extra opts...]: recompile a cached variant with --time and print phases."""
import json, sys, os, glob, subprocess, tempfile
sys.path.insert(0, "/tmp/ct"); import nv
m = json.load(open(sys.argv[1])); stem = m['kernel'].split('[')[0]
KD = os.environ.get("KD", "/work/wt-compile/kernels")
src = [p[len(KD)+1:] for p in glob.glob(f"{KD}/*/{stem}.cu")][0]
extra = sys.argv[2:]
opts = [o for o in m['options'] if o != '--ptxas-options=--verbose'] + ['--no-cache']
drop = [e[1:] for e in extra if e.startswith('!')]
opts = [o for o in opts if o not in drop] + [e for e in extra if not e.startswith('!')]
tf = tempfile.mktemp(suffix=".csv")
st, w, c, sz, ps, log = nv.compile(src, opts + [f"--time={tf}"], os.environ.get("CUBIN"))
ph = {}
if os.path.exists(tf):
    for line in open(tf).read().splitlines()[1:]:
        f = [x.strip() for x in line.split(',')]; ph[f[1]] = float(f[2])
print(f"{m['kernel'][:70]:70s} st {st} wall {w:6.0f} cpu {c:6.0f} fe {ph.get('CUDA C++ Frontend',0):4.0f} nvvm {ph.get('NVVM Optimizer',0):6.0f} ptxas {ph.get('PTX Translation',0):6.0f} ptx {ps//1024} KB cubin {sz//1024} KB")
if st: print(log[:3000])
