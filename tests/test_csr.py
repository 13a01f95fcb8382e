"""Unstructured CSR weights (nmspmm.CSRWeight, torch.ops.nmspmm.csr_spmm, CSRLinear) against an
independent reference: an fp64 dense product with the weight built entry by entry from the CSR
fields in plain Python/torch indexing. Fresh random data per test (conftest seeds); tolerances are
stated per dtype. Every test runs on the CPU and, where there is one, on the GPU."""
import pytest
import torch
from torch.library import opcheck

import nmspmm
from nmspmm.pruning import unstructured_mask

ops = torch.ops.nmspmm
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Relative Frobenius error bound against the fp64 reference: fp32 accumulation over <= 4096 terms,
# inputs rounded to the dtype before the product (so only the output rounding and the fp32 sums).
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def dense_reference(crow, col, vals, shape):
    """W[out, in] in fp64 from the CSR fields, entry by entry (no nmspmm code)."""
    out, inp = shape
    w = torch.zeros(out, inp, dtype=torch.float64)
    crow, col, vals = crow.cpu().tolist(), col.cpu().tolist(), vals.cpu().double().tolist()
    for j in range(out):
        for p in range(crow[j], crow[j + 1]):
            w[j, col[p]] += vals[p]
    return w


def random_csr(out, inp, density, dtype, device, rows="uniform"):
    """A random CSR weight: Bernoulli(density) entries, or heavy-tailed rows (a few near-dense)."""
    if rows == "uniform":
        mask = torch.rand(out, inp) < density
    else:  # heavy-tailed nonzeros per row: row j keeps a fraction drawn from a Pareto-like law
        frac = (torch.rand(out, 1) ** 6).clamp(max=1.0)
        mask = torch.rand(out, inp) < frac
    weight = torch.randn(out, inp).to(dtype)
    return nmspmm.CSRWeight.from_dense(weight.to(device), mask=mask.to(device))


def check_product(x, w, bias, y):
    ref = x.double().cpu() @ dense_reference(w.crow_indices, w.col_indices, w.values, w.shape).T
    if bias is not None:
        ref = ref + bias.double().cpu()
    err = (y.double().cpu() - ref).norm() / ref.norm().clamp_min(1e-30)
    assert err <= TOL[x.dtype], f"relative error {err:.3e} above {TOL[x.dtype]:.1e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m", [1, 3, 8, 12, 17, 40, 64, 100])
@pytest.mark.parametrize("density", [0.02, 0.1, 0.5])
def test_csr_spmm_matches_fp64_reference(dtype, m, density, device):
    # m <= 8 runs csr_spmm_warp_row on the GPU, or csr_spmm_x_shared (x in shared memory, 1 / 2 / 4 / 8
    # token slots) where max_row_nnz says the rows are uneven (forced here by a large hint); the rest
    # csr_spmm_xt_gather with groups of 2 / 4 / 8 / 16 lanes (16 / 32 / 64 / 128 tokens; fp32 half that),
    # its blocks balanced by nonzeros under the large hint.
    w = random_csr(96, 160, density, dtype, device)
    x = torch.randn(m, 160).to(dtype).to(device)
    bias = torch.randn(96).to(dtype).to(device)
    check_product(x, w, bias, nmspmm.spmm(x, w, bias))
    check_product(x, w, None, nmspmm.csr_spmm(x, w))
    check_product(x, w, bias, ops.csr_spmm(x, w.crow_indices, w.col_indices, w.values, 160, bias, 2**31 - 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_csr_spmm_edge_matrices(dtype, device):
    out, inp = 40, 72
    cases = {
        "all-zero": torch.zeros(out, inp, dtype=torch.bool),
        "single-nonzero": torch.zeros(out, inp, dtype=torch.bool).index_put_((torch.tensor([7]), torch.tensor([71])),
                                                                            torch.tensor(True)),
        "one-dense-row": (torch.rand(out, inp) < 0.05).index_fill_(0, torch.tensor([3]), True),
        "empty-rows": (torch.rand(out, inp) < 0.3) & (torch.arange(out)[:, None] % 3 == 0),
        "dense": torch.ones(out, inp, dtype=torch.bool),
    }
    x = torch.randn(5, inp).to(dtype).to(device)
    for name, mask in cases.items():
        w = nmspmm.CSRWeight.from_dense(torch.randn(out, inp).to(dtype).to(device), mask=mask.to(device))
        assert w.nnz == int(mask.sum()), name
        check_product(x, w, None, nmspmm.spmm(x, w))


@pytest.mark.parametrize("rows", ["uniform", "heavy-tailed"])
def test_csr_spmm_long_rows_and_3d_strided_input(rows, device):
    w = random_csr(64, 1000, 0.3, torch.float32, device, rows=rows)
    base = torch.randn(2, 3, 2000, device=device)
    x = base[..., ::2]  # a strided view: columns 2 elements apart
    y = nmspmm.spmm(x, w)
    assert y.shape == (2, 3, 64)
    check_product(x.reshape(-1, 1000), w, None, y.reshape(-1, 64))


@pytest.mark.parametrize("dtype,inp,m", [(torch.bfloat16, 7000, 20), (torch.float32, 7000, 11),
                                         (torch.float32, 13000, 9), (torch.float32, 26000, 9),
                                         (torch.bfloat16, 13000, 8), (torch.bfloat16, 14000, 8),
                                         (torch.bfloat16, 40000, 4), (torch.float32, 13000, 8)])
def test_csr_spmm_wide_inputs(dtype, inp, m, device):
    # Rows of thousands of inputs, token counts past one chunk of 8 (tails of 1-4 tokens). With the
    # balanced kernels asked for (a large max_row_nnz) on the GPU (227 KB of shared memory per block):
    # bf16 13000 x 8 tokens is csr_spmm_x_shared near its limit; bf16 14000 x 8, 40000 x 4 and fp32
    # 13000 x 8 csr_spmm_xt_gather with blocks balanced by nonzeros (x does not fit), as every m > 8.
    w = random_csr(24, inp, 0.05, dtype, device)
    x = torch.randn(m, inp).to(dtype).to(device)
    check_product(x, w, None, nmspmm.spmm(x, w))
    check_product(x, w, None, ops.csr_spmm(x, w.crow_indices, w.col_indices, w.values, inp, None, 2**31 - 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("out,inp,m,rows", [(96, 300, 40, "uniform"), (70, 1000, 130, "heavy-tailed"),
                                            (33, 129, 257, "uniform"), (2048, 300, 2200, "uniform")])
def test_csr_spmm_token_tiles(dtype, out, inp, m, rows, device):
    # csr_spmm_xt_gather's shapes: token tiles of 64 / 128 (fp32: 32 / 64) with a tail, row blocks of
    # 8 or 16 with a tail, a heavy-tailed block whose long rows spread over several groups, and at
    # 2048 x 2200 many blocks.
    w = random_csr(out, inp, 0.1, dtype, device, rows=rows)
    x = torch.randn(m, inp).to(dtype).to(device)
    bias = torch.randn(out).to(dtype).to(device)
    check_product(x, w, bias, nmspmm.spmm(x, w, bias))


@pytest.mark.parametrize("m", [2, 40, 300])
def test_csr_spmm_sums_unsorted_and_duplicate_columns(m, device):
    # The op takes column indices in any order and sums repeated ones (CSRWeight stores them sorted
    # and unique, so this is the raw op's contract). Each row spans several of its block's groups, so
    # repeats fall in different groups' partial sums.
    g = torch.Generator().manual_seed(11)
    out, inp, per_row = 20, 700, 50
    crow = torch.arange(out + 1) * per_row
    col = torch.randint(0, inp, (out * per_row,), generator=g)
    col[5:15] = col[4]  # repeats within row 0
    vals = torch.randn(out * per_row, generator=g)
    x = torch.randn(m, inp, generator=g)
    ref = x.double() @ dense_reference(crow, col, vals, (out, inp)).T
    y = ops.csr_spmm(x.to(device), crow.int().to(device), col.int().to(device), vals.to(device), inp)
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [1, 140])
def test_csr_spmm_masks_non_finite_inputs_it_does_not_read(m, device):
    # Row 0 keeps input 1 only: a NaN at input 0 must not reach y[:, 0] (the CSR product reads only
    # the stored columns), while it does reach the rows that store input 0.
    dense = torch.zeros(3, 4)
    dense[0, 1], dense[1, 0], dense[2, 3] = 2.0, 1.0, -1.0
    w = nmspmm.CSRWeight.from_dense(dense.to(device), mask=(dense != 0).to(device))
    x = torch.tensor([[float("nan"), 3.0, 5.0, 7.0]], device=device).expand(m, 4)
    y = nmspmm.spmm(x, w).cpu()
    assert (y[:, 0] == 6.0).all() and (y[:, 2] == -7.0).all()
    assert torch.isnan(y[:, 1]).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_csr_weight_round_trips(dtype, device):
    w = random_csr(48, 80, 0.2, dtype, device)
    dense = w.to_dense()
    assert dense.dtype == dtype and dense.shape == (48, 80)
    assert torch.equal(dense.double().cpu(), dense_reference(w.crow_indices, w.col_indices, w.values, w.shape))
    t = w.to_sparse_csr()
    assert t.layout == torch.sparse_csr and torch.equal(t.to_dense(), dense)
    back = nmspmm.CSRWeight.from_sparse(t)
    for a, b in ((back.crow_indices, w.crow_indices), (back.col_indices, w.col_indices), (back.values, w.values)):
        assert torch.equal(a, b)
    assert w.nbytes() == w.nnz * (dtype.itemsize + 4) + (48 + 1) * 4
    assert abs(w.density - w.nnz / (48 * 80)) < 1e-12


def test_from_sparse_sums_duplicates_and_sorts(device):
    # COO with an unsorted row and a duplicate (1, 2): from_sparse sums it, as coalesce does.
    idx = torch.tensor([[1, 0, 1, 1], [2, 3, 0, 2]])
    vals = torch.tensor([1.0, 2.0, 4.0, 0.5])
    w = nmspmm.CSRWeight.from_sparse(torch.sparse_coo_tensor(idx, vals, (2, 4)).to(device))
    assert w.crow_indices.tolist() == [0, 1, 3]
    assert w.col_indices.tolist() == [3, 0, 2]
    assert w.values.tolist() == [2.0, 4.0, 1.5]
    csr = torch.sparse_csr_tensor(torch.tensor([0, 1, 3]), torch.tensor([3, 0, 2]), torch.tensor([2.0, 4.0, 1.5]),
                                  size=(2, 4)).to(device)
    assert torch.equal(nmspmm.CSRWeight.from_sparse(csr).to_dense(), w.to_dense())


def _fields(device):
    return (torch.tensor([0, 2, 3], dtype=torch.int32, device=device),
            torch.tensor([0, 2, 1], dtype=torch.int32, device=device),
            torch.tensor([1.0, 2.0, 3.0], device=device))


@pytest.mark.parametrize("case,exc,match", [
    ("crow-first", ValueError, "crow_indices\\[0\\] must be 0"),
    ("crow-last", ValueError, "must equal nnz"),
    ("crow-decreasing", ValueError, "non-decreasing"),
    ("col-range", ValueError, "col_indices must be in"),
    ("col-negative", ValueError, "col_indices must be in"),
    ("col-unsorted", ValueError, "strictly ascending"),
    ("col-duplicate", ValueError, "strictly ascending"),
    ("crow-length", ValueError, "out_features \\+ 1"),
    ("int64", TypeError, "int32"),
    ("values-int", TypeError, "values must be"),
    ("lengths", ValueError, "entries but values has"),
])
def test_csr_weight_refuses_bad_index_data(case, exc, match, device):
    crow, col, vals = _fields(device)
    shape = (2, 3)
    if case == "crow-first":
        crow = crow.clone()
        crow[0] = 1
    elif case == "crow-last":
        crow = crow.clone()
        crow[2] = 2
    elif case == "crow-decreasing":
        crow = torch.tensor([0, 3, 2, 3], dtype=torch.int32, device=device)
        shape = (3, 3)
    elif case == "col-range":
        col = torch.tensor([0, 3, 1], dtype=torch.int32, device=device)
    elif case == "col-negative":
        col = torch.tensor([-1, 2, 1], dtype=torch.int32, device=device)
    elif case == "col-unsorted":
        col = torch.tensor([2, 0, 1], dtype=torch.int32, device=device)
    elif case == "col-duplicate":
        col = torch.tensor([2, 2, 1], dtype=torch.int32, device=device)
    elif case == "crow-length":
        shape = (3, 3)
    elif case == "int64":
        crow = crow.long()
    elif case == "values-int":
        vals = vals.int()
    elif case == "lengths":
        vals = vals[:2]
    with pytest.raises(exc, match=match):
        nmspmm.CSRWeight(crow, col, vals, shape)
    nmspmm.CSRWeight(*_fields(device), (2, 3))  # the unmodified fields are accepted


@pytest.mark.parametrize("hint", [-1, 2**31 - 1])
@pytest.mark.parametrize("m", [1, 3, 8, 20, 150])
@pytest.mark.parametrize("case", ["cols-out-of-range", "crow-past-nnz", "crow-decreasing", "crow-negative"])
def test_csr_spmm_masks_corrupted_indices_like_the_reference(case, m, hint, device):
    # The op itself checks no index data (the weight was checked where it entered); given corrupted
    # data anyway it reads nothing outside its inputs and computes the documented masked product:
    # a row's range clamped to [0, nnz], columns outside [0, in) skipped. The CPU loop below is that
    # rule written independently.
    g = torch.Generator().manual_seed(5)
    out, inp, nnz = 12, 20, 40
    crow = torch.sort(torch.randint(0, nnz + 1, (out + 1,), generator=g)).values
    crow[0], crow[-1] = 0, nnz
    col = torch.randint(0, inp, (nnz,), generator=g)
    if case == "cols-out-of-range":
        col[::3] = torch.tensor([inp, -5, 2**31 - 1, -(2**31)]).repeat(nnz)[: col[::3].numel()]
    elif case == "crow-past-nnz":
        crow[5:] = nnz + 1000
    elif case == "crow-decreasing":
        crow[4], crow[5] = 30, 3
    elif case == "crow-negative":
        crow[2:4] = -7
    vals = torch.randn(nnz, generator=g)
    x = torch.randn(m, inp, generator=g)
    ref = torch.zeros(m, out, dtype=torch.float64)
    for j in range(out):
        b = min(max(int(crow[j]), 0), nnz)
        e = min(max(int(crow[j + 1]), b), nnz)
        for p in range(b, e):
            if 0 <= int(col[p]) < inp:
                ref[:, j] += vals[p].double() * x[:, int(col[p])].double()
    # hint: max_row_nnz, unknown (csr_spmm_warp_row for m <= 8) or large (csr_spmm_x_shared).
    y = ops.csr_spmm(x.to(device), crow.int().to(device), col.int().to(device), vals.to(device), inp, None, hint)
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-5, atol=1e-5)


def masked_reference(x, crow, col, vals, inp):
    """The documented masked product for any index content, vectorised in plain torch: row j sums
    the entries of its range clamped to [0, nnz] whose column lies in [0, inp)."""
    nnz, out = vals.numel(), crow.numel() - 1
    b = crow[:-1].long().clamp(0, nnz)
    e = torch.maximum(crow[1:].long().clamp(max=nnz), b)
    rows = torch.repeat_interleave(torch.arange(out), e - b)
    starts = torch.repeat_interleave(b - torch.cumsum(e - b, 0) + (e - b), e - b)
    pos = starts + torch.arange(rows.numel())
    c = col.long()[pos]
    keep = (c >= 0) & (c < inp)
    w = torch.zeros(out, inp, dtype=torch.float64)
    w.index_put_((rows[keep], c[keep]), vals.double()[pos][keep], accumulate=True)
    return x.double() @ w.T


@pytest.mark.parametrize("m", [1, 5, 8, 12, 40])
@pytest.mark.parametrize("case", ["random-crow", "many-rows", "one-long-row"])
def test_csr_spmm_row_ranges_over_many_blocks(case, m, device):
    # Shapes where the blocks split the rows by nonzero count (asked for by a large max_row_nnz;
    # csr_spmm_x_shared at m <= 8, one block per SM, csr_spmm_xt_gather above): a crow of random
    # values (the blocks' ranges must still partition the rows), blocks of several tiles of 256 rows
    # (xt_gather: 256 / 128 rows at m = 12 / 40), and one row longer than a block's share.
    g = torch.Generator().manual_seed(3 + m)
    if case == "random-crow":
        out, inp, nnz = 3000, 64, 20000
        crow = torch.randint(-50, nnz + 50, (out + 1,), generator=g)
        crow[::7] = torch.sort(crow[::7]).values
    elif case == "many-rows":
        out, inp = 90000, 48
        lens = (torch.rand(out, generator=g) ** 4 * 6).long()
        crow = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lens, 0)])
        nnz = int(crow[-1])
    else:
        out, inp = 2000, 4096
        lens = torch.full((out,), 8, dtype=torch.long)
        lens[1234] = inp
        crow = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lens, 0)])
        nnz = int(crow[-1])
    col = torch.randint(0, inp, (nnz,), generator=g)
    vals = torch.randn(nnz, generator=g)
    x = torch.randn(m, inp, generator=g)
    ref = masked_reference(x, crow, col, vals, inp)
    # fp32 sums of up to 20,000 terms: each output within 2e-6 of its terms' absolute sum (a missed
    # or doubled entry of typical size is off by 1 / terms of that sum, 5e-5 or more here).
    bound = 2e-6 * masked_reference(x.abs(), crow, col, vals.abs(), inp) + 1e-6
    y = ops.csr_spmm(x.to(device), crow.int().to(device), col.int().to(device), vals.to(device), inp, None,
                     2**31 - 1)
    err = (y.cpu().double() - ref).abs()
    assert (err <= bound).all(), f"{int((err > bound).sum())} outputs off, worst {float((err / bound).max()):.3g} x bound"


@pytest.mark.parametrize("hint", [-1, 2**31 - 1])
def test_csr_spmm_of_no_tokens(hint, device):
    # m = 0 (2-D and 3-D x): an empty product of the right shape, whichever kernel the hint would pick.
    w = random_csr(30, 5000, 0.1, torch.bfloat16, device, rows="heavy-tailed")
    for shape in [(0, 5000), (2, 0, 5000)]:
        x = torch.randn(shape).to(torch.bfloat16).to(device)
        y = ops.csr_spmm(x, w.crow_indices, w.col_indices, w.values, 5000, None, hint)
        assert y.shape == shape[:-1] + (30,)


def test_csr_spmm_refuses_bad_arguments(device):
    crow, col, vals = _fields(device)
    x = torch.randn(2, 3, device=device)
    with pytest.raises(RuntimeError, match="x.shape\\[-1\\]=4 does not match"):
        ops.csr_spmm(torch.randn(2, 4, device=device), crow, col, vals, 3)
    with pytest.raises(RuntimeError, match="x has dtype"):
        ops.csr_spmm(x.half(), crow, col, vals, 3)
    with pytest.raises(RuntimeError, match="crow_indices must be a 1-D int32"):
        ops.csr_spmm(x, crow.long(), col, vals, 3)
    with pytest.raises(RuntimeError, match="bias must have shape \\[2\\]"):
        ops.csr_spmm(x, crow, col, vals, 3, torch.zeros(3, device=device))
    with pytest.raises(RuntimeError, match="values has 2 entries but col_indices has 3"):
        ops.csr_spmm(x, crow, col, vals[:2], 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_csr_spmm_opcheck(dtype, device):
    w = random_csr(32, 48, 0.2, dtype, device)
    bias = torch.randn(32).to(dtype).to(device)
    f = (w.crow_indices, w.col_indices, w.values, 48)
    for args in ((torch.randn(5, 48).to(dtype).to(device), *f),
                 (torch.randn(2, 3, 48).to(dtype).to(device), *f, bias),
                 (torch.randn(4, 48).to(dtype).to(device).requires_grad_(), *f, bias.clone().requires_grad_()),
                 (torch.randn(0, 48).to(dtype).to(device), *f, bias),
                 (torch.randn(3, 48).to(dtype).to(device).requires_grad_(), *f, bias, 2**31 - 1)):
        opcheck(ops.csr_spmm, args)
    opcheck(ops.csr_decompress, f)


def test_csr_spmm_gradients(device):
    w = random_csr(24, 40, 0.25, torch.float32, device)
    x = torch.randn(3, 40, device=device, requires_grad=True)
    bias = torch.randn(24, device=device, requires_grad=True)
    y = nmspmm.spmm(x, w, bias)
    g = torch.randn_like(y)
    y.backward(g)
    dense = torch.tensor(dense_reference(w.crow_indices, w.col_indices, w.values, w.shape).numpy())
    torch.testing.assert_close(x.grad.double().cpu(), g.double().cpu() @ dense, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bias.grad.cpu(), g.sum(0).cpu())


def test_csr_linear_state_dict_round_trip_and_load_checks(device):
    lin = torch.nn.Linear(64, 32).to(device)
    layer = nmspmm.CSRLinear.from_dense(lin, sparsity=0.75)
    assert layer.values.numel() == 32 * 16  # 25% of each row kept
    x = torch.randn(4, 64, device=device)
    check_product(x, layer.weight_csr, layer.bias.detach(), layer(x).detach())
    # Load into a fresh layer of another nnz: sizes follow the checkpoint.
    fresh = nmspmm.CSRLinear(64, 32, device=device)
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh(x), layer(x))
    # Corrupted checkpoints are refused where they enter.
    bad = dict(layer.state_dict())
    bad["col_indices"] = bad["col_indices"].flip(0).contiguous()
    with pytest.raises(RuntimeError, match="strictly ascending"):
        nmspmm.CSRLinear(64, 32, device=device).load_state_dict(bad)
    bad = dict(layer.state_dict())
    bad["crow_indices"] = bad["crow_indices"][:-1]
    with pytest.raises(RuntimeError, match="out_features \\+ 1"):
        nmspmm.CSRLinear(64, 32, device=device).load_state_dict(bad)


def test_max_row_nnz_follows_the_weight(device):
    # The kernel-choice hint (csr_spmm's max_row_nnz) is the longest row's count wherever a CSR
    # weight enters or moves: CSRWeight, from_dense, to(), CSRLinear.from_weight and load_state_dict.
    mask = torch.zeros(5, 40, dtype=torch.bool)
    mask[0, :3] = mask[2, :17] = mask[4, ::8] = True
    w = nmspmm.CSRWeight.from_dense(torch.randn(5, 40).to(device), mask=mask.to(device))
    assert w.max_row_nnz == 17
    assert nmspmm.CSRWeight(w.crow_indices, w.col_indices, w.values, w.shape).max_row_nnz == 17
    assert w.to(dtype=torch.float16).max_row_nnz == 17
    layer = nmspmm.CSRLinear.from_weight(w)
    assert layer.max_row_nnz == 17 and layer.weight_csr.max_row_nnz == 17
    fresh = nmspmm.CSRLinear(40, 5, bias=False, device=device)
    assert fresh.max_row_nnz == 0
    fresh.load_state_dict(layer.state_dict())
    assert fresh.max_row_nnz == 17
    empty = nmspmm.CSRWeight.from_dense(torch.zeros(0, 3, device=device), mask=torch.zeros(0, 3, dtype=torch.bool,
                                                                                         device=device))
    assert empty.max_row_nnz == 0


def test_unstructured_mask_keeps_the_largest_per_row_or_per_matrix():
    score = torch.rand(6, 50)
    m = unstructured_mask(score, 0.9)
    assert (m.sum(1) == 5).all()
    kept_min = torch.where(m, score, torch.inf).min(1).values
    dropped_max = torch.where(m, -torch.inf, score).max(1).values
    assert (kept_min >= dropped_max).all()
    g = unstructured_mask(score, 0.9, per_row=False)
    assert int(g.sum()) == 30 and score[g].min() >= score[~g].max()
    assert not unstructured_mask(score, 1.0).any() and unstructured_mask(score, 0.0).all()
    with pytest.raises(ValueError, match="sparsity must be a number in \\[0, 1\\]"):
        unstructured_mask(score, 1.5)


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_sparsify_unstructured(method):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    dense = {fqn: m.weight.detach().clone() for fqn, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    calib = [torch.randint(0, 256, (2, 32)) for _ in range(2)] if method != "magnitude" else None
    nmspmm.sparsify_(model, sparsity=0.75, method=method, calibration=calib, progress=False)
    layers = {fqn: m for fqn, m in model.named_modules() if isinstance(m, nmspmm.CSRLinear)}
    assert len(layers) == 14 and type(model.lm_head) is torch.nn.Linear
    for fqn, layer in layers.items():
        w = layer.to_dense()
        assert layer.values.numel() == w.numel() // 4  # 25% kept: per row, or per block of columns
        if method == "sparsegpt":  # the kept weights are updated (OBS), the pruned ones zero
            assert not torch.equal(w[w != 0], dense[fqn][w != 0])
        else:  # the kept weights are the dense ones, the best of each row
            assert torch.equal(w[w != 0], dense[fqn][w != 0])
            assert ((w != 0).sum(1) == w.shape[1] // 4).all()
    report = nmspmm.sparsify_report(model)
    assert "unstructured 75% (CSR)" in str(report) and report.sparse_bytes < report.dense_bytes
    ids = torch.randint(0, 256, (1, 16))
    assert torch.isfinite(model(ids).logits).all()


def test_sparsify_unstructured_argument_checks():
    model = torch.nn.Sequential()
    with pytest.raises(ValueError, match="not both"):
        nmspmm.sparsify_(model, 2, 4, 1, sparsity=0.5)
    with pytest.raises(ValueError, match="sparsity must be a number in \\[0, 1\\)"):
        nmspmm.sparsify_(model, sparsity=1.0)
    with pytest.raises(ValueError, match="does not apply to unstructured"):
        nmspmm.sparsify_(model, sparsity=0.5, permute=True)
    with pytest.raises(TypeError, match="needs the pattern"):
        nmspmm.sparsify_(model, 2, 4)


def test_csr_linear_without_bias_registers_none_as_linear_does():
    layer = nmspmm.CSRLinear(8, 4, bias=False)
    assert layer.bias is None and "bias" in layer._parameters and "bias" not in layer.state_dict()
    assert torch.equal(layer(torch.ones(2, 8)), torch.zeros(2, 4))


def test_csr_linear_compiles_fullgraph(device):
    # torch.compile sees csr_spmm through its fake kernel: no graph break, same result; on the GPU
    # also under CUDA graphs (mode="reduce-overhead": the kernel allocates and syncs nothing).
    torch._dynamo.reset()
    layer = nmspmm.CSRLinear.from_dense(torch.nn.Linear(96, 40).to(device), sparsity=0.8)
    mod = torch.nn.Sequential(torch.nn.Linear(96, 96).to(device), layer).eval()
    mode = {"mode": "reduce-overhead"} if device == "cuda" else {"backend": "aot_eager"}
    compiled = torch.compile(mod, fullgraph=True, **mode)
    with torch.no_grad():
        for m in (1, 7, 1):
            x = torch.randn(m, 96, device=device)
            torch.testing.assert_close(compiled(x).clone(), mod(x), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()


def test_bench_csr_structures():
    # benchmarks/bench_csr.py's matrices: "even" spreads a heavy-tailed matrix's nonzero count over
    # its rows (the load-balance reference), "magnitude" keeps each row's largest entries.
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import bench_csr

    g = torch.Generator().manual_seed(3)
    w = torch.randn(256, 512, generator=g)
    heavy = bench_csr.make_mask("heavy", 256, 512, 0.9, g, w)
    rows = heavy.sum(1).float()
    assert rows.max() > 4 * rows.mean()  # heavy-tailed
    even = bench_csr.make_mask("even", 256, 512, 1 - heavy.float().mean().item(), g, w)
    counts = even.sum(1)
    assert bool((counts == counts[0]).all()) and abs(int(counts.sum()) - int(heavy.sum())) <= 256
    mag = bench_csr.make_mask("magnitude", 256, 512, 0.9, g, w)
    kept_min = torch.where(mag, w.abs(), torch.inf).min(1).values
    dropped_max = torch.where(mag, -torch.inf, w.abs()).max(1).values
    assert bool((mag.sum(1) == round(512 * 0.1)).all()) and bool((kept_min >= dropped_max).all())
