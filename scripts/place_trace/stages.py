import re,sys
err,log=sys.argv[1],sys.argv[2]
F={};H={};G={}
for l in open(err):
    m=re.match(r'PT-F job=(\d+) sent=(\d+) accepted=(\d+)',l)
    if m: F[int(m[1])]=(int(m[2]),int(m[3]))
    m=re.match(r'PT-H job=(\d+) nodes=(\d+) \[(.*)\]',l)
    if m: H[int(m[1])]=(int(m[2]),[int(x) for x in m[3].split(',')])
sub=[]
for l in open(log):
    m=re.search(r'PT submit_recv (\d+)',l)
    if m: sub.append(int(m[1])); continue
    m=re.search(r'PT job=(\d+) (\w+) .*?(\d+)$',l)
    if m: G.setdefault(int(m[1]),{})[m[2]]=int(m[3])
print("job nodes | sent>recv recv>alloc alloc>queued | queued>H1stPrep H1st>lastPrep lastPrep>lastPrepd | Hprepd>Glast | Glast>Gstart | Gstart>H1stStart H1st>lastStart | total accept")
for j in sorted(F):
    if j not in H or j not in G: continue
    s,a=F[j]; n,h=H[j]; g=G[j]
    r=max([x for x in sub if x>=s and x<=g['alloc_done']] or [s])
    d=lambda x,y:(y-x)/1e6
    print(f"{j:3} {n:5} | {d(s,r):6.1f} {d(r,g['alloc_done']):6.1f} {d(g['alloc_done'],g['prepare_queued']):5.1f} | {d(g['prepare_queued'],h[0]):6.1f} {d(h[0],h[1]):6.1f} {d(h[1],h[2]):5.1f} | {d(h[2],g['last_prepared']):6.1f} | {d(g['last_prepared'],g['start_queued']):5.1f} | {d(g['start_queued'],h[3]):6.1f} {d(h[3],h[4]):6.1f} | {d(s,h[4]):6.1f} {d(s,a):6.1f}")
