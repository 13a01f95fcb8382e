"""The metadata of the 2:4 sparse tensor-core kernels (``sparse_tc_meta``, docs/format.md "Sparse
tensor-core metadata"): the op on every device against an independent plain-Python reference of the
documented layout, its checks, and how it travels with a weight (NMWeight, NMLinear, spmm)."""
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


@pytest.mark.parametrize("L,inp,out", CASES[:4])
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
