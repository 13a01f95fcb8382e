"""Benchmark shapes: NM-SpMM's 100-point Llama dataset and the projections of real Llama configs.

Conventions (nn.Linear / NM-SpMM): ``y[m, n] = x[m, k] @ W[n, k].T``; k = in_features, n =
out_features, m = tokens (batch x sequence).

* The 100 NM-SpMM points are m in {256, 512, 1024, 2048, 4096} x the 20 (n, k) pairs used by every
  run script of the authors' repository (the paper lists none; see shared docs/papers.md section 1.6).
* The Llama shapes are *derived*, not typed: a ``transformers.LlamaConfig`` is built from each
  model's published hyperparameters and one ``LlamaDecoderLayer`` is instantiated on the meta device;
  its ``nn.Linear`` modules give (in_features, out_features). Identical (n, k) within one model are
  merged (e.g. Llama-2-7B's q/k/v/o). lm_head is not included (never sparsified).

Run ``python benchmarks/shapes.py`` to print every suite.
"""
from __future__ import annotations

import argparse
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

# --------------------------------------------------------------------------------------------
# NM-SpMM's dataset (paper section IV-A; pairs from the authors' repository, in their order).
NMSPMM100_M: Tuple[int, ...] = (256, 512, 1024, 2048, 4096)
NMSPMM100_NK: Tuple[Tuple[int, int], ...] = (
    (2048, 2048), (6144, 2048), (2048, 5632), (5632, 2048),          # h=2048, f=5632 (TinyLlama-like)
    (4096, 4096), (12288, 4096), (4096, 11008), (11008, 4096),       # LLaMA-7B
    (5120, 5120), (15360, 5120), (5120, 13824), (13824, 5120),       # LLaMA-13B
    (6656, 6656), (19968, 6656), (6656, 17920), (17920, 6656),       # LLaMA-33B
    (8192, 8192), (24576, 8192), (8192, 22016), (22016, 8192),       # LLaMA-65B
)

# Token counts: decode (batch of single tokens) through prefill.
ALL_M: Tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
DECODE_M: Tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)

# Published hyperparameters (HF config.json of each checkpoint). Only what shapes the linears
# (and what e2e_llama.py needs to build a faithful model) is listed.
LLAMA_MODELS: "OrderedDict[str, Dict]" = OrderedDict([
    ("llama-2-7b", dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                        num_key_value_heads=32, num_hidden_layers=32, vocab_size=32000,
                        max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0)),
    ("llama-2-13b", dict(hidden_size=5120, intermediate_size=13824, num_attention_heads=40,
                         num_key_value_heads=40, num_hidden_layers=40, vocab_size=32000,
                         max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0)),
    ("llama-2-70b", dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                         num_key_value_heads=8, num_hidden_layers=80, vocab_size=32000,
                         max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0)),
    ("llama-3-8b", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                        num_key_value_heads=8, num_hidden_layers=32, vocab_size=128256,
                        max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0)),
    ("llama-3-70b", dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                         num_key_value_heads=8, num_hidden_layers=80, vocab_size=128256,
                         max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0)),
    ("llama-3.2-1b", dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=64, num_hidden_layers=16, vocab_size=128256,
                          max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                          tie_word_embeddings=True)),
    ("llama-3.2-3b", dict(hidden_size=3072, intermediate_size=8192, num_attention_heads=24,
                          num_key_value_heads=8, head_dim=128, num_hidden_layers=28, vocab_size=128256,
                          max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                          tie_word_embeddings=True)),
])

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

_ALIASES = {"2-7b": "llama-2-7b", "2-13b": "llama-2-13b", "2-70b": "llama-2-70b", "3-8b": "llama-3-8b",
            "3.1-8b": "llama-3-8b", "3-70b": "llama-3-70b", "3.1-70b": "llama-3-70b",
            "3.3-70b": "llama-3-70b", "3.2-1b": "llama-3.2-1b", "3.2-3b": "llama-3.2-3b"}


def canonical_model(name: str) -> str:
    """'Llama-2-7B', 'llama2-7b', '2-7b' -> 'llama-2-7b' (ValueError if unknown)."""
    key = name.strip().lower().replace("_", "-")
    if key in LLAMA_MODELS:
        return key
    key = key.replace("llama-", "").replace("llama", "").lstrip("-")
    if key in _ALIASES:
        return _ALIASES[key]
    raise ValueError(f"unknown model {name!r}; known: {', '.join(LLAMA_MODELS)}")


def make_config(model: str, num_hidden_layers: Optional[int] = None, **overrides):
    """A ``transformers.LlamaConfig`` with the model's published hyperparameters."""
    from transformers import LlamaConfig

    kwargs = dict(LLAMA_MODELS[canonical_model(model)])
    if num_hidden_layers is not None:
        kwargs["num_hidden_layers"] = num_hidden_layers
    kwargs.update(overrides)
    return LlamaConfig(**kwargs)


def _linear_shapes_from_config(cfg) -> "OrderedDict[str, Tuple[int, int]]":
    """leaf name -> (n=out_features, k=in_features), read off a meta-device decoder layer."""
    import torch
    from torch import nn
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    with torch.device("meta"):
        layer = LlamaDecoderLayer(cfg, layer_idx=0)
    shapes: "OrderedDict[str, Tuple[int, int]]" = OrderedDict()
    for fqn, mod in layer.named_modules():
        if isinstance(mod, nn.Linear):
            shapes[fqn.rsplit(".", 1)[-1]] = (mod.out_features, mod.in_features)
    return shapes


def _linear_shapes_from_hparams(hp: Dict) -> "OrderedDict[str, Tuple[int, int]]":
    """Fallback when transformers is unavailable (dry runs): the same arithmetic HF applies."""
    h, f = hp["hidden_size"], hp["intermediate_size"]
    heads, kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    hd = hp.get("head_dim") or h // heads
    return OrderedDict([("q_proj", (heads * hd, h)), ("k_proj", (kv * hd, h)), ("v_proj", (kv * hd, h)),
                        ("o_proj", (h, heads * hd)), ("gate_proj", (f, h)), ("up_proj", (f, h)),
                        ("down_proj", (h, f))])


_SOURCE: Dict[str, str] = {}


def model_projections(model: str) -> List[Tuple[str, int, int]]:
    """[(layer label, n, k)] for one model, identical (n, k) merged ('q_proj+o_proj')."""
    model = canonical_model(model)
    try:
        shapes = _linear_shapes_from_config(make_config(model, num_hidden_layers=1))
        _SOURCE[model] = "transformers.LlamaConfig + meta LlamaDecoderLayer"
    except ImportError:
        shapes = _linear_shapes_from_hparams(LLAMA_MODELS[model])
        _SOURCE[model] = "hyperparameter arithmetic (transformers not importable)"
    merged: "OrderedDict[Tuple[int, int], List[str]]" = OrderedDict()
    for leaf, nk in shapes.items():
        if leaf in PROJECTIONS:
            merged.setdefault(nk, []).append(leaf)
    return [("+".join(leaves), n, k) for (n, k), leaves in merged.items()]


def shape_source(model: str) -> str:
    return _SOURCE.get(canonical_model(model), "not derived yet")


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    suite: str   # nmspmm100 | llama | decode | custom
    model: str   # model name, 'nmspmm100' or 'custom'
    layer: str   # projection label ('q_proj+o_proj') or 'pairNN' for the 100-point dataset
    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True)
class Pattern:
    N: int
    M: int
    L: int

    @property
    def sparsity(self) -> float:
        return 1.0 - self.N / self.M

    @property
    def ideal(self) -> float:
        return self.M / self.N

    def __str__(self) -> str:
        return f"{self.N}:{self.M}:{self.L}"

    @property
    def label(self) -> str:
        return f"{self.N}:{self.M} L={self.L} ({100 * self.sparsity:.1f}%)"

    def fits(self, n: int, k: int) -> bool:
        return k % self.M == 0 and n % self.L == 0


DEFAULT_PATTERNS = "16:32,12:32,8:32,4:32"


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def parse_pattern(text: str, default_L: int = 32) -> Pattern:
    """'16:32' (L defaults to 32), '2:4:1', '8:32:64' -> Pattern (ValueError when invalid)."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"pattern {text!r} is not N:M or N:M:L")
    try:
        N, M = int(parts[0]), int(parts[1])
        L = int(parts[2]) if len(parts) == 3 else default_L
    except ValueError:
        raise ValueError(f"pattern {text!r}: N, M and L must be integers") from None
    if not (_pow2(M) and 2 <= M <= 64):
        raise ValueError(f"pattern {text!r}: M must be a power of two in [2, 64]")
    if not 1 <= N <= M:
        raise ValueError(f"pattern {text!r}: need 1 <= N <= M")
    if not (_pow2(L) and L <= 128):
        raise ValueError(f"pattern {text!r}: L must be a power of two <= 128")
    return Pattern(N, M, L)


def parse_patterns(text: str) -> List[Pattern]:
    out: List[Pattern] = []
    for tok in text.split(","):
        if tok.strip():
            p = parse_pattern(tok)
            if p not in out:
                out.append(p)
    if not out:
        raise ValueError("no pattern given")
    return out


def parse_int_list(text: str) -> List[int]:
    vals = [int(t) for t in text.replace(" ", "").split(",") if t]
    if not vals or any(v <= 0 for v in vals):
        raise ValueError(f"expected a comma list of positive integers, got {text!r}")
    return vals


# --------------------------------------------------------------------------------------------
# Suites. Each returns a list of Shape, in the order they will be run.
SUITES = ("nmspmm100", "llama", "decode", "all")

# --quick subsets (must stay small: the quick run has a 3-minute budget on one GPU).
QUICK_NMSPMM100 = ((4096, 4096, 4096), (256, 2048, 2048), (2048, 11008, 4096), (2048, 4096, 11008))
QUICK_LLAMA_MODELS = ("llama-3-8b",)
QUICK_LLAMA_M = (1, 16, 64, 512, 2048)
QUICK_DECODE_MODELS = ("llama-2-7b",)
QUICK_DECODE_M = (1, 4, 16)


def nmspmm100_shapes(m_list: Optional[Sequence[int]] = None, quick: bool = False) -> List[Shape]:
    if quick and m_list is None:
        return [Shape("nmspmm100", "nmspmm100", f"pair{NMSPMM100_NK.index((n, k)):02d}", m, n, k)
                for m, n, k in QUICK_NMSPMM100]
    ms = tuple(m_list) if m_list else NMSPMM100_M
    return [Shape("nmspmm100", "nmspmm100", f"pair{i:02d}", m, n, k)
            for m in ms for i, (n, k) in enumerate(NMSPMM100_NK)]


def llama_shapes(models: Optional[Iterable[str]] = None, m_list: Optional[Sequence[int]] = None,
                 suite: str = "llama") -> List[Shape]:
    models = [canonical_model(x) for x in (models or LLAMA_MODELS)]
    ms = tuple(m_list) if m_list else (DECODE_M if suite == "decode" else ALL_M)
    out = []
    for model in models:
        for layer, n, k in model_projections(model):
            out.extend(Shape(suite, model, layer, m, n, k) for m in ms)
    return out


def build_suite(suite: str, models: Optional[Sequence[str]] = None, m_list: Optional[Sequence[int]] = None,
                quick: bool = False) -> List[Shape]:
    """Shapes of a suite; --models / --m override the defaults, --quick picks the small subset."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; choose from {SUITES}")
    shapes: List[Shape] = []
    if suite in ("nmspmm100", "all"):
        shapes += nmspmm100_shapes(m_list, quick)
    if suite in ("llama", "all"):
        if quick:
            shapes += llama_shapes(models or QUICK_LLAMA_MODELS, m_list or QUICK_LLAMA_M)
            if not models and not m_list:
                shapes += llama_shapes(QUICK_DECODE_MODELS, QUICK_DECODE_M, suite="decode")
        else:
            shapes += llama_shapes(models, m_list)
    if suite == "decode":
        if quick:
            shapes += llama_shapes(models or QUICK_DECODE_MODELS, m_list or QUICK_DECODE_M, suite="decode")
        else:
            shapes += llama_shapes(models, m_list, suite="decode")
    return shapes


def parse_custom_shapes(text: str) -> List[Shape]:
    """'m,n,k;m,n,k' or 'mxnxk;...' -> custom shapes (for ad-hoc runs and CPU smoke tests)."""
    out = []
    for tok in text.split(";"):
        tok = tok.strip().lower().replace("x", ",")
        if tok:
            m, n, k = (int(v) for v in tok.split(","))
            out.append(Shape("custom", "custom", f"{n}x{k}", m, n, k))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="all", choices=SUITES)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default=None, help="comma list, e.g. llama-3-8b,llama-2-7b")
    args = ap.parse_args(argv)
    models = args.models.split(",") if args.models else None
    print("Llama projections (n = out_features, k = in_features), unique per model:")
    for model in (models or LLAMA_MODELS):
        projs = model_projections(model)
        print(f"  {canonical_model(model):13s} " + "  ".join(f"{lab}:{n}x{k}" for lab, n, k in projs)
              + f"   [{shape_source(model)}]")
    shapes = build_suite(args.suite, models, None, args.quick)
    print(f"\nsuite={args.suite} quick={args.quick}: {len(shapes)} shapes, "
          f"{len({(s.m, s.n, s.k) for s in shapes})} unique (m,n,k), "
          f"{len({(s.n, s.k) for s in shapes})} unique (n,k)")


if __name__ == "__main__":
    main()
