"""NMLinear and sparsify_ on small synthetic modules (no transformers needed).

CPU tests run everywhere; tests marked ``cuda`` need a GPU and the CUDA build of nmspmm and are
skipped otherwise (the skip is defined here, not in conftest).
"""
import copy
import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nmspmm
from nmspmm import NMLinear, sparsify_, sparsify_report
from nmspmm.nn import sparse_metadata
from conftest import assert_close_to_ref, ref_linear64, ref_prune

CUDA_OK = torch.cuda.is_available() and nmspmm.cuda_kernels_built()
requires_cuda = pytest.mark.skipif(not CUDA_OK, reason="needs a CUDA GPU and nmspmm built with CUDA")

# (N, M, L) covered throughout: 50% with L=1 and L=32, 75% with L=16/32, 87.5% with L=128.
PATTERNS = [(2, 4, 1), (16, 32, 32), (8, 32, 32), (4, 32, 128), (2, 8, 16)]
PATTERN_IDS = [f"{n}:{m}-L{l}" for n, m, l in PATTERNS]
IN, OUT = 256, 256


def make_linear(in_features=IN, out_features=OUT, bias=True, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return nn.Linear(in_features, out_features, bias=bias).to(dtype)


def pruned_weight(linear, N, M, L):
    """The dense weight times the magnitude mask, computed in plain torch (tests/conftest.py)."""
    return linear.weight.detach() * ref_prune(linear.weight, N, M, L)


# float32 layers against the float64 reference (docs/format.md's accumulation in float32); the CUDA
# kernels' split-K and tile orders get the tolerance of test_cuda_kernels.py.
F32_TOL = dict(rtol=1e-4, atol_rel=1e-5, rel_norm=1e-5)
CUDA_F32_TOL = dict(rtol=1e-4, atol_rel=1e-4, rel_norm=1e-5)


def assert_matches_ref64(y, x, linear, N, M, L, mask=None, tol=F32_TOL):
    """y against float64 x @ (W * mask).T + b from the original dense layer (mask: the magnitude
    mask of tests/conftest.py unless given)."""
    ref, scale = ref_linear64(x, linear.weight, N, M, L, linear.bias, mask)
    assert_close_to_ref(y, ref, scale, **tol)


def nbytes(t):
    return t.numel() * t.element_size()


# --------------------------------------------------------------------------- construction
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=PATTERN_IDS)
def test_empty_layer_shapes(N, M, L):
    layer = NMLinear(IN, OUT, N, M, L, bias=True)
    assert (layer.in_features, layer.out_features, layer.N, layer.M, layer.L) == (IN, OUT, N, M, L)
    assert layer.values.shape == (IN * N // M, OUT) and layer.values.dtype == torch.float32
    assert layer.indices.shape == (IN * N // M, OUT // L) and layer.indices.dtype == torch.uint8
    # The packing kernels' metadata only on request (the heuristic never uses it); 2:4 layers hold
    # the sparse tensor-core metadata (int32 [in/32, out/L rounded up to 4]).
    sp24 = (N, M) == (2, 4)
    assert layer.col_info is None and layer.packed_indices is None
    tc_bytes = (IN + 31) // 32 * ((OUT // L + 3) // 4 * 4) * 4 if sp24 else 0
    assert layer.metadata_nbytes == tc_bytes and (layer.tc_meta is not None) == sp24
    assert layer.bias.shape == (OUT,)
    # An empty layer is a valid all-zero weight.
    assert torch.equal(layer.to_dense(), torch.zeros(OUT, IN))
    assert torch.equal(layer(torch.randn(3, IN)), torch.zeros(3, OUT))
    assert [n for n, _ in layer.named_parameters()] == ["bias"]
    tc = ["tc_meta"] if sp24 else []
    assert sorted(n for n, _ in layer.named_buffers()) == sorted(["indices", "values"] + tc)
    assert list(layer.state_dict()) == ["bias", "values", "indices", "_extra_state"]
    layer.enable_col_info()
    assert layer.col_info.shape == (OUT // 128, IN // 64, 64) and layer.col_info.dtype == torch.uint8
    assert layer.packed_indices.shape == layer.indices.shape
    assert sorted(n for n, _ in layer.named_buffers()) == sorted(["col_info", "indices", "packed_indices", "values"] + tc)
    assert list(layer.state_dict()) == ["bias", "values", "indices", "_extra_state"]
    assert layer.state_dict()["_extra_state"].tolist() == [1, N, M, L, IN, OUT]
    r = repr(layer)
    assert f"in_features={IN}, out_features={OUT}, N={N}, M={M}, L={L}, bias=True" in r


def test_constructor_dtype_device_and_errors():
    layer = NMLinear(128, 128, 2, 4, 1, bias=False, dtype=torch.bfloat16, device="meta")
    assert layer.values.dtype == torch.bfloat16 and layer.values.is_meta and layer.bias is None
    assert layer.indices.dtype == torch.uint8 and layer.col_info is None
    with pytest.raises(ValueError, match="in_features=100 % M=8"):
        NMLinear(100, 128, 2, 8, 1)
    with pytest.raises(ValueError, match="out_features=96 % L=64"):
        NMLinear(128, 96, 2, 8, 64)
    with pytest.raises(ValueError, match="M must be a power of two"):
        NMLinear(128, 128, 2, 6, 1)
    with pytest.raises(ValueError, match="N must satisfy"):
        NMLinear(128, 128, 5, 4, 1)
    with pytest.raises(ValueError, match="L must be a power of two"):
        NMLinear(128, 256, 2, 4, 256)
    with pytest.raises(TypeError, match="dtype"):
        NMLinear(128, 128, 2, 4, 1, dtype=torch.float64)


# ------------------------------------------------------------------------------- forward
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=PATTERN_IDS)
@pytest.mark.parametrize("bias", [True, False])
def test_from_dense_matches_pruned_linear(N, M, L, bias):
    lin = make_linear(bias=bias)
    layer = NMLinear.from_dense(lin, N, M, L)
    w = pruned_weight(lin, N, M, L)
    assert torch.equal(layer.to_dense(), w)
    for shape in [(IN,), (5, IN), (2, 3, IN), (0, IN)]:
        x = torch.randn(shape)
        assert_matches_ref64(layer(x), x, lin, N, M, L)
    # Non-contiguous input.
    x = torch.randn(IN, 6).t()
    assert_matches_ref64(layer(x), x, lin, N, M, L)
    # The functional path on the packed weight agrees.
    packed = layer.packed
    assert isinstance(packed, nmspmm.NMWeight) and packed.shape == (OUT, IN)
    assert packed.col_info is None
    packed = layer.enable_col_info().packed
    assert packed.col_info is layer.col_info and torch.equal(packed.col_info, nmspmm.col_info(packed)[0])
    torch.testing.assert_close(nmspmm.spmm(x.contiguous(), packed, lin.bias), layer(x))


def test_from_dense_with_mask():
    N, M, L = 2, 8, 16
    lin = make_linear()
    # A vector-wise 2:8 mask that is not the magnitude one: keep the first 2 positions of each window.
    mask = (torch.arange(IN) % M < N).expand(OUT, IN).clone()
    layer = NMLinear.from_dense(lin, N, M, L, mask=mask)
    assert torch.equal(layer.to_dense(), lin.weight.detach() * mask)
    x = torch.randn(5, IN)
    assert_matches_ref64(layer(x), x, lin, N, M, L, mask=mask)
    assert not torch.equal(mask, nmspmm.prune(lin.weight.detach(), N, M, L))
    bad = torch.ones_like(mask)
    with pytest.raises(RuntimeError, match="not vector-wise"):
        NMLinear.from_dense(lin, N, M, L, mask=bad)
    with pytest.raises(ValueError, match="does not fit"):
        NMLinear.from_dense(nn.Linear(100, 128), 2, 8, 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_from_dense_half_weights(dtype):
    lin = make_linear(dtype=dtype)
    layer = NMLinear.from_dense(lin, 8, 32, 32)
    assert layer.values.dtype == dtype and layer.bias.dtype == dtype and not layer.values.requires_grad
    assert torch.equal(layer.to_dense(), pruned_weight(lin, 8, 32, 32))
    x = torch.randn(3, IN, dtype=dtype)
    # Inputs and weight already in the dtype: float32 accumulation, one rounding of the output.
    ref, scale = ref_linear64(x, lin.weight, 8, 32, 32, lin.bias)
    assert_close_to_ref(layer(x), ref, scale, rtol=torch.finfo(dtype).eps, atol_rel=1e-5)


def test_from_packed_shares_storage():
    lin = make_linear()
    packed = nmspmm.compress(lin.weight.detach(), 2, 4, 1)
    layer = NMLinear.from_packed(packed, lin.bias)
    assert layer.values.data_ptr() == packed.values.data_ptr()
    x = torch.randn(4, IN)
    assert_matches_ref64(layer(x), x, lin, 2, 4, 1)


@pytest.mark.parametrize("layer_dtype,x_dtype", [
    (torch.float32, torch.bfloat16), (torch.float32, torch.float16),
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.bfloat16, torch.bfloat16)])
def test_mixed_dtypes(layer_dtype, x_dtype):
    lin = make_linear()
    layer = NMLinear.from_dense(lin, 4, 32, 128).to(layer_dtype)
    x = torch.randn(4, IN).to(x_dtype)
    y = layer(x)
    assert y.dtype == x_dtype  # cast to the layer's dtype and back
    ref = F.linear(x.to(layer_dtype).double(), pruned_weight(lin, 4, 32, 128).to(layer_dtype).double(),
                   lin.bias.detach().to(layer_dtype).double())
    torch.testing.assert_close(y.float(), ref.to(layer_dtype).float().to(x_dtype).float(),
                               rtol=2e-2, atol=2e-2)


# -------------------------------------------------------------------- dtype/device moves
def test_half_to_type_keep_indices_uint8():
    lin = make_linear()
    layer = NMLinear.from_dense(lin, 8, 32, 32).enable_col_info()
    indices, cols = layer.indices.clone(), layer.col_info.clone()
    for move in (lambda m: m.half(), lambda m: m.bfloat16(), lambda m: m.to(torch.float16),
                 lambda m: m.float(), lambda m: m.type(torch.float16), lambda m: m.double().float(),
                 lambda m: m.to("cpu", torch.bfloat16)):
        move(layer)
        assert layer.values.dtype == layer.bias.dtype
        for name in ("indices", "col_info", "packed_indices"):
            assert getattr(layer, name).dtype == torch.uint8, name
        assert torch.equal(layer.indices, indices) and torch.equal(layer.col_info, cols)
    layer.to(torch.float16)
    assert layer.values.dtype == torch.float16
    layer.to("meta")
    assert all(b.is_meta for b in layer.buffers()) and layer.indices.dtype == torch.uint8


def test_float64_layer_is_rejected_by_the_op():
    layer = NMLinear.from_dense(make_linear(), 2, 4, 1).double()
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        layer(torch.randn(2, IN))


# -------------------------------------------------------------------------- serialization
def test_state_dict_roundtrip_into_empty_layer():
    N, M, L = 16, 32, 32
    layer = NMLinear.from_dense(make_linear(), N, M, L)
    sd = layer.state_dict()
    assert set(sd) == {"values", "indices", "bias", "_extra_state"}
    assert sum(nbytes(t) for k, t in sd.items() if k != "_extra_state") == layer.weight_nbytes
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    empty = NMLinear(IN, OUT, N, M, L).enable_col_info()
    layer.enable_col_info()
    before = empty.col_info.clone()
    empty.load_state_dict(loaded)
    # col_info was rebuilt from the loaded indices, not left at the empty layer's.
    assert torch.equal(empty.col_info, layer.col_info) and not torch.equal(empty.col_info, before)
    assert torch.equal(empty.packed_indices, layer.packed_indices)
    x = torch.randn(3, IN)
    assert torch.equal(empty(x), layer(x))


def test_safetensors_roundtrip(tmp_path):
    import safetensors.torch as safetensors
    N, M, L = 2, 8, 16
    model = nn.Sequential()
    model.add_module("q_proj", NMLinear.from_dense(make_linear(bias=False), N, M, L))
    path = tmp_path / "layer.safetensors"
    safetensors.save_file(model.state_dict(), str(path), metadata=sparse_metadata(model))
    with safetensors.safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        keys = set(f.keys())
    assert keys == {"q_proj.values", "q_proj.indices", "q_proj._extra_state"}
    assert (meta["N"], meta["M"], meta["L"]) == ("2", "8", "16") and meta["nmspmm_format"] == "1"
    fresh = nn.Sequential()
    fresh.add_module("q_proj", NMLinear(IN, OUT, int(meta["N"]), int(meta["M"]), int(meta["L"]), bias=False))
    fresh.load_state_dict(safetensors.load_file(str(path)))
    x = torch.randn(2, IN)
    assert torch.equal(fresh(x), model(x))
    assert fresh.q_proj.col_info is None and model.q_proj.col_info is None  # not part of the format


def test_load_checks_pattern_and_indices():
    layer = NMLinear.from_dense(make_linear(), 2, 4, 1)
    sd = layer.state_dict()
    # Same buffer shapes as 2:4 but another pattern: refused thanks to the recorded pattern.
    with pytest.raises(RuntimeError, match="saved with N:M:L=2:4:1"):
        NMLinear(IN, OUT, 4, 8, 1).load_state_dict(sd)
    # ... also without torch.save's metadata (safetensors): by _extra_state.
    with pytest.raises(RuntimeError, match="_extra_state: the checkpoint has N=2 but this layer has N=4"):
        NMLinear(IN, OUT, 4, 8, 1).load_state_dict(dict(sd))
    # Shape mismatch (another L): refused, naming the field.
    with pytest.raises(RuntimeError, match="the checkpoint has L=1 but this layer has L=2"):
        NMLinear(IN, OUT, 2, 4, 2).load_state_dict(dict(sd))
    no_extra = {k: v for k, v in sd.items() if k != "_extra_state"}
    with pytest.raises(RuntimeError, match=r"nmspmm: indices must have shape \[128, 128\]"):
        NMLinear(IN, OUT, 2, 4, 2).load_state_dict(no_extra, strict=False)
    # Out-of-range indices are refused when the metadata is rebuilt.
    bad = dict(sd)
    bad["indices"] = torch.full_like(sd["indices"], 7)
    with pytest.raises(RuntimeError, match=">= M=4"):
        NMLinear(IN, OUT, 2, 4, 1).load_state_dict(bad)
    # Packing metadata is not part of the format.
    extra = dict(sd, col_info=layer.col_info)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        NMLinear(IN, OUT, 2, 4, 1).load_state_dict(extra)


def test_meta_init_and_assign_load():
    layer = NMLinear.from_dense(make_linear(), 8, 32, 32)
    with torch.device("meta"):
        empty = NMLinear(IN, OUT, 8, 32, 32)
    empty.load_state_dict(layer.state_dict(), assign=True)
    assert not empty.values.is_meta and empty.col_info is None
    x = torch.randn(2, IN)
    assert torch.equal(empty(x), layer(x))


# ------------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("N,M,L", [(2, 4, 1), (4, 32, 128)], ids=["2:4-L1", "4:32-L128"])
def test_input_and_bias_grad_match_dense(N, M, L):
    lin = make_linear()
    layer = NMLinear.from_dense(lin, N, M, L)
    dense = nn.Linear(IN, OUT)
    with torch.no_grad():
        dense.weight.copy_(pruned_weight(lin, N, M, L))
        dense.bias.copy_(lin.bias)
    dense.weight.requires_grad_(False)
    x = torch.randn(2, 5, IN, requires_grad=True)
    xd = x.detach().clone().requires_grad_(True)
    g = torch.randn(2, 5, OUT)
    layer(x).backward(g)
    dense(xd).backward(g)
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, dense.bias.grad, rtol=1e-5, atol=1e-5)
    assert not layer.values.requires_grad and layer.values.grad is None


# ---------------------------------------------------------------------------- torch.compile
def test_compile_fullgraph_no_graph_breaks():
    torch._dynamo.reset()
    layer = NMLinear.from_dense(make_linear(), 16, 32, 32)
    x = torch.randn(4, IN)
    explain = torch._dynamo.explain(layer)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), layer(x))
    # Mixed dtype path and autograd through the compiled module.
    xh = torch.randn(3, IN, dtype=torch.bfloat16)
    assert compiled(xh).dtype == torch.bfloat16
    xg = torch.randn(4, IN, requires_grad=True)
    compiled(xg).sum().backward()
    torch.testing.assert_close(xg.grad, pruned_weight(make_linear(), 16, 32, 32).sum(0).expand(4, IN),
                               rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ sparsify_
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(256, 256, bias=False)
        self.k_proj = nn.Linear(256, 128, bias=True)
        self.v_proj = nn.Linear(256, 96, bias=False)   # out 96: does not fit L=64
        self.gate_proj = nn.Linear(200, 256)           # in 200: does not fit M=32
        self.other = nn.Linear(256, 256)               # not a default target


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens = nn.Embedding(64, 256)
        self.block = Block()
        self.lm_head = nn.Linear(256, 64, bias=False)
        self.alias = self.block  # the same module under a second name

    def forward(self, x):
        b = self.block
        h = b.q_proj(x) + b.other(x)
        return self.lm_head(h), b.k_proj(x), b.v_proj(x)


def test_sparsify_default_filter_report_and_warning(caplog):
    model = Toy()
    ref = copy.deepcopy(model)
    before = sum(nbytes(t) for t in list(model.parameters()) + list(model.buffers()))
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", logger="nmspmm"):
        warnings.simplefilter("always")
        out = sparsify_(model, 8, 32, 64)
    assert out is model
    msgs = [str(w.message) for w in caught if "nmspmm" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "block.v_proj" in msgs[0] and "block.gate_proj" in msgs[0] and "q_proj" not in msgs[0]
    assert isinstance(model.block.q_proj, NMLinear) and isinstance(model.block.k_proj, NMLinear)
    assert model.alias.q_proj is model.block.q_proj
    for name in ("v_proj", "gate_proj", "other"):
        assert type(getattr(model.block, name)) is nn.Linear
    assert type(model.lm_head) is nn.Linear and type(model.embed_tokens) is nn.Embedding

    report = sparsify_report(model)
    assert report is model._nmspmm_report and report.pattern == (8, 32, 64)
    assert [r.fqn for r in report.swapped] == ["block.q_proj", "block.k_proj"]
    assert [fqn for fqn, _ in report.skipped] == ["block.v_proj", "block.gate_proj"]
    q, k = model.block.q_proj, model.block.k_proj
    assert report.dense_bytes == (256 * 256 + 256 * 128 + 128) * 4
    assert report.sparse_bytes == q.weight_nbytes + k.weight_nbytes
    # 8:32 L=64: q values [64, 256] fp32 + indices [64, 4]; k values [64, 128] + indices [64, 2] + bias.
    assert report.sparse_bytes == 64 * 256 * 4 + 64 * 4 + 64 * 128 * 4 + 64 * 2 + 128 * 4
    assert report.model_bytes_before == before
    after = sum(nbytes(t) for t in list(model.parameters()) + list(model.buffers()))
    assert report.model_bytes_after == after
    assert after == before - report.dense_bytes + report.sparse_bytes + report.metadata_bytes
    assert report.resident_bytes == report.sparse_bytes + report.metadata_bytes  # canonical indices held
    assert any("swapped 2 Linear layers" in r.getMessage() for r in caplog.records)

    x = torch.randn(3, 256)
    with torch.no_grad():
        for fqn in ("block.q_proj", "block.k_proj"):
            w = ref.get_submodule(fqn).weight
            w.mul_(nmspmm.prune(w, 8, 32, 64))
        for a, b in zip(model(x), ref(x)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_sparsify_compressed_bytes_exact():
    model = Toy()
    sparsify_(model, 16, 32, 32, filter_fn=lambda m, fqn: fqn in ("block.q_proj", "block.k_proj"))
    q, k = model.block.q_proj, model.block.k_proj
    # values (fp32) + uint8 indices + bias: what the state dict holds.
    assert q.weight_nbytes == 128 * 256 * 4 + 128 * 8
    assert k.weight_nbytes == 128 * 128 * 4 + 128 * 4 + 128 * 4
    for layer in (q, k):
        sd_bytes = sum(nbytes(t) for k, t in layer.state_dict().items() if k != "_extra_state")
        assert sd_bytes == layer.weight_nbytes
        held = sum(nbytes(t) for t in list(layer.parameters()) + list(layer.buffers()))
        # Held in memory: that alone (no packing metadata unless enable_col_info() asks for it).
        assert held == layer.weight_nbytes and layer.metadata_nbytes == 0
        layer.enable_col_info()
        held = sum(nbytes(t) for t in list(layer.parameters()) + list(layer.buffers()))
        assert held == layer.weight_nbytes + layer.metadata_nbytes
        assert layer.metadata_nbytes == layer.col_info.numel() + layer.indices.numel()


def test_sparsify_filter_fn_never_lm_head_or_tied():
    model = Toy()
    model.tied = nn.Linear(64, 256, bias=False)
    model.tied.weight = model.embed_tokens.weight  # [64, 256] shared with the embedding
    seen = []

    def everything(module, fqn):
        seen.append(fqn)
        return True

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sparsify_(model, 2, 4, 1, filter_fn=everything)
    assert "lm_head" in seen and "block.other" in seen
    assert type(model.lm_head) is nn.Linear and type(model.tied) is nn.Linear
    assert isinstance(model.block.other, NMLinear) and isinstance(model.block.v_proj, NMLinear)
    assert isinstance(model.block.gate_proj, NMLinear)  # 200 % 4 == 0
    msgs = [str(w.message) for w in caught if "nmspmm" in str(w.message)]
    assert len(msgs) == 1 and "lm_head" in msgs[0] and "tied" in msgs[0]


def test_sparsify_empty_then_load():
    src = sparsify_(Toy(), 2, 8, 16, filter_fn=lambda m, fqn: fqn in ("block.q_proj", "block.k_proj"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dst = sparsify_(Toy(), 2, 8, 16, filter_fn=lambda m, fqn: fqn in ("block.q_proj", "block.k_proj"),
                        empty=True)
    assert torch.equal(dst.block.q_proj.values, torch.zeros_like(dst.block.q_proj.values))
    dst.load_state_dict(src.state_dict())
    x = torch.randn(2, 256)
    for a, b in zip(dst(x), src(x)):
        assert torch.equal(a, b)


def test_sparsify_root_linear_is_not_swapped():
    lin = make_linear()
    with pytest.warns(UserWarning, match="root module"):
        out = sparsify_(lin, 2, 4, 1, filter_fn=lambda m, fqn: True)
    assert out is lin and type(lin) is nn.Linear and sparsify_report(lin).swapped == []


def test_sparsify_rejects_bad_pattern_before_touching_model():
    model = Toy()
    with pytest.raises(ValueError):
        sparsify_(model, 2, 3, 1)
    assert type(model.block.q_proj) is nn.Linear and sparsify_report(model) is None


# ----------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=PATTERN_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_forward_matches_cpu(N, M, L, dtype):
    lin = make_linear()
    cpu = NMLinear.from_dense(lin, N, M, L)
    cpu.enable_col_info()  # opt-in packing metadata: it must follow the module to the GPU
    gpu = copy.deepcopy(cpu).cuda().to(dtype)
    for name in ("values", "indices", "col_info", "packed_indices", "bias"):
        assert getattr(gpu, name).is_cuda, name
    assert gpu.indices.dtype == torch.uint8 and gpu.col_info.dtype == torch.uint8
    assert torch.equal(gpu.col_info.cpu(), cpu.col_info)
    # The metadata built on the GPU from the indices equals the moved one.
    cols, packed = torch.ops.nmspmm.col_info(gpu.indices, N, M, L)
    assert torch.equal(cols, gpu.col_info) and torch.equal(packed, gpu.packed_indices)
    tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    for m in (1, 7, 32, 300):
        x = torch.randn(m, IN)
        w, b = pruned_weight(lin, N, M, L).to(dtype).double(), lin.bias.detach().to(dtype).double()
        ref = F.linear(x.to(dtype).double(), w, b)
        y = gpu(x.to(dtype).cuda())
        assert y.dtype == dtype
        torch.testing.assert_close(y.double().cpu(), ref.to(dtype).double(), rtol=tol, atol=tol)


@pytest.mark.cuda
@requires_cuda
def test_cuda_state_dict_cpu_to_gpu_and_grad():
    lin = make_linear()
    cpu = NMLinear.from_dense(lin, 8, 32, 32)
    gpu = NMLinear(IN, OUT, 8, 32, 32, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    assert gpu.values.is_cuda and gpu.col_info is None  # packing metadata is opt-in
    gpu.enable_col_info(), cpu.enable_col_info()
    assert gpu.col_info.is_cuda and torch.equal(gpu.col_info.cpu(), cpu.col_info)
    x = torch.randn(4, IN, device="cuda", requires_grad=True)
    gpu(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), pruned_weight(lin, 8, 32, 32).sum(0).expand(4, IN), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.cuda
@requires_cuda
def test_cuda_compile_inductor_fullgraph():
    torch._dynamo.reset()
    lin = make_linear()
    layer = NMLinear.from_dense(lin, 4, 32, 128).cuda()
    compiled = torch.compile(layer, fullgraph=True)
    for m in (1, 16, 64):
        x = torch.randn(m, IN, device="cuda")
        y = compiled(x)
        torch.testing.assert_close(y, layer(x), rtol=1e-5, atol=1e-5)
        assert_matches_ref64(y.cpu(), x.cpu(), lin, 4, 32, 128, tol=CUDA_F32_TOL)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("m", [1, 16, 128])
def test_cuda_graph_capture_layer(m):
    lin = make_linear()
    layer = NMLinear.from_dense(lin, 2, 8, 16).cuda()
    static_x = torch.randn(m, IN, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            layer(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    for _ in range(3):
        static_x.copy_(torch.randn(m, IN, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_y, layer(static_x), rtol=0, atol=0)
        assert_matches_ref64(static_y.cpu(), static_x.cpu(), lin, 2, 8, 16, tol=CUDA_F32_TOL)


def test_sparsify_report_counts_the_compact_2_4_form():
    # A 2:4 bf16 layer holds values and tc_meta (no indices): the report's resident bytes are what
    # the model holds; its state dict still carries the canonical indices (sparse_bytes).
    model = nn.Sequential(nn.Linear(256, 128, dtype=torch.bfloat16), nn.ReLU(), nn.Linear(128, 64, dtype=torch.bfloat16))
    before = sum(t.numel() * t.element_size() for t in model.parameters())
    sparsify_(model, 2, 4, 1, filter_fn=lambda mod, fqn: True)
    report = sparsify_report(model)
    layers = [model[0], model[2]]
    assert all(m.indices_compact for m in layers)
    assert report.resident_bytes == sum(m.resident_nbytes for m in layers)
    # values (in/2 x out x 2 B) + tc_meta (in/32 x out words) + bias, per layer
    assert report.resident_bytes == (128 * 128 * 2 + 8 * 128 * 4 + 128 * 2) + (64 * 64 * 2 + 4 * 64 * 4 + 64 * 2)
    assert report.sparse_bytes == sum(m.weight_nbytes for m in layers) == report.resident_bytes \
        - report.metadata_bytes + 128 * 128 + 64 * 64
    assert report.model_bytes_after == before - report.dense_bytes + report.resident_bytes
    assert "B held with the kernels' metadata" in str(report)
