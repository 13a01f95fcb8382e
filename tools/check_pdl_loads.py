"""Checks, on the compiled SASS, that the decode kernels read nothing but their weight before
griddepcontrol.wait (SASS ACQBULK). These kernels start while the kernel before them in the stream
still runs (programmatic dependent launch); x is that kernel's output and may be read only after the
wait. A load the compiler hoists above the wait (an invariant __ldg is free to move) reads stale x
and gives wrong results with no error: a variant of the cluster decode loop compiles that way. Weight loads (16-byte evict-first loads of `values`, byte loads of `indices`) are what the
kernels issue early on purpose.

    python tools/check_pdl_loads.py            # spmm_decode_cluster.cu and spmm_decode_staged.cu
    python tools/check_pdl_loads.py --files 'spmm_decode_*.cu'

Needs nvcc and cuobjdump (pip download nvidia-cuda-cuobjdump). Exits 1
if any kernel has another load before its first wait."""
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
WEIGHT = re.compile(r"LDG\.E\.EF\.128|LDG\.E\.U8")  # values (__ldcs, 16 bytes) and indices (bytes)


def check(cubin):
    sass = subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
    bad = 0
    for func in sass.split("Function : ")[1:]:
        name = func.split("\n", 1)[0].strip()
        short = re.search(r"\d+((?:spmm|decode)\w*?_kernel)(I\w+?EE)", name)
        name = short.group(1) + short.group(2) if short else name[:100]
        ins = [b.strip() for b in re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", func)]
        waits = [i for i, t in enumerate(ins) if "ACQBULK" in t]
        if not waits:
            continue
        early = [t for t in ins[:waits[0]] if LOAD.search(t) and not WEIGHT.search(t)]
        status = "ok" if not early else f"{len(early)} non-weight load(s) before the wait: {early[:3]}"
        print(f"{name}: {status}")
        bad += bool(early)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default="spmm_decode_cluster.cu,spmm_decode_staged.cu",
                    help="comma-separated file names or globs under csrc/cuda/kernels")
    ap.add_argument("--arch", default="sm_90a")
    a = ap.parse_args()
    files = sorted({f for pat in a.files.split(",") for f in glob.glob(os.path.join(KERNELS, pat))})
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            cubin = os.path.join(tmp, os.path.basename(f) + ".cubin")
            subprocess.run(["nvcc", f"-gencode=arch=compute_{a.arch[3:]},code={a.arch}", "-O3", "-std=c++17",
                            "-cubin", "-o", cubin, f], check=True)
            print(f"== {os.path.basename(f)}")
            bad += check(cubin)
    print("all decode kernels read only their weight before the wait" if not bad else f"{bad} kernel(s) FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
