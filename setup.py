"""Build nmspmm against the torch installed in the running Python: CPU-only, or CPU + CUDA kernels.

The one-command set-up is ``python3 install.py`` (README.md). By hand, with torch installed:

    MAX_JOBS=4 python -m pip install --no-build-isolation -e .

Environment:
  NMSPMM_BUILD_CUDA=auto|0|1   auto (default) builds the CUDA kernels only when the evidence says the
                               build can work: torch has CUDA, a toolkit with nvcc, cuda_runtime.h and
                               libcudart is found, and nvcc's major version equals torch's CUDA major.
                               Otherwise it builds CPU-only and prints one line saying why. 1 fails at
                               once, naming what is missing; 0 builds CPU-only.
  CUDA_HOME / CUDA_PATH        the toolkit to use (else torch's guess, /usr/local/cuda, nvcc on PATH).
  TORCH_CUDA_ARCH_LIST         default "8.0;9.0a". 9.0 is compiled as 9.0a: the warp-specialized
                               kernel needs sm_90a (setmaxnreg), and plain sm_90 runs it slower.

The wheel is built for one torch: its metadata pins ``torch==<the version built against>`` and its
version carries a local tag (``0.1.0+torch2.13cpu``). ``nmspmm.build_info()`` reports the build.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
VERSION = "0.1.0"
DEFAULT_ARCHS = "8.0;9.0a"
INSTALL_HINT = ("run `python3 install.py` from the repository root (it installs torch and builds "
                "nmspmm), or install torch first and build against it with "
                "`python -m pip install --no-build-isolation -e .`")


def _say(msg):
    print(f"nmspmm setup: {msg}", flush=True)


try:
    import torch
except ImportError:
    sys.exit("nmspmm setup: torch is not importable in this Python. nmspmm compiles against the torch "
             "it runs with, so pip's isolated build environment (plain `pip install .`) cannot build "
             f"it: {INSTALL_HINT}.")


# ------------------------------------------------------------------------------ CUDA evidence
def _cudart_found(home):
    for lib in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"),
                os.path.join("targets", "sbsa-linux", "lib")):
        if glob.glob(os.path.join(home, lib, "libcudart.so*")):
            return True
    return False


def _nvcc_version(nvcc):
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _toolkit_problems(home):
    """What is missing in the toolkit at ``home`` (empty list: usable)."""
    problems = []
    if not os.path.isfile(os.path.join(home, "bin", "nvcc")):
        problems.append(f"{home}/bin/nvcc not found")
    if not os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")):
        problems.append(f"{home}/include/cuda_runtime.h not found")
    if not _cudart_found(home):
        problems.append(f"libcudart.so not found under {home}/lib64 or {home}/lib")
    return problems


def _toolkit_candidates():
    """(where it came from, path) in the order tried. An explicit CUDA_HOME/CUDA_PATH is the only
    candidate; otherwise torch's guess, /usr/local/cuda and the real location of nvcc on PATH (nvcc
    may be a wrapper script outside the toolkit, which makes torch guess its parent folder)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return [(var, os.environ[var])]
    found = []
    from torch.utils import cpp_extension
    if cpp_extension.CUDA_HOME:
        found.append(("torch's guess", cpp_extension.CUDA_HOME))
    found.append(("default", "/usr/local/cuda"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        found.append(("nvcc on PATH", os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))))
    seen, unique = set(), []
    for origin, path in found:
        if path not in seen:
            seen.add(path)
            unique.append((origin, path))
    return unique


def _cuda_decision():
    """(build CUDA?, toolkit path or None, nvcc version or None, one-line reason)."""
    flag = os.environ.get("NMSPMM_BUILD_CUDA", "auto").strip().lower()
    if flag not in ("auto", "", "0", "1", "true", "false", "yes", "no", "on", "off"):
        sys.exit(f"nmspmm setup: NMSPMM_BUILD_CUDA must be auto, 0 or 1, got {flag!r}")
    if flag in ("0", "false", "no", "off"):
        return False, None, None, "NMSPMM_BUILD_CUDA=0"
    required = flag in ("1", "true", "yes", "on")

    def no(reason):
        if required:
            sys.exit(f"nmspmm setup: NMSPMM_BUILD_CUDA=1 cannot work: {reason}. Fix that, or build "
                     "CPU-only with NMSPMM_BUILD_CUDA=0.")
        return False, None, None, reason

    if torch.version.cuda is None:
        return no(f"torch {torch.__version__} is a build without CUDA")
    tried = []
    for origin, home in _toolkit_candidates():
        problems = _toolkit_problems(home)
        if problems:
            tried.append(f"{home} ({origin}): {'; '.join(problems)}")
            continue
        version = _nvcc_version(os.path.join(home, "bin", "nvcc"))
        if version is None:
            tried.append(f"{home} ({origin}): `nvcc --version` gave no version")
            continue
        torch_major = int(torch.version.cuda.split(".")[0])
        if version[0] != torch_major:
            tried.append(f"{home} ({origin}): nvcc {version[0]}.{version[1]} but torch is built "
                         f"with CUDA {torch.version.cuda} (the major versions must match)")
            continue
        return True, home, version, f"CUDA toolkit {home} (nvcc {version[0]}.{version[1]}, torch CUDA {torch.version.cuda})"
    if not tried:
        return no("no CUDA toolkit found (set CUDA_HOME)")
    return no("no usable CUDA toolkit: " + " | ".join(tried))


def _arch_list():
    """TORCH_CUDA_ARCH_LIST with every 9.0 entry compiled as 9.0a (see the module docstring)."""
    given = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    raw = given or DEFAULT_ARCHS
    if raw == "native":
        raw = ";".join(sorted({"%d.%d" % torch.cuda.get_device_capability(i)
                               for i in range(torch.cuda.device_count())})) or DEFAULT_ARCHS
    tokens = [t for t in re.split(r"[;\s]+", raw.replace("Hopper", "9.0+PTX")) if t]
    fixed = []
    for t in tokens:
        if t in ("9.0", "9.0+PTX"):
            t = "9.0a"
        if t not in fixed:
            fixed.append(t)
    final = ";".join(fixed)
    if given and final != given.replace(" ", ";"):
        _say(f"TORCH_CUDA_ARCH_LIST={given!r} -> {final!r}: Hopper is compiled for sm_90a, because the "
             "warp-specialized kernel needs setmaxnreg and runs slower as plain sm_90")
    return fixed


# ------------------------------------------------------------------------------ build
WITH_CUDA, CUDA_ROOT, NVCC_VERSION, REASON = _cuda_decision()
ARCHS = []
if WITH_CUDA:
    from torch.utils import cpp_extension

    os.environ["CUDA_HOME"] = CUDA_ROOT
    cpp_extension.CUDA_HOME = CUDA_ROOT  # torch guessed at import; use the toolkit checked above
    ARCHS = _arch_list()
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(ARCHS)
    _say(f"building CPU + CUDA kernels for {';'.join(ARCHS)}: {REASON}")
else:
    _say(f"building CPU-only (no CUDA kernels): {REASON}")

TORCH_PUBLIC = torch.__version__.split("+")[0]
_flavour = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
_major_minor = ".".join(TORCH_PUBLIC.split(".")[:2])
LOCAL_VERSION = f"{VERSION}+torch{_major_minor}{_flavour}"


def _write_build_info():
    info = {
        "version": LOCAL_VERSION,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda": WITH_CUDA,
        "cuda_archs": ARCHS,
        "nvcc": "%d.%d" % NVCC_VERSION if NVCC_VERSION else None,
        "cuda_home": CUDA_ROOT,
        "reason": REASON,
    }
    text = ('"""Written by setup.py when nmspmm is built; read it through nmspmm.build_info()."""\n'
            f"BUILD_INFO = {info!r}\n")
    path = os.path.join(ROOT, "nmspmm", "_build_info.py")
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def _extension():
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    debug = os.environ.get("DEBUG", "0") == "1"
    opt = ["-O0", "-g"] if debug else ["-O3"]
    # py_limited_api: torch compiles with -DPy_LIMITED_API=<its oldest CPython> and links no
    # libtorch_python; the op library calls only the limited C API (one PyModule_Create), so the
    # wheel's abi3 tag holds for Python. It does not hold for torch, which the metadata pins.
    cxx = opt + ["-std=c++20"]
    sources = [os.path.join("csrc", "nmspmm_ops.cpp"), os.path.join("csrc", "autograd.cpp")]
    sources += sorted(glob.glob(os.path.join("csrc", "cpu", "*.cpp")))
    include_dirs = [os.path.join(ROOT, "csrc")]
    if WITH_CUDA:
        # Op bindings are plain C++ (g++): no torch host code goes through nvcc.
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "*.cpp")))
        # One folder per kernel family group: f32/ (the fp32 families), half/ (fp16 / bf16),
        # sparse_tc/ (2:4 on the sparse tensor cores), decode_splitk/ (every dtype), preprocess/,
        # csr/ (unstructured CSR); common/ holds shared device primitives (headers only).
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "kernels", "*", "*.cu")))
        nvcc = opt + ["-std=c++20", "-lineinfo", "--expt-relaxed-constexpr",
                      "--threads", os.environ.get("NVCC_THREADS", "2")]
        return CUDAExtension("nmspmm._C", sources, include_dirs=include_dirs,
                             extra_compile_args={"cxx": cxx + ["-DNMSPMM_WITH_CUDA"], "nvcc": nvcc},
                             py_limited_api=True)
    return CppExtension("nmspmm._C", sources, include_dirs=include_dirs,
                        extra_compile_args={"cxx": cxx}, py_limited_api=True)


def _torch_libstdcxx():
    """Path of the libstdc++.so.6 loaded with torch in this process (Linux), else None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libstdc++.so.6"):
                    return path
    except OSError:
        pass
    return None


def _build_ext():
    from torch.utils.cpp_extension import BuildExtension

    class BuildExt(BuildExtension):
        """torch's BuildExtension; on Linux the extension links the libstdc++ that torch runs with.

        A compiler whose own libstdc++ is only a static archive (seen on the GPU machine:
        /opt/gcc/bin/g++) puts a private copy of libstdc++ into _C.so. Its locale facets differ
        from the copy torch uses, and formatting an integer into an error message (TORCH_CHECK)
        then segfaults. Naming torch's libstdc++.so.6 on the link line makes the extension use the
        shared one (the static archive, searched later, is no longer needed).
        """

        def build_extensions(self):
            lib = _torch_libstdcxx()
            if lib:
                _say(f"linking {lib}")
                for ext in self.extensions:
                    ext.extra_link_args = list(ext.extra_link_args or []) + [lib]
            super().build_extensions()

    return BuildExt


def _abi3_tag():
    """cp3X for the Py_LIMITED_API value torch compiles extensions with (0x030A0000 -> cp310)."""
    from torch.utils import cpp_extension
    value = int(getattr(cpp_extension, "min_supported_cpython", "0x03090000"), 16)
    return f"cp{value >> 24}{(value >> 16) & 0xFF}"


_write_build_info()
setup(
    version=LOCAL_VERSION,
    install_requires=[f"torch=={TORCH_PUBLIC}"],
    ext_modules=[_extension()],
    cmdclass={"build_ext": _build_ext()},
    options={"bdist_wheel": {"py_limited_api": _abi3_tag()}},
)
