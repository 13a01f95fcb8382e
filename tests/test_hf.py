"""Hugging Face round trip of a sparsified tiny Llama through transformers' own route:
``model.save_pretrained(dir)`` after ``nmspmm.sparsify_``, then ``AutoModelForCausalLM.from_pretrained``
gives back the same NMLinear layers and identical logits (fp32, bf16, fp16, sharded, ``dtype`` and
``device_map`` arguments, CPU and CUDA); without nmspmm, transformers refuses the checkpoint."""
import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import nmspmm
from nmspmm import NMLinear

import transformers  # noqa: E402  (a test dependency: install.py installs it)
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402
from safetensors import safe_open  # noqa: E402

CUDA = torch.cuda.is_available() and nmspmm.cuda_kernels_built()


def tiny_llama(tie=False, dtype=torch.float32):
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=tie)
    # _from_config builds in the dtype (rotary inv_freq stays fp32), as from_pretrained does.
    return LlamaForCausalLM._from_config(config, dtype=dtype).eval()


def two_pattern_model(tie=False, dtype=torch.float32):
    model = tiny_llama(tie, dtype)
    nmspmm.sparsify_(model, 16, 32, 32, filter_fn=lambda m, fqn: ".self_attn." in fqn)
    nmspmm.sparsify_(model, 8, 32, 16, filter_fn=lambda m, fqn: ".mlp." in fqn)
    return model


def logits(model, ids):
    with torch.no_grad():
        return model(ids.to(model.device), use_cache=False).logits


def patterns(model):
    return {fqn: (m.N, m.M, m.L) for fqn, m in model.named_modules() if isinstance(m, NMLinear)}


def test_transformers_version_is_supported():
    lo, hi = nmspmm.hf.SUPPORTED_TRANSFORMERS
    v = nmspmm.hf._version_tuple(transformers.__version__)
    assert lo <= v < hi, transformers.__version__
    nmspmm.hf.check_transformers()
    assert nmspmm.hf.NMSpmmHfQuantizer is not None


@pytest.mark.parametrize("shard", [None, "150KB"], ids=["one-file", "sharded"])
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied-lm-head"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_round_trip_identical_logits(tmp_path, tie, dtype, shard):
    model = two_pattern_model(tie, dtype)
    ids = torch.randint(0, 512, (2, 12))
    expected = logits(model, ids)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(str(tmp_path), **kwargs)
    assert os.path.exists(tmp_path / "model.safetensors.index.json") == (shard is not None)

    qc = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qc["quant_method"] == "nmspmm" and qc["format"] == 1
    assert {k: tuple(v) for k, v in qc["layers"].items()} == patterns(model)
    assert "N" not in qc  # two patterns: no model-wide N:M:L

    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert patterns(loaded) == patterns(model) and len(patterns(loaded)) == 14
    assert loaded.model.layers[1].mlp.up_proj.values.dtype == dtype
    assert loaded.model.layers[1].mlp.up_proj.indices.dtype == torch.uint8
    assert type(loaded.lm_head) is nn.Linear
    assert (loaded.lm_head.weight is loaded.model.embed_tokens.weight) == tie
    for fqn, layer in loaded.named_modules():
        if isinstance(layer, NMLinear):
            src = model.get_submodule(fqn)
            assert torch.equal(layer.values, src.values) and torch.equal(layer.indices, src.indices)
            assert torch.equal(layer.bias, src.bias) if src.bias is not None else layer.bias is None
    assert torch.equal(logits(loaded, ids), expected)
    # A fresh random model differs: the load did something.
    assert not torch.allclose(logits(tiny_llama(tie, dtype), ids).float(), expected.float(), atol=1e-2)


def test_loaded_model_saves_again(tmp_path):
    model = two_pattern_model()
    ids = torch.randint(0, 512, (1, 9))
    model.save_pretrained(str(tmp_path / "a"))
    again = AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"))
    again.save_pretrained(str(tmp_path / "b"))
    twice = AutoModelForCausalLM.from_pretrained(str(tmp_path / "b"))
    assert patterns(twice) == patterns(model)
    assert torch.equal(logits(twice, ids), logits(model, ids))


def test_dtype_and_device_map_arguments(tmp_path):
    model = nmspmm.sparsify_(tiny_llama(), 16, 32, 32)
    model.save_pretrained(str(tmp_path))
    qc = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert (qc["N"], qc["M"], qc["L"]) == (16, 32, 32)
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.bfloat16, device_map="cpu")
    layer = loaded.model.layers[0].mlp.down_proj
    assert isinstance(layer, NMLinear) and layer.values.dtype == torch.bfloat16
    assert layer.indices.dtype == torch.uint8
    src = model.model.layers[0].mlp.down_proj
    assert torch.equal(layer.values, src.values.to(torch.bfloat16)) and torch.equal(layer.indices, src.indices)
    # The bf16 model against the fp32 one: bf16 rounding only.
    ids = torch.randint(0, 512, (2, 8))
    ref = logits(model, ids)
    err = (logits(loaded, ids).float() - ref).abs().max().item()
    assert err < 0.05 * ref.abs().max().item(), err


def test_the_saved_layer_list_follows_the_model(tmp_path):
    """The layers are recorded at save time, not at sparsify_ time."""
    model = tiny_llama()
    nmspmm.sparsify_(model, 16, 32, 32, filter_fn=lambda m, fqn: fqn.endswith("q_proj"))
    nmspmm.sparsify_(model, 4, 32, 32, filter_fn=lambda m, fqn: fqn.endswith("down_proj"))
    model.save_pretrained(str(tmp_path))
    qc = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert sorted(qc["layers"]) == sorted(patterns(model)) and len(qc["layers"]) == 4
    assert patterns(AutoModelForCausalLM.from_pretrained(str(tmp_path))) == patterns(model)


def test_markers_are_empty_and_values_present(tmp_path):
    model = nmspmm.sparsify_(tiny_llama(), 2, 8, 16)
    model.save_pretrained(str(tmp_path))
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("model.layers.0.mlp.down_proj.weight").numel() == 0
        assert f.get_tensor("model.layers.0.mlp.down_proj.indices").dtype == torch.uint8
    assert "model.layers.0.mlp.down_proj.values" in keys
    assert "model.layers.0.mlp.down_proj._extra_state" in keys


def test_2_4_layers_get_their_tensor_core_metadata(tmp_path):
    # tc_meta is derived, never saved: the load rebuilds it from each layer's indices (bf16: the
    # dtype of the 2:4 sparse tensor-core kernels).
    model = nmspmm.sparsify_(tiny_llama(dtype=torch.bfloat16), 2, 4, 16)
    model.save_pretrained(str(tmp_path))
    # The layers hold the compact 2:4 form; the checkpoint has the canonical indices.
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert not any(k.endswith("tc_meta") for k in f.keys())
        for fqn, m in model.named_modules():
            if isinstance(m, NMLinear):
                assert m.indices_compact, fqn
                assert torch.equal(f.get_tensor(f"{fqn}.indices"), m.canonical_indices()), fqn
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    layers = {fqn: m for fqn, m in loaded.named_modules() if isinstance(m, NMLinear)}
    assert len(layers) == 14
    for fqn, layer in layers.items():
        src = model.get_submodule(fqn)
        assert layer.tc_meta is not None and layer.tc_meta.dtype == torch.int32, fqn
        assert layer.indices_compact, fqn
        assert torch.equal(layer.tc_meta, src.tc_meta), fqn
        assert torch.equal(layer.tc_meta, torch.ops.nmspmm.sparse_tc_meta(layer.canonical_indices(), 2, 4, 16,
                                                                          layer.in_features)), fqn
    ids = torch.randint(0, 512, (1, 6))
    assert torch.equal(logits(loaded, ids), logits(model, ids))


REFUSE = """
import sys, transformers
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_pretrained(sys.argv[1])
assert "nmspmm" not in sys.modules
print("LOADED")
"""


def test_plain_transformers_without_nmspmm_refuses(tmp_path):
    nmspmm.sparsify_(tiny_llama(), 16, 32, 32).save_pretrained(str(tmp_path))
    r = subprocess.run([sys.executable, "-c", REFUSE, str(tmp_path)], capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "LOADED" not in out, out[-2000:]
    assert "RuntimeError" in out and "got nmspmm" in out, out[-2000:]


def test_corrupted_indices_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    nmspmm.sparsify_(tiny_llama(), 4, 8, 16).save_pretrained(str(tmp_path))
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    key = "model.layers.1.self_attn.o_proj.indices"
    tensors[key] = tensors[key].clone()
    tensors[key][3, 2] = 8  # >= M
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises((RuntimeError, ValueError), match="indices|index"):
        AutoModelForCausalLM.from_pretrained(str(tmp_path))


def test_missing_sparse_tensor_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    nmspmm.sparsify_(tiny_llama(), 16, 32, 32).save_pretrained(str(tmp_path))
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    del tensors["model.layers.0.mlp.up_proj.values"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.up_proj\.values"):
        AutoModelForCausalLM.from_pretrained(str(tmp_path))


def test_pattern_mismatch_in_extra_state_is_refused(tmp_path):
    nmspmm.sparsify_(tiny_llama(), 16, 32, 32).save_pretrained(str(tmp_path))
    cfg_path = tmp_path / "config.json"
    cfg = json.load(open(cfg_path))
    # The config claims 8:32 for one layer whose tensors hold 16:32.
    cfg["quantization_config"]["layers"]["model.layers.0.mlp.up_proj"] = [8, 32, 32]
    del cfg["quantization_config"]["N"], cfg["quantization_config"]["M"], cfg["quantization_config"]["L"]
    json.dump(cfg, open(cfg_path, "w"))
    with pytest.raises((RuntimeError, ValueError)):
        AutoModelForCausalLM.from_pretrained(str(tmp_path))


def test_wrappers_refuse_wrong_inputs(tmp_path):
    with pytest.raises(ValueError, match="no NMLinear"):
        nmspmm.hf.save_pretrained(tiny_llama(), str(tmp_path / "dense"))
    assert not os.path.exists(tmp_path / "dense" / "config.json")
    tiny_llama().save_pretrained(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="not an nmspmm checkpoint"):
        nmspmm.hf.from_pretrained(str(tmp_path / "plain"))


def test_wrappers_are_the_standard_route(tmp_path):
    model = two_pattern_model()
    nmspmm.hf.save_pretrained(model, str(tmp_path))
    loaded = nmspmm.hf.from_pretrained(str(tmp_path))
    ids = torch.randint(0, 512, (1, 7))
    assert patterns(loaded) == patterns(model)
    assert torch.equal(logits(loaded, ids), logits(model, ids))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU and nmspmm built with CUDA kernels")
@pytest.mark.parametrize("device_map", ["cuda", None], ids=["device_map", "to-cuda"])
def test_cuda_round_trip_bf16_native_plans(tmp_path, device_map):
    model = nmspmm.sparsify_(tiny_llama(dtype=torch.bfloat16), 16, 32, 32)
    model.save_pretrained(str(tmp_path))
    kwargs = {"device_map": device_map} if device_map else {}
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.bfloat16, **kwargs)
    if device_map is None:
        loaded = loaded.cuda()
    layer = loaded.model.layers[0].mlp.up_proj
    assert isinstance(layer, NMLinear) and layer.values.is_cuda and layer.values.dtype == torch.bfloat16
    ids = torch.randint(0, 512, (2, 33))
    gpu = logits(loaded, ids).float().cpu()
    # Against the same sparse model on the CPU in fp32 (the decompressed weights): bf16 rounding only.
    ref = logits(model.to(torch.float32), ids)
    err = (gpu - ref).abs().max().item()
    assert err < 0.05 * ref.abs().max().item(), err
    # The plans the loaded layers run are native bf16 kernels, at decode and at prefill m.
    cc = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in (1, 66):
        name, _ = torch.ops.nmspmm.spmm_heuristic(m, layer.out_features, layer.in_features, 16, 32, 32,
                                                  torch.bfloat16, cc[0] * 10 + cc[1], sms, 16)
        assert nmspmm.kernel_info(name).dtype == "bfloat16", (m, name)


def csr_layers(model):
    return {fqn: m.values.numel() for fqn, m in model.named_modules() if isinstance(m, nmspmm.CSRLinear)}


@pytest.mark.parametrize("shard", [None, "150KB"], ids=["one-file", "sharded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_unstructured_csr_round_trip(tmp_path, dtype, shard):
    # Attention at 80% unstructured (CSR), MLP at 16:32 L=32: both kinds in one checkpoint.
    model = tiny_llama(dtype=dtype)
    nmspmm.sparsify_(model, sparsity=0.8, filter_fn=lambda m, fqn: ".self_attn." in fqn)
    nmspmm.sparsify_(model, 16, 32, 32, filter_fn=lambda m, fqn: ".mlp." in fqn)
    assert len(csr_layers(model)) == 8 and len(patterns(model)) == 6
    ids = torch.randint(0, 512, (2, 12))
    expected = logits(model, ids)
    model.save_pretrained(str(tmp_path), **({"max_shard_size": shard} if shard else {}))
    qc = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qc["format"] == 2
    assert sorted(k for k, v in qc["layers"].items() if v == ["csr"]) == sorted(csr_layers(model))
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert csr_layers(loaded) == csr_layers(model) and patterns(loaded) == patterns(model)
    for fqn, n in csr_layers(model).items():
        a, b = model.get_submodule(fqn), loaded.get_submodule(fqn)
        for t in ("crow_indices", "col_indices", "values"):
            assert torch.equal(getattr(a, t), getattr(b, t)), (fqn, t)
    assert torch.equal(logits(loaded, ids), expected)


def test_n_m_only_checkpoints_stay_format_1(tmp_path):
    nmspmm.sparsify_(tiny_llama(), 16, 32, 32).save_pretrained(str(tmp_path))
    assert json.load(open(tmp_path / "config.json"))["quantization_config"]["format"] == 1


def test_corrupted_csr_indices_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    nmspmm.sparsify_(tiny_llama(), sparsity=0.9).save_pretrained(str(tmp_path))
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    key = "model.layers.1.mlp.down_proj.col_indices"
    tensors[key] = tensors[key].clone()
    tensors[key][5] = 10**6  # past in_features
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"down_proj.*col_indices must be in"):
        AutoModelForCausalLM.from_pretrained(str(tmp_path))
