"""Session 22: the staged decode rule's cluster-16 threshold, fitted on s22_decode_sweep_narrow.csv
(python3 s22_fit_staged_cluster16.py [csv])."""
import csv, math, collections, sys
T=collections.defaultdict(dict)
for f in (sys.argv[1] if len(sys.argv) > 1 else 's22_decode_sweep_narrow.csv',):
    for r in csv.DictReader(open(f)):
        key=(int(r['n']),int(r['k']),int(r['N']),int(r['m']))
        if r['name'].startswith('decode_s'): T[key][(int(r['kernel']),int(r['split']))]=float(r['us'])
def base(n,k,M=32,sms=132):
    windows=k//M; max_split=min(windows,8); cap=sms*17//10; best=(0,None)
    for cw in (4,2,1):
        tiles=-(-n//(128*cw)); split=max_split
        while split>1 and tiles*split>cap: split-=1
        if tiles*split<=cap and tiles*split>best[0]: best=(tiles*split,(15+{1:0,2:1,4:2}[cw],split))
    return best[1]
def r16(T_):
    def f(n,k,N,m):
        p=base(n,k); w=k//32
        if p[0]==15 and -(-n//128)*16<=132 and w//16*N>=T_: return (15,16)
        return p
    return f
def rlargest(T_, lo=9):
    def f(n,k,N,m):
        p=base(n,k); w=k//32
        if p[0]!=15 or -(-n//128)*16>132: return p
        for s in range(16,lo-1,-1):
            if w//s*N>=T_: return (15,s)
        return p
    return f
def ev(f,label):
    lg=collections.defaultdict(list); worst=(0,)
    for key,t in T.items():
        p=f(*key); best=min(t.values()); r=t[p]/best
        lg[key[3]].append(math.log(r)); worst=max(worst,(r,key,p))
    allv=[x for v in lg.values() for x in v]
    print(f"{label:28s}", ' '.join(f"m={m}: {math.exp(sum(v)/len(v)):.3f}" for m,v in sorted(lg.items())), 'all %.3f'%math.exp(sum(allv)/len(allv)), 'worst %.3f'%worst[0], worst[1:])
ev(lambda n,k,N,m: base(n,k),'current')
for t in (24,32,40,48,56,64):
    ev(r16(t),f'16 if rows>={t}')
for t in (32,48,64):
    ev(rlargest(t),f'largest s>=9 rows>={t}')
