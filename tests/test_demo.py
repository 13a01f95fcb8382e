"""The main job, ``python -m nmspmm.demo``, runs end to end on the CPU and checks itself."""
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from nmspmm import demo  # noqa: E402


def test_demo_tiny_llama_cpu(capsys):
    rc = demo.main(["--device", "cpu", "--tokens", "16", "--reps", "1", "--pattern", "8:32:32"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "pruned dense logits" in out and ": OK" in out
    # 8:32 keeps a quarter of every projection's values.
    assert "(74% saved)" in out or "(73% saved)" in out, out


def test_demo_rejects_bad_pattern():
    r = subprocess.run([sys.executable, "-m", "nmspmm.demo", "--pattern", "3:32"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "N:M:L" in r.stderr
