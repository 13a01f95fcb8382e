"""Hugging Face round trip of a sparsified tiny Llama: nmspmm.hf.save_pretrained writes an ordinary
checkpoint directory, nmspmm.hf.from_pretrained reloads it as a sparse model with identical logits,
and transformers' plain from_pretrained refuses it instead of building random dense layers."""
import json
import os

import pytest
import torch
from torch import nn

import nmspmm
from nmspmm import NMLinear

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
import nmspmm.hf  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402


def tiny_llama(tie, dtype=torch.float32):
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=tie)
    return LlamaForCausalLM(config).to(dtype).eval()


def logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def patterns(model):
    return {fqn: (m.N, m.M, m.L) for fqn, m in model.named_modules() if isinstance(m, NMLinear)}


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied-lm-head"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_round_trip_identical_logits(tmp_path, tie, dtype):
    model = tiny_llama(tie, dtype)
    # Two patterns in one model: attention 16:32 L=32, MLP 8:32 L=16.
    nmspmm.sparsify_(model, 16, 32, 32, filter_fn=lambda m, fqn: ".self_attn." in fqn)
    nmspmm.sparsify_(model, 8, 32, 16, filter_fn=lambda m, fqn: ".mlp." in fqn)
    ids = torch.randint(0, 512, (2, 12))
    expected = logits(model, ids)
    nmspmm.hf.save_pretrained(model, str(tmp_path))
    assert not hasattr(model.config, "quantization_config")  # the live model's config is unchanged

    qc = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qc["quant_method"] == "nmspmm" and qc["format"] == 1
    assert {k: tuple(v) for k, v in qc["layers"].items()} == patterns(model)
    assert "N" not in qc  # two patterns: no model-wide N:M:L

    loaded = nmspmm.hf.from_pretrained(str(tmp_path))
    assert patterns(loaded) == patterns(model) and len(patterns(loaded)) == 14
    assert loaded.model.layers[1].mlp.up_proj.values.dtype == dtype
    assert type(loaded.lm_head) is nn.Linear
    assert (loaded.lm_head.weight is loaded.model.embed_tokens.weight) == tie
    for fqn, layer in loaded.named_modules():
        if isinstance(layer, NMLinear):
            src = model.get_submodule(fqn)
            assert torch.equal(layer.values, src.values) and torch.equal(layer.indices, src.indices)
    got = logits(loaded, ids)
    assert torch.equal(got, expected)
    # And it is a different model from a fresh random one (the load did something).
    assert not torch.allclose(logits(tiny_llama(tie, dtype), ids).float(), expected.float(), atol=1e-2)


def test_plain_transformers_route_raises(tmp_path):
    model = nmspmm.sparsify_(tiny_llama(tie=False), 16, 32, 32)
    nmspmm.hf.save_pretrained(model, str(tmp_path))
    with pytest.raises(RuntimeError, match="mismatch|size"):
        AutoModelForCausalLM.from_pretrained(str(tmp_path))


def test_loader_refuses_a_dense_checkpoint(tmp_path):
    tiny_llama(tie=False).save_pretrained(str(tmp_path))
    with pytest.raises(ValueError, match="not an nmspmm checkpoint"):
        nmspmm.hf.from_pretrained(str(tmp_path))


def test_save_refuses_a_dense_model(tmp_path):
    with pytest.raises(ValueError, match="no NMLinear"):
        nmspmm.hf.save_pretrained(tiny_llama(tie=False), str(tmp_path))
    assert not os.path.exists(tmp_path / "config.json")


def test_markers_are_empty_and_values_present(tmp_path):
    from safetensors import safe_open

    model = nmspmm.sparsify_(tiny_llama(tie=False), 2, 8, 16)
    nmspmm.hf.save_pretrained(model, str(tmp_path))
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        marker = f.get_tensor("model.layers.0.mlp.down_proj.weight")
        assert marker.numel() == 0
        assert f.get_tensor("model.layers.0.mlp.down_proj.indices").dtype == torch.uint8
    assert "model.layers.0.mlp.down_proj.values" in keys
