"""Build nmspmm: a CPU-only extension, or CPU + CUDA when torch has CUDA and nvcc is found.

NMSPMM_BUILD_CUDA=auto|0|1 overrides the choice (auto by default). TORCH_CUDA_ARCH_LIST defaults
to "8.0;9.0". Install with:  pip install --no-build-isolation -e .
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
    cxx = opt + ["-std=c++17", "-DPy_LIMITED_API=0x03090000"]
    sources = [os.path.join("csrc", "nmspmm_ops.cpp")] + sorted(glob.glob(os.path.join("csrc", "cpu", "*.cpp")))
    include_dirs = [os.path.join(ROOT, "csrc")]
    if _want_cuda():
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
        # Op bindings are plain C++ (g++): no torch host code goes through nvcc.
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "*.cpp")))
        sources += sorted(glob.glob(os.path.join("csrc", "cuda", "kernels", "*.cu")))
        nvcc = opt + ["-std=c++17", "-lineinfo", "--expt-relaxed-constexpr",
                      "--threads", os.environ.get("NVCC_THREADS", "2")]
        return CUDAExtension("nmspmm._C", sources, include_dirs=include_dirs,
                             extra_compile_args={"cxx": cxx + ["-DNMSPMM_WITH_CUDA"], "nvcc": nvcc},
                             py_limited_api=True)
    return CppExtension("nmspmm._C", sources, include_dirs=include_dirs,
                        extra_compile_args={"cxx": cxx}, py_limited_api=True)


def _build_ext():
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension


setup(
    ext_modules=[_extension()],
    cmdclass={"build_ext": _build_ext()},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
