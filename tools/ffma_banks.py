"""How often a kernel's FFMAs read two operands from one register bank: a static check of ptxas's
register allocation of the FFMA blocks (CPU only; nvcc and cuobjdump, CUOBJDUMP= if not on PATH).

    python tools/ffma_banks.py                                  # every kernel file (sm_90a)
    python tools/ffma_banks.py --files 'spmm_producer*.cu' 'spmm_warp_packed_tm*.cu'

For each function with at least --min-ffma FFMAs it prints the FFMA count and the share of FFMAs
whose register sources not taken from the operand reuse cache (at least two) all lie in one bank
(register number mod 2). In the 16x8 thread tiles the A operand is reused, so that is mostly B and
the accumulator in one bank.

Why (session 31, docs/kernels.md): kernel 21's math loop compiled three ways from changes elsewhere
in the kernel had 6.6%, 9.1% and 38.5% of such FFMAs, and ncu at 4096^3 16:32 put 8.6%, 9.4% and 13.3%
of the warp samples in dispatch stalls (benchmarks/results/h100/experiments/s31/ncu_alloc_modes_h100.txt;
the 38.5% build ran 1.6% slower than the 6.6% one of the same kernel). With four warps per scheduler
(kernel 20: 18% -> 11% under a register cap) the time did not change. The share predicts dispatch
stalls, not the time: other stalls move with the allocation too, so measure.

Session 33 (docs/kernels.md): in kernel 21, divergent code that the producer warpgroup's idle warps run
right after setmaxnreg.dec, before the producer's 64-bit divisions, moved the FFMA block from 9.1% to
38.2%; computing those divisions in all four warps before the warp split moved it back."""
import argparse
import concurrent.futures as cf
import fnmatch
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_diff import KDIR, ROOT, sass_by_function  # noqa: E402


def same_bank_share(ffmas):
    """Share of FFMA lines whose non-reused register sources (at least two) all lie in one bank."""
    hits = 0
    for line in ffmas:
        operands = re.findall(r"R(\d+)(\.reuse)?", line.split("FFMA", 1)[1].split(";")[0])
        sources = [int(num) for num, reuse in operands[1:4] if not reuse]
        if len(sources) >= 2 and len({s % 2 for s in sources}) == 1:
            hits += 1
    return hits / len(ffmas) if ffmas else 0.0


def functions(name, out_dir, cuobjdump):
    """(function, FFMA count, same-bank share) for one kernel file, compiled as tools/sass_diff.py does."""
    out = []
    for fn, (ins, _) in sass_by_function(ROOT, name, out_dir, cuobjdump).items():
        ffmas = [line for line in ins if re.search(r"\bFFMA\b", line)]
        out.append((fn, len(ffmas), same_bank_share(ffmas)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", nargs="+", default=["*.cu"], help="globs over csrc/cuda/kernels")
    ap.add_argument("--min-ffma", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump:
        sys.exit("cuobjdump not found: set CUOBJDUMP")
    names = sorted(n for n in os.listdir(os.path.join(ROOT, KDIR)) if n.endswith(".cu") and any(fnmatch.fnmatch(n, g) for g in a.files))
    with tempfile.TemporaryDirectory() as tmp, cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        jobs = {n: ex.submit(functions, n, tmp, cuobjdump) for n in names}
        for n, job in jobs.items():
            for fn, count, share in job.result():
                if count >= a.min_ffma:
                    short = fn if len(fn) < 100 else fn[:97] + "..."
                    print(f"{share:6.3f}  {count:5d} FFMA  {n}: {short}")


if __name__ == "__main__":
    main()
