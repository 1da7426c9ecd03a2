# as run on 2026-11-22 (see results/compile-time.md): /tmp/kc-A is a fresh-cache `kiln check` of main (its meta.json files give each variant's options), /tmp/korig/kernels main's kernels/ (git archive 0d8354a), the "after" side this branch's kernels/.
"""Paired, interleaved cold compiles: for every variant (options from kiln's cache metadata), compile
before (original kernels, kiln's old options) then after (new kernels, + --minimal), one thread,
and record the compiling thread's CPU time and wall time. Headers resolve through -I."""
import json, glob, sys, os, time
sys.path.insert(0, "/tmp/ct"); import nv
metas = {}
for f in glob.glob('/tmp/kc-A/*/meta.json'):
    m = json.load(open(f)); metas[m['kernel']] = m
def src_of(stem, kd):
    return [p[len(kd)+1:] for p in glob.glob(f"{kd}/*/{stem}.cu")][0]
out = open(sys.argv[1], 'w')
for k in sorted(metas):
    m = metas[k]; stem = k.split('[')[0]
    opts = [o for o in m['options']] + ['--no-cache']
    rec = {'kernel': k}
    for tag, kd, extra in (('before', '/tmp/korig/kernels', []), ('after', '/work/wt-compile/kernels', ['--minimal'])):
        nv.KD = kd
        st, w, c, sz, ps, log = nv.compile(src_of(stem, kd), opts + extra)
        rec[tag] = {'status': st, 'wall_ms': w, 'cpu_ms': c, 'cubin': sz}
    out.write(json.dumps(rec) + '\n'); out.flush()
