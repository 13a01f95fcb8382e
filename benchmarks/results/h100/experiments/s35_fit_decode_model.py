# Session 35: leave-one-shape-out fits of a staged-decode plan cost model on the s35 plan sweep, with the
# resident clusters at two blocks per SM (s35/cluster_occupancy_2per_sm.txt). Run from the repo root:
#   python3 benchmarks/results/h100/experiments/s35_fit_decode_model.py
# v1 (linear in time): 1.042x the best plan on geomean, v2 (log-linear): 1.019x; the rule: 1.016x.
import csv,math,collections,itertools
import numpy as np
rows=[]
for m in (4,8,16): rows+=list(csv.DictReader(open(f'benchmarks/results/h100/experiments/s35/sweep_m{m}.csv')))
RES={1:264,2:132,3:79,4:62,5:47,6:39,7:32,8:30,9:23,10:21,11:16,12:16,13:14,14:14,15:14,16:14}
T={}; cells=set()
for r in rows:
    if int(r['kernel'])<15: continue
    key=(int(r['m']),int(r['n']),int(r['k']),int(r['N']))
    T[key+(int(r['kernel']),int(r['split']))]=float(r['us']); cells.add(key)
def feats(m,n,k,N,kern,S):
    cw={15:1,16:2,17:4}[kern]; tiles=math.ceil(n/(128*cw)); waves=math.ceil(tiles/RES[S])
    R=k/32*N/S; KW=8//cw; D=4 if m>8 else 8
    rounds=math.ceil(R/(KW*D)); chunks=math.ceil(k/32/S/16)
    per_warp_rows=R/KW
    bytes_=k/32*N*n*4
    blocks=tiles*S
    mr=4 if m<=4 else 8 if m<=8 else 16
    return dict(waves=waves, rounds=rounds*waves, rows=per_warp_rows*waves*mr, chunks=chunks*waves, S=S*waves, bw=bytes_/min(blocks,264), one=1.0)
names=['one','waves','rounds','rows','chunks','S','bw']
def fit(train):
    X=[];y=[]
    for key in train:
        for kk,v in T.items():
            if kk[:4]==key:
                f=feats(*key,*kk[4:]); X.append([f[n] for n in names]); y.append(math.log(v))
    # fit in log space? use linear in time with relative weighting
    X=np.array(X); y=np.array(y)
    # time-space linear fit weighted by 1/t
    t=np.exp(y); W=1/t
    coef,*_=np.linalg.lstsq(X*W[:,None], t*W, rcond=None)
    return coef
def pick(coef,key):
    best=None
    for kk in T:
        if kk[:4]==key:
            f=feats(*key,*kk[4:]); c=sum(coef[i]*f[n] for i,n in enumerate(names))
            if best is None or c<best[0]: best=(c,kk[4:])
    return best[1]
shapes=sorted(set((c[1],c[2]) for c in cells))
res=collections.defaultdict(list)
for hold in shapes:
    train=[c for c in cells if (c[1],c[2])!=hold]; test=[c for c in cells if (c[1],c[2])==hold]
    coef=fit(train)
    for key in test:
        best=min(v for kk,v in T.items() if kk[:4]==key)
        p=pick(coef,key); res[(key[0],key[3])].append(math.log(T[key+p]/best))
allv=[x for v in res.values() for x in v]
print('leave-one-shape-out geomean vs best %.4f worst %.3f'%(math.exp(sum(allv)/len(allv)), math.exp(max(allv))))
for k,v in sorted(res.items()): print(k, round(math.exp(sum(v)/len(v)),3))
print('coef all', fit(list(cells)))

# variant 2: features per wave + cw one-hot, fit in log space with log features
def feats2(m,n,k,N,kern,S):
    cw={15:1,16:2,17:4}[kern]; tiles=math.ceil(n/(128*cw)); waves=math.ceil(tiles/RES[S])
    R=k/32*N/S; KW=8//cw; D=4 if m>8 else 8
    rounds=math.ceil(R/(KW*D)); blocks=tiles*S
    mr=4 if m<=4 else 8 if m<=8 else 16
    bytes_=k/32*N*n*4
    return [1.0, math.log(waves), math.log(rounds), math.log(R/KW*mr), math.log(S), math.log(bytes_/min(blocks,264)+1), cw==2, cw==4, math.log(min(blocks,264))]
def fit2(train):
    X=[];y=[]
    for key in train:
        for kk,v in T.items():
            if kk[:4]==key: X.append(feats2(*key,*kk[4:])); y.append(math.log(v))
    coef,*_=np.linalg.lstsq(np.array(X,float), np.array(y), rcond=None); return coef
def pick2(coef,key):
    return min((float(np.dot(coef,feats2(*key,*kk[4:]))),kk[4:]) for kk in T if kk[:4]==key)[1]
res=collections.defaultdict(list)
for hold in shapes:
    train=[c for c in cells if (c[1],c[2])!=hold]; test=[c for c in cells if (c[1],c[2])==hold]
    coef=fit2(train)
    for key in test:
        best=min(v for kk,v in T.items() if kk[:4]==key)
        p=pick2(coef,key); res[(key[0],key[3])].append(math.log(T[key+p]/best))
allv=[x for v in res.values() for x in v]
print('v2 leave-one-shape-out geomean vs best %.4f worst %.3f'%(math.exp(sum(allv)/len(allv)), math.exp(max(allv))))
for k,v in sorted(res.items()): print(k, round(math.exp(sum(v)/len(v)),3))
