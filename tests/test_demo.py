"""The main job, ``python -m nmspmm.demo``, runs end to end and checks itself: on the CPU (and on
the GPU where there is one), on its tiny random Llama and on a model directory given by --model."""
import subprocess
import sys

import pytest
import torch

import transformers  # noqa: E402,F401  (a test dependency: its absence is an error, not a skip)

from nmspmm import demo  # noqa: E402


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_demo_tiny_llama(capsys, device):
    rc = demo.main(["--device", device, "--tokens", "16", "--reps", "1", "--pattern", "8:32:32"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "pruned dense logits" in out and ": OK" in out
    # 8:32 keeps a quarter of every projection's values (plus indices; no packing metadata by default).
    assert any(f"({p}% saved)" in out for p in (73, 74, 75)), out
    assert f"speed ({device}, torch.float32" in out


def test_demo_given_model_dir(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(str(tmp_path))
    rc = demo.main(["--model", str(tmp_path), "--device", "cpu", "--tokens", "8", "--reps", "1",
                    "--pattern", "2:4:1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 layers, hidden 128" in out and "torch.bfloat16" in out and ": OK" in out


def test_demo_rejects_bad_pattern():
    r = subprocess.run([sys.executable, "-m", "nmspmm.demo", "--pattern", "3:32"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "N:M:L" in r.stderr
