"""Hugging Face checkpoints of sparse models, through transformers' own route.

    import nmspmm
    nmspmm.sparsify_(model, 16, 32, 32)                    # any transformers PreTrainedModel
    model.save_pretrained("llama-sparse")                  # config.json, safetensors (sharded too)
    model = AutoModelForCausalLM.from_pretrained("llama-sparse")   # the same NMLinear layers

``import nmspmm`` registers an ``HfQuantizer`` and its config under the quantization method
``"nmspmm"`` (transformers' extension point for weight formats, ``register_quantizer`` /
``register_quantization_config``). :func:`nmspmm.sparsify_` attaches them to a transformers model,
so that:

* ``save_pretrained`` writes ``quantization_config = {"quant_method": "nmspmm", "format": 1,
  "layers": {fqn: [N, M, L]}, "N", "M", "L" (when every layer shares one pattern)}`` into
  ``config.json``, and each sparse layer's ``values``, ``indices``, ``bias`` and ``_extra_state``
  plus a zero-size ``<fqn>.weight`` marker into the safetensors files. Unstructured
  ``CSRLinear`` layers (``sparsify_(model, sparsity=s)``) are listed as ``["csr"]`` with their
  ``crow_indices``, ``col_indices``, ``values`` and ``bias``, in format 2 (which a reader of
  format 1 refuses by number);
* ``from_pretrained`` (any ``dtype``, ``device_map``, sharded or not) builds the recorded layers as
  empty ``NMLinear`` / ``CSRLinear`` modules before the weights load (CSR buffers sized from the
  safetensors headers), checks that the checkpoint holds every one of their tensors, and validates
  the indices after loading.

Without nmspmm, transformers does not know the method and would build dense ``nn.Linear`` layers
with random weights; the zero-size ``<fqn>.weight`` marker makes that load fail with a size
mismatch instead, after transformers' warning "Unknown quantization type, got nmspmm".

Tested with transformers 5.17 and 5.24 (:data:`SUPPORTED_TRANSFORMERS`); on other versions the
registration is refused with an error naming the version (:func:`check_transformers`).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from typing import Dict, Optional

import torch
from torch import nn

from .nn import NMLinear

__all__ = ["QUANT_METHOD", "FORMAT", "SUPPORTED_TRANSFORMERS", "check_transformers", "attach",
           "save_pretrained", "from_pretrained", "NMSpmmConfig", "NMSpmmHfQuantizer"]

QUANT_METHOD = "nmspmm"
FORMAT = 1       # N:M layers only
FORMAT_CSR = 2   # also unstructured CSR layers, listed as ["csr"]
CSR = "csr"
# [lowest, first unsupported) release of transformers whose HfQuantizer hooks this module uses
# (preprocess_model -> _process_model_before_weight_loading(checkpoint_files=...),
# get_state_dict_and_metadata on save, set_extra_state on load).
SUPPORTED_TRANSFORMERS = ((5, 17), (6, 0))

NMSpmmConfig = None
NMSpmmHfQuantizer = None
_problem: Optional[str] = None  # why the registration did not happen (None: registered)


def _version_tuple(text: str):
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def _layers(model: nn.Module) -> Dict[str, list]:
    """{fqn: [N, M, L]} of the NMLinear layers and {fqn: ["csr"]} of the CSRLinear layers."""
    from .csr import CSRLinear

    layers = {}
    for fqn, m in model.named_modules():
        if isinstance(m, NMLinear):
            layers[fqn] = [m.N, m.M, m.L]
        elif isinstance(m, CSRLinear):
            layers[fqn] = [CSR]
    return layers


def _config_dict(layers: Dict[str, list]) -> dict:
    # Format 1 holds N:M layers only; a checkpoint with CSR layers is format 2, which a reader of
    # format 1 refuses by its number instead of misreading.
    fmt = FORMAT_CSR if any(p == [CSR] for p in layers.values()) else FORMAT
    qc = {"quant_method": QUANT_METHOD, "format": fmt, "layers": dict(sorted(layers.items()))}
    patterns = {tuple(p) for p in layers.values()}
    if len(patterns) == 1 and len(next(iter(patterns))) == 3:
        (qc["N"], qc["M"], qc["L"]), = patterns
    return qc


def _checkpoint_shapes(checkpoint_files, names) -> Dict[str, list]:
    """The shapes of the tensors ``names`` in the checkpoint's safetensors files (read from the
    headers; absent names are left out)."""
    from safetensors import safe_open

    shapes = {}
    for path in checkpoint_files or []:
        if not str(path).endswith(".safetensors"):
            continue
        with safe_open(str(path), "pt") as f:
            for name in set(f.keys()) & set(names):
                shapes[name] = list(f.get_slice(name).get_shape())
    return shapes


def _checkpoint_keys(checkpoint_files) -> Optional[set]:
    """The tensor names in the checkpoint's safetensors files (None for other formats)."""
    from safetensors import safe_open

    keys = set()
    for path in checkpoint_files or []:
        if not str(path).endswith(".safetensors"):
            return None
        with safe_open(str(path), "pt") as f:
            keys.update(f.keys())
    return keys


def _define():
    """Define and register the config and quantizer classes (needs a supported transformers)."""
    global NMSpmmConfig, NMSpmmHfQuantizer
    from transformers.quantizers.auto import register_quantization_config, register_quantizer
    from transformers.quantizers.base import HfQuantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    class _Config(QuantizationConfigMixin):
        """``quantization_config`` of an nmspmm checkpoint: the pattern of every sparse layer."""

        def __init__(self, layers=None, format=FORMAT, N=None, M=None, L=None, **kwargs):
            self.quant_method = QUANT_METHOD
            self.format = int(format)
            if self.format not in (FORMAT, FORMAT_CSR):
                raise ValueError(f"nmspmm: checkpoint format {self.format} is not supported (this nmspmm "
                                 f"reads formats {FORMAT} and {FORMAT_CSR}); upgrade nmspmm")
            self.layers = {}
            for fqn, p in (layers or {}).items():
                if list(p) == [CSR] and self.format == FORMAT_CSR:
                    self.layers[str(fqn)] = [CSR]
                elif len(p) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in p):
                    self.layers[str(fqn)] = [int(v) for v in p]
                else:
                    raise ValueError(f"nmspmm: quantization_config.layers[{fqn!r}] must be [N, M, L]"
                                     + (' or ["csr"]' if self.format == FORMAT_CSR else "") + f", got {p}")
            if N is not None:
                self.N, self.M, self.L = int(N), int(M), int(L)
            for k in kwargs:
                if k != "quant_method":
                    raise ValueError(f"nmspmm: unknown quantization_config field {k!r}")

        def to_dict(self):
            return _config_dict(self.layers)

    class _Quantizer(HfQuantizer):
        """Loads and saves ``NMLinear`` layers. Only pre-sparsified checkpoints load (pruning
        needs ``nmspmm.sparsify_``, with calibration data for a usable model)."""

        requires_calibration = True

        def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
            from .csr import CSRLinear

            layers = self.quantization_config.layers
            keys = _checkpoint_keys(checkpoint_files)
            csr_names = [f"{fqn}.{t}" for fqn, p in layers.items() if p == [CSR]
                         for t in ("crow_indices", "col_indices", "values")]
            shapes = _checkpoint_shapes(checkpoint_files, csr_names) if csr_names else {}
            problems = []
            for fqn, pattern in layers.items():
                try:
                    linear = model.get_submodule(fqn)
                except AttributeError:
                    problems.append(f"{fqn}: no such module in {type(model).__name__}")
                    continue
                if not isinstance(linear, nn.Linear):
                    problems.append(f"{fqn}: {type(linear).__name__} is not nn.Linear")
                    continue
                csr = pattern == [CSR]
                needed = (["crow_indices", "col_indices", "values"] if csr else ["values", "indices"]) + \
                    (["bias"] if linear.bias is not None else [])
                missing = [f"{fqn}.{t}" for t in needed if keys is not None and f"{fqn}.{t}" not in keys]
                if csr and keys is None:
                    missing = [f"{fqn}.{t} (CSR layers load from safetensors checkpoints only)" for t in needed[:1]]
                if missing:
                    problems.append(f"{fqn}: the checkpoint lacks {', '.join(missing)}")
                    continue
                if csr:
                    # The buffers take the checkpoint's sizes (its number of nonzeros) before loading.
                    new = CSRLinear(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                    device=linear.weight.device, dtype=linear.weight.dtype)
                    for t in ("crow_indices", "col_indices", "values"):
                        buf = new._buffers[t]
                        new._buffers[t] = torch.empty(shapes[f"{fqn}.{t}"], dtype=buf.dtype, device=buf.device)
                else:
                    new = NMLinear(linear.in_features, linear.out_features, *pattern,
                                   bias=linear.bias is not None, device=linear.weight.device,
                                   dtype=linear.weight.dtype)
                parent, _, leaf = fqn.rpartition(".")
                setattr(model.get_submodule(parent) if parent else model, leaf, new)
            if problems:
                raise ValueError("nmspmm: this checkpoint does not fit the model: " + "; ".join(problems))
            # The zero-size markers of a dense loader's trap are not part of the sparse model.
            ignore = set(model._keys_to_ignore_on_load_unexpected or ())
            ignore.update(re.escape(f"{fqn}.weight") + "$" for fqn in layers)
            model._keys_to_ignore_on_load_unexpected = ignore
            return model

        def _process_model_after_weight_loading(self, model, **kwargs):
            from .csr import CSRLinear, CSRWeight

            for fqn, layer in model.named_modules():
                if isinstance(layer, NMLinear):
                    if layer.values.is_meta or layer.indices.is_meta:
                        raise ValueError(f"nmspmm: {fqn} was not loaded from the checkpoint")
                    layer.rebuild_metadata()  # every index < M and ascending, or a clear error
                elif isinstance(layer, CSRLinear):
                    if any(getattr(layer, t).is_meta for t in ("crow_indices", "col_indices", "values")):
                        raise ValueError(f"nmspmm: {fqn} was not loaded from the checkpoint")
                    try:  # the index data, checked as where any CSR weight enters
                        CSRWeight(layer.crow_indices, layer.col_indices, layer.values,
                                  (layer.out_features, layer.in_features))
                    except (TypeError, ValueError) as e:
                        raise ValueError(f"nmspmm: {fqn}: {e}") from None
            return model

        def get_state_dict_and_metadata(self, model):
            layers = _layers(model)
            self.quantization_config.layers = {k: list(v) for k, v in layers.items()}
            self.quantization_config.format = _config_dict(layers)["format"]
            state_dict = dict(model.state_dict())
            for fqn in layers:
                state_dict[f"{fqn}.weight"] = state_dict[f"{fqn}.values"].new_empty(0)
            return state_dict, {}

        def is_serializable(self, safe_serialization=None):
            return True

        @property
        def is_trainable(self):
            return False  # the sparse weight is frozen; x and bias take gradients

        @property
        def is_compileable(self):
            return True

    _Config.__name__ = _Config.__qualname__ = "NMSpmmConfig"
    _Quantizer.__name__ = _Quantizer.__qualname__ = "NMSpmmHfQuantizer"
    register_quantization_config(QUANT_METHOD)(_Config)
    register_quantizer(QUANT_METHOD)(_Quantizer)
    NMSpmmConfig, NMSpmmHfQuantizer = _Config, _Quantizer


def _register() -> None:
    """Called by ``import nmspmm``: registers the quantizer where transformers is installed."""
    global _problem
    if importlib.util.find_spec("transformers") is None:
        _problem = "transformers is not installed"
        return
    import transformers

    version = _version_tuple(transformers.__version__)
    lo, hi = SUPPORTED_TRANSFORMERS
    if not (lo <= version < hi):
        _problem = (f"transformers {transformers.__version__} is not supported by nmspmm's Hugging Face "
                    f"checkpoints (needs >= {lo[0]}.{lo[1]}, < {hi[0]}.{hi[1]}: its HfQuantizer "
                    "extension point differs); install a supported transformers")
        return
    try:
        _define()
    except (ImportError, AttributeError, TypeError) as e:
        _problem = (f"transformers {transformers.__version__} lacks the HfQuantizer extension point "
                    f"nmspmm uses ({e})")


def check_transformers() -> None:
    """Raise if sparse transformers models cannot save and load on this installation."""
    if _problem is not None:
        raise RuntimeError(f"nmspmm: {_problem}")


def attach(model: nn.Module) -> nn.Module:
    """Make a transformers model holding ``NMLinear`` layers save as an nmspmm checkpoint:
    ``config.quantization_config`` and ``model.hf_quantizer`` (``sparsify_`` calls it). The layer
    list is refreshed on every save."""
    check_transformers()
    layers = _layers(model)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and not isinstance(quantizer, NMSpmmHfQuantizer):
        raise ValueError(f"nmspmm: the model is already quantized with "
                         f"{quantizer.quantization_config.quant_method}; nmspmm cannot sparsify it")
    config = NMSpmmConfig(layers=layers, format=_config_dict(layers)["format"])
    model.config.quantization_config = config
    model.hf_quantizer = NMSpmmHfQuantizer(config, pre_quantized=True)
    model.quantization_method = QUANT_METHOD
    return model


def save_pretrained(model: nn.Module, save_directory: str, **kwargs) -> None:
    """``model.save_pretrained(save_directory, **kwargs)`` after checking that the model holds
    ``NMLinear`` layers (the same route; kept for code written against it)."""
    if not _layers(model):
        raise ValueError("nmspmm.hf.save_pretrained: the model has no NMLinear layer; "
                         "use model.save_pretrained for a dense model")
    if not hasattr(model, "save_pretrained") or getattr(model, "config", None) is None:
        raise TypeError("nmspmm.hf.save_pretrained: expects a transformers PreTrainedModel")
    if not isinstance(getattr(model, "hf_quantizer", None), NMSpmmHfQuantizer or ()):
        attach(model)
    model.save_pretrained(save_directory, **kwargs)


def from_pretrained(directory: str, *, model_cls=None, device: Optional[str] = None, **kwargs) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(directory, **kwargs)`` (or ``model_cls``) after
    checking that ``directory`` is an nmspmm checkpoint; ``device`` moves the model after loading."""
    check_transformers()
    path = os.path.join(directory, "config.json")
    qc = json.load(open(path)).get("quantization_config") if os.path.exists(path) else None
    if not isinstance(qc, dict) or qc.get("quant_method") != QUANT_METHOD:
        raise ValueError(f"nmspmm.hf.from_pretrained: {directory} is not an nmspmm checkpoint "
                         "(config.json has no quantization_config with quant_method 'nmspmm'); "
                         "load a dense checkpoint with transformers' from_pretrained")
    if model_cls is None:
        from transformers import AutoModelForCausalLM as model_cls
    model = model_cls.from_pretrained(directory, **kwargs)
    return model.to(device) if device is not None else model


_register()
