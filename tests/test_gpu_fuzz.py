"""tools/gpu_fuzz.py's harness on the CPU ops: the --jobs split runs every case once over its
processes and merges their tallies."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_jobs_split_and_merge():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu_fuzz.py"), "--device", "cpu", "--only", "csr",
                        "--cases", "7", "--corrupt-cases", "3", "--jobs", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = {m.group(1).strip(): (int(m.group(2)), int(m.group(3)), int(m.group(5)))
            for m in re.finditer(r"^(\S.*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+$", r.stdout, re.M)}
    assert rows["csr: random"] == (7, 7, 0), r.stdout  # 4 + 3 cases, all passed
    assert rows["corrupt csr: raw op masked"] == (3, 3, 0), r.stdout
    assert "seeds 0..1 over 2 processes" in r.stdout
