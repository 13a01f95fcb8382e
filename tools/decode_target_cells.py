"""Decode target cells of issue #3: the Llama-2-7B / Llama-3-8B layer shapes of the `llama` suite at
m = 1, 8, 16 and every N:32 pattern, each unique (m, n, k, N) once; a cell meets the target when its
CUDA-graph speedup over cuBLAS fp32 is >= 0.7 * M / N. Prints the count, the misses and the geomean
per m and pattern (16, 12, 8, 4 of 32). Usage: python tools/decode_target_cells.py bench_spmm.csv
"""
import csv,sys,math,collections
rows=list(csv.DictReader(open(sys.argv[1])))
cell={}
for r in rows:
    if r['impl']!='nmspmm' or r['suite']!='llama' or r['model'] not in ('llama-2-7b','llama-3-8b'): continue
    m=int(r['m'])
    if m not in (1,8,16): continue
    cell[(m,int(r['n']),int(r['k']),int(r['N']))]=float(r['speedup_graph_vs_fp32'])
ok=0; miss=[]
g=collections.defaultdict(list)
for key,s in sorted(cell.items()):
    N=key[-1]; m=key[0]; t=0.7*32/N; g[(m,N)].append(s)
    if s>=t: ok+=1
    else: miss.append(f"{key} {s:.2f}<{t:.2f}")
print(len(cell),'cells',ok,'ok'); print('\n'.join(miss))
for m in (1,8,16): print(m,' '.join('%.2f'%math.exp(sum(map(math.log,g[(m,N)]))/len(g[(m,N)])) for N in (16,12,8,4)))
