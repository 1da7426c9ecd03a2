from collections import OrderedDict
M=(1<<64)-1
def uneven(tokens,experts,seed):
    x=(seed*0x9E3779B97F4A7C15 & M)|1
    w=[]
    for _ in range(experts):
        x^=(x<<13)&M; x^=x>>7; x^=(x<<17)&M
        w.append(0.5+(x%1000)/1000)
    s=sum(w); c=[int(tokens*wi/s) for wi in w]
    short=tokens-sum(c)
    for i in range(short): c[i]+=1
    return c
cnt=uneven(7516,8,1); print(cnt, [ (r+127)//128 for r in cnt], [r%128 for r in cnt])
BM=128
mt=[(r+BM-1)//BM for r in cnt]; prefix=[0]
for m in mt: prefix.append(prefix[-1]+m)
tiles_m=prefix[-1]
def find(g):
    for e in range(len(mt)):
        if prefix[e]<=g<prefix[e+1]: return e
def fixed(t,tn,G):
    per=G*tn; first=(t//per)*G; rows=min(tiles_m-first,G); r=t-(first//G)*per
    return first+r%rows, r//rows
def byexp(t,tn,cap):
    e=find(t//tn); local=t-prefix[e]*tn; me=mt[e]
    groups=(me+cap-1)//cap; small=me//groups; extra=me%groups; big=(small+1)*tn
    if local<extra*big: first=(local//big)*(small+1); r=local%big; rows=small+1
    else:
        l=local-extra*big; per=small*tn; first=extra*(small+1)+(l//per)*small; r=l%per; rows=small
    return prefix[e]+first+r%rows, r//rows
def sim(order, tn, xmb, wmb, L2=50, sms=132):
    cache=OrderedDict(); size=0; miss=0
    T=tiles_m*tn
    seen=set()
    for w0 in range(0,T,sms):
        for t in range(w0,min(T,w0+sms)):
            g,n=order(t)
            assert (g,n) not in seen; seen.add((g,n))
            e=find(g)
            for key,sz in ((('x',g),xmb),(('w',e,n),wmb)):
                if key in cache: cache.move_to_end(key)
                else:
                    miss+=sz; cache[key]=sz; size+=sz
                    while size>L2:
                        k,v=cache.popitem(last=False); size-=v
    assert len(seen)==T
    return miss
tn=24
for G in (4,8,12,16):
    print('fixed',G, sim(lambda t:fixed(t,tn,G),tn,1,2))
for cap in (8,16):
    print('byexp',cap, sim(lambda t:byexp(t,tn,cap),tn,1,2))
# plain grouped gemm prefill N=3072 bn=256 -> tn=12, W tile 256x4096x2=2MB
tn=12
print('plain fixed8', sim(lambda t:fixed(t,tn,8),tn,1,2), 'byexp16', sim(lambda t:byexp(t,tn,16),tn,1,2))
