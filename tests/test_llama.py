"""End-to-end: sparsify a tiny HF LlamaForCausalLM (built offline from a config) with nmspmm.

Reference for every comparison: the same model with the same N:M masks applied to its dense
nn.Linear weights ("dense-pruned"). Tests marked ``cuda`` need a GPU and the CUDA build of
nmspmm and are skipped otherwise (the skip is defined here, not in conftest).
"""
import copy
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import nmspmm  # noqa: E402
from nmspmm import NMLinear, sparsify_, sparsify_report  # noqa: E402
from nmspmm.nn import DEFAULT_TARGETS, sparse_metadata  # noqa: E402

import transformers  # noqa: E402,F401  (a test dependency: its absence is an error, not a skip)
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache  # noqa: E402

CUDA_OK = torch.cuda.is_available() and nmspmm.cuda_kernels_built()
requires_cuda = pytest.mark.skipif(not CUDA_OK, reason="needs a CUDA GPU and nmspmm built with CUDA")

PATTERNS = [(2, 4, 1), (16, 32, 32), (8, 32, 32), (4, 32, 128), (2, 8, 16)]
PATTERN_IDS = [f"{n}:{m}-L{l}" for n, m, l in PATTERNS]
LINEARS_PER_LAYER = 7


def tiny_config(**overrides):
    # Every projection dim is a multiple of 128 (k/v out = 2 kv heads * head_dim 64).
    kw = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              tie_word_embeddings=False, attn_implementation="eager")
    kw.update(overrides)
    return LlamaConfig(**kw)


def tiny_llama(seed=0, **overrides):
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_config(**overrides)).eval()


@pytest.fixture(scope="module")
def base():
    return tiny_llama()


@pytest.fixture(scope="module")
def ids():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 512, (2, 16), generator=g)


def sparse_and_reference(model, N, M, L):
    """(sparsified copy, dense copy with the same masks applied to its Linear weights)."""
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for fqn, mod in ref.named_modules():
            if isinstance(mod, nn.Linear) and fqn.rsplit(".", 1)[-1] in DEFAULT_TARGETS:
                mod.weight.mul_(nmspmm.prune(mod.weight, N, M, L))
    sparse = sparsify_(copy.deepcopy(model), N, M, L)
    return sparse, ref


def logits(model, ids):
    with torch.no_grad():
        return model(ids.to(model.device), use_cache=False).logits.float().cpu()


def nbytes(t):
    return t.numel() * t.element_size()


def decode_mask(batch, pos, max_len, dtype, device):
    """4-D additive attention mask for one decode token at position ``pos`` over a StaticCache of
    ``max_len`` slots. Passing it (and position_ids) explicitly keeps HF's mask construction,
    which creates tensors from Python values, out of a captured CUDA graph."""
    mask = torch.full((batch, 1, 1, max_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[..., : pos + 1] = 0
    return mask


def decode_step(model, tok, cache, mask, position_ids):
    return model(tok, past_key_values=cache, attention_mask=mask, position_ids=position_ids,
                 use_cache=True).logits[:, -1]


def static_decode(model, ids, steps):
    """Greedy decode with a StaticCache: eager prefill, then ``steps`` single-token steps with
    explicit masks and positions. Returns (first token [B, 1], tokens [B, steps], logits
    [B, steps, vocab]); token i+1 is the argmax of logits i."""
    batch, prompt = ids.shape
    max_len = prompt + steps + 1
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    dtype = next(model.parameters()).dtype
    toks, outs = [], []
    with torch.no_grad():
        tok = model(ids, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
        first = tok
        for i in range(steps):
            pos = prompt + i
            out = decode_step(model, tok, cache, decode_mask(batch, pos, max_len, dtype, ids.device),
                              torch.full((batch, 1), pos, dtype=torch.long, device=ids.device))
            outs.append(out.float())
            tok = out.argmax(-1, keepdim=True)
            toks.append(tok)
    return first, torch.cat(toks, 1), torch.stack(outs, 1)


def set_cache_length(cache, length):
    """Rewind a StaticCache (in place, so captured addresses stay valid) to ``length`` tokens."""
    for layer in cache.layers:
        layer.cumulative_length.fill_(length)


# ---------------------------------------------------------------- (a) logits, (e) memory
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=PATTERN_IDS)
def test_logits_match_dense_pruned(base, ids, N, M, L):
    sparse, ref = sparse_and_reference(base, N, M, L)
    swapped = [m for m in sparse.modules() if isinstance(m, NMLinear)]
    assert len(swapped) == LINEARS_PER_LAYER * base.config.num_hidden_layers
    assert type(sparse.lm_head) is nn.Linear and type(sparse.model.embed_tokens) is nn.Embedding
    torch.testing.assert_close(logits(sparse, ids), logits(ref, ids), rtol=1e-5, atol=1e-5)
    # The pruning did something: the dense model differs.
    assert not torch.allclose(logits(base, ids), logits(ref, ids), atol=1e-3)

    # (e) Each swapped layer holds exactly its compressed weight (values + uint8 indices + bias)
    # plus the derived packing metadata; its state dict holds only the compressed weight.
    for fqn, layer in sparse.named_modules():
        if not isinstance(layer, NMLinear):
            continue
        w = base.get_submodule(fqn).weight
        compressed = w.numel() * N // M * w.element_size() + w.numel() * N // M // L
        assert layer.weight_nbytes == compressed, fqn
        assert sum(nbytes(t) for k, t in layer.state_dict().items() if k != "_extra_state") == compressed, fqn
        held = sum(nbytes(t) for t in list(layer.parameters()) + list(layer.buffers()))
        assert held == compressed + layer.metadata_nbytes, fqn
    report = sparsify_report(sparse)
    dense_sd = sum(nbytes(t) for t in base.state_dict().values())
    # (each NMLinear also records its pattern: _extra_state, 6 int64)
    sparse_sd = sum(nbytes(t) for k, t in sparse.state_dict().items() if not k.endswith("._extra_state"))
    assert sparse_sd == dense_sd - report.dense_bytes + report.sparse_bytes
    assert report.model_bytes_after == report.model_bytes_before - report.dense_bytes \
        + report.sparse_bytes + report.metadata_bytes


# --------------------------------------------------------------------------- (b) generate
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=PATTERN_IDS)
def test_greedy_generate_same_tokens(base, ids, N, M, L):
    sparse, ref = sparse_and_reference(base, N, M, L)
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        out_s = sparse.generate(ids, **kw)
        out_r = ref.generate(ids, **kw)
    assert out_s.shape[1] > ids.shape[1]
    assert torch.equal(out_s, out_r)


def test_static_cache_decode_matches_dense_and_rewinds(base, ids):
    steps = 4
    sparse, ref = sparse_and_reference(base, 2, 8, 16)
    first, toks_s, logits_s = static_decode(sparse, ids, steps)
    _, toks_r, logits_r = static_decode(ref, ids, steps)
    assert torch.equal(toks_s, toks_r)
    torch.testing.assert_close(logits_s, logits_r, rtol=1e-5, atol=1e-5)
    # The explicit-mask decode steps agree with a full forward over the generated sequence.
    seq = torch.cat([ids, first, toks_s[:, :-1]], 1)
    full = logits(sparse, seq)[:, ids.shape[1]:]
    torch.testing.assert_close(logits_s, full, rtol=1e-4, atol=1e-4)
    # The rewind used by the CUDA-graph test: a repeated step at the same position is identical.
    prompt, max_len = ids.shape[1], ids.shape[1] + 8
    cache = StaticCache(config=sparse.config, max_cache_len=max_len)
    mask = decode_mask(2, prompt, max_len, torch.float32, ids.device)
    pos = torch.full((2, 1), prompt)
    with torch.no_grad():
        sparse(ids, past_key_values=cache, use_cache=True)
        once = decode_step(sparse, first, cache, mask, pos)
        set_cache_length(cache, prompt)
        again = decode_step(sparse, first, cache, mask, pos)
    assert torch.equal(once, again)
    torch.testing.assert_close(once, logits_s[:, 0], rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------- (c) serialization
@pytest.mark.parametrize("N,M,L", [(16, 32, 32), (2, 8, 16)], ids=["16:32-L32", "2:8-L16"])
def test_save_reload_roundtrip(base, ids, tmp_path, N, M, L):
    import safetensors.torch as safetensors
    sparse = sparsify_(copy.deepcopy(base), N, M, L)
    expected = logits(sparse, ids)
    sd = sparse.state_dict()
    assert not any(k.endswith(("col_info", "packed_indices", "q_proj.weight")) for k in sd)

    def fresh():
        # Different random init, swapped to empty layers: everything must come from the file.
        model = sparsify_(tiny_llama(seed=123), N, M, L, empty=True)
        assert torch.count_nonzero(model.model.layers[0].mlp.up_proj.values) == 0
        return model

    # 1. state_dict in memory.
    model = fresh()
    model.load_state_dict(sd)
    assert torch.equal(logits(model, ids), expected)

    # 2. torch.save / torch.load(weights_only=True).
    path = tmp_path / "sparse.pt"
    torch.save(sd, path)
    model = fresh()
    model.load_state_dict(torch.load(path, weights_only=True))
    assert torch.equal(logits(model, ids), expected)

    # 3. safetensors with the pattern in the file metadata.
    path = tmp_path / "sparse.safetensors"
    safetensors.save_file(sd, str(path), metadata=sparse_metadata(sparse))
    with safetensors.safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    assert (int(meta["N"]), int(meta["M"]), int(meta["L"])) == (N, M, L)
    model = sparsify_(tiny_llama(seed=123), int(meta["N"]), int(meta["M"]), int(meta["L"]), empty=True)
    model.load_state_dict(safetensors.load_file(str(path)))
    assert torch.equal(logits(model, ids), expected)
    with torch.no_grad():
        kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(model.generate(ids, **kw), sparse.generate(ids, **kw))

    # The file is the compressed size: no dense copy of the swapped weights.
    dense_sd = sum(nbytes(t) for t in base.state_dict().values())
    assert os.path.getsize(path) < dense_sd - sparsify_report(sparse).dense_bytes \
        + sparsify_report(sparse).sparse_bytes + 64 * 1024


# ----------------------------------------------------------------------- report, skipping
def test_report_and_single_warning_for_misfit_layers(ids):
    # intermediate 320: gate/up (out 320) do not fit L=128; down (in 320) fits M=32.
    model = tiny_llama(intermediate_size=320)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sparsify_(model, 4, 32, 128)
    msgs = [str(w.message) for w in caught if "nmspmm" in str(w.message)]
    assert len(msgs) == 1
    for i in range(2):
        assert f"model.layers.{i}.mlp.gate_proj" in msgs[0] and f"model.layers.{i}.mlp.up_proj" in msgs[0]
    report = sparsify_report(model)
    assert len(report.swapped) == 10 and len(report.skipped) == 4
    assert type(model.model.layers[0].mlp.gate_proj) is nn.Linear
    assert isinstance(model.model.layers[0].mlp.down_proj, NMLinear)
    assert report.model_bytes_after < report.model_bytes_before
    assert "swapped 10 Linear layers" in str(report)
    assert torch.isfinite(logits(model, ids)).all()


# ------------------------------------------------------------------------------- docs
def doc_blocks(path):
    """The ```python blocks of a markdown file that follow a ``<!-- tested:`` comment."""
    blocks, lines, i = [], open(path).read().splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("<!-- tested:"):
            while not lines[i].startswith("```python"):
                i += 1
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            blocks.append("\n".join(lines[i + 1:j]))
            i = j
        i += 1
    return blocks


def test_docs_snippets(ids, tmp_path, monkeypatch):
    doc = os.path.join(os.path.dirname(__file__), "..", "docs", "llama.md")
    blocks = doc_blocks(doc)
    assert len(blocks) == 3
    # A tiny Llama with a tied lm_head (like Llama-3.2), saved locally and loaded by path.
    model_dir = tmp_path / "tiny-llama"
    tiny_llama(seed=3, tie_word_embeddings=True).save_pretrained(str(model_dir))
    monkeypatch.chdir(tmp_path)
    ns = {"MODEL_ID": str(model_dir)}
    exec(compile(blocks[0], "docs/llama.md[three-lines]", "exec"), ns)
    model = ns["model"].eval()
    assert sum(isinstance(m, NMLinear) for m in model.modules()) == 14
    assert type(model.lm_head) is nn.Linear
    assert model.lm_head.weight is model.model.embed_tokens.weight
    exec(compile(blocks[1], "docs/llama.md[hugging-face]", "exec"), ns)
    sparse = ns["sparse"]
    assert sum(isinstance(m, NMLinear) for m in sparse.modules()) == 14
    assert sparse.lm_head.weight is sparse.model.embed_tokens.weight
    assert torch.equal(logits(sparse, ids), logits(model, ids))
    exec(compile(blocks[2], "docs/llama.md[serialization]", "exec"), ns)
    fresh = ns["fresh"].eval()
    assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    assert torch.equal(logits(fresh, ids), logits(model, ids))


# ------------------------------------------------------------------------- torch.compile
def test_compile_fullgraph_cpu(base, ids):
    sparse, _ = sparse_and_reference(base, 8, 32, 32)
    torch._dynamo.reset()
    layer = sparse.model.layers[0]
    hidden = torch.randn(2, 16, 256)
    pos = torch.arange(16)[None].expand(2, -1)
    pe = sparse.model.rotary_emb(hidden, pos)
    with torch.no_grad():
        explain = torch._dynamo.explain(layer)(hidden, position_embeddings=pe, attention_mask=None)
        assert explain.graph_break_count == 0, explain.break_reasons
        compiled = torch.compile(sparse, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(ids, use_cache=False).logits, sparse(ids, use_cache=False).logits)


# ----------------------------------------------------------------------- half precision
def half_rule(sparse, ref, ids, dtype, device, floor=2e-3):
    """flash-attn style: the sparse model's error vs the fp32 dense-pruned reference is at most
    2x the dense-pruned model's own error in the same dtype, plus a small absolute floor."""
    ref32 = logits(ref.to(device), ids)
    dense_err = (logits(copy.deepcopy(ref).to(dtype), ids) - ref32).abs().max().item()
    sparse_h = copy.deepcopy(sparse).to(device=device, dtype=dtype)
    assert sparse_h.model.layers[0].self_attn.q_proj.values.dtype == dtype
    assert sparse_h.model.layers[0].self_attn.q_proj.indices.dtype == torch.uint8
    sparse_err = (logits(sparse_h, ids) - ref32).abs().max().item()
    assert sparse_err <= 2 * dense_err + floor, (sparse_err, dense_err)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_half_precision_cpu(base, ids, dtype):
    sparse, ref = sparse_and_reference(base, 2, 4, 1)
    half_rule(sparse, ref, ids, dtype, "cpu")


# ----------------------------------------------------------------------------------- CUDA
@pytest.fixture
def fp32_matmul_highest():
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 in the fp32 references
    yield
    torch.set_float32_matmul_precision(prev)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=PATTERN_IDS)
def test_cuda_fp32_matches_dense_pruned(base, ids, N, M, L, fp32_matmul_highest):
    sparse, ref = sparse_and_reference(base, N, M, L)
    sparse.cuda()
    ref.cuda()
    up = sparse.model.layers[0].mlp.up_proj
    assert up.values.is_cuda and up.indices.is_cuda and up.col_info is None
    torch.testing.assert_close(logits(sparse, ids), logits(ref, ids), rtol=1e-4, atol=1e-4)
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(sparse.generate(ids.cuda(), **kw), ref.generate(ids.cuda(), **kw))


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("N,M,L", [(2, 4, 1), (4, 32, 128)], ids=["2:4-L1", "4:32-L128"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cuda_half_precision(base, ids, N, M, L, dtype, fp32_matmul_highest):
    sparse, ref = sparse_and_reference(base, N, M, L)
    half_rule(sparse, ref, ids, dtype, "cuda")


@pytest.mark.cuda
@requires_cuda
def test_cuda_compile_decoder_layer_fullgraph(base, fp32_matmul_highest):
    sparse, _ = sparse_and_reference(base, 16, 32, 32)
    sparse.cuda()
    torch._dynamo.reset()
    layer = sparse.model.layers[1]
    hidden = torch.randn(2, 16, 256, device="cuda")
    pos = torch.arange(16, device="cuda")[None].expand(2, -1)
    pe = sparse.model.rotary_emb(hidden, pos)
    with torch.no_grad():
        explain = torch._dynamo.explain(layer)(hidden, position_embeddings=pe, attention_mask=None)
        assert explain.graph_break_count == 0, explain.break_reasons
        compiled = torch.compile(layer, fullgraph=True)
        out = compiled(hidden, position_embeddings=pe, attention_mask=None)
        out = out[0] if isinstance(out, tuple) else out
        eager = layer(hidden, position_embeddings=pe, attention_mask=None)
        eager = eager[0] if isinstance(eager, tuple) else eager
    torch.testing.assert_close(out, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@requires_cuda
def test_cuda_graph_decode_step(base, ids, fp32_matmul_highest):
    sparse = sparsify_(copy.deepcopy(base), 4, 32, 128).cuda()
    ids = ids.cuda()
    steps = 4
    batch, prompt = ids.shape
    max_len = prompt + steps + 1
    first, toks_e, logits_e = static_decode(sparse, ids, steps)

    cache = StaticCache(config=sparse.config, max_cache_len=max_len)
    with torch.no_grad():
        sparse(ids, past_key_values=cache, use_cache=True)  # eager prefill
        static_tok = first.clone()
        static_mask = decode_mask(batch, prompt, max_len, torch.float32, "cuda")
        static_pos = torch.full((batch, 1), prompt, dtype=torch.long, device="cuda")

        def step():
            return decode_step(sparse, static_tok, cache, static_mask, static_pos)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()  # warm-up: writes position `prompt`, which the first replay rewrites
        torch.cuda.current_stream().wait_stream(stream)
        set_cache_length(cache, prompt)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = step()
        toks_g, logits_g = [], []
        for i in range(steps):
            static_mask.copy_(decode_mask(batch, prompt + i, max_len, torch.float32, "cuda"))
            static_pos.fill_(prompt + i)
            graph.replay()
            out = static_logits.float().clone()
            logits_g.append(out)
            static_tok.copy_(out.argmax(-1, keepdim=True))
            toks_g.append(static_tok.clone())
    torch.cuda.synchronize()
    assert torch.equal(torch.cat(toks_g, 1), toks_e)
    torch.testing.assert_close(torch.stack(logits_g, 1), logits_e, rtol=1e-4, atol=1e-4)
