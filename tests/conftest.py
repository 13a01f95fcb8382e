"""Shared test set-up: offline Hugging Face, per-test seeds, the ``cuda`` marker, the ``device``
fixture and small helpers (exposed as the ``nm`` fixture) that build random N:M weights and an
independent plain-torch reference of the format.

Every test gets its own seed, derived from its node id (so tests do not share random data but a
failure reproduces exactly); set NMSPMM_TEST_SEED=<int> to shift all seeds and draw fresh data.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Inductor compiles in this process, without its worker pool: on torch 2.11 the pool can hold the
# interpreter at exit for minutes after a cold start (pytorch/pytorch#162199), which stops an
# xdist run after its last test.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import random  # noqa: E402
import types  # noqa: E402
import zlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import nmspmm  # noqa: E402

CUDA_OK = torch.cuda.is_available() and nmspmm.cuda_kernels_built()
CUDA_SKIP_REASON = ("needs a CUDA GPU and nmspmm built with CUDA kernels "
                    f"(torch.cuda.is_available()={torch.cuda.is_available()}, "
                    f"nmspmm.cuda_kernels_built()={nmspmm.cuda_kernels_built()})")

# The device parametrization every device-generic test uses: the same checks run on the GPU.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU and the CUDA build (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    if CUDA_OK:
        return
    skip = pytest.mark.skip(reason=CUDA_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def _skip_reason(report):
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def pytest_terminal_summary(terminalreporter):
    """One line that explains the CUDA skips (thousands on a machine without a GPU)."""
    skipped = terminalreporter.stats.get("skipped", [])
    cuda = sum(1 for r in skipped if "needs a CUDA GPU" in _skip_reason(r))
    if _IMPORT_SKIPS and os.environ.get("NMSPMM_NO_SKIPS") == "1":
        terminalreporter.write_line(f"nmspmm: FAIL: {len(_IMPORT_SKIPS)} skip(s) for a missing import "
                                    "(NMSPMM_NO_SKIPS=1): install the test dependencies", red=True)
    if _OTHER_SKIPS:
        terminalreporter.write_line(f"nmspmm: {len(_OTHER_SKIPS)} skip(s) not for a missing GPU:")
        for line in _OTHER_SKIPS[:20]:
            terminalreporter.write_line(f"  {line}")
    if cuda:
        terminalreporter.write_line(
            f"nmspmm: {cuda} of the {len(skipped)} skipped tests need a CUDA GPU and nmspmm built with "
            f"CUDA kernels (here torch.cuda.is_available()={torch.cuda.is_available()}, "
            f"nmspmm.cuda_kernels_built()={nmspmm.cuda_kernels_built()}); they run on a GPU machine.")


# NMSPMM_NO_SKIPS=1 (set by .ci/run): a test or a test file skipped because an import failed
# (pytest.importorskip: a missing test dependency) fails the run instead of shrinking the suite
# silently. Every skip other than the missing GPU's is listed in the summary.
_OTHER_SKIPS, _IMPORT_SKIPS = [], []


def _note_skip(report):
    if report.skipped and "needs a CUDA GPU" not in _skip_reason(report):
        reason = _skip_reason(report)
        _OTHER_SKIPS.append(f"{report.nodeid}: {reason}")
        if "could not import" in reason or "No module named" in reason:
            _IMPORT_SKIPS.append(_OTHER_SKIPS[-1])


def pytest_collectreport(report):
    _note_skip(report)


def pytest_runtest_logreport(report):
    if not hasattr(report, "wasxfail"):
        _note_skip(report)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("NMSPMM_NO_SKIPS") == "1" and _IMPORT_SKIPS and exitstatus == 0:
        session.exitstatus = 1


def pytest_report_header(config):
    return (f"nmspmm: torch {torch.__version__}, cuda_kernels_built={nmspmm.cuda_kernels_built()}, "
            f"cuda available={torch.cuda.is_available()}")


@pytest.fixture(autouse=True)
def _seed(request):
    seed = (zlib.crc32(request.node.nodeid.encode()) + int(os.environ.get("NMSPMM_TEST_SEED", "0"))) % 2**31
    random.seed(seed)
    torch.manual_seed(seed)  # seeds the CUDA generators too
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:  # numpy is optional for the tests
        pass
    return seed


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


# ----------------------------------------------------------------------------------------------
# Independent reference of the format, in plain torch (no nmspmm op is used here).


def random_indices(in_features, out_features, N, M, L, device="cpu"):
    """uint8 indices [in*N/M, out/L]: for each (window, vector) N distinct positions of 0..M-1,
    drawn uniformly and sorted ascending."""
    G, V = in_features // M, out_features // L
    pos = torch.rand(G, V, M, device=device).argsort(dim=-1)[..., :N].sort(dim=-1).values  # [G, V, N]
    return pos.permute(0, 2, 1).reshape(G * N, V).to(torch.uint8).contiguous()


def random_packed(out_features, in_features, N, M, L, dtype=torch.float32, device="cpu"):
    """(values, indices) of a random compressed weight with a random N:M pattern."""
    indices = random_indices(in_features, out_features, N, M, L, device)
    values = torch.randn(in_features // M * N, out_features, device=device).to(dtype)
    return values, indices


def ref_columns(indices, N, M, L):
    """int64 [in*N/M, out]: the dense input column of every compressed value."""
    w = indices.shape[0]
    window_base = (torch.arange(w, device=indices.device) // N * M)[:, None]
    return window_base + indices.long().repeat_interleave(L, dim=1)


def ref_decompress(values, indices, N, M, L):
    """Dense W[out, in] by scatter: W[j, (u // N) * M + indices[u, j // L]] = values[u, j]."""
    w, out = values.shape
    in_features = w // N * M
    dense_t = torch.zeros(in_features, out, dtype=values.dtype, device=values.device)
    dense_t.scatter_(0, ref_columns(indices, N, M, L), values)
    return dense_t.t().contiguous()


def ref_decompress_loops(values, indices, N, M, L):
    """The same, with explicit Python loops (for tiny shapes): cross-checks ref_decompress."""
    w, out = values.shape
    dense = torch.zeros(out, w // N * M, dtype=values.dtype)
    v, idx = values.cpu(), indices.cpu()
    for u in range(w):
        for j in range(out):
            dense[j, (u // N) * M + int(idx[u, j // L])] = v[u, j]
    return dense.to(values.device)


def ref_prune(weight, N, M, L):
    """The vector-wise N:M magnitude mask of docs/format.md, bool [out, in], from the dense weight
    alone, in plain torch (no nmspmm op): the demo's reference_mask, which its own check uses too."""
    from nmspmm.demo import reference_mask

    return reference_mask(weight.detach(), N, M, L)


def ref_pruned_dense64(weight, N, M, L, mask=None):
    """float64 dense weight [out, in] times its mask (ref_prune's unless given): what a compressed
    weight must decompress to, computed without any nmspmm op."""
    mask = ref_prune(weight, N, M, L) if mask is None else mask
    return weight.detach().double() * mask


def ref_linear64(x, weight, N, M, L, bias=None, mask=None):
    """float64 x @ (W * mask).T (+ bias) from the original dense weight, and the scale
    |x| @ |W * mask|.T (+ |bias|) for absolute tolerances (as ref_spmm64)."""
    dense = ref_pruned_dense64(weight, N, M, L, mask)
    x2 = x.detach().double().reshape(-1, x.shape[-1])
    y = x2 @ dense.t()
    scale = (x2.abs() @ dense.abs().t()).max().item() if y.numel() else 0.0
    if bias is not None:
        y = y + bias.detach().double()
        scale += bias.detach().double().abs().max().item() if bias.numel() else 0.0
    return y.reshape(*x.shape[:-1], weight.shape[0]), max(scale, 1e-30)


def ref_spmm64(x, values, indices, N, M, L, bias=None):
    """float64 x @ decompress(W).T (+ bias), and the scale |x| @ |W|.T (the largest partial-sum
    magnitude, used to set absolute tolerances)."""
    dense = ref_decompress(values.double(), indices, N, M, L)
    x2 = x.double().reshape(-1, x.shape[-1])
    y = x2 @ dense.t()
    if bias is not None:
        y = y + bias.double()
    scale = (x2.abs() @ dense.abs().t()).max().item() if y.numel() else 0.0
    if bias is not None and bias.numel():
        scale += bias.double().abs().max().item()
    return y.reshape(*x.shape[:-1], values.shape[1]), max(scale, 1e-30)


def assert_close_to_ref(y, ref, scale, rtol, atol_rel, rel_norm=None):
    """Elementwise |y - ref| <= atol_rel * scale + rtol * |ref| (every element, NaN fails) and,
    if given, ||y - ref|| / ||ref|| < rel_norm."""
    assert y.shape == ref.shape, (y.shape, ref.shape)
    yd = y.double()
    assert not torch.isnan(yd).any(), "output has NaN (unwritten or poisoned elements)"
    torch.testing.assert_close(yd, ref, rtol=rtol, atol=atol_rel * scale, check_device=False)
    if rel_norm is not None and ref.numel():
        den = ref.norm().item()
        if den > 0:
            rel = (yd - ref).norm().item() / den
            assert rel < rel_norm, f"relative error {rel:.3g} >= {rel_norm:g}"


def assert_within_twice_linear(y, x, values, indices, N, M, L, bias=None):
    """The flash-attention accuracy rule for a 16-bit SpMM output y: its largest error against the
    fp64 reference is at most twice that of F.linear in the same dtype on the same inputs and the
    same (decompressed) weight, plus 2^-12 of the output scale |x| @ |W|^T."""
    ref, scale = ref_spmm64(x, values, indices, N, M, L, bias)
    assert y.dtype == x.dtype and y.shape == ref.shape
    assert torch.isfinite(y).all(), "output has NaN/Inf"
    lin = torch.nn.functional.linear(x, ref_decompress(values, indices, N, M, L), bias)
    err = (y.double() - ref).abs().max().item() if y.numel() else 0.0
    err_lin = (lin.double() - ref).abs().max().item() if y.numel() else 0.0
    floor = 2.0 ** -12 * scale
    assert err <= 2 * err_lin + floor, f"error {err:.3e} > 2 x F.linear's {err_lin:.3e} + {floor:.3e}"


@pytest.fixture
def nm():
    """The helpers above, for tests: nm.random_packed(...), nm.ref_decompress(...), ..."""
    return types.SimpleNamespace(
        random_indices=random_indices, random_packed=random_packed, ref_columns=ref_columns,
        ref_decompress=ref_decompress, ref_decompress_loops=ref_decompress_loops,
        ref_spmm64=ref_spmm64, assert_close_to_ref=assert_close_to_ref, ref_prune=ref_prune,
        assert_within_twice_linear=assert_within_twice_linear,
        ref_pruned_dense64=ref_pruned_dense64, ref_linear64=ref_linear64, CUDA_OK=CUDA_OK)
