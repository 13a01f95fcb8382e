"""The README's and docs/kernels.md's statements about 2:4 prefill under the power limit are the
committed results of benchmarks/power_24.py (benchmarks/results/h200/power_24.csv): the geomeans
are recomputed from the CSV, and every sustained run must have been at the software power cap."""
import csv
import math
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSV = os.path.join(ROOT, "benchmarks", "results", "h200", "power_24.csv")

pytestmark = pytest.mark.skipif(not os.path.exists(CSV), reason="benchmarks/results/h200/power_24.csv not committed")


def _rows():
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _burst_geomean(rows, impl, ms):
    return _geomean([float(r["speedup_vs_cublas"]) for r in rows
                     if r["part"] == "burst" and r["impl"] == impl and int(r["m"]) in ms])


def test_burst_covers_the_hundred_points_for_each_implementation():
    rows = [r for r in _rows() if r["part"] == "burst"]
    for impl in ("cublas", "cusparselt", "nmspmm"):
        cells = {(r["m"], r["n"], r["k"]) for r in rows if r["impl"] == impl}
        assert len(cells) == 100, f"{impl}: {len(cells)} burst cells"


def test_sustained_runs_sit_at_the_power_cap():
    rows = [r for r in _rows() if r["part"] == "sustained"]
    assert rows, "no sustained rows"
    top = max(float(r["watts"]) for r in rows)
    for r in rows:
        # 0x4: the software power cap (nvidia-smi clocks_throttle_reasons.active)
        reasons = [int(t, 16) for t in r["throttle_reasons"].split()]
        assert reasons and all(t & 0x4 for t in reasons), f"{r['impl']} {r['m']}x{r['n']}x{r['k']}: {reasons}"
        assert float(r["watts"]) >= 0.97 * top and int(r["samples"]) >= 20
        mj = float(r["watts"]) * float(r["us_per_call"]) * 1e-3  # watts and time rounded in the CSV
        assert abs(float(r["mj_per_call"]) - mj) <= 1e-3 * mj + 0.05


def test_readme_states_the_committed_geomeans():
    rows = _rows()
    big, small = (1024, 2048, 4096), (256, 512)
    want = [_burst_geomean(rows, "cusparselt", big), _burst_geomean(rows, "cusparselt", small),
            _burst_geomean(rows, "nmspmm", big), _burst_geomean(rows, "nmspmm", small)]
    readme = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())
    m = re.search(r"runs (\d\.\d\d)x cuBLAS on geomean at m >= 1024 and (\d\.\d\d)x at m = 256, 512, "
                  r"`sparse_tc` (\d\.\d\d)x and (\d\.\d\d)x", readme)
    assert m, "README.md lacks the power_24 sentence"
    assert [float(g) for g in m.groups()] == [round(v, 2) for v in want]


def test_kernels_doc_states_the_committed_energies():
    rows = [r for r in _rows() if r["part"] == "sustained"]
    doc = open(os.path.join(ROOT, "docs", "kernels.md"), encoding="utf-8").read()
    for r in rows:
        shape = f"| {r['m']} x {r['n']} x {r['k']} |"
        line = next((ln for ln in doc.splitlines() if ln.startswith(shape)), None)
        assert line is not None, f"docs/kernels.md lacks the row {shape}"
        mj = float(r["mj_per_call"])
        text = f"{mj:,.0f} mJ" if mj >= 100 else f"{mj:.1f} mJ"
        assert text in line, f"{shape} {r['impl']}: {text} not in {line}"
