"""Hugging Face checkpoints of sparsified models: :func:`save_pretrained` and :func:`from_pretrained`.

    nmspmm.hf.save_pretrained(model, "llama-sparse")       # model after nmspmm.sparsify_
    model = nmspmm.hf.from_pretrained("llama-sparse")      # NMLinear layers, same logits

The directory is an ordinary transformers checkpoint (``config.json``, ``model.safetensors`` or
shards, ``generation_config.json``) with two additions:

* ``config.json`` holds ``quantization_config = {"quant_method": "nmspmm", "format": 1,
  "layers": {fqn: [N, M, L]}, "N": .., "M": .., "L": ..}`` (N/M/L when every layer shares one
  pattern). :func:`from_pretrained` rebuilds exactly these layers as empty ``NMLinear`` modules and
  loads their ``values``/``indices``/``bias``.
* every sparse layer also has a zero-size ``<fqn>.weight`` entry. It carries no data; it makes a
  dense loader fail. ``AutoModelForCausalLM.from_pretrained`` on this directory (without nmspmm)
  would otherwise build dense ``nn.Linear`` layers with random weights and only print a report; with
  the marker it raises a size-mismatch error for ``<fqn>.weight``. (With
  ``ignore_mismatched_sizes=True`` it warns instead, and the model is still wrong.)
"""
from __future__ import annotations

import json
import os
from typing import Dict, Optional

import torch
from torch import nn

from .nn import NMLinear, sparsify_

__all__ = ["save_pretrained", "from_pretrained", "QUANT_METHOD"]

QUANT_METHOD = "nmspmm"
FORMAT = 1


def _sparse_layers(model: nn.Module) -> Dict[str, list]:
    return {fqn: [m.N, m.M, m.L] for fqn, m in model.named_modules() if isinstance(m, NMLinear)}


def save_pretrained(model: nn.Module, save_directory: str, **kwargs) -> None:
    """``model.save_pretrained(save_directory, **kwargs)`` for a model holding ``NMLinear`` layers,
    recording their patterns in ``config.json`` (see the module docstring)."""
    layers = _sparse_layers(model)
    if not layers:
        raise ValueError("nmspmm.hf.save_pretrained: the model has no NMLinear layer; "
                         "use model.save_pretrained for a dense model")
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "save_pretrained"):
        raise TypeError("nmspmm.hf.save_pretrained: expects a transformers PreTrainedModel")
    qc = {"quant_method": QUANT_METHOD, "format": FORMAT, "layers": layers}
    patterns = {tuple(p) for p in layers.values()}
    if len(patterns) == 1:
        (qc["N"], qc["M"], qc["L"]), = patterns
    state_dict = kwargs.pop("state_dict", None)
    if state_dict is None:
        state_dict = model.state_dict()
    state_dict = dict(state_dict)
    for fqn in layers:
        values = state_dict[f"{fqn}.values"]
        state_dict[f"{fqn}.weight"] = values.new_empty(0)  # the dense-loader trap (module docstring)
    had = hasattr(config, "quantization_config")
    previous = getattr(config, "quantization_config", None)
    config.quantization_config = qc
    try:
        model.save_pretrained(save_directory, state_dict=state_dict, **kwargs)
    finally:
        if had:
            config.quantization_config = previous
        else:
            del config.quantization_config


def _read_state_dict(directory: str) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(directory, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"nmspmm.hf.from_pretrained: no model.safetensors (or shard index) "
                                f"in {directory}")
    state_dict: Dict[str, torch.Tensor] = {}
    for name in files:
        state_dict.update(load_file(os.path.join(directory, name)))
    return state_dict


def _model_class(config, model_cls):
    if model_cls is not None:
        return model_cls
    import transformers

    for arch in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    return transformers.AutoModelForCausalLM


@torch.no_grad()
def from_pretrained(directory: str, *, model_cls=None, device: Optional[str] = None,
                    strict: bool = True) -> nn.Module:
    """Load a checkpoint written by :func:`save_pretrained` as a sparse model (eval mode).

    ``directory`` is a local folder. ``model_cls`` defaults to the class named in the config's
    ``architectures`` (else ``AutoModelForCausalLM``). The model is built from its config in the
    saved dtype, the recorded layers become empty ``NMLinear`` modules, and the saved tensors are
    loaded with ``load_state_dict`` (``strict`` as given; weights tied to another module, like a
    tied ``lm_head``, need no entry). ``device`` moves the model after loading.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(directory)
    qc = getattr(config, "quantization_config", None)
    if not isinstance(qc, dict) or qc.get("quant_method") != QUANT_METHOD:
        raise ValueError(f"nmspmm.hf.from_pretrained: {directory} is not an nmspmm checkpoint "
                         "(config.json has no quantization_config with quant_method 'nmspmm'); "
                         "load a dense checkpoint with transformers' from_pretrained")
    if int(qc.get("format", 0)) != FORMAT:
        raise ValueError(f"nmspmm.hf.from_pretrained: checkpoint format {qc.get('format')!r} is not "
                         f"supported (this nmspmm reads format {FORMAT})")
    layers = {fqn: tuple(int(v) for v in p) for fqn, p in qc["layers"].items()}
    del config.quantization_config  # the model is built dense, then swapped below

    state_dict = _read_state_dict(directory)
    for fqn in layers:
        marker = state_dict.pop(f"{fqn}.weight", None)
        if marker is not None and marker.numel() != 0:
            raise ValueError(f"nmspmm.hf.from_pretrained: {fqn}.weight holds data in a sparse checkpoint")
    dtypes = {state_dict[f"{fqn}.values"].dtype for fqn in layers if f"{fqn}.values" in state_dict}
    dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32

    model = _model_class(config, model_cls)._from_config(config)
    model.to(dtype)
    for pattern in sorted(set(layers.values())):
        sparsify_(model, *pattern, filter_fn=lambda m, fqn, p=pattern: layers.get(fqn) == p, empty=True)
    built = _sparse_layers(model)
    if set(built) != set(layers):
        missing = sorted(set(layers) - set(built))
        raise ValueError(f"nmspmm.hf.from_pretrained: could not rebuild sparse layers {missing} "
                         "(not nn.Linear in this model class, or tied to another module)")

    result = model.load_state_dict(state_dict, strict=False)
    if strict:
        # A missing key is fine only for a parameter that another, loaded name shares (tied).
        names_of: Dict[int, set] = {}
        for name, t in list(model.named_parameters(remove_duplicate=False)) + \
                list(model.named_buffers(remove_duplicate=False)):
            names_of.setdefault(id(t), set()).add(name)
        by_name = dict(model.named_parameters(remove_duplicate=False))
        missing = [k for k in result.missing_keys
                   if not (k in by_name and (names_of[id(by_name[k])] - {k}) & state_dict.keys())]
        if missing or result.unexpected_keys:
            raise RuntimeError(f"nmspmm.hf.from_pretrained: checkpoint does not match the model: "
                               f"missing {missing}, unexpected {list(result.unexpected_keys)}")
    model.eval()
    if device is not None:
        model.to(device)
    return model
