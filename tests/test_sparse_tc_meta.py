"""The metadata of the 2:4 sparse tensor-core kernels (``sparse_tc_meta``, docs/format.md "Sparse
tensor-core metadata"): the op on every device against an independent plain-Python reference of the
documented layout, its checks, and how it travels with a weight (NMWeight, NMLinear, spmm)."""
import io

import pytest
import torch
from torch.library import opcheck

import nmspmm

ops = torch.ops.nmspmm


def reference_meta(indices, L, in_features):
    """int32 [ceil(in/32), round_up(out/L, 4)] from the documented layout, word by word: nibble j
    of word [b, v] is (i0 & 3) | (i1 & 3) << 2 for window 8 b + j of vector v, else 0x4."""
    idx = indices.cpu().tolist()
    vectors = indices.shape[1]
    windows = in_features // 4
    rows, ld = (in_features + 31) // 32, (vectors + 3) // 4 * 4
    out = torch.empty(rows, ld, dtype=torch.int64)
    for b in range(rows):
        for v in range(ld):
            word = 0
            for j in range(8):
                g = 8 * b + j
                nib = 0x4
                if g < windows and v < vectors:
                    nib = (idx[2 * g][v] & 3) | ((idx[2 * g + 1][v] & 3) << 2)
                word |= nib << (4 * j)
            out[b, v] = word - (1 << 32) if word >= 1 << 31 else word
    return out.to(torch.int32)


CASES = [(1, 64, 8), (1, 36, 24), (2, 100, 16), (4, 96, 40), (32, 128, 96), (128, 68, 128), (64, 256, 192)]


@pytest.mark.parametrize("L,inp,out", CASES)
def test_matches_the_documented_layout(L, inp, out, device, nm):
    indices = nm.random_indices(inp, out, 2, 4, L, device)
    meta = ops.sparse_tc_meta(indices, 2, 4, L, inp)
    assert meta.dtype == torch.int32 and meta.device.type == torch.device(device).type
    assert torch.equal(meta.cpu(), reference_meta(indices, L, inp))


@pytest.mark.parametrize("L,inp,out", CASES)
def test_any_index_bytes_are_masked(L, inp, out, device):
    # Index bytes are read as b & 3, on every device alike (no validation: the masking guarantee).
    indices = torch.randint(0, 256, (inp // 2, out // L), dtype=torch.uint8, device=device)
    meta = ops.sparse_tc_meta(indices, 2, 4, L, inp)
    assert torch.equal(meta.cpu(), reference_meta(indices, L, inp))
    assert torch.equal(meta.cpu(), ops.sparse_tc_meta(indices.cpu(), 2, 4, L, inp))


def test_refusals(device):
    idx = torch.zeros(16, 8, dtype=torch.uint8, device=device)
    with pytest.raises(RuntimeError, match="for N:M = 2:4, got N=4, M=8"):
        ops.sparse_tc_meta(idx, 4, 8, 1, 32)
    with pytest.raises(RuntimeError, match="L must be a power of two"):
        ops.sparse_tc_meta(idx, 2, 4, 3, 32)
    with pytest.raises(RuntimeError, match="indices must be a 2-D uint8 tensor"):
        ops.sparse_tc_meta(idx.int(), 2, 4, 1, 32)
    with pytest.raises(RuntimeError, match="in_features must be a non-negative multiple of 4"):
        ops.sparse_tc_meta(idx, 2, 4, 1, 30)
    with pytest.raises(RuntimeError, match="in_features / 2 = 20 rows"):
        ops.sparse_tc_meta(idx, 2, 4, 1, 40)


def test_opcheck(device, nm):
    indices = nm.random_indices(72, 48, 2, 4, 2, device)
    opcheck(ops.sparse_tc_meta, (indices, 2, 4, 2, 72))
    opcheck(ops.sparse_tc_meta, (indices.t().contiguous().t(), 2, 4, 2, 72))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_spmm_with_and_without_it(dtype, nm):
    values, indices = nm.random_packed(64, 96, 2, 4, 2, dtype)
    meta = ops.sparse_tc_meta(indices, 2, 4, 2, 96)
    x = torch.randn(5, 96).to(dtype)
    assert torch.equal(ops.spmm(x, values, indices, 2, 4, 2, None, None, None, meta),
                       ops.spmm(x, values, indices, 2, 4, 2))
    stale = meta.clone()
    stale[0, 0] ^= 0x3
    with pytest.raises(RuntimeError, match="tc_meta does not match indices"):
        ops.spmm(x, values, indices, 2, 4, 2, None, None, None, stale)
    with pytest.raises(RuntimeError, match="tc_meta must be int32 of shape \\[3, 32\\]"):
        ops.spmm(x, values, indices, 2, 4, 2, None, None, None, meta[:, :8])
    with pytest.raises(RuntimeError, match="tc_meta is the metadata of 2:4 weights"):
        v4, i4 = nm.random_packed(64, 96, 4, 8, 2, dtype)
        ops.spmm(x, v4, i4, 4, 8, 2, None, None, None, meta)
    with pytest.raises(RuntimeError, match="tc_meta must be int32"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 2, None, None, None, "dense_expand_f32", 1, meta.long())


def test_weights_carry_it():
    w = torch.randn(64, 128)
    packed = nmspmm.compress(w, 2, 4, 16)
    assert torch.equal(packed.tc_meta, reference_meta(packed.indices, 16, 128))
    assert nmspmm.compress(w, 4, 8, 16).tc_meta is None
    assert packed.nbytes(with_metadata=True) == packed.nbytes() + packed.tc_meta.numel() * 4
    with pytest.raises(ValueError, match="tc_meta does not match indices"):
        nmspmm.NMWeight(packed.values, packed.indices, 2, 4, 16, (64, 128), tc_meta=packed.tc_meta ^ 1)
    with pytest.raises(TypeError, match="tc_meta must be an int32 tensor"):
        nmspmm.NMWeight(packed.values, packed.indices, 2, 4, 16, (64, 128), tc_meta=packed.tc_meta.long())
    layer = nmspmm.NMLinear.from_packed(packed)
    assert torch.equal(layer.tc_meta, packed.tc_meta)
    assert "tc_meta" not in layer.state_dict()
    other = nmspmm.NMLinear.from_packed(nmspmm.compress(torch.randn(64, 128), 2, 4, 16))
    layer.load_state_dict(other.state_dict())
    assert torch.equal(layer.tc_meta, reference_meta(other.indices, 16, 128))
    assert layer.metadata_nbytes == layer.tc_meta.numel() * 4
    x = torch.randn(3, 128)
    assert torch.equal(layer(x), other(x))
    assert nmspmm.NMLinear.from_packed(nmspmm.compress(w, 4, 8, 16)).tc_meta is None


def reference_meta_torch(indices, L, in_features):
    """The same layout from whole tensors (a second formulation, for larger shapes): the nibbles
    [G, V] of the row pairs, padded with 0x4 to [8 * ceil(G / 8), round_up(V, 4)], then each group
    of 8 windows shifted into one 32-bit word."""
    idx = indices.cpu().long() & 3
    nib = idx[0::2] | (idx[1::2] << 2)  # [G, V]
    G, V = nib.shape
    rows, ld = (in_features + 31) // 32, (V + 3) // 4 * 4
    padded = torch.full((rows * 8, ld), 0x4, dtype=torch.int64)
    padded[:G, :V] = nib
    shifts = (4 * torch.arange(8, dtype=torch.int64))[None, :, None]
    words = (padded.reshape(rows, 8, ld) << shifts).sum(1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


PAD_WORD = 0x44444444  # eight nibbles 0x4: positions {0, 1} (1145324612 as int32)


@pytest.mark.parametrize("L,inp,out", CASES)
def test_two_references_agree(L, inp, out):
    indices = torch.randint(0, 256, (inp // 2, out // L), dtype=torch.uint8)
    assert torch.equal(reference_meta_torch(indices, L, inp), reference_meta(indices, L, inp))


@pytest.mark.parametrize("L,inp,out", [(1, 1028, 1030), (2, 4100, 520), (4, 2048, 1036), (32, 4132, 4096),
                                       (128, 1000, 1152)])
def test_larger_shapes(L, inp, out, device):
    # in not / in a multiple of 32, V not / a multiple of 4, for every L of the list; corrupted bytes.
    indices = torch.randint(0, 256, (inp // 2, out // L), dtype=torch.uint8, device=device)
    meta = ops.sparse_tc_meta(indices, 2, 4, L, inp)
    assert tuple(meta.shape) == ((inp + 31) // 32, (out // L + 3) // 4 * 4)
    assert torch.equal(meta.cpu(), reference_meta_torch(indices, L, inp))


def test_padding_words_and_nibbles(device):
    # in = 36: 9 windows, so row 1 holds window 8 in nibble 0 and padding in nibbles 1..7;
    # out / L = 6 vectors, so words 6 and 7 of each row are padding.
    indices = torch.randint(0, 256, (18, 6), dtype=torch.uint8, device=device)
    meta = ops.sparse_tc_meta(indices, 2, 4, 1, 36).cpu()
    assert meta.shape == (2, 8)
    assert (meta[:, 6:] == PAD_WORD).all() and PAD_WORD == 1145324612
    for v in range(6):
        i0, i1 = int(indices[16, v]) & 3, int(indices[17, v]) & 3
        assert int(meta[1, v]) == 0x44444440 | i0 | (i1 << 2)
    assert ops.sparse_tc_meta(indices[:0], 2, 4, 1, 0).shape == (0, 8)


def test_the_worked_example_of_docs_format():
    W = torch.tensor([[1., -3., 2., 0.5, 4., 0., -1., 2.],
                      [2., 1., -2., 0., 3., 1., 0., -1.],
                      [0., 2., 1., -4., 1., -1., 3., 0.],
                      [1., -1., 0., 3., -2., 1., 2., 1.]])
    packed = nmspmm.compress(W, 2, 4, 2)
    # vector 0: windows (1, 2) and (0, 3); vector 1: (1, 3) and (0, 2); vectors 2, 3: padding.
    assert [w & 0xFFFFFFFF for w in packed.tc_meta.flatten().tolist()] == \
        [0x444444C9, 0x4444448D, PAD_WORD, PAD_WORD]
    assert packed.nbytes() == 72 and packed.nbytes(with_metadata=True) == 88
    assert packed.with_col_info().nbytes(with_metadata=True) == 160


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_compress_attaches_it_for_every_dtype(dtype, device):
    w = torch.randn(96, 72, device=device).to(dtype)
    packed = nmspmm.compress(w, 2, 4, 4)
    assert packed.tc_meta.dtype == torch.int32 and packed.tc_meta.device == packed.values.device
    assert torch.equal(packed.tc_meta.cpu(), reference_meta(packed.indices, 4, 72))
    moved = packed.to(dtype=torch.float32)
    assert moved.tc_meta.dtype == torch.int32 and torch.equal(moved.tc_meta, packed.tc_meta)
    on_meta = packed.to("meta")
    assert on_meta.tc_meta.is_meta and on_meta.tc_meta.dtype == torch.int32
    x = torch.randn(3, 72, device=device).to(dtype)
    assert torch.equal(nmspmm.spmm(x, packed), ops.spmm(x, packed.values, packed.indices, 2, 4, 4))


def test_spmm_with_plan_and_leading_dims(nm):
    values, indices = nm.random_packed(128, 64, 2, 4, 16)
    meta = ops.sparse_tc_meta(indices, 2, 4, 16, 64)
    x, bias = torch.randn(2, 3, 64), torch.randn(128)
    for kernel in ("generic_f32", "dense_expand_f32"):
        assert torch.equal(ops.spmm_with_plan(x, values, indices, 2, 4, 16, bias, None, None, kernel, 1, meta),
                           ops.spmm_with_plan(x, values, indices, 2, 4, 16, bias, None, None, kernel, 1))
    cols, packed = ops.col_info(indices, 2, 4, 16)
    assert torch.equal(ops.spmm(x, values, indices, 2, 4, 16, bias, cols, packed, meta),
                       ops.spmm(x, values, indices, 2, 4, 16, bias))
    with pytest.raises(RuntimeError, match="nmspmm.spmm: tc_meta does not match indices"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 16, bias, None, None, "generic_f32", 1, meta ^ 0x30)


def test_autograd_with_it(nm):
    values, indices = nm.random_packed(64, 96, 2, 4, 1)
    meta = ops.sparse_tc_meta(indices, 2, 4, 1, 96)
    x = torch.randn(4, 96, requires_grad=True)
    bias = torch.randn(64, requires_grad=True)
    g = torch.randn(4, 64)
    ops.spmm(x, values, indices, 2, 4, 1, bias, None, None, meta).backward(g)
    gx, gb = x.grad.clone(), bias.grad.clone()
    dense = nm.ref_decompress(values, indices, 2, 4, 1)
    torch.testing.assert_close(gx, g @ dense, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, g.sum(0))
    x.grad, bias.grad = None, None
    ops.spmm_with_plan(x, values, indices, 2, 4, 1, bias, None, None, "generic_f32", 1, meta).backward(g)
    assert torch.equal(x.grad, gx) and torch.equal(bias.grad, gb)


def test_layer_save_load_round_trip_rebuilds_it():
    layer = nmspmm.NMLinear.from_dense(torch.nn.Linear(96, 64), 2, 4, 2)
    empty = nmspmm.NMLinear(96, 64, 2, 4, 2)
    # An empty layer keeps positions {0, 1} everywhere: nibble 0x4 (= 0 | 1 << 2) in every word.
    assert (empty.tc_meta == PAD_WORD).all()
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    assert "tc_meta" not in sd
    empty.load_state_dict(sd)
    assert torch.equal(empty.tc_meta, reference_meta(layer.indices, 2, 96))
    x = torch.randn(3, 96)
    assert torch.equal(empty(x), layer(x))
    with pytest.raises(RuntimeError, match="Unexpected key.*tc_meta"):
        empty.load_state_dict(dict(sd, tc_meta=layer.tc_meta))
    with torch.device("meta"):
        lazy = nmspmm.NMLinear(96, 64, 2, 4, 2)
    assert lazy.tc_meta.is_meta
    lazy.load_state_dict(sd, assign=True)
    assert torch.equal(lazy.tc_meta, layer.tc_meta)


def test_layer_keeps_it_through_moves_and_edits():
    layer = nmspmm.NMLinear.from_dense(torch.nn.Linear(64, 32), 2, 4, 1)
    ref = layer.tc_meta.clone()
    for move in (lambda m: m.half(), lambda m: m.type(torch.float16), lambda m: m.double().float(),
                 lambda m: m.to(torch.bfloat16)):
        move(layer)
        assert layer.tc_meta.dtype == torch.int32 and torch.equal(layer.tc_meta, ref)
    # bf16: the compact form (positions in tc_meta alone), the same product as the canonical indices.
    assert layer.indices_compact and tuple(layer.indices.shape) == (0, 32)
    x = torch.randn(2, 64).to(torch.bfloat16)
    assert torch.equal(layer(x), ops.spmm(x, layer.values, layer.canonical_indices(), 2, 4, 1, layer.bias.detach()))
    # New indices assigned, then rebuild_metadata: the metadata follows and the layer is compact again.
    idx = layer.canonical_indices().clone()
    idx[0::2, 3], idx[1::2, 3] = 0, 3
    layer.indices = idx
    layer.rebuild_metadata()
    assert layer.indices_compact and torch.equal(layer.canonical_indices(), idx)
    assert torch.equal(layer.tc_meta, reference_meta(idx, 1, 64)) and not torch.equal(layer.tc_meta, ref)
    layer.enable_col_info()  # the packing kernels read the canonical indices: the layer holds them again
    assert not layer.indices_compact and torch.equal(layer.indices, idx)
    cols, packed = ops.col_info(layer.indices, 2, 4, 1)
    assert layer.metadata_nbytes == layer.tc_meta.numel() * 4 + cols.numel() + packed.numel()
    layer.to("meta")
    assert layer.tc_meta.is_meta and layer.tc_meta.dtype == torch.int32


def test_tensor_parallel_shards_carry_their_own():
    from nmspmm.parallel import _split

    layer = nmspmm.NMLinear.from_dense(torch.nn.Linear(128, 64), 2, 4, 4)
    x = torch.randn(3, 128)
    for rank in range(2):
        col = _split(layer, "column", rank, 2, None)
        assert torch.equal(col.tc_meta, reference_meta(col.indices, 4, 128))
        row = _split(layer, "row", rank, 2, None)
        assert torch.equal(row.tc_meta, reference_meta(row.indices, 4, 64))
        assert torch.equal(col(x), layer(x)[:, rank * 32:(rank + 1) * 32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)  # bf16: the compact form
def test_compiled_2_4_layer_passes_it(dtype):
    torch._dynamo.reset()
    layer = nmspmm.NMLinear.from_dense(torch.nn.Linear(96, 64), 2, 4, 2).to(dtype)
    assert layer.indices_compact == (dtype == torch.bfloat16)
    explain = torch._dynamo.explain(layer)(torch.randn(4, 96, dtype=dtype))
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend="aot_eager")
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for m in (3, 7):
        x = torch.randn(m, 96, dtype=dtype, requires_grad=True)
        y = compiled(x)
        assert torch.equal(y, layer(x))
        y.sum().backward()
        torch.testing.assert_close(x.grad, layer.to_dense().sum(0).expand(m, 96), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("L", [1, 4, 32])
def test_layer_holds_the_compact_form(dtype, L, device, nm):
    lin = torch.nn.Linear(256, 128, device=device, dtype=dtype)
    mask = nm.ref_prune(lin.weight, 2, 4, L)
    layer = nmspmm.NMLinear.from_dense(lin, 2, 4, L, mask=mask)
    canonical = ops.compress(lin.weight.detach(), mask, 2, 4, L)[1]
    assert layer.indices_compact and tuple(layer.indices.shape) == (0, 128 // L)
    assert torch.equal(layer.canonical_indices(), canonical) and torch.equal(layer.packed.indices, canonical)
    # Resident: values, tc_meta and bias; the bound is values + 2 bits per kept value
    # (L = 1) or + one word per vector per 32 inputs (L > 1), + 1%.
    values_bytes = 128 * 128 * 2
    meta_bytes = 8 * ((128 // L + 3) // 4 * 4) * 4
    assert layer.resident_nbytes == values_bytes + meta_bytes + 128 * 2
    bound = values_bytes + (128 * 128 // 4 if L == 1 else 8 * (128 // L) * 4)
    assert values_bytes + meta_bytes <= 1.01 * bound
    assert layer.weight_nbytes == values_bytes + canonical.numel() + 128 * 2  # the state dict's bytes
    torch.testing.assert_close(layer.to_dense().double(), nm.ref_pruned_dense64(lin.weight, 2, 4, L, mask),
                               rtol=0, atol=0)
    x = torch.randn(5, 256, device=device, dtype=dtype)
    y = layer(x)
    # The state dict holds the canonical indices; a load rebuilds tc_meta and compacts again.
    sd = layer.state_dict()
    assert torch.equal(sd["indices"], canonical) and "tc_meta" not in sd
    fresh = nmspmm.NMLinear(256, 128, 2, 4, L, device=device, dtype=dtype)
    fresh.load_state_dict(sd)
    assert fresh.indices_compact and torch.equal(fresh.tc_meta, layer.tc_meta) and torch.equal(fresh(x), y)
    # A refused load leaves the layer as it was.
    bad = dict(sd, indices=sd["indices"][:, :1].contiguous())
    with pytest.raises(RuntimeError, match="indices must have shape"):
        fresh.load_state_dict(bad)
    assert fresh.indices_compact and torch.equal(fresh(x), y)
    # float32 holds the canonical indices (its kernels read them); back to 16 bits compacts again.
    layer.float()
    assert not layer.indices_compact and torch.equal(layer.indices, canonical)
    layer.to(dtype)
    assert layer.indices_compact and torch.equal(layer(x), y)


def test_other_layers_keep_the_canonical_indices():
    for (N, M, L, dtype) in ((2, 4, 1, torch.float32), (16, 32, 1, torch.bfloat16), (4, 8, 4, torch.float16)):
        layer = nmspmm.NMLinear.from_dense(torch.nn.Linear(64, 32, dtype=dtype), N, M, L)
        assert not layer.indices_compact and tuple(layer.indices.shape) == (64 // M * N, 32 // L)
        assert layer.canonical_indices() is layer.indices


# ---------------------------------------------------------------------------------------------
# The compact 2:4 form: indices [0, out/L], the positions in tc_meta alone (docs/format.md).


@pytest.mark.parametrize("L,inp,out", CASES)
def test_sparse_tc_indices_inverts_it(L, inp, out, device, nm):
    indices = nm.random_indices(inp, out, 2, 4, L, device)
    back = ops.sparse_tc_indices(ops.sparse_tc_meta(indices, 2, 4, L, inp), L, inp, out)
    assert back.dtype == torch.uint8 and back.device == indices.device and back.is_contiguous()
    assert torch.equal(back, indices)
    # Any index bytes: tc_meta holds b & 3, and so do the indices rebuilt from it.
    raw = torch.randint(0, 256, (inp // 2, out // L), dtype=torch.uint8, device=device)
    assert torch.equal(ops.sparse_tc_indices(ops.sparse_tc_meta(raw, 2, 4, L, inp), L, inp, out), raw & 3)
    # Padding words and nibbles are not read.
    meta = ops.sparse_tc_meta(indices, 2, 4, L, inp)
    if meta.shape[1] > out // L:
        meta[:, out // L:] = -1
    assert torch.equal(ops.sparse_tc_indices(meta, L, inp, out), indices)


def test_sparse_tc_indices_refusals_and_opcheck(device, nm):
    meta = ops.sparse_tc_meta(nm.random_indices(96, 48, 2, 4, 2, device), 2, 4, 2, 96)
    with pytest.raises(RuntimeError, match="tc_meta must be int32 of shape \\[3, 20\\]"):
        ops.sparse_tc_indices(meta, 2, 96, 40)
    with pytest.raises(RuntimeError, match="tc_meta must be int32"):
        ops.sparse_tc_indices(meta.long(), 2, 96, 48)
    with pytest.raises(RuntimeError, match="L must be a power of two"):
        ops.sparse_tc_indices(meta, 3, 96, 48)
    with pytest.raises(RuntimeError, match="in_features must be a non-negative multiple of 4"):
        ops.sparse_tc_indices(meta, 2, 94, 48)
    opcheck(ops.sparse_tc_indices, (meta, 2, 96, 48))
    fake = ops.sparse_tc_indices(meta.to("meta"), 2, 96, 48)
    assert fake.is_meta and tuple(fake.shape) == (48, 24) and fake.dtype == torch.uint8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("L", [1, 4, 32])
def test_spmm_compact_form(dtype, L, device, nm):
    # The heuristic's plan on the compact form, against fp64, and the same as the canonical form
    # where both run one plan (the CPU reference; forced plans on CUDA below).
    values, indices = nm.random_packed(128, 160, 2, 4, L, dtype, device)
    meta = ops.sparse_tc_meta(indices, 2, 4, L, 160)
    compact = indices[:0]
    bias = torch.randn(128, device=device).to(dtype)
    for shape in ((1, 160), (3, 7, 160), (33, 160)):
        x = torch.randn(shape, device=device).to(dtype)
        y = ops.spmm(x, values, compact, 2, 4, L, bias, None, None, meta)
        ref, scale = nm.ref_spmm64(x, values, indices, 2, 4, L, bias)
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        nm.assert_close_to_ref(y, ref, scale, rtol=tol, atol_rel=tol)
        if device.type == "cpu":
            assert torch.equal(y, ops.spmm(x, values, indices, 2, 4, L, bias, None, None, meta))


def test_spmm_compact_form_refusals(nm):
    values, indices = nm.random_packed(64, 96, 2, 4, 2, torch.bfloat16)
    meta = ops.sparse_tc_meta(indices, 2, 4, 2, 96)
    x = torch.randn(5, 96).to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="compact 2:4 form\\) need the weight's tc_meta"):
        ops.spmm(x, values, indices[:0], 2, 4, 2)
    with pytest.raises(RuntimeError, match="compact 2:4 indices must have shape \\[0, 32\\]"):
        ops.spmm(x, values, indices[:0, :8], 2, 4, 2, None, None, None, meta)
    v4, i4 = nm.random_packed(64, 96, 4, 8, 2, torch.bfloat16)
    with pytest.raises(RuntimeError, match="are for N:M = 2:4, got 4:8"):
        ops.spmm(x, v4, i4[:0], 4, 8, 2, None, None, None, meta)
    cols, packed = ops.col_info(indices, 2, 4, 2)
    with pytest.raises(RuntimeError, match="col_info needs the canonical indices"):
        ops.spmm(x, values, indices[:0], 2, 4, 2, None, cols, packed, meta)
    # The CPU reference checks the words against the positions they hold (padding included) and
    # the positions as it checks indices.
    v8, i8 = nm.random_packed(48, 96, 2, 4, 8, torch.bfloat16)
    m8 = ops.sparse_tc_meta(i8, 2, 4, 8, 96)
    stale = m8.clone()
    stale[:, 6:] = 0
    with pytest.raises(RuntimeError, match="tc_meta does not match indices"):
        ops.spmm(x, v8, i8[:0], 2, 4, 8, None, None, None, stale)
    descending = m8.clone()
    descending[0, 0] = (descending[0, 0] & ~0xF) | 0x6  # window 0 of vector 0 keeps (2, 1)
    with pytest.raises(RuntimeError, match="ascending"):
        ops.spmm(x, v8, i8[:0], 2, 4, 8, None, None, None, descending)
    # The fake kernel refuses what the backends refuse.
    with pytest.raises(Exception, match="compact 2:4 form\\) need the weight's tc_meta"):
        ops.spmm(x.to("meta"), values.to("meta"), indices[:0].to("meta"), 2, 4, 2)
    y = ops.spmm(x.to("meta"), values.to("meta"), indices[:0].to("meta"), 2, 4, 2, None, None, None, meta.to("meta"))
    assert y.is_meta and tuple(y.shape) == (5, 64)


def test_spmm_compact_form_opcheck_and_autograd(nm):
    values, indices = nm.random_packed(64, 96, 2, 4, 1, torch.bfloat16)
    meta = ops.sparse_tc_meta(indices, 2, 4, 1, 96)
    x = torch.randn(4, 96).to(torch.bfloat16)
    opcheck(ops.spmm, (x, values, indices[:0], 2, 4, 1, None, None, None, meta))
    opcheck(ops.spmm_with_plan, (x, values, indices[:0], 2, 4, 1, None, None, None, "generic_f32", 1, meta))
    xr = x.float().requires_grad_()
    bias = torch.randn(64, requires_grad=True)
    g = torch.randn(4, 64)
    ops.spmm(xr, values.float(), indices[:0], 2, 4, 1, bias, None, None, meta).backward(g)
    torch.testing.assert_close(xr.grad, g @ nm.ref_decompress(values.float(), indices, 2, 4, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bias.grad, g.sum(0))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("L", [1, 16, 32])
def test_every_plan_runs_the_compact_form_as_the_canonical(dtype, L, nm):
    # Plans that read tc_meta ignore the indices; the others run on the indices rebuilt for the call.
    # Same kernel, same inputs: the same bits.
    cc = torch.cuda.get_device_capability()
    values, indices = nm.random_packed(256, 512, 2, 4, L, dtype, "cuda")
    meta = ops.sparse_tc_meta(indices, 2, 4, L, 512)
    bias = torch.randn(256, device="cuda").to(dtype)
    ran = set()
    for m in (1, 8, 16, 64, 300):
        x = torch.randn(m, 512, device="cuda").to(dtype)
        for name in ops.kernels():
            info = ops.kernel_info(name)
            if info[1] not in ("float32", str(dtype).removeprefix("torch.")):
                continue
            if info[10] or not ops.kernel_supports(name, m, 2, 4, L, False, cc[0] * 10 + cc[1]):
                continue
            try:
                a = ops.spmm_with_plan(x, values, indices, 2, 4, L, bias, None, None, name, 1, meta)
            except RuntimeError:  # a plan the binding refuses for the call refuses both forms
                with pytest.raises(RuntimeError):
                    ops.spmm_with_plan(x, values, indices[:0], 2, 4, L, bias, None, None, name, 1, meta)
                continue
            b = ops.spmm_with_plan(x, values, indices[:0], 2, 4, L, bias, None, None, name, 1, meta)
            assert torch.equal(a, b), (name, m)
            ran.add(info[0])
    assert len(ran) >= 3, ran


def test_compact_form_only_where_the_kernels_read_tc_meta(monkeypatch):
    # GPUs other than compute capability 9.0 plan 2:4 kernels that read the indices (rebuilt on every
    # call from the compact form), so a layer there keeps them; the CPU and sm_90 compact.
    from nmspmm.nn import _compact_device

    assert _compact_device(torch.device("cpu")) and not _compact_device(torch.device("meta"))
    for cc, want in (((8, 0), False), ((8, 9), False), ((9, 0), True), ((10, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, cc=cc: cc)
        assert _compact_device(torch.device("cuda", 0)) == want, cc
