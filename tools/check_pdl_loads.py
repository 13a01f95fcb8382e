"""Checks, on the compiled SASS, that the decode kernels read nothing but their weight before
griddepcontrol.wait (SASS ACQBULK). These kernels start while the kernel before them in the stream
still runs (programmatic dependent launch); x is that kernel's output and may be read only after the
wait. A load the compiler hoists above the wait (an invariant __ldg is free to move) reads stale x
and gives wrong results with no error: a variant of the cluster decode loop compiles that way.

What it checks, per file (every kernel of the file's cubin that contains a wait; sm_90a):
  * the fp32 decode kernels (spmm_decode_cluster.cu, spmm_decode_staged.cu): before the first
    wait, only 16-byte evict-first global loads (LDG.E.EF.128: `values`, __ldcs) and byte loads
    (LDG.E.U8: `indices`);
  * the fp16 / bf16 decode kernels (half/decode_half_bf16.cu, half/decode_half_f16.cu, every
    instantiation of decode_half.cuh): before the first wait, only 16-byte cp.async copies
    (LDGSTS.E.BYPASS.128: `values` into the weight ring) and byte loads (LDG.E.U8: `indices`).
    These kernels read x with plain 16- and 32-bit loads (LDG.E.U16, LDG.E), never through
    cp.async, so an x load above the wait shows as another opcode.
Any other load (LDG, LDGSTS, LD, TMA or bulk copies of another form) before the wait fails the
kernel. The split-K decode kernel (spmm_small.cu) and the prefill kernels are not checked.

    python tools/check_pdl_loads.py            # the four files above
    python tools/check_pdl_loads.py --files 'f32/spmm_decode_*.cu'

Needs nvcc and cuobjdump (pip download nvidia-cuda-cuobjdump). Exits 1 if any kernel has another
load before its first wait, or if a file yields no kernel with a wait (nothing checked)."""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
KERNELS = os.path.join(ROOT, "csrc", "cuda", "kernels")
LOAD = re.compile(r"\b(LDG|LDGSTS|LD|UTMALDG|UBLKCP)\b[.\w]*")
# The loads of the weight that each kernel family issues before the wait on purpose.
WEIGHT_F32 = re.compile(r"LDG\.E\.EF\.128|LDG\.E\.U8")  # values (__ldcs, 16 bytes), indices (bytes)
WEIGHT_HALF = re.compile(r"LDGSTS\.E\.BYPASS\.128|LDG\.E\.U8")  # values (cp.async.cg 16 bytes), indices
DEFAULT_FILES = "f32/spmm_decode_cluster.cu,f32/spmm_decode_staged.cu,half/decode_half_bf16.cu,half/decode_half_f16.cu"


def weight_loads(path):
    return WEIGHT_HALF if os.path.basename(path).startswith("decode_half") else WEIGHT_F32


def check(cubin, weight):
    """(kernels with a wait, kernels failing) of one cubin."""
    sass = subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
    checked = bad = 0
    for func in sass.split("Function : ")[1:]:
        name = func.split("\n", 1)[0].strip()
        short = re.search(r"\d+((?:spmm|decode)\w*?_kernel)(I\w+?EE)", name)
        name = short.group(1) + short.group(2) if short else name[:100]
        ins = [b.strip() for b in re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", func)]
        waits = [i for i, t in enumerate(ins) if "ACQBULK" in t]
        if not waits:
            continue
        early = [t for t in ins[:waits[0]] if LOAD.search(t) and not weight.search(t)]
        weights = sum(1 for t in ins[:waits[0]] if LOAD.search(t) and weight.search(t))
        status = (f"ok ({weights} weight loads before the wait)" if not early
                  else f"{len(early)} non-weight load(s) before the wait: {early[:3]}")
        print(f"{name}: {status}")
        checked += 1
        bad += bool(early)
    return checked, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default=DEFAULT_FILES,
                    help="comma-separated file names or globs under csrc/cuda/kernels")
    ap.add_argument("--arch", default="sm_90a")
    a = ap.parse_args()
    files, empty = [], []
    for pat in a.files.split(","):
        found = sorted(glob.glob(os.path.join(KERNELS, pat)))
        if not found:
            empty.append(f"{pat} (no such file)")
        files += [f for f in found if f not in files]
    checked = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            rel = os.path.relpath(f, KERNELS)
            cubin = os.path.join(tmp, rel.replace(os.sep, "_") + ".cubin")
            subprocess.run(["nvcc", f"-gencode=arch=compute_{a.arch[3:]},code={a.arch}", "-O3", "-std=c++17",
                            "-I", os.path.join(ROOT, "csrc"), "-cubin", "-o", cubin, f], check=True)
            print(f"== {rel}")
            c, b = check(cubin, weight_loads(f))
            if c == 0:
                empty.append(f"{rel} (no kernel with griddepcontrol.wait)")
            checked += c
            bad += b
    for e in empty:
        print(f"FAIL: nothing checked in {e}")
    if bad or empty or not checked:
        print(f"{bad} of {checked} kernel(s) FAIL; {len(empty)} file pattern(s) checked nothing")
        return 1
    print(f"{checked} decode kernels in {len(files)} files read only their weight before the wait")
    return 0


if __name__ == "__main__":
    sys.exit(main())
