import json, glob, math, sys
from math import comb
D=sys.argv[1]
print("| landscape | configs | timed | rejected | best config | best TFLOPS | within 2% | default's ratio | uniform draws of 15%: P(hit) |")
print("|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(D+"/landscape-*.json")):
    l=json.load(open(f)); o=l["outcomes"]
    def t(x):
        return x["median_ms"] if x["status"] in ("ok","slow") and x["median_ms"] else math.inf
    ok=[x for x in o if x["status"]=="ok"]
    best=min(ok,key=t); bt=t(best)
    N=len(o); n=int(math.floor(N*0.15)); k=sum(1 for x in o if t(x)<=bt*1.02)
    p=1-comb(N-k,n)/comb(N,n)
    p_ = l["problem"]; causal=p_["causal"]; d=p_["head_dim"]
    # the default config as the space writes it
    dflt={128:dict(BN=128,CWG=2,STAGES=3,OVERLAP=1,PINGPONG=0,EMU=0),64:dict(BN=128,CWG=3,STAGES=4,OVERLAP=1,PINGPONG=0,EMU=0),256:dict(BN=80,CWG=2,STAGES=2,OVERLAP=1,PINGPONG=0,EMU=0)}[d]
    dflt["PERSIST"]=0 if causal else 2
    cfg=lambda x: {k:v for k,v in x["config"]}
    dd=[x for x in o if cfg(x)==dflt]
    ratio = bt/t(dd[0]) if dd else float('nan')
    rej=sum(1 for x in o if x["status"]=="rejected")
    lab=",".join(f"{k}={v}" for k,v in best["config"])
    name=f.split("landscape-")[1][:-5]
    print(f"| {name} | {N} | {sum(1 for x in o if x['status'] in ('ok','slow'))} | {rej} | {lab} | {best['tflops']:.1f} | {k} | {ratio:.3f} | {p:.2f} |")
