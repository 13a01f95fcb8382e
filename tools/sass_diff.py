"""Which kernels' machine code a change altered: compiles csrc/cuda/kernels/*.cu for sm_90 from the
working tree and from a git revision, and compares the SASS of every function (instruction text,
with addresses, encodings and anonymous-namespace hashes removed) and its register count.

    python tools/sass_diff.py 76256c8                 # every kernel file
    python tools/sass_diff.py HEAD --files 'spmm_decode_*.cu' --jobs 8
    python tools/sass_diff.py HEAD --files 'half/tc_prefill_*.cu'

Why: adding fields to SpmmParams makes ptxas compile the decode kernels, whose source does not
change, into different code that runs up to 1.7x slower at some m = 1 plans. A change meant for some kernels should
leave the others' SASS identical; this prints the functions where it does not.
Needs nvcc and cuobjdump (CUOBJDUMP=path if it is not on PATH). Exits 1 if any function differs."""
import argparse
import concurrent.futures as cf
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
KDIR = os.path.join("csrc", "cuda", "kernels")


def anon(symbol):
    """The symbol with its anonymous-namespace hash removed (it changes with the file's contents)."""
    symbol = re.sub(r"GLOBAL__N__[0-9a-f]+", "anon", symbol)
    return re.sub(r"(_anon_\d+_\w+?_cu_)[0-9a-f]{8}", r"\1anon", symbol)


def sass_by_function(src_root, name, out_dir, cuobjdump):
    """{function: (normalized instruction lines, registers)} of one .cu file."""
    cubin = os.path.join(out_dir, name.replace("/", "_") + ".cubin")
    subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90a", "-I", os.path.join(src_root, "csrc"), "-cubin", name,
                    "-o", cubin], cwd=os.path.join(src_root, KDIR), check=True, capture_output=True)
    text = subprocess.run([cuobjdump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
    res = subprocess.run([cuobjdump, "-res-usage", cubin], check=True, capture_output=True, text=True).stdout
    regs = {}
    for fn, r in re.findall(r"Function (\S+):\s*\n\s*REG:(\d+)", res):
        regs[anon(fn)] = int(r)
    funcs, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = anon(m.group(1))
            funcs[cur] = []
        elif cur and re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
            ins = anon(re.sub(r"/\*[0-9a-f]+\*/", "", line).split(";")[0].strip())
            funcs[cur].append(ins)
    return {f: (ins, regs.get(f)) for f, ins in funcs.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rev", help="git revision to compare the working tree with")
    ap.add_argument("--files", default="*.cu", help="glob over csrc/cuda/kernels (half/*.cu: the 16-bit kernels)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump:
        sys.exit("cuobjdump not found: set CUOBJDUMP")
    kdir = os.path.join(ROOT, KDIR)
    names = sorted(os.path.relpath(os.path.join(d, f), kdir) for d, _, fs in os.walk(kdir) for f in fs)
    names = [n for n in names if fnmatch.fnmatch(n, a.files) and n.endswith(".cu")]
    with tempfile.TemporaryDirectory() as tmp:
        old_root = os.path.join(tmp, "old")
        os.makedirs(old_root)
        archive = subprocess.run(["git", "archive", a.rev, "csrc"], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", old_root], input=archive, check=True)
        os.makedirs(os.path.join(tmp, "o"))
        os.makedirs(os.path.join(tmp, "n"))
        jobs = {}
        with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
            for n in names:
                if not os.path.exists(os.path.join(old_root, KDIR, n)):
                    print(f"new file   {n}")
                    continue
                jobs[n] = (ex.submit(sass_by_function, old_root, n, os.path.join(tmp, "o"), cuobjdump),
                           ex.submit(sass_by_function, ROOT, n, os.path.join(tmp, "n"), cuobjdump))
        differ = 0
        for n, (fo, fn) in jobs.items():
            old, new = fo.result(), fn.result()
            for f in sorted(set(old) | set(new)):
                short = f if len(f) < 110 else f[:107] + "..."
                if f not in old or f not in new:
                    print(f"{'added' if f not in old else 'removed':10s} {n}: {short}")
                    differ += 1
                elif old[f] != new[f]:
                    (io, ro), (i2, r2) = old[f], new[f]
                    print(f"differs    {n}: {short}  ({len(io)} -> {len(i2)} instructions, {ro} -> {r2} registers)")
                    differ += 1
        print(f"{len(jobs)} files compared, {differ} functions differ")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
