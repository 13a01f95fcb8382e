"""The speed-of-light model of benchmarks/speed_of_light.py: its byte and MAC counts against counts
made here by hand, and the columns it adds to benchmark rows."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import speed_of_light as sol  # noqa: E402


def test_bytes_per_mac_of_the_sparse_tc_tiles():
    # x read once per 64 outputs by the wgmma, weight written and read once per tile of tokens, x
    # written once per tile of 128 outputs.
    assert sol.sparse_tc_bytes_per_mac(256) == pytest.approx(1 / 32 + 1 / 256)
    assert [round(16 * sol.sparse_tc_bytes_per_mac(t), 4) for t in (256, 128, 64, 16)] == [0.5625, 0.625, 0.75, 1.5]
    assert sol.sparse_tc_tile_tokens("sparse_tc_bf16_64x128_sm90a") == 64
    assert sol.sparse_tc_tile_tokens("tiled_f32_128x128") is None


@pytest.mark.parametrize("N,M,L,dtype", [(2, 4, 1, "bf16"), (2, 4, 32, "fp16"), (16, 32, 32, "bf16"), (8, 32, 4, "fp32")])
def test_min_bytes_counts_weight_metadata_x_and_y(N, M, L, dtype):
    m, n, k = 7, 256, 512
    e = {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
    values = n * k * N // M * e
    if (N, M) == (2, 4) and e == 2:  # tc_meta: a 32-bit word per vector per 32 inputs
        meta = (k // 32) * (n // L) * 4
    else:  # one index byte per kept input per vector
        meta = (n // L) * (k * N // M)
    assert sol.min_bytes(m, n, k, N, M, L, dtype) == values + meta + m * k * e + m * n * e


def test_compute_time_is_the_useful_macs_at_the_tensor_rate():
    # 2:4 and 8:32 alike: the useful MACs; 2:4's limit is half the dense product's time.
    dense = sol.compute_us(4096, 4096, 4096, 1, 1, 800.0)
    assert dense == pytest.approx(2 * 4096 ** 3 / 800e12 * 1e6)
    assert sol.compute_us(4096, 4096, 4096, 2, 4, 800.0) == pytest.approx(dense / 2)
    assert sol.compute_us(4096, 4096, 4096, 8, 32, 800.0) == pytest.approx(dense / 4)


def _rows():
    # A dense row at 800 TF/s and 2:4 rows at 1.0x and 1.25x of it, as bench_spmm builds them.
    m = n = k = 8192
    t_dense = 2 * m * n * k / 800e12 * 1e3  # ms
    base = {"m": m, "n": n, "k": k, "status": "ok", "dtype": "bf16"}
    return [dict(base, impl="dense_bf16", pattern="", N="", M="", L="", tflops_eff=800.0, ms=t_dense, kernel=""),
            dict(base, impl="dense_fp16", pattern="", N="", M="", L="", tflops_eff=700.0, ms=t_dense * 8 / 7,
                 kernel="", dtype="fp16"),
            dict(base, impl="nmspmm", pattern="2:4:1", N=2, M=4, L=1, ms=t_dense, kernel="sparse_tc_bf16_256x128_sm90a"),
            dict(base, impl="nmspmm", pattern="2:4:1", N=2, M=4, L=1, ms=t_dense / 1.25, kernel="decode_tc_bf16_64"),
            dict(base, impl="nmspmm", pattern="2:4:1", N=2, M=4, L=1, ms="", status="refused", kernel="")]


def test_add_sol_columns_grades_each_row():
    rows = _rows()
    rates = sol.add_sol_columns(rows)
    assert rates == {"bf16": 800.0, "fp16": 800.0}  # bf16 and fp16 share the tensor cores
    dense, dense16, same, faster, refused = rows
    assert dense["sol_frac"] == pytest.approx(1.0, rel=1e-3) and dense["sol_bound"] == "compute"
    assert dense16["sol_frac"] == pytest.approx(7 / 8, rel=1e-3)
    assert same["sol_frac"] == pytest.approx(0.5, rel=1e-3)
    assert faster["sol_frac"] == pytest.approx(0.625, rel=1e-3)
    # The design bound of the 256-token tile: 0.5625 x the dense time at the wgmma rate (800 / 0.94).
    assert same["design_frac"] == pytest.approx(0.5625 * 0.94, rel=1e-3)
    assert faster["design_us"] == "" and refused["sol_frac"] == ""
    assert all(c in r for r in rows for c in sol.SOL_COLUMNS)


def test_memory_bound_cell():
    r = {"impl": "nmspmm", "status": "ok", "dtype": "bf16", "m": 1, "n": 4096, "k": 4096, "N": 2, "M": 4,
         "L": 1, "ms": 0.01, "kernel": "decode_tc_bf16_64"}
    out = sol.cell_sol(r, {"bf16": 800.0}, 4000.0)
    assert out["sol_bound"] == "memory"
    assert out["sol_us"] == pytest.approx(sol.min_bytes(1, 4096, 4096, 2, 4, 1, "bf16") / 4e12 * 1e6, rel=1e-3)
    assert math.isclose(out["sol_frac"], out["sol_us"] / 10.0, rel_tol=1e-3)


def test_command_line_on_a_csv(tmp_path, capsys):
    import csv
    rows = _rows()
    path = tmp_path / "b.csv"
    cols = sorted({c for r in rows for c in r})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    assert sol.main([str(path), "--out", str(tmp_path / "o.csv")]) == 0
    text = capsys.readouterr().out
    assert "| bf16 | 2:4:1 | 8192 | 2 | 0.56 (0.50-0.62)" in text
    assert (tmp_path / "o.csv").read_text().count("\n") == 3
