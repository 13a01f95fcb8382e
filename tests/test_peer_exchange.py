"""nmspmm.peer_exchange on two GPUs (NCCL, symmetric memory): the copy-engine all-gather and
reduce-scatter against references from the ranks' own data, eager and replayed from a CUDA graph
on fresh data, in long alternating sequences (the rule that drops the barrier between exchanges
on different regions is what such a sequence would break), for B = 1 (the buffer views) and B = 2;
and a sequence-parallel tiny Llama whose prefill replayed from a CUDA graph matches the NCCL
path's (bf16 rounding) and itself. Skipped without two GPUs."""
import os
import socket
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two GPUs")
WORLD = 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank, port):
    import torch.distributed as dist

    os.environ["NMSPMM_PEER_COPIES"] = "1"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            device_id=torch.device("cuda", rank))
    return dist


def _run(rank, worker, port):
    """``worker`` on this rank; a failure prints its traceback and ends the process at once (a peer
    may be waiting in a device barrier that this rank will never reach: no orderly shutdown)."""
    import traceback

    dist = _init(rank, port)
    try:
        worker(rank, dist)
        dist.barrier()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    dist.destroy_process_group()


def _data(step, rank, shape, dtype):
    """Every rank can rebuild every rank's data: a generator seeded by (step, rank)."""
    g = torch.Generator(device="cuda").manual_seed(1000 * step + rank)
    return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def _exchange_worker(rank, dist):
    from nmspmm.peer_exchange import peer_exchange

    dtype = torch.bfloat16
    group = dist.group.WORLD
    for B in (1, 2):
        t, d, k = 24, 64, 48  # this rank's tokens, hidden size, row-parallel inputs
        weights = [_data(-1, r, (d, k), dtype) for r in range(WORLD)]  # each rank's row-parallel shard
        x_in = torch.empty(B, t, d, device="cuda", dtype=dtype)
        h_in = torch.empty(B, WORLD * t, k, device="cuda", dtype=dtype)
        slot = B * t * d * 2

        def step():
            with torch.no_grad():
                ex = peer_exchange(group, x_in, slot)
                assert ex is not None
                gathered = ex.all_gather(x_in, view=(B == 1))
                g_copy = gathered.clone()  # the view lives until the next exchange
                reduced = ex.reduce_scatter(lambda xs: xs @ weights[rank].T, h_in, slot)
                return g_copy, reduced

        def check(i, g_copy, reduced):
            xs = [_data(i, r, (B, t, d), dtype) for r in range(WORLD)]
            assert torch.equal(g_copy, torch.cat(xs, 1)), f"all_gather, step {i}, B={B}"
            hs = [_data(i + 500, r, (B, WORLD * t, k), dtype) for r in range(WORLD)]
            ref = sum(hs[r][:, rank * t:(rank + 1) * t].double() @ weights[r].double().T for r in range(WORLD))
            err = (reduced.double() - ref).norm() / ref.norm()
            # Each partial is rounded to bf16 once and the sum once more: a few bf16 ulps.
            assert err < 1e-2, f"reduce_scatter, step {i}, B={B}: rel err {err:.2e}"

        def load(i):
            x_in.copy_(_data(i, rank, (B, t, d), dtype))
            h_in.copy_(_data(i + 500, rank, (B, WORLD * t, k), dtype))

        for i in range(20):  # eager, one exchange after another
            load(i)
            check(i, *step())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = step()
        for i in range(20, 40):  # replays on fresh data
            load(i)
            graph.replay()
            check(i, *outs)


def test_exchange_matches_references():
    import torch.multiprocessing as mp

    mp.spawn(_run, args=(_exchange_worker, _free_port()), nprocs=WORLD, join=True)


def _llama_worker(rank, dist):
    import nmspmm
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16).cuda().eval()
    nmspmm.sparsify_(model, 16, 32, 16)
    nmspmm.parallelize_(model, sequence_parallel=True)
    ids = torch.randint(0, 512, (1, 64), device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))

    def forward():
        with torch.no_grad():
            return model(ids, use_cache=False).logits

    os.environ["NMSPMM_PEER_COPIES"] = "0"
    expected = forward()
    os.environ["NMSPMM_PEER_COPIES"] = "graph"  # the default: the copy engines inside the capture only
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward()
    first = None
    for _ in range(3):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        # The copy engines' reduce-scatter computes the row-parallel products slice by slice
        # (other plans than one product over the sequence): bf16 rounding apart, the same.
        err = ((out.float() - expected.float()).norm() / expected.float().norm()).item()
        assert err < 2e-2, f"rank {rank}: logits differ from the NCCL path's by {err:.2e}"
        first = out.clone() if first is None else first
        assert torch.equal(out, first), "replays differ"


def test_sequence_parallel_llama_graph_matches_nccl():
    pytest.importorskip("transformers")
    import torch.multiprocessing as mp

    mp.spawn(_run, args=(_llama_worker, _free_port()), nprocs=WORLD, join=True)
