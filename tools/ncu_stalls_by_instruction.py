"""Top warp-stall instructions of one kernel from an ncu source-page CSV, for the GPU machine.

    ncu --section WarpStateStats --section SourceCounters -o rep python3 ...  # one kernel
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python tools/ncu_stalls_by_instruction.py src.csv [TOP]

Prints the total sampled stalls and the TOP (default 25) SASS instructions with the most samples,
in program order: index, samples, executions, the instruction and its stall reasons.
"""
import csv
import sys


def main(path, top=25):
    rows = list(csv.reader(open(path)))
    hdr, data = rows[1], rows[2:]
    i_src = hdr.index("Source")
    i_smp = hdr.index("Warp Stall Sampling (All Samples)")
    i_exe = hdr.index("Instructions Executed")
    reasons = [(h[len("stall_"):], hdr.index(h)) for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples = [int(r[i_smp] or 0) for r in data]
    print("total samples", sum(samples), "instructions", len(data))
    for i in sorted(sorted(range(len(data)), key=lambda j: -samples[j])[:top]):
        r = data[i]
        why = ", ".join(f"{name}={r[j]}" for name, j in reasons if r[j] not in ("0", ""))
        print(f"{i:5d} {samples[i]:4d} exec={r[i_exe]:>7s} {r[i_src].strip()[:60]:60s} {why}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
