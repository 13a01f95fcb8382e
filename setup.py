"""Build nmspmm: a CPU-only extension, or CPU + CUDA when torch has CUDA and nvcc is found.

NMSPMM_BUILD_CUDA=auto|0|1 overrides the choice (auto by default). TORCH_CUDA_ARCH_LIST defaults
to "8.0;9.0a". Install with:  pip install --no-build-isolation -e .
"""
import glob
import os

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _want_cuda():
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    flag = os.environ.get("NMSPMM_BUILD_CUDA", "auto").lower()
    if flag in ("0", "false", "no", "off"):
        return False
    available = torch.version.cuda is not None and CUDA_HOME is not None
    if flag in ("1", "true", "yes", "on"):
        if not available:
            raise RuntimeError(
                "NMSPMM_BUILD_CUDA=1 but torch has no CUDA (torch.version.cuda is None) "
                "or nvcc was not found (CUDA_HOME unset)")
        return True
    return available


def _extension():
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    debug = os.environ.get("DEBUG", "0") == "1"
    opt = ["-O0", "-g"] if debug else ["-O3"]
    cxx = opt + ["-std=c++20", "-DPy_LIMITED_API=0x03090000"]
    sources = [os.path.join("csrc", "nmspmm_ops.cpp"), os.path.join("csrc", "autograd.cpp")] + sorted(glob.glob(os.path.join("csrc", "cpu", "*.cpp")))
    include_dirs = [os.path.join(ROOT, "csrc")]
    if _want_cuda():
        # 9.0a (not 9.0): the warp-specialized kernel moves registers between warpgroups (setmaxnreg),
        # an sm_90a instruction; every other kernel compiles to the same SASS for sm_90a as for sm_90.
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
        # Op bindings are plain C++ (g++): no torch host code goes through nvcc.
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "*.cpp")))
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "kernels", "*.cu")))
        nvcc = opt + ["-std=c++20", "-lineinfo", "--expt-relaxed-constexpr",
                      "--threads", os.environ.get("NVCC_THREADS", "2")]
        return CUDAExtension("nmspmm._C", sources, include_dirs=include_dirs,
                             extra_compile_args={"cxx": cxx + ["-DNMSPMM_WITH_CUDA"], "nvcc": nvcc},
                             py_limited_api=True)
    return CppExtension("nmspmm._C", sources, include_dirs=include_dirs,
                        extra_compile_args={"cxx": cxx}, py_limited_api=True)


def _torch_libstdcxx():
    """Path of the libstdc++.so.6 loaded with torch in this process (Linux), else None."""
    import torch  # noqa: F401  (loads libstdc++)

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
                print(f"nmspmm setup: linking {lib}")
                for ext in self.extensions:
                    ext.extra_link_args = list(ext.extra_link_args or []) + [lib]
            super().build_extensions()

    return BuildExt


setup(
    ext_modules=[_extension()],
    cmdclass={"build_ext": _build_ext()},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
