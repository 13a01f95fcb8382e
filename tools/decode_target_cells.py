"""Decode target cells of issue #3: the Llama-2-7B / Llama-3-8B layer shapes of the `llama` suite at
m = 1, 8, 16 and every N:32 pattern, each unique (m, n, k, N) once. A cell meets the target when its
CUDA-graph speedup over cuBLAS fp32 is >= 0.7 * M / N. Prints the count, the misses and the geomean
per m and pattern (16, 12, 8, 4 of 32).

    python tools/decode_target_cells.py benchmarks/results/h100/bench_spmm.csv
"""
import csv
import math
import sys
from collections import defaultdict

MODELS = ("llama-2-7b", "llama-3-8b")
MS = (1, 8, 16)
NS = (16, 12, 8, 4)  # N of N:32


def main(path: str) -> None:
    cells = {}  # (m, n, k, N) -> CUDA-graph speedup over cuBLAS fp32
    for r in csv.DictReader(open(path)):
        if r["impl"] == "nmspmm" and r["suite"] == "llama" and r["model"] in MODELS and int(r["m"]) in MS:
            cells[(int(r["m"]), int(r["n"]), int(r["k"]), int(r["N"]))] = float(r["speedup_graph_vs_fp32"])
    by_m_n = defaultdict(list)
    misses = []
    for (m, n, k, N), speedup in sorted(cells.items()):
        by_m_n[(m, N)].append(speedup)
        target = 0.7 * 32 / N
        if speedup < target:
            misses.append(f"  {m}x{n}x{k} {N}:32  {speedup:.2f} < {target:.2f}")
    print(f"{len(cells) - len(misses)} of {len(cells)} cells reach 0.7*M/N")
    print("\n".join(misses))
    print("geomean    " + "  ".join(f"{N:>2}:32" for N in NS))
    for m in MS:
        geo = [math.exp(sum(map(math.log, by_m_n[(m, N)])) / len(by_m_n[(m, N)])) for N in NS]
        print(f"m = {m:<6} " + "  ".join(f"{g:5.2f}" for g in geo))


if __name__ == "__main__":
    main(sys.argv[1])
