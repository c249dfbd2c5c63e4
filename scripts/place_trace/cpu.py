# CPU ms per thread group between two monotonic instants
import sys,re,collections
samp,t0,t1=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
rows=[]
for l in open(samp):
    p=l.split(); t=int(p[0]); d={}
    for x in p[1:]:
        k,v=x.rsplit('=',1); name,comm,tid=k.split(':'); d[(name,comm,tid)]=int(v)
    rows.append((t,d))
a=max([r for r in rows if r[0]<=t0] or [rows[0]],key=lambda r:r[0])
b=min([r for r in rows if r[0]>=t1] or [rows[-1]],key=lambda r:r[0])
agg=collections.Counter()
for k,v in b[1].items():
    agg[(k[0],k[1])]+= (v-a[1].get(k,0))*10
print(f"window {(b[0]-a[0])/1e6:.0f} ms:", ', '.join(f"{n}/{c}={ms}" for (n,c),ms in sorted(agg.items(), key=lambda x:-x[1]) if ms))
