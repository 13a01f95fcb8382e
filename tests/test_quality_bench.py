"""benchmarks/quality.py end to end on a tiny random Llama: every row kind (dense, calibrated
pruning, permutations, recovery with a token budget, lr=auto, per-layer mixes) on both weight
holders (NMLinear, masked dense), on the CPU and, where present, on CUDA.

References: the dense row's perplexity against transformers' own language-model loss; the
masked-dense rows against the NMLinear rows (same pruning, same optimisation); the recovery
rows against the unrecovered row of the same pruning."""
import math
import os
import sys

import pytest
import torch

import transformers  # noqa: E402,F401  (a test dependency: its absence is an error, not a skip)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import quality as Q  # noqa: E402

from nmspmm import pruning, recovery  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def text_windows(n, seq=32, seed=0):
    # A learnable stream (a noisy periodic sequence) so that distillation has signal.
    g = torch.Generator().manual_seed(seed)
    base = torch.arange(n * seq) * 7 % 128
    noise = torch.randint(0, 128, (n * seq,), generator=g)
    ids = torch.where(torch.rand(n * seq, generator=g) < 0.2, noise, base)
    return Q.windows_of(ids, seq)


def context(device, weights, csv_path, **kw):
    wins = text_windows(24)
    return Q.Context(tiny_model(), wins[:4], wins[4:6], wins[6:10], wins[10:], device, weights=weights,
                     calib_batch=2, eval_batch=3, recover_batch=2, lr=3e-3, csv_path=csv_path, **kw)


def test_parse_row_and_tokens():
    assert Q.parse_tokens("250k") == 250000 and Q.parse_tokens("1M") == 1000000 and Q.parse_tokens("5120") == 5120
    s = Q.parse_row("sparsegpt:16:32:32:perm:rec1M:lr3e-4:mix=ends-dense")
    assert (s["method"], s["N"], s["M"], s["L"], s["permute"], s["recover_tokens"], s["lr"], s["mix"]) == \
        ("sparsegpt", 16, 32, 32, True, 1000000, "3e-4", "ends-dense")
    assert Q.parse_row("wanda:2:4:1:lr=auto:rec2k")["lr"] == "auto"
    with pytest.raises(SystemExit):
        Q.parse_row("sparsegpt:16:32:32:bogus")
    u = Q.parse_row("sparsegpt:u75")  # unstructured: N of M = 100 kept, L = 0
    assert (u["method"], u["N"], u["M"], u["L"]) == ("sparsegpt", 25, 100, 0)
    for bad in ("sparsegpt:u0", "sparsegpt:u100", "sparsegpt:ux"):
        with pytest.raises(SystemExit):
            Q.parse_row(bad)


def test_recovery_windows_cycle_and_budget():
    pool = text_windows(5)
    wins = Q.recovery_windows(pool, 12 * 32 + 7, 32, seed=0)
    assert len(wins) == 12  # floor(tokens / seq): never over the budget
    ids = [int(w[0, 0]) for w in wins]
    first = {int(w[0, 0]) for w in pool}
    assert set(ids[:5]) == first and set(ids[5:10]) == first  # each pass uses every window once


@pytest.mark.parametrize("device", DEVICES)
def test_dense_row_matches_transformers_loss(device, tmp_path):
    ctx = context(device, "nmlinear" if device == "cpu" else "masked", str(tmp_path / "q.csv"))
    res = Q.run_row("dense", ctx)
    model = ctx.fresh()
    with torch.no_grad():
        losses = [float(model(w.to(device), labels=w.to(device)).loss) for w in ctx.evalw]
    assert math.isclose(res["ppl"], math.exp(sum(losses) / len(losses)), rel_tol=1e-5)
    assert res["eval_tokens"] == 4 * 32 and res["val_tokens"] == 2 * 32
    if device == "cuda":
        assert res["peak_gpu_mb"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_masked_rows_match_nmlinear_rows(device, tmp_path):
    if device == "cuda":
        import nmspmm
        if not nmspmm.cuda_kernels_built():
            pytest.skip("NMLinear on CUDA needs the CUDA kernels")
    out = {}
    for weights in ("nmlinear", "masked"):
        ctx = context(device, weights, str(tmp_path / f"{weights}.csv"))
        for row in ("sparsegpt:8:32:16:perm", "sparsegpt:8:32:16:perm:rec384"):
            out[weights, row] = Q.run_row(row, ctx)
    for row in ("sparsegpt:8:32:16:perm", "sparsegpt:8:32:16:perm:rec384"):
        a, b = out["nmlinear", row], out["masked", row]
        assert math.isclose(a["ppl"], b["ppl"], rel_tol=2e-3), (row, a["ppl"], b["ppl"])
        assert b["weights"] == "masked" and "reproduce the weights exactly" in b["note"]
    rec = out["masked", "sparsegpt:8:32:16:perm:rec384"]
    assert rec["recover_steps"] == 6 and rec["recover_tokens"] == 384
    assert rec["ppl"] < out["masked", "sparsegpt:8:32:16:perm"]["ppl"]


@pytest.mark.parametrize("device", DEVICES)
def test_masked_rows_cache_lr_auto_and_mix(device, tmp_path):
    csv_path = str(tmp_path / "q.csv")
    ctx = context(device, "masked", csv_path)
    rows = ["wanda:2:4:1", "sparsegpt:16:32:32:perm:rec320:lr1e-2", "sparsegpt:16:32:32:perm:rec320:lr1e-4",
            "sparsegpt:16:32:32:perm:rec320:lr=auto", "sparsegpt:16:32:32:mix=ends-dense", "magnitude:16:32:32",
            "wanda:16:32:32:mix=budget"]
    res = {}
    for row in rows:
        res[row] = Q.run_row(row, ctx)
        Q.append_csv(csv_path, res[row])
    a, b = res[rows[1]], res[rows[2]]
    assert "shared with row" in b["note"] and b["prune_s"] == a["prune_s"]  # one pruning, reused
    best = a if a["val_ppl"] < b["val_ppl"] else b
    assert res[rows[3]]["lr"] == best["lr"] and math.isclose(res[rows[3]]["ppl"], best["ppl"], rel_tol=1e-4)
    for r in res.values():
        assert math.isfinite(r["ppl"]) and r["ppl"] > 1
    # The mix keeps model.layers.0 dense: 7 of the 14 projections are pruned.
    assert res["sparsegpt:16:32:32:mix=ends-dense"]["note"].startswith("7 layers")
    assert res["magnitude:16:32:32"]["note"].startswith("14 layers")
    # Per-layer N under the 50 % budget: every layer at 8, 16 or 24 of 32, at most half kept.
    budget = res["wanda:16:32:32:mix=budget"]["note"]
    counts = dict(kv.split(": ") for kv in budget.split(";")[0][len("layers per N: "):].split(", "))
    assert set(counts) == {"8", "16", "24"} and sum(map(int, counts.values())) == 14
    pats = ctx.patterns[Q.prune_key(Q.parse_row("wanda:16:32:32:mix=budget"))]
    sizes = {n: m.weight.numel() for n, m in ctx.model.named_modules() if n in pats}
    assert sum(sizes[n] * p[0] / 32 for n, p in pats.items()) <= 0.5 * sum(sizes.values())
    Q.write_table(csv_path, str(tmp_path / "q.md"), type("A", (), dict(seq=32, eval_novel="e", calib_novel="c"))())
    assert (tmp_path / "q.md").read_text().count("\n| ") == len(rows) + 1


def test_recover_masked_dense_keeps_zeros_and_lowers_loss():
    teacher = tiny_model()
    student = tiny_model()
    layers = Q.target_layers(student, 8, 32, 16, None)
    masks, _ = pruning.prune_linears(student, layers, "magnitude")
    data = text_windows(4)
    losses = recovery.recover(student, teacher, data, steps=12, lr=3e-3, warmup=3, max_grad_norm=1.0,
                             masks=masks, progress=False)
    assert len(losses) == 12 and losses[-1] < 0.7 * losses[0], losses
    mods = dict(student.named_modules())
    for fqn, m in masks.items():
        assert torch.all(mods[fqn].weight[~m] == 0)
    assert all(p.requires_grad for p in student.parameters())
    with pytest.raises(ValueError, match="outside its mask"):
        bad = {k: ~v for k, v in masks.items()}
        recovery.recover(student, teacher, data, steps=1, masks=bad, progress=False)
