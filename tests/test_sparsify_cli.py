"""``python -m nmspmm.sparsify``: end to end on a tiny random Llama with a tokenizer trained on the
shipped calibration text, its output loaded back through ``AutoModelForCausalLM.from_pretrained``,
and its errors. The end-to-end runs are subprocesses (offline); the error cases call ``main``."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nmspmm
from nmspmm import NMLinear
from nmspmm import sparsify as cli

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 32
EVAL_TEXT = ("The ferry leaves the harbour at dawn, when the water is flat and the gulls are still asleep "
             "on the posts of the pier. Passengers carry baskets of fruit, crates of tools and, now and "
             "then, a bicycle that needs a new chain. The crossing takes forty minutes if the wind is "
             "kind and an hour if it is not, and the captain knows every rock along the way.\n")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama (every projection 64 or 128 wide, k/v 32 wide) and a BPE tokenizer
    trained on the shipped calibration text, saved together as a transformers checkpoint."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    path = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([cli.shipped_calibration_path()],
              trainers.BpeTrainer(vocab_size=256, special_tokens=["[UNK]", "<s>", "</s>"], show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    # initializer_range 0.3 (not 0.02): logits far from uniform, so pruning moves the perplexity
    config = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         initializer_range=0.3)
    LlamaForCausalLM(config).save_pretrained(str(path))
    fast.save_pretrained(str(path))
    return str(path)


def run_cli(*args, timeout=240):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "nmspmm.sparsify", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# ------------------------------------------------------------------- independent expectations
def token_ids(tokenizer, text):
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])


def reference_perplexity(model, ids, seq):
    """exp(mean NLL of every next token) over consecutive ``seq``-token windows of ``ids`` (the last
    one shorter), one window at a time."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids), seq):
            w = ids[start:start + seq]
            if len(w) < 2:
                continue
            logits = model(input_ids=w[None], use_cache=False).logits[0].double()
            total += float(F.cross_entropy(logits[:-1], w[1:], reduction="sum"))
            count += len(w) - 1
    return math.exp(total / count)


def magnitude_pruned(w, N, M, L):
    """w with, in every window of M inputs, only the N columns of largest L2 norm over each vector
    of L output rows kept."""
    out, inp = w.shape
    blocks = w.reshape(out // L, L, inp // M, M)
    norms = blocks.double().norm(dim=1)                              # [out/L, in/M, M]
    keep = torch.zeros_like(norms, dtype=torch.bool)
    keep.scatter_(-1, norms.topk(N, dim=-1).indices, True)
    return (blocks * keep[:, None]).reshape(out, inp)


def assert_vector_nm(dense, N, M, L):
    """Each (L rows x M inputs) block has one column set of at most N non-zero columns."""
    out, inp = dense.shape
    nz = dense.reshape(out // L, L, inp // M, M) != 0
    assert (nz.any(dim=1).sum(-1) <= N).all()


def sparse_layers(model):
    return {fqn: (m.N, m.M, m.L) for fqn, m in model.named_modules() if isinstance(m, NMLinear)}


# -------------------------------------------------------------------------------- end to end
def test_sparsegpt_with_recovery_on_the_shipped_text(tiny_dir, tmp_path):
    out = str(tmp_path / "out")
    proc = run_cli(tiny_dir, out, "--pattern", "16:32:32", "--recover-tokens", "1000", "--seq", str(SEQ),
                   "--calibration-tokens", "2k", "--no-progress")
    rep = json.load(open(os.path.join(out, cli.REPORT_NAME)))
    assert "| recovered (1000 tokens, 5 steps) |" in proc.stdout
    assert "layers sparsified: 14 of 14" in proc.stdout
    assert rep["method"] == "sparsegpt" and rep["pattern"] == [16, 32, 32]
    assert rep["calibration"] == {"source": cli.shipped_calibration_path(), "tokens": 2000}
    # 1000 tokens: 31 windows of 32 in batches of 8 (4 steps) and the last 8 tokens (1 step)
    assert rep["recovery"]["steps"] == 5 and rep["recovery"]["tokens"] == 1000
    assert rep["layers"]["count"] == 14 and rep["layers"]["skipped"] == []
    assert rep["bytes"]["projections_sparse"] < 0.6 * rep["bytes"]["projections_dense"]

    # the held-out evaluation text: the last 20 % of the shipped text's tokens
    tok = AutoTokenizer.from_pretrained(out)
    ids = token_ids(tok, open(cli.shipped_calibration_path()).read())
    held = ids[-round(0.2 * len(ids)):]
    assert rep["eval"]["tokens"] == len(held) and rep["eval"]["held_out"]
    dense = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    assert reference_perplexity(dense, held, SEQ) == pytest.approx(rep["perplexity"]["dense"], rel=1e-6)

    sparse = AutoModelForCausalLM.from_pretrained(out).eval()
    assert sparse_layers(sparse) == {n: (16, 32, 32) for n in rep["layers"]["names"]}
    assert len(sparse_layers(sparse)) == 14 and type(sparse.lm_head) is nn.Linear
    for fqn, layer in sparse.named_modules():
        if isinstance(layer, NMLinear):
            assert_vector_nm(layer.to_dense(), 16, 32, 32)
            assert not torch.equal(layer.to_dense(), dense.get_submodule(fqn).weight)
    # the saved model is the one the command measured last
    ppl = reference_perplexity(sparse, held, SEQ)
    assert ppl == pytest.approx(rep["perplexity"]["recovered"], rel=1e-6)
    assert abs(rep["perplexity"]["pruned"] - rep["perplexity"]["dense"]) > 1e-3 * rep["perplexity"]["dense"]


def test_magnitude_with_eval_file(tiny_dir, tmp_path):
    out = str(tmp_path / "out")
    eval_file = tmp_path / "eval.txt"
    eval_file.write_text(EVAL_TEXT * 3)
    proc = run_cli(tiny_dir, out, "--pattern", "8:32:16", "--method", "magnitude", "--eval", str(eval_file),
                   "--seq", str(SEQ), "--batch", "2", "--dtype", "float32", "--no-progress")
    rep = json.load(open(os.path.join(out, cli.REPORT_NAME)))
    assert rep["calibration"]["tokens"] == 0 and rep["recovery"] is None
    assert "recovered" not in rep["perplexity"] and "recovered" not in proc.stdout
    assert rep["eval"]["source"] == str(eval_file) and not rep["eval"]["held_out"]

    dense = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    sparse = AutoModelForCausalLM.from_pretrained(out).eval()
    assert set(sparse_layers(sparse).values()) == {(8, 32, 16)} and len(sparse_layers(sparse)) == 14
    for fqn, layer in sparse.named_modules():
        if isinstance(layer, NMLinear):
            assert torch.equal(layer.to_dense(), magnitude_pruned(dense.get_submodule(fqn).weight, 8, 32, 16)), fqn
    ids = token_ids(AutoTokenizer.from_pretrained(out), EVAL_TEXT * 3)
    assert rep["eval"]["tokens"] == len(ids)
    assert reference_perplexity(dense, ids, SEQ) == pytest.approx(rep["perplexity"]["dense"], rel=1e-6)
    assert reference_perplexity(sparse, ids, SEQ) == pytest.approx(rep["perplexity"]["pruned"], rel=1e-6)


def test_skip_unfit_keeps_those_layers_dense(tiny_dir, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    # L=64 does not divide k_proj / v_proj (32 outputs): kept dense; --overwrite writes into out
    assert cli.main([tiny_dir, str(out), "--pattern", "16:32:64", "--method", "magnitude", "--skip-unfit",
                     "--overwrite", "--seq", str(SEQ), "--no-progress"]) == 0
    rep = json.load(open(out / cli.REPORT_NAME))
    kv = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(2) for p in "kv"]
    assert sorted(rep["layers"]["unfit"]) == sorted(kv)
    sparse = AutoModelForCausalLM.from_pretrained(str(out))
    assert len(sparse_layers(sparse)) == 10
    assert all(type(sparse.get_submodule(f)) is nn.Linear for f in kv)
    assert "kept dense: " in capsys.readouterr().out


# ------------------------------------------------------------------------------------- errors
def cli_error(capsys, *argv):
    assert cli.main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmspmm.sparsify: error: "), err
    return err


def test_pattern_that_does_not_fit_names_the_layer(tiny_dir, tmp_path, capsys):
    out = tmp_path / "out"
    err = cli_error(capsys, tiny_dir, out, "--pattern", "16:32:64")
    assert "model.layers.0.self_attn.k_proj [in 64, out 32]: out_features=32 % L=64 != 0" in err
    assert "4 of 14 target projections" in err and "--skip-unfit" in err
    assert not out.exists()  # refused before any work
    layers = [("a.q_proj", 96, 64), ("a.k_proj", 64, 16)]
    with pytest.raises(cli.CliError, match=r"a.q_proj \[in 96, out 64\]: in_features=96 % M=64 != 0; "
                                           r"a.k_proj .* no target projection fits it"):
        cli.check_fit(layers, 8, 64, 32, skip_unfit=True)
    assert cli.check_fit(layers, 8, 32, 32, skip_unfit=True) == ["a.k_proj"]


@pytest.mark.parametrize("pattern, message", [
    ("16:32", "--pattern must be N:M:L"),
    ("a:b:c", "--pattern must be N:M:L"),
    ("16:32:3", "L must be a power of two"),
    ("16:24:32", "M must be a power of two"),
    ("40:32:32", "N must satisfy 1 <= N <= M"),
])
def test_bad_pattern_syntax(tiny_dir, tmp_path, capsys, pattern, message):
    assert message in cli_error(capsys, tiny_dir, tmp_path / "out", "--pattern", pattern)


def test_missing_files_and_non_empty_out_dir(tiny_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert "does not exist" in cli_error(capsys, tmp_path / "nothing", out, "--pattern", "16:32:32")
    assert "without config.json" in cli_error(capsys, tmp_path, out, "--pattern", "16:32:32")
    err = cli_error(capsys, tiny_dir, out, "--pattern", "16:32:32", "--calibration", tmp_path / "none.txt")
    assert "calibration file" in err and "none.txt does not exist" in err
    err = cli_error(capsys, tiny_dir, out, "--pattern", "16:32:32", "--eval", tmp_path / "none.txt")
    assert "evaluation file" in err
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "is not empty; pass --overwrite" in cli_error(capsys, tiny_dir, out, "--pattern", "16:32:32")
    assert (out / "keep.txt").read_text() == "mine"
    assert "model's own directory" in cli_error(capsys, tiny_dir, tiny_dir, "--pattern", "16:32:32", "--overwrite")


def test_gguf_needs_the_gguf_package(tmp_path, capsys, monkeypatch):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    err = cli_error(capsys, model, tmp_path / "out", "--pattern", "16:32:32")
    assert "needs the gguf package" in err and "pip install gguf" in err
    (tmp_path / "model.bin").write_bytes(b"x")
    assert "not a .gguf" in cli_error(capsys, tmp_path / "model.bin", tmp_path / "out", "--pattern", "16:32:32")


def test_shipped_calibration_text_is_package_data():
    path = cli.shipped_calibration_path()
    text = open(path, encoding="utf-8").read()
    assert os.path.dirname(path) == os.path.join(os.path.dirname(nmspmm.__file__), "data")
    assert 4000 < len(text.encode()) < 20000 and text.isascii() and len(text.split()) > 700
    try:
        import tomllib
    except ImportError:  # Python 3.10
        pytest.skip("tomllib needs Python 3.11")
    cfg = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["setuptools"]
    assert "nmspmm.data" in cfg["packages"] and "*.txt" in cfg["package-data"]["nmspmm.data"]
